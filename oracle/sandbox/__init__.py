"""The concrete sandbox: a task's sinks provisioned in a private folder, the agent folder with
its limit, and small clients that reach the sandbox's services. It registers itself as the
sandbox the trial loop opens.

The names of the former module ``oracle.sandbox`` are still found here, with a deprecation
warning, for one release: import them from ``oracle.sandbox.sandbox`` (or from ``oracle``).
"""

from oracle.base.moved import forward_names

__getattr__ = forward_names("oracle.sandbox", "oracle.sandbox.sandbox")
