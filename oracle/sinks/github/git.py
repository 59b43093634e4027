"""Reading (and, for the service, writing) the world's bare repositories with the real `git`.

Every call runs ``git`` with a clean environment (no user or system configuration, no
prompts), so that what a repository holds is read the same on every machine.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from oracle.sinks.github.model import TEXT_LIMIT, Person, TreeEntry

#: The empty tree, which every repository knows: the parent of a root commit, for diffs.
EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"


class GitError(RuntimeError):
    """A git command failed. Names the repository, the command and what git said."""

    def __init__(self, repo: Path, argv: Sequence[str], stderr: str) -> None:
        self.repo = repo
        super().__init__(f"git {' '.join(argv)} in {repo}: {stderr.strip() or 'failed'}")


def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment every git command of the oracle runs with: no configuration from the
    user or the system, no terminal prompts, UTC."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": "/nonexistent",
        "LANG": "C.UTF-8",
        "TZ": "UTC",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_TERMINAL_PROMPT": "0",
    }
    env.update(extra or {})
    return env


def _run(
    repo: Path, argv: Sequence[str], input: bytes | None, env: Mapping[str, str] | None
) -> subprocess.CompletedProcess[bytes]:
    cmd = ["git", "--git-dir", str(repo), *argv]
    return subprocess.run(cmd, input=input, capture_output=True, env=clean_env(env), timeout=120)


def git(
    repo: Path, *argv: str, input: bytes | None = None, env: Mapping[str, str] | None = None
) -> bytes:
    """Run ``git --git-dir REPO ARGV…`` and return its stdout; raise `GitError` on failure."""
    proc = _run(repo, argv, input, env)
    if proc.returncode != 0:
        raise GitError(repo, argv, proc.stderr.decode("utf-8", "replace"))
    return proc.stdout


def git_ok(repo: Path, *argv: str) -> bool:
    """Whether ``git --git-dir REPO ARGV…`` succeeds (a question git answers by its exit)."""
    return _run(repo, argv, None, None).returncode == 0


def refs(repo: Path) -> dict[str, str]:
    """Every ref of `repo` → the object it points at (tags peeled to their commit).

    Read from the repository's files where they hold nothing but what git itself writes
    (loose refs and ``packed-refs``), as ``git for-each-ref`` lists them; anything else (a
    symbolic ref, a name git would refuse, a ref to an object the repository lacks, a
    ``packed-refs`` that changed during the read, another ref storage) is left to ``git
    for-each-ref``. Only objects not seen before in this process are looked up (one ``git
    cat-file``): an object's name fixes its content, so whether it is a tag, and what it tags,
    never changes. A GitHub trial reads the refs a few times per repository, and starting git
    for it cost ten times the read."""
    found = _read_refs(repo)
    return found if found is not None else _refs_by_git(repo)


#: Object → what a ref to it reads as (a tag object: the object it tags). Objects never change.
_PEELED: dict[str, str] = {}
_HEX = frozenset("0123456789abcdef")
_NAME_PART = re.compile(r"[A-Za-z0-9_+=,@%-][A-Za-z0-9._+=,@%-]*")


def _plain_name(name: str) -> bool:
    """Whether `name` (below ``refs/``) is one git takes and this reader need not doubt."""
    parts = name.split("/")
    return all(
        _NAME_PART.fullmatch(p) and not p.endswith((".", ".lock")) and ".." not in p for p in parts
    )


def object_name(text: str) -> str | None:
    """`text` if it is an object's name (40 lowercase hex digits), else None."""
    return text if len(text) == 40 and set(text) <= _HEX else None


def _read_refs(repo: Path) -> dict[str, str] | None:
    """The refs as `refs` gives them, from the files; None where git must be asked."""
    if (repo / "reftable").exists():
        return None
    packed_path = repo / "packed-refs"
    try:
        before = os.stat(packed_path)
    except FileNotFoundError:
        before = None
    found: dict[str, str] = {}
    if before is not None:
        packed = _read_packed(packed_path)
        if packed is None:
            return None
        found.update(packed)
    loose: dict[str, str] = {}
    top = repo / "refs"
    try:
        for root, dirs, files in os.walk(top, onerror=_raise):
            dirs.sort()
            for f in files:
                full = os.path.join(root, f)
                name = "refs/" + os.path.relpath(full, top)
                if not _plain_name(name[5:]):
                    return None
                with open(full, encoding="ascii") as fh:
                    sha = object_name(fh.read().removesuffix("\n"))
                if sha is None:
                    return None  # a symbolic ref, or a file git would skip
                loose[name] = sha
    except (OSError, UnicodeDecodeError):
        return None  # a ref moved while it was read: git reads it whole
    try:
        after = os.stat(packed_path)
    except FileNotFoundError:
        after = None
    if (before is None) != (after is None) or (
        before is not None
        and after is not None
        and (before.st_ino, before.st_mtime_ns, before.st_size)
        != (after.st_ino, after.st_mtime_ns, after.st_size)
    ):
        return None
    found.update(loose)
    unknown = sorted({sha for sha in found.values() if sha not in _PEELED})
    if unknown:
        kinds = object_info(repo, unknown)
        if any(kinds[sha][0] == "missing" for sha in unknown):
            return None  # a broken ref: git says which
        tags = [sha for sha in unknown if kinds[sha][0] == "tag"]
        for sha, body in objects(repo, tags).items():
            # A tag's first line names the object it tags (one level, as %(*objectname)).
            first = (body or b"").split(b"\n", 1)[0].decode("ascii", "replace")
            target = object_name(first.removeprefix("object "))
            if not first.startswith("object ") or target is None:
                return None
            _PEELED[sha] = target
        for sha in unknown:
            _PEELED.setdefault(sha, sha)
    found = {name: _PEELED[sha] for name, sha in found.items()}
    return dict(sorted(found.items()))


def _raise(exc: OSError) -> None:
    raise exc


def _read_packed(path: Path) -> dict[str, str] | None:
    """The refs of a ``packed-refs`` file (its peeled lines are checked, not used: they
    peel a tag of a tag to the end, where a ref reads as the object its tag names); None
    where it holds a line git would not have written."""
    try:
        lines = path.read_text(encoding="ascii").splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    found: dict[str, str] = {}
    after_ref = False
    for i, line in enumerate(lines):
        if i == 0 and line.startswith("# pack-refs with:"):
            continue
        if line.startswith("^"):
            if object_name(line[1:]) is None or not after_ref:
                return None
            after_ref = False
            continue
        sha, _, name = line.partition(" ")
        if object_name(sha) is None or not name.startswith("refs/") or not _plain_name(name[5:]):
            return None
        found[name] = sha
        after_ref = True
    return found


def _refs_by_git(repo: Path) -> dict[str, str]:
    out = git(repo, "for-each-ref", "--format=%(objectname) %(*objectname) %(refname)")
    found: dict[str, str] = {}
    for line in out.decode().splitlines():
        obj, peeled, name = line.split(" ", 2)  # `peeled` is empty but for an annotated tag
        found[name] = peeled or obj
    return dict(sorted(found.items()))


def is_commit(repo: Path, sha: str) -> bool:
    return object_info(repo, [sha]).get(sha, ("missing", 0))[0] == "commit"


def object_info(repo: Path, names: Iterable[str]) -> dict[str, tuple[str, int]]:
    """The type and size of each object (``("missing", 0)`` where there is none), read in
    one ``cat-file --batch-check``."""
    wanted = sorted(set(names))
    if not wanted:
        return {}
    out = git(
        repo,
        "cat-file",
        "--batch-check=%(objecttype) %(objectsize)",
        input=("\n".join(wanted) + "\n").encode(),
    )
    found: dict[str, tuple[str, int]] = {}
    for name, line in zip(wanted, out.decode().splitlines(), strict=True):
        kind, _, size = line.rpartition(" ")
        found[name] = ("missing", 0) if line.endswith(" missing") else (kind, int(size))
    return found


def objects(repo: Path, names: Iterable[str]) -> dict[str, bytes | None]:
    """The content of each object (None: missing), read in one ``cat-file --batch``."""
    wanted = sorted(set(names))
    if not wanted:
        return {}
    out = git(repo, "cat-file", "--batch", input=("\n".join(wanted) + "\n").encode())
    found: dict[str, bytes | None] = {}
    pos = 0
    for sha in wanted:
        end = out.index(b"\n", pos)
        header = out[pos:end].split()
        pos = end + 1
        if len(header) < 3 or header[1] == b"missing":
            found[sha] = None
            continue
        size = int(header[2])
        found[sha] = out[pos : pos + size]
        pos += size + 1
    return found


def blobs_text(repo: Path, blobs: Iterable[str]) -> dict[str, str | None]:
    """The UTF-8 text of each blob (None: not text), read in one ``cat-file --batch``."""
    texts: dict[str, str | None] = {}
    for sha, data in objects(repo, blobs).items():
        try:
            texts[sha] = data.decode("utf-8") if data is not None else None
        except UnicodeDecodeError:
            texts[sha] = None
    return texts


def tree(repo: Path, commit: str, text_limit: int = TEXT_LIMIT) -> dict[str, TreeEntry]:
    """Every file of `commit`'s tree: path → blob, mode, size and (small text files) text."""
    out = git(repo, "ls-tree", "-r", "-l", "-z", commit)
    rows: list[tuple[str, str, str, int]] = []
    for item in out.split(b"\0"):
        if not item:
            continue
        meta, _, path = item.partition(b"\t")
        mode, kind, blob, size = meta.decode().split(maxsplit=3)
        if kind != "blob":
            continue  # a submodule's commit
        rows.append((path.decode("utf-8", "surrogateescape"), mode, blob, int(size.strip())))
    small = [blob for _, mode, blob, size in rows if size <= text_limit and mode != "120000"]
    texts = blobs_text(repo, small)
    return {
        path: TreeEntry(blob=blob, mode=mode, size=size, text=texts.get(blob))
        for path, mode, blob, size in sorted(rows)
    }


@dataclass(frozen=True)
class CommitInfo:
    sha: str
    author: Person
    committer: Person
    message: str
    parents: tuple[str, ...]
    #: (status letter, path, blob after or None) of each file it changed against its first
    #: parent (or against nothing, for a root commit)
    files: tuple[tuple[str, str, str | None], ...]


def reachable(repo: Path, new: Iterable[str], old: Iterable[str], limit: int = 1000) -> list[str]:
    """The commits reachable from `new` and not from `old`, oldest first (at most `limit`);
    names in `old` that are no commit (a ref to a blob) are left out."""
    tips = sorted({t for t in new if t})
    if not tips:
        return []
    olds = object_info(repo, (o for o in old if o))
    known = [f"^{o}" for o, (kind, _) in olds.items() if kind == "commit"]
    listed = git(repo, "rev-list", "--reverse", f"--max-count={limit}", *tips, *known)
    return listed.decode().split()


def commits_between(
    repo: Path, new: Iterable[str], old: Iterable[str], limit: int = 1000
) -> list[CommitInfo]:
    """The commits reachable from `new` and not from `old`, oldest first, read whole."""
    return [commit_info(repo, sha) for sha in reachable(repo, new, old, limit)]


def commit_info(repo: Path, sha: str) -> CommitInfo:
    fmt = "%H%x00%an%x00%ae%x00%aI%x00%cn%x00%ce%x00%cI%x00%P%x00%B"
    head = git(repo, "show", "-s", f"--format={fmt}", sha).decode("utf-8", "replace")
    f = head.split("\0")
    parents = tuple(f[7].split())
    base = parents[0] if parents else EMPTY_TREE
    raw = git(repo, "diff-tree", "-r", "-z", "--no-commit-id", "--raw", "--no-renames", base, sha)
    files: list[tuple[str, str, str | None]] = []
    items = raw.split(b"\0")
    i = 0
    while i + 1 < len(items):
        meta = items[i].decode()
        path = items[i + 1].decode("utf-8", "surrogateescape")
        i += 2
        if not meta.startswith(":"):
            continue
        _, _, _, new_blob, status = meta[1:].split(" ")
        files.append((status[0], path, None if set(new_blob) == {"0"} else new_blob))
    return CommitInfo(
        sha=f[0],
        author=Person(name=f[1], email=f[2], date=f[3]),
        committer=Person(name=f[4], email=f[5], date=f[6]),
        message=f[8].rstrip("\n"),
        parents=parents,
        files=tuple(files),
    )


def is_ancestor(repo: Path, old: str, new: str) -> bool:
    """Whether `old` is an ancestor of `new` (a fast-forward from `old` to `new`)."""
    return git_ok(repo, "merge-base", "--is-ancestor", old, new)


def is_commit_sha(text: str) -> bool:
    """Whether `text` looks like a full object name (40 hex digits)."""
    return len(text) == 40 and all(c in "0123456789abcdef" for c in text)
