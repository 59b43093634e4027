"""What a trial observes and records: the sink contracts, snapshots and typed diffs, the
registry of sink kinds, canary search, the boundary and harness records, the `Evidence` a
predicate reads, the trial record and the trial archive (DESIGN §3).

The names of the former module ``oracle.evidence`` are still found here, with a deprecation
warning, for one release: import them from ``oracle.evidence.evidence`` (or from ``oracle``).
"""

from oracle.base.moved import forward_names

__getattr__ = forward_names("oracle.evidence", "oracle.evidence.evidence")
