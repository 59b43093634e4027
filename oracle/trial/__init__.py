"""One trial, in the order of DESIGN §4: the loop, the agent contract, the sandbox protocol the
loop drives, discrepancy findings, and the embedding for harnesses that run their own agent.

The names of the former module ``oracle.trial`` are still found here, with a deprecation
warning, for one release: import them from ``oracle.trial.loop`` (or from ``oracle``).
"""

from oracle.base.moved import forward_names

__getattr__ = forward_names("oracle.trial", "oracle.trial.loop")
