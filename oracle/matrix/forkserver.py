"""Imported by the fork server of a matrix run or of tasks side by side (`oracle.cli.parallel`),
and by nothing else: ties it to the driver, the command that started it.

Both list this module first in the fork server's preload, which the fork server imports as it
starts; importing it asks for the fork server's death with the driver's
(`oracle.base.lifeline.die_with_parent`). Any other process that imported it would be tied to its
own parent the same way, so nothing else imports it.
"""

from __future__ import annotations

from oracle.base.interrupts import StopOnce
from oracle.base.lifeline import die_with_parent

die_with_parent()
# The fork server ignores SIGINT itself, and hands this handler to each worker it forks: a
# worker still loading its tasks when Ctrl-C comes remembers it and starts no task.
StopOnce.install(busy=False)
