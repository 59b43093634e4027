"""What lies under the folders given to `oracle view`: runs, trials, reports, controls.

The catalog is made by walking each folder (links are not followed, hidden entries are
skipped: a half-written archive is a hidden temporary folder). Every page looks items up in it
by key, ``(folder number, path under the folder)``: no file path is ever built from a URL, so
a request can only name what a walk found.

- a *trial folder* holds ``manifest.sha256`` (``oracle trial``, ``oracle demo``, ``oracle
  controls --out``);
- a *cell archive* is a ``.tar.gz`` file (``oracle matrix run``, under ``cells/``);
- a *report* is a folder holding ``report.json`` (``oracle reduce``, ``oracle report``);
- a *controls file* is ``task_x.controls.json`` beside a task file, or a signed controls
  record under a matrix output's ``controls/``;
- a *run* is the folder that holds trials: their parent, or its parent when that is named
  ``trials``, ``cells`` or ``controls`` (what ``oracle demo`` and ``oracle matrix run`` write).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from oracle.base.signing import SIGNATURE_SUFFIX
from oracle.evidence.archive import MANIFEST
from oracle.matrix.cell_archive import SUFFIX

#: Folder names under a run that hold its trials (the section a trial is listed in).
SECTIONS = ("trials", "cells", "controls")
#: How deep a walk goes below each folder, and how many entries it reads at most.
MAX_DEPTH = 8
MAX_ENTRIES = 200_000

Key = tuple[int, str]


@dataclass(frozen=True)
class TrialEntry:
    """A trial archive found by the walk: a trial folder or a signed cell archive."""

    root: int
    rel: str
    path: Path
    kind: Literal["folder", "cell"]
    run: str
    section: str


@dataclass
class RunEntry:
    """A folder that holds trials, with the trials found in it."""

    root: int
    rel: str
    path: Path
    trials: list[TrialEntry] = field(default_factory=list)


@dataclass(frozen=True)
class ReportEntry:
    """A report folder (``report.json``, and ``report.dsse.json`` where it is signed)."""

    root: int
    rel: str
    path: Path


@dataclass(frozen=True)
class ControlsEntry:
    """A controls result: beside a task file (unsigned) or a matrix output's signed record."""

    root: int
    rel: str
    path: Path
    signed: bool


@dataclass
class Catalog:
    """Everything found under the folders, by key."""

    roots: list[Path]
    labels: list[str]
    runs: dict[Key, RunEntry] = field(default_factory=dict)
    trials: dict[Key, TrialEntry] = field(default_factory=dict)
    reports: dict[Key, ReportEntry] = field(default_factory=dict)
    controls: dict[Key, ControlsEntry] = field(default_factory=dict)
    truncated: list[str] = field(default_factory=list)

    def runs_of(self, root: int) -> list[RunEntry]:
        return sorted((r for r in self.runs.values() if r.root == root), key=lambda r: r.rel)


def _rel(parts: tuple[str, ...]) -> str:
    return "/".join(parts)


def _run_of(parts: tuple[str, ...]) -> tuple[tuple[str, ...], str]:
    """The run a trial at `parts` belongs to, and its section."""
    parent = parts[:-1]
    if parent and parent[-1] in SECTIONS:
        return parent[:-1], parent[-1]
    return parent, ""


def scan(roots: list[Path], labels: list[str] | None = None) -> Catalog:
    """Walk every folder of `roots` and return what was found."""
    cat = Catalog([r.absolute() for r in roots], labels or [str(r) for r in roots])
    for n, root in enumerate(cat.roots):
        _walk(cat, n, root)
    return cat


def _add_trial(
    cat: Catalog, n: int, root: Path, parts: tuple[str, ...], kind: Literal["folder", "cell"]
) -> None:
    run, section = _run_of(parts) if parts else ((), "")
    entry = TrialEntry(n, _rel(parts), root.joinpath(*parts), kind, _rel(run), section)
    cat.trials[(n, entry.rel)] = entry
    key = (n, entry.run)
    if key not in cat.runs:
        cat.runs[key] = RunEntry(n, entry.run, root.joinpath(*run))
    cat.runs[key].trials.append(entry)


def _walk(cat: Catalog, n: int, root: Path) -> None:
    seen = 0
    stack: list[tuple[str, ...]] = [()]
    while stack:
        parts = stack.pop()
        folder = root.joinpath(*parts)
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError:
            continue
        names = {e.name for e in entries}
        if MANIFEST in names:
            _add_trial(cat, n, root, parts, "folder")
            continue
        if "report.json" in names:
            cat.reports[(n, _rel(parts))] = ReportEntry(n, _rel(parts), folder)
        for e in entries:
            seen += 1
            if seen > MAX_ENTRIES:
                cat.truncated.append(f"{cat.labels[n]}: stopped after {MAX_ENTRIES} entries")
                return
            if e.name.startswith("."):
                continue
            sub = (*parts, e.name)
            if e.is_dir(follow_symlinks=False):
                if len(sub) <= MAX_DEPTH:
                    stack.append(sub)
            elif e.is_file(follow_symlinks=False):
                if e.name.endswith(SUFFIX):
                    _add_trial(cat, n, root, sub, "cell")
                elif e.name.endswith(".controls.json"):
                    cat.controls[(n, _rel(sub))] = ControlsEntry(
                        n, _rel(sub), folder / e.name, False
                    )
                elif (
                    parts
                    and parts[-1] == "controls"
                    and e.name.endswith(".json")
                    and e.name + SIGNATURE_SUFFIX in names
                ):
                    cat.controls[(n, _rel(sub))] = ControlsEntry(
                        n, _rel(sub), folder / e.name, True
                    )
    for run in cat.runs.values():
        run.trials.sort(key=lambda t: t.rel)
