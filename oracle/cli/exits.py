"""The exit codes of every `oracle` command: one table, used everywhere.

=====  ==========================================================================
code   meaning
=====  ==========================================================================
0      all as expected
1      a verdict, control or trial error: a verdict not reached (unknown), a
       control that misbehaved or a predicate not proven, a trial that broke, a
       task refused by ``oracle check``, an archive or report that does not verify
2      a usage or load error: a bad option, a path that does not exist, a task
       file that cannot be loaded, a key or matrix that cannot be read
130    interrupted (Ctrl-C); what was archived so far is kept
=====  ==========================================================================

Scripts test these numbers; the table is printed under ``oracle --help`` and in docs/cli.md.
"""

from __future__ import annotations

from typing import Final

#: All as expected.
OK: Final = 0
#: A verdict, control or trial error (a verdict not reached, a control that misbehaved, a
#: predicate not proven, a trial that broke, an archive that does not verify).
FAILED: Final = 1
#: A usage or load error (a bad option, a missing path, a task file that cannot be loaded).
USAGE: Final = 2
#: Interrupted (Ctrl-C).
INTERRUPTED: Final = 130

#: Each code with what it means, in the order of the table.
TABLE: Final[tuple[tuple[int, str], ...]] = (
    (OK, "all as expected"),
    (
        FAILED,
        "a verdict, control or trial error (a verdict not reached, a control that "
        "misbehaved, a predicate not proven, a trial that broke, an archive that does not verify)",
    ),
    (
        USAGE,
        "a usage or load error (a bad option, a path that does not exist, a task file "
        "that cannot be loaded)",
    ),
    (INTERRUPTED, "interrupted; what was archived so far is kept"),
)


def epilog() -> str:
    """The table as the epilog of ``oracle --help`` (one paragraph per code: click rewraps
    paragraphs, and a blank line keeps them apart)."""
    rows = "\n\n".join(f"{code:>3}  {meaning}" for code, meaning in TABLE)
    return f"Exit codes:\n\n{rows}"
