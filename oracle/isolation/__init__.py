"""Generic isolation primitives, shared by isolated agents and the sealed scorer.

- `bwrap`: the bubblewrap command line for a filesystem allow-list (`BwrapPolicy`);
- `allowlist`: what a program needs bound back from the host's files;
- `cgroup`: process and memory limits for one run (a cgroup of its own, or rlimits);
- `engine`: a client of the local Docker engine, or an error saying why there is none.

These import nothing of the sandbox, the proxies or the CLI, so the core may use them
(`oracle.scoring.sealed` runs its zygote under bubblewrap). Nothing here starts on import.
"""
