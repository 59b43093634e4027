"""Running a task's controls and judging each predicate by them (DESIGN §6).

The names of the former module ``oracle.controls`` are still found here, with a deprecation
warning, for one release: import them from ``oracle.controls.run`` (or from ``oracle``).
"""

from oracle.base.moved import forward_names

__getattr__ = forward_names("oracle.controls", "oracle.controls.run")
