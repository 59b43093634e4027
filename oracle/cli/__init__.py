"""The `oracle` command: a thin layer over the library, and its readable output.

The names of the former module ``oracle.cli`` are still found here, with a deprecation
warning, for one release: import them from ``oracle.cli.app`` (or from ``oracle``).
"""

from oracle.base.moved import forward_names

__getattr__ = forward_names("oracle.cli", "oracle.cli.app")
