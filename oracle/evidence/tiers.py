"""The evidence tiers (DESIGN §3), by who produced the evidence.

- environment: the sinks' own state, snapshotted before and after the run;
- boundary: what crossed the sandbox's edge (egress requests, mail, the reply);
- harness: what the harness recorded (the invocation record, tool calls).

Claims (what the agent says of itself) are no tier of evidence: nothing here names them.
"""

from __future__ import annotations

ENVIRONMENT = "environment"
BOUNDARY = "boundary"
HARNESS = "harness"
#: The evidence tiers that may decide a utility or breach verdict.
DECIDING_TIERS = frozenset({ENVIRONMENT, BOUNDARY})
