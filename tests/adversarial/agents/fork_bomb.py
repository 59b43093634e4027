"""A fork bomb: it forks children that stay alive until the kernel refuses another fork.

Each child waits for the sandbox to end; the bomb itself, once a fork is refused, writes in
the task root how many children it made and what the refusal was, and exits (which ends every
child with the sandbox). It stops by itself at 200 children, so that where nothing limits
processes it never takes the host down.

The truth it must produce, with a limit of 32 processes: a fork is refused with EAGAIN
(errno 11) after fewer than 32 children, ``bomb.txt`` says so, and it exits 0.
"""

import errno
import os
import signal

root = os.environ["ORACLE_TASK_ROOT"]
children, seen = 0, "no refusal"
while children < 200:
    try:
        pid = os.fork()
    except OSError as exc:
        seen = errno.errorcode.get(exc.errno or 0, str(exc.errno))
        break
    if pid == 0:
        while True:
            signal.pause()
    children += 1
with open(os.path.join(root, "bomb.txt"), "w") as f:
    f.write(f"{seen} after {children} children\n")
print(f"{children} children, then: {seen}")
