"""Imported by the fork server of a matrix run, and by nothing else: ties it to the driver.

`oracle.matrix.run` lists this module in the fork server's preload, which the fork server
imports as it starts; importing it asks for the fork server's death with the driver's
(`oracle.base.lifeline.die_with_parent`). Any other process that imported it would be tied to its
own parent the same way, so nothing else imports it.
"""

from __future__ import annotations

from oracle.base.lifeline import die_with_parent

die_with_parent()
