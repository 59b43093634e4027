"""Helpers every layer may use and that know nothing of trials: canonical JSON and digests,
read-only containers, path globs, query helpers, file-system operations, signatures, and
processes that die with their parent.
"""
