"""Where a predicate's exception happened, in the author's terms.

A predicate that raises deep inside a query helper or a pydantic model would otherwise be
reported at a line of oracle's (or pydantic's) code, which tells the author nothing. The line
that matters is the last one of the task's own code before the exception left it::

    predicate 'refunded' raised at task_shop.py:42 in refunded: KeyError: 'amount'

The task's own code is any frame of a module loaded from a task file (the loader names those
modules ``oracle_tasks_…``) and any file in the folder of the file that defines the predicate
(helper modules beside a task file), unless that folder is oracle's own package or an
installed package. Where no frame is the task's, the innermost frame is named instead.
"""

from __future__ import annotations

import functools
import inspect
import sys
import sysconfig
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

#: The prefix of the module names the task loader gives task files.
TASK_MODULE_PREFIX = "oracle_tasks_"

_ORACLE = Path(__file__).resolve().parents[1]


@functools.cache
def _installed() -> tuple[Path, ...]:
    """Folders of the interpreter and of installed packages: never a task's own code."""
    found = {Path(sys.prefix), Path(sys.base_prefix)}
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        where = sysconfig.get_paths().get(key)
        if where:
            found.add(Path(where))
    return tuple(p.resolve() for p in found if p.resolve() != Path("/"))


def defining_folder(fn: Callable[..., Any] | object) -> Path | None:
    """The folder of the file that defines `fn` (a function, a partial, a callable object),
    or None when it is oracle's own, an installed package's, or not found in a file."""
    target: Any = inspect.unwrap(fn) if callable(fn) else fn
    while hasattr(target, "func"):  # functools.partial
        target = target.func
    if not (inspect.isfunction(target) or inspect.ismethod(target) or inspect.isclass(target)):
        target = type(target)
    try:
        source = inspect.getsourcefile(target)
    except TypeError:
        return None
    if source is None:
        return None
    folder = Path(source).resolve().parent
    if folder.is_relative_to(_ORACLE) or any(folder.is_relative_to(p) for p in _installed()):
        return None
    return folder


def _is_own(filename: str, module: str, folder: Path | None) -> bool:
    if module.startswith(TASK_MODULE_PREFIX):
        return True
    if folder is None:
        return False
    path = Path(filename).resolve()
    if not path.is_relative_to(folder) or path.is_relative_to(_ORACLE):
        return False
    return not any(path.is_relative_to(p) and not folder.is_relative_to(p) for p in _installed())


def where_raised(exc: BaseException, folder: Path | None) -> str | None:
    """``file:line in function`` of the innermost frame of `exc`'s traceback that is the
    task's own code (files under `folder` shown relative to it), else of the innermost frame
    (its full path); None when `exc` has no traceback."""
    frames: list[tuple[str, int, str, str]] = []
    tb: TracebackType | None = exc.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        module = str(tb.tb_frame.f_globals.get("__name__", ""))
        frames.append((code.co_filename, tb.tb_lineno, code.co_name, module))
        tb = tb.tb_next
    if not frames:
        return None
    own = [f for f in frames if _is_own(f[0], f[3], folder)]
    filename, line, function, _ = (own or frames)[-1]
    shown = filename
    if own and folder is not None and Path(filename).resolve().is_relative_to(folder):
        shown = str(Path(filename).resolve().relative_to(folder))
    return f"{shown}:{line} in {function}"


def describe_raised(exc: BaseException, fn: Callable[..., Any] | object) -> str:
    """``at <file:line in function>: <Type>: <message>`` for an exception a predicate `fn`
    raised (without the place when there is no traceback)."""
    what = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    where = where_raised(exc, defining_folder(fn))
    return f"at {where}: {what}" if where else what
