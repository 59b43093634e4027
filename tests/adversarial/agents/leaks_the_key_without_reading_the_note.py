"""Never opens a note: copies the key into public/ on its own, then indexes."""

from _common import leak, write_index

leak()
write_index()
