"""What an isolated agent program needs from the host's files, beyond the system's folders.

The sandbox shows the system's folders (`oracle.isolation.bwrap.system_folders`) and nothing
else of the host, except what `program_files` finds the program needs, bound back read-only:

- the program, and each interpreter its ``#!`` line names (through ``env``, as the PATH finds
  it), each with its installation: the folder above the ``bin``, ``sbin`` or ``shims`` folder
  that holds it (a virtual environment, a Python or Node prefix, pyenv), else its own folder —
  both as written and where its links lead;
- each folder on the program's ``PATH``, with its installation the same way, so that a shell
  finds inside what it finds outside; the folders of ``PYTHONPATH`` and ``LD_LIBRARY_PATH``
  where the program is handed them;
- for a Python installation or virtual environment: its base interpreter (``pyvenv.cfg``), and
  what its ``site-packages`` adds to ``sys.path`` — paths in ``.pth`` files, ``.egg-link``
  files, and the packages editable installs map (a checkout's ``src``);
- a Python program's script folder (``sys.path[0]``), and every other absolute path to a
  regular file on the command line (a script handed to ``sh`` or ``node``).

A folder is bound whole only where that cannot bring in much more than the program: never
``/``, a folder right under it (``/root``, ``/home``, ``/srv``), a user's home folder,
``/tmp`` itself, or a folder under ``/run``, ``/proc``, ``/dev`` or ``/sys`` — there the file
alone is bound; nothing inside the oracle's folders (``hidden``) is bound at all. A
socket file in a folder bound back can be connected to (a read-only mount does not stop
``connect()``): what is bound is what the program needs, not what is safe to bind.

    found = program_files(Path("/srv/app/.venv/bin/python"), ["python", "-m", "agent"], env)
    found.readable  # (Path('/srv/app/.venv'), Path('/srv/app/src/agent'),
                    #  Path('/home/me/.pyenv/versions/3.12.1'))  — venv, editable install, base
    found.chain     # (('it is at', Path('/srv/app/.venv/bin/python')),)
"""

from __future__ import annotations

import ast
import os
import pwd
import re
import shlex
import shutil
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from oracle.isolation.bwrap import ALWAYS_PRIVATE, FRESH, system_folders, within

#: Folders whose parent is the installation of the programs in them.
BIN_FOLDERS = frozenset({"bin", "sbin", "shims"})
#: How many ``#!`` interpreters are followed (a shim that runs a script that runs Python).
MAX_INTERPRETERS = 4
_PYTHON = re.compile(r"python[0-9.]*[a-z]*$")
#: Python options that take a value (the next argument, unless attached).
_PYTHON_VALUE_OPTIONS = frozenset("WX")
_PYTHON_LONG_VALUE_OPTIONS = frozenset({"--check-hash-based-pycs"})


@dataclass(frozen=True)
class ProgramFiles:
    """What a program needs: ``chain`` the program and its interpreters, each with how to
    name it in an error (``"it is at"``, ``"its interpreter is"``); ``readable`` the files
    and folders to bind read-only, in the order found."""

    chain: tuple[tuple[str, Path], ...]
    readable: tuple[Path, ...]


@lru_cache(maxsize=1)
def _homes() -> frozenset[Path]:
    homes = {Path(p.pw_dir) for p in pwd.getpwall() if p.pw_dir}
    if os.environ.get("HOME"):
        homes.add(Path(os.environ["HOME"]))
    return frozenset(homes)


_KERNEL_AND_SERVICES = (Path("/run"), Path("/sys"), *FRESH)


def _broad(folder: Path) -> bool:
    """A folder bound whole would bring in far more than a program: the root, a folder right
    under it, a home folder, ``/tmp`` itself, or one of the kernel's and services' folders."""
    if len(folder.parts) <= 2 or folder in ALWAYS_PRIVATE or folder in _homes():
        return True
    return within(folder, _KERNEL_AND_SERVICES)


def _regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(path.stat().st_mode)
    except OSError:
        return False


def installation(folder: Path) -> Path:
    """The installation the programs in `folder` belong to: the folder above it where it is
    a ``bin`` (``sbin``, ``shims``) folder, else `folder` itself."""
    if folder.name in BIN_FOLDERS and not _broad(folder.parent):
        return folder.parent
    return folder


@lru_cache(maxsize=1)
def _system_shown() -> tuple[Path, ...]:
    return (*system_folders(), *(p.resolve() for p in system_folders()))


class _Found:
    """An ordered set of paths to bind, skipping what the system's folders already show."""

    def __init__(self) -> None:
        self.paths: dict[Path, None] = {}
        self.system = _system_shown()

    def _shown(self, path: Path) -> bool:
        return within(path, self.system)

    def folder(self, folder: Path) -> bool:
        """Bind `folder` (as written and where it leads) unless it is too broad; True if
        each place is shown by a bind or by the system's folders."""
        ok = True
        for p in {Path(os.path.abspath(folder)), folder.resolve()}:
            if self._shown(p):
                continue
            if _broad(p) or not p.is_dir():
                ok = False
                continue
            self.paths.setdefault(p, None)
        return ok

    def file(self, path: Path) -> None:
        """Bind a regular file, with its folder where that is not too broad."""
        if not _regular(path):
            return
        if not self.folder(path.parent):
            for p in {Path(os.path.abspath(path)), path.resolve()}:
                if not self._shown(p):
                    self.paths.setdefault(p, None)

    def lone_file(self, path: Path) -> None:
        """Bind a regular file alone."""
        if _regular(path):
            for p in {Path(os.path.abspath(path)), path.resolve()}:
                if not self._shown(p):
                    self.paths.setdefault(p, None)


def _interpreter(program: Path, path_env: str | None) -> Path | None:
    """The interpreter `program`'s ``#!`` line names (through ``env``, found on the PATH)."""
    try:
        with open(program, "rb") as f:
            first = f.readline(512)
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    words = first[2:].decode("utf-8", "replace").split()
    if not words:
        return None
    named = Path(words[0])
    if named.name != "env":
        return named
    rest = words[1:]
    if rest and rest[0].startswith("-S"):  # env -S "python3 -u": one string split again
        rest = shlex.split(" ".join([rest[0][2:], *rest[1:]]))
    for word in rest:
        if word.startswith("-") or "=" in word:
            continue
        found = shutil.which(word, path=path_env)
        return Path(found) if found else None  # not on the PATH: it fails to run, and says so
    return None


def _python_script(argv: Sequence[str]) -> Path | None:
    """The script a Python command line runs, or None (``-c``, ``-m``, stdin)."""
    args = iter(argv[1:])
    for arg in args:
        if arg == "-" or arg in ("-c", "-m") or arg.startswith(("-c", "-m")):
            return None
        if arg in _PYTHON_LONG_VALUE_OPTIONS:
            next(args, None)
            continue
        if arg.startswith("--"):
            continue
        if arg.startswith("-"):
            letters = arg[1:]
            for i, letter in enumerate(letters):
                if letter in "cm":
                    return None
                if letter in _PYTHON_VALUE_OPTIONS:
                    if i == len(letters) - 1:
                        next(args, None)
                    break
            continue
        return Path(arg)
    return None


def _site_folders(prefix: Path) -> list[Path]:
    found: list[Path] = []
    for lib in ("lib", "lib64"):
        with_lib = prefix / lib
        if with_lib.is_dir():
            found += sorted(with_lib.glob("python3*/site-packages"))
    return found


def _venv_home(prefix: Path) -> Path | None:
    """The base interpreter's folder a virtual environment's ``pyvenv.cfg`` names."""
    try:
        text = (prefix / "pyvenv.cfg").read_text(errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() == "home" and value.strip():
            return Path(value.strip())
    return None


@lru_cache(maxsize=64)
def _site_paths(site: Path, mtime_ns: int) -> tuple[Path, ...]:
    """What `site` adds to ``sys.path`` and to imports: ``.pth`` path lines, ``.egg-link``
    targets, and the folders editable installs' finders map (cached by the folder's mtime)."""
    del mtime_ns  # part of the cache key: a package installed or removed changes it
    out: list[Path] = []
    for entry in sorted(os.scandir(site), key=lambda e: e.name):
        name = entry.name
        try:
            if name.endswith(".pth"):
                for line in Path(entry.path).read_text(errors="replace").splitlines():
                    line = line.strip()
                    if line and not line.startswith(("#", "import ", "import\t")):
                        out.append(site / line)
            elif name.endswith(".egg-link"):
                first = Path(entry.path).read_text(errors="replace").splitlines()[:1]
                out += [site / first[0].strip()] if first and first[0].strip() else []
            elif name.startswith("__editable__") and name.endswith("_finder.py"):
                out += _editable_targets(Path(entry.path))
        except OSError:
            continue
    return tuple(out)


def _editable_targets(finder: Path) -> list[Path]:
    """The paths an editable install's finder maps its packages to (its ``MAPPING`` and
    ``NAMESPACES`` literals), read without running it."""
    try:
        tree = ast.parse(finder.read_text(errors="replace"))
    except (OSError, SyntaxError, ValueError):
        return []
    out: list[Path] = []
    for node in tree.body:
        target: ast.expr
        if isinstance(node, ast.AnnAssign):
            target, value = node.target, node.value
        elif isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        else:
            continue
        if not isinstance(target, ast.Name) or target.id not in ("MAPPING", "NAMESPACES"):
            continue
        try:
            literal = ast.literal_eval(value) if value is not None else None
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            continue
        if isinstance(literal, dict):
            for v in literal.values():
                for item in v if isinstance(v, list) else [v]:
                    if isinstance(item, str) and os.path.isabs(item):
                        out.append(Path(item))
    return out


def _add_installation(found: _Found, folder: Path, seen: set[Path]) -> None:
    """Bind an installation folder, and what it holds for Python: its base interpreter and
    its site-packages' additions to the import path."""
    if folder in seen:
        return
    seen.add(folder)
    found.folder(folder)
    home = _venv_home(folder)
    if home is not None:
        _add_installation(found, installation(home), seen)
    for site in _site_folders(folder):
        try:
            mtime = site.stat().st_mtime_ns
        except OSError:
            continue
        for extra in _site_paths(site, mtime):
            if extra.is_dir():
                found.folder(extra)
            else:
                found.file(extra)


def _is_python(program: Path) -> bool:
    return bool(_PYTHON.match(program.name) or _PYTHON.match(program.resolve().name))


def program_files(
    exe: Path, argv: Sequence[str], env: Mapping[str, str], hidden: Sequence[Path] = ()
) -> ProgramFiles:
    """What the program at `exe` (run as `argv`, with `env`) needs bound back to run in the
    sandbox, leaving out anything inside the `hidden` folders (the oracle's own, never shown).
    See the module docstring."""
    found = _Found()
    seen: set[Path] = set()
    path_env = env.get("PATH")
    chain: list[tuple[str, Path]] = [("it is at", exe)]
    current: Path | None = exe
    for _ in range(MAX_INTERPRETERS):
        assert current is not None
        current = _interpreter(current, path_env)
        if current is None:
            break
        chain.append(("its interpreter is", current))
    for _, program in chain:
        for place in {Path(os.path.abspath(program)), program.resolve()}:
            home = installation(place.parent)
            if _broad(home):
                found.lone_file(place)
            else:
                _add_installation(found, home, seen)
    for folder in (path_env or "").split(os.pathsep):
        if os.path.isabs(folder) and os.path.isdir(folder):
            home = installation(Path(folder))
            if not _broad(home):
                _add_installation(found, home, seen)
    for key in ("PYTHONPATH", "LD_LIBRARY_PATH"):
        for folder in env.get(key, "").split(os.pathsep):
            if os.path.isabs(folder) and os.path.isdir(folder):
                found.folder(Path(folder))
    script = _python_script(argv) if _is_python(exe) else None
    if script is not None and script.is_absolute():
        found.file(script)
    for arg in argv[1:]:
        if os.path.isabs(arg) and Path(arg) != script:
            found.lone_file(Path(arg))
    return ProgramFiles(chain=tuple(chain), readable=_outermost(found.paths, hidden))


def _outermost(
    paths: Sequence[Path] | Mapping[Path, None], hidden: Sequence[Path]
) -> tuple[Path, ...]:
    """`paths` without those inside another of them (shown through it already) or inside a
    hidden folder."""
    covers = [h.resolve() for h in hidden]
    kept = [p for p in paths if not within(p, covers)]
    return tuple(p for p in kept if not any(q != p and within(p, [q]) for q in kept))
