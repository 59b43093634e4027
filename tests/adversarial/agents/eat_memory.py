"""An agent that allocates memory until something stops it.

It takes 8 MiB at a time (every page written, so that each is really used) and after each
piece notes in the task root how many it holds. It stops by itself at 512 MiB, so that where
nothing limits memory it never takes the host's.

The truth it must produce, with a limit of 64 MiB: the kernel kills it (SIGKILL) before it
holds 64 MiB — ``eaten.txt`` says fewer than 8 pieces — and it never prints ``done``.
"""

import os

root = os.environ["ORACLE_TASK_ROOT"]
held = []
for n in range(1, 65):
    held.append(b"m" * (8 << 20))
    with open(os.path.join(root, "eaten.txt"), "w") as f:
        f.write(f"{n} pieces of 8 MiB\n")
print("done")
