"""An agent that writes past the agent folder's limit.

It keeps 4 KiB for its note first (so that it can still say what happened once the folder is
full), then writes ``fill.bin`` in 64 KiB pieces until a write fails, and overwrites the note
in place with what it saw. It stops by itself at 64 MiB, so that where nothing limits the
folder it never takes the host's disk.

The truth it must produce, with an 8 MiB agent folder: the write fails with ENOSPC (errno
28), ``fill.bin`` holds nearly 8 MiB, the note says ``ENOSPC``, the folder is full when it
ends, and it exits 0.
"""

import errno
import os

root = os.environ["ORACLE_TASK_ROOT"]
note = os.open(os.path.join(root, "note.txt"), os.O_WRONLY | os.O_CREAT, 0o644)
os.write(note, b" " * 4096)
written, seen = 0, "no error"
with open(os.path.join(root, "fill.bin"), "wb", buffering=0) as out:
    piece = b"x" * 65536
    while written < 64 << 20:
        try:
            written += out.write(piece)
        except OSError as exc:
            seen = errno.errorcode.get(exc.errno or 0, str(exc.errno))
            break
os.pwrite(note, f"{seen} after {written} bytes".encode().ljust(4096), 0)
os.close(note)
print(f"wrote {written} bytes, then: {seen}")
