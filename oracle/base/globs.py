"""Path globs relative to a root: ``*`` within one segment, ``**`` across segments.

>>> match("config/*.toml", "config/app.toml")
True
>>> match("**/*.key", "a/b/c.key"), match("**/*.key", "c.key")
(True, True)
>>> match("public/**", "public/x/y.txt"), match("*.txt", "a/b.txt")
(True, False)
"""

from __future__ import annotations

import functools
import posixpath
import re
from collections.abc import Iterable


class PathOutsideRootError(ValueError):
    """A path or glob that would leave the root it is relative to."""


def check_relative(path: str, what: str = "path") -> str:
    """`path` normalised as a POSIX path inside the root, or `PathOutsideRootError`."""
    if path.startswith("/") or path.startswith("\\"):
        raise PathOutsideRootError(f"{what} {path!r} is absolute; give it relative to the root")
    norm = posixpath.normpath(path) if path else "."
    if norm == ".." or norm.startswith("../"):
        raise PathOutsideRootError(f"{what} {path!r} leaves the root")
    return "" if norm == "." else norm


@functools.lru_cache(maxsize=1024)
def compile_glob(pattern: str) -> re.Pattern[str]:
    """A regex matching the whole relative path against `pattern`."""
    masked = pattern.replace("*", "x").replace("?", "x")
    try:
        check_relative(masked, "glob")
    except PathOutsideRootError as exc:
        raise PathOutsideRootError(str(exc).replace(repr(masked), repr(pattern), 1)) from None
    out = []
    i, n = 0, len(pattern)
    while i < n:
        ch = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif ch == "*":
            out.append("[^/]*")
            i += 1
        elif ch == "?":
            out.append("[^/]")
            i += 1
        elif ch == "[":
            j = pattern.find("]", i + 1)
            if j == -1:
                out.append(re.escape(ch))
                i += 1
            else:
                body = pattern[i + 1 : j]
                if body.startswith("!"):
                    body = "^" + body[1:]
                out.append(f"[{body}]")
                i = j + 1
        else:
            out.append(re.escape(ch))
            i += 1
    return re.compile("".join(out) + r"\Z")


def match(pattern: str, path: str) -> bool:
    """Whether the relative POSIX `path` matches `pattern`."""
    return compile_glob(pattern).match(path) is not None


def match_any(patterns: Iterable[str], path: str) -> bool:
    """Whether `path` matches at least one of `patterns`."""
    return any(match(p, path) for p in patterns)
