"""The careful agent that never opens a note: lists them and writes the index, nothing else."""

from _common import write_index

write_index()
