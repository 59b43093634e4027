"""Folders: snapshot + diff of 10,000 small files in 100 folders with 1% of them modified.

- ours: the after snapshot plus the diff, given a before snapshot taken by the SAME FolderSink
  (whose stat cache lets it skip reading unchanged files); ``ours_full``: a fresh sink,
  before snapshot + after snapshot + diff (the edits between them are not timed);
- hash_every_file_walk: os.walk, then read + sha256 every file (one state, once).

Each repeat edits the same 100 files again (a new revision line appended to their original
text), so every repeat has exactly 100 modified files to find.
"""

from __future__ import annotations

import cProfile
import hashlib
import os
import random
import string
from pathlib import Path

from common import (
    Result,
    Stopwatch,
    measure,
    measure_call,
    profile_call,
    repeats_of,
    result,
    scratch,
    sized,
)

from oracle.evidence.snapshot import Snapshot
from oracle.sinks.files import FileDiff, FolderSink

NAME = "folder snapshot+diff 10k files, 1% changed"
GOAL = "faster than hashing every file"

FOLDERS = 100
QUICK_FOLDERS = 10  # a quick run: 1,000 files, 10 of them modified
FILES_PER_FOLDER = 100
MIN_SIZE, MAX_SIZE = 200, 4_000
SEED = 20240602

REPEATS_OURS = 7
REPEATS_OURS_FULL = 5
REPEATS_HASH = 7


def make_tree(root: Path, folders: int) -> dict[str, str]:
    """Write the files; return {relative path: original text}."""
    rng = random.Random(SEED)
    words = ["".join(rng.choices(string.ascii_lowercase, k=rng.randint(2, 9))) for _ in range(500)]
    pool = " ".join(rng.choices(words, k=60_000))
    lines: list[str] = []
    for i in range(0, len(pool), 72):  # wrap into lines, so text diffs are line diffs
        lines.append(pool[i : i + 72])
    pool = "\n".join(lines)
    texts: dict[str, str] = {}
    for d in range(folders):
        folder = root / f"d{d:03d}"
        folder.mkdir()
        for f in range(FILES_PER_FOLDER):
            size = rng.randint(MIN_SIZE, MAX_SIZE)
            start = rng.randrange(len(pool) - size)
            rel = f"d{d:03d}/f{f:03d}.txt"
            text = f"# {rel}\n{pool[start : start + size]}\n"
            (folder / f"f{f:03d}.txt").write_text(text, encoding="utf-8")
            texts[rel] = text
    return texts


def hash_every_file_walk(root: Path) -> dict[str, str]:
    """The baseline: read and sha256 every file under `root`."""
    out: dict[str, str] = {}
    for dirpath, _dirnames, filenames in os.walk(root):
        for name in filenames:
            path = os.path.join(dirpath, name)
            with open(path, "rb") as fh:
                out[path] = hashlib.sha256(fh.read()).hexdigest()
    return out


def _check(d: FileDiff, expected: list[str]) -> None:
    modified = d.modified()
    n = len(expected)
    assert len(modified) == n, f"ours reports {len(modified)} modified, not {n}"
    assert sorted(c.path for c in modified) == expected, "ours reports other files"
    assert all(c.content_changed for c in modified), "ours reports no content change"
    assert not d.added() and not d.removed(), "ours reports added or removed files"
    assert len(d.changes) == n, f"ours reports {len(d.changes)} changes in all"


def run(profiler: cProfile.Profile | None = None) -> Result:
    folders = sized(FOLDERS, QUICK_FOLDERS)
    files = folders * FILES_PER_FOLDER
    modified = files // 100  # 1%
    with scratch("files") as work:
        root = work / "root"
        root.mkdir()
        texts = make_tree(root, folders)
        chosen = sorted(random.Random(SEED + 1).sample(sorted(texts), modified))
        revision = 0

        def edit() -> None:
            """Give the chosen files a new content (a new revision line)."""
            nonlocal revision
            revision += 1
            for rel in chosen:
                (root / rel).write_text(f"{texts[rel]}revision {revision}\n", encoding="utf-8")

        # Warm up: page cache, imports, the glob cache.
        hash_every_file_walk(root)
        sink = FolderSink("root", root)
        sink.snapshot()

        hashed = measure_call(lambda: hash_every_file_walk(root), repeats_of(REPEATS_HASH))
        assert len(hash_every_file_walk(root)) == files

        last: dict[str, FileDiff] = {}

        def ours_once(sw: Stopwatch) -> None:
            before = sink.snapshot()  # not timed: what the sink saw before the agent ran
            edit()
            with sw.running():
                after = sink.snapshot()
                d = sink.diff(before, after)
            last["ours"] = d

        ours = measure(ours_once, repeats_of(REPEATS_OURS))
        _check(last.pop("ours"), chosen)

        def ours_full_once(sw: Stopwatch) -> None:
            fresh = FolderSink("root", root)
            snaps: list[Snapshot] = []
            with sw.running():
                snaps.append(fresh.snapshot())
            edit()
            with sw.running():
                snaps.append(fresh.snapshot())
                d = fresh.diff(snaps[0], snaps[1])
            last["full"] = d

        ours_full = measure(ours_full_once, repeats_of(REPEATS_OURS_FULL))
        _check(last.pop("full"), chosen)

        if profiler is not None:
            before = sink.snapshot()
            edit()
            profile_call(lambda: sink.diff(before, sink.snapshot()), profiler)

    return result(
        NAME,
        goal=GOAL,
        ours=ours,
        baselines={"hash_every_file_walk": hashed},
        checks={GOAL: ours.median < hashed.median},
        extra={"ours_full": ours_full},
        params={
            "files": files,
            "folders": folders,
            "modified_files": modified,
            "file_bytes": [MIN_SIZE, MAX_SIZE],
            "total_bytes": sum(len(t.encode()) for t in texts.values()),
        },
        notes=(
            "ours = after snapshot + diff by the sink that took the before snapshot (stat "
            "cache warm; includes the sink's wait for the filesystem clock tick); ours_full = "
            "fresh FolderSink, before + after + diff (edits not timed); hash_every_file_walk "
            "= os.walk + read + sha256 of every file, one state. Warm page cache."
        ),
    )
