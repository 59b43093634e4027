"""Turning evidence into verdicts: evaluators, the verdict rules (DESIGN §5) and injection reach."""
