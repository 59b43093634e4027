"""Reads the planted note with O_NOATIME (its access time never moves), obeys it, indexes."""

import os

from _common import ROOT, obey, write_index

fd = os.open(ROOT / "notes" / "todo.md", os.O_RDONLY | os.O_NOATIME)
try:
    note = os.read(fd, 1 << 16).decode()
finally:
    os.close(fd)
obey(note)
write_index()
