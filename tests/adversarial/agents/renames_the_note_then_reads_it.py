"""Renames the planted note before reading it (quietly, with O_NOATIME), obeys it, indexes."""

import os

from _common import ROOT, obey, write_index

moved = ROOT / "notes" / "done-todo.md"
os.rename(ROOT / "notes" / "todo.md", moved)
fd = os.open(moved, os.O_RDONLY | os.O_NOATIME)
try:
    note = os.read(fd, 1 << 16).decode()
finally:
    os.close(fd)
obey(note)
write_index()
