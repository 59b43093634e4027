"""The reducer's verification: every archive, the exact cell set, and parity. Fails closed.

`verify_run` walks a run folder (recursively; runs may be merged under one folder) and applies
every rule of `RULES`: the per-archive rules of `oracle.matrix.cell_archive` and the rules over the
whole set below. Any rejection stops the reduction: `ReduceFailed` lists each one, naming the
archive (relative to the run folder) and the rule. Nothing is extracted to disk.

Set rules:
"""

from __future__ import annotations

import os
import re
import stat
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from oracle.authoring.loader import load_tasks
from oracle.authoring.versions import task_digest
from oracle.base.signing import SIGNATURE_SUFFIX
from oracle.evidence.record import Cell
from oracle.matrix.cell_archive import (
    DEFAULT_LIMITS,
    SUFFIX,
    CellMeta,
    Limits,
    ModelSetting,
    OpenedCell,
    Rejected,
    open_cell,
)
from oracle.matrix.cell_archive import RULES as ARCHIVE_RULES
from oracle.matrix.controls_record import FOLDER as CONTROLS_FOLDER
from oracle.matrix.controls_record import ControlsRecord, read_controls
from oracle.matrix.run_id import RUN_FILE, read_run, run_id_of
from oracle.matrix.spec import Matrix, MatrixError

SET_RULES: dict[str, str] = {
    "stray-file": "a file in the run folder that is neither an archive, an envelope nor controls",
    "missing-cell": "a cell the matrix expects has no archive",
    "duplicate-cell": "two archives hold the same cell",
    "unexpected-cell": "an archive holds a cell the matrix does not have",
    "controls-missing": "a task of the matrix has no controls result",
    "duplicate-controls": "a task has two controls results",
    "task-digest-mismatch": "cells or controls of one task were made from different task code",
    "run-mismatch": "an archive, controls result or run.json names another run than the rest "
    "(a cell taken from another run of the same matrix), or no run at all",
    "parity": "unless --no-parity: runtime versions (oracle, Python, packages…) differ between "
    "archives, a harness's agent program (file digest or --version) differs between its cells, "
    "a model's provider or version is not the one the matrix declares, or task code changed",
    "model-observed": "unless --no-parity: a model the egress recorder saw answer a cell's "
    "model calls is not the model the matrix declares for the cell (its version, else its "
    "name; a dated snapshot of it, such as name-2025-01-31, counts as it), or a model "
    "answered where the matrix declares none",
}
RULES: dict[str, str] = {**ARCHIVE_RULES, **SET_RULES}
__doc__ = (__doc__ or "") + "".join(f"\n- ``{k}``: {v}" for k, v in SET_RULES.items())


@dataclass(frozen=True)
class Rejection:
    """One broken rule: where (relative to the run folder), which rule, what was found."""

    where: str
    rule: str
    detail: str

    def __str__(self) -> str:
        return f"{self.where}: {self.rule}: {self.detail}"


class ReduceFailed(Exception):
    """The reduction was refused; `rejections` lists every broken rule."""

    def __init__(self, rejections: Sequence[Rejection]) -> None:
        self.rejections = list(rejections)
        head = f"{len(self.rejections)} rejection(s); no report was made"
        super().__init__(head + "".join(f"\n  {r}" for r in self.rejections[:50]))


@dataclass(frozen=True)
class Expected:
    """What the matrix promises: the cells, each cell's declared settings, each task's digest."""

    cells: list[Cell]
    meta: dict[str, CellMeta]
    task_digests: dict[str, str]
    #: The archive limits the run was written under (the matrix's ``[limits]``).
    limits: Limits = DEFAULT_LIMITS


@dataclass
class Verified:
    """A run that passed every rule."""

    root: Path
    cells: list[OpenedCell]
    controls: dict[str, ControlsRecord]
    controls_digests: dict[str, str] = field(default_factory=dict)
    #: The id of the run every archive and controls result was signed in.
    run_id: str = ""


def _scan(root: Path) -> tuple[list[Path], list[Path], list[Path], list[Rejection]]:
    """Archives, controls files, run files and rejections for everything else, without
    following links."""
    archives: list[Path] = []
    controls: list[Path] = []
    runs: list[Path] = []
    bad: list[Rejection] = []
    envelopes: set[Path] = set()
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        d = Path(dirpath)
        for name in sorted(dirnames):
            p = d / name
            if p.is_symlink():
                bad.append(Rejection(_rel(p, root), "symlink", "a linked folder in the run"))
        dirnames[:] = sorted(n for n in dirnames if not (d / n).is_symlink())
        for name in sorted(filenames):
            p = d / name
            st = p.lstat()
            if stat.S_ISLNK(st.st_mode):
                bad.append(Rejection(_rel(p, root), "symlink", "a link in the run folder"))
            elif not stat.S_ISREG(st.st_mode):
                bad.append(Rejection(_rel(p, root), "device-file", "not a regular file"))
            elif name.endswith(SUFFIX):
                archives.append(p)
            elif name.endswith(SIGNATURE_SUFFIX):
                envelopes.add(p)
            elif d.name == CONTROLS_FOLDER and name.endswith(".json"):
                controls.append(p)
            elif name == RUN_FILE:
                runs.append(p)
            else:
                bad.append(Rejection(_rel(p, root), "stray-file", "not part of a run"))
    signed = {p.with_name(p.name + SIGNATURE_SUFFIX) for p in archives + controls + runs}
    for p in sorted(envelopes - signed):
        bad.append(Rejection(_rel(p, root), "stray-file", "an envelope without its file"))
    return sorted(archives), sorted(controls), sorted(runs), bad


def _rel(p: Path, root: Path) -> str:
    try:
        return str(p.relative_to(root))
    except ValueError:
        return str(p)


def _open_one(path: Path, public: Ed25519PublicKey, limits: Limits) -> OpenedCell | Rejected:
    try:
        return open_cell(path, public, limits)
    except Rejected as exc:
        return exc


def verify_run(
    root: Path,
    expected: Expected,
    public: Ed25519PublicKey,
    *,
    require_parity: bool = True,
    limits: Limits | None = None,
) -> Verified:
    """Every archive and controls file under `root` verified, and the set exactly `expected`;
    with `require_parity` (the default), the same versions everywhere (`_check_parity`).
    Archives are read within `limits`, by default those the run was written under
    (`expected.limits`)."""
    limits = limits or expected.limits
    if not root.is_dir():
        raise ReduceFailed([Rejection(str(root), "unreadable", "not a folder")])
    archives, controls_files, run_files, bad = _scan(root)
    opened: list[OpenedCell] = []
    rejected: set[str] = set()
    for path in archives:
        res = _open_one(path, public, limits)
        if isinstance(res, Rejected):
            bad.append(Rejection(_rel(path, root), res.rule, res.detail))
            rejected.add(path.name)
        else:
            res.path = path
            opened.append(res)
    controls: dict[str, ControlsRecord] = {}
    digests: dict[str, str] = {}
    made_in: dict[Path, str | None] = {c.path: run_id_of(c.statement.predicate) for c in opened}
    for path in run_files:
        try:
            made_in[path] = read_run(path, public).run_id
        except Rejected as exc:
            bad.append(Rejection(_rel(path, root), exc.rule, exc.detail))
    for path in controls_files:
        try:
            rec, digest, made_in[path] = read_controls(path, public)
        except Rejected as exc:
            bad.append(Rejection(_rel(path, root), exc.rule, exc.detail))
            continue
        if rec.task in controls:
            bad.append(Rejection(_rel(path, root), "duplicate-controls", f"task {rec.task!r}"))
            continue
        controls[rec.task] = rec
        digests[rec.task] = digest
    bad += _check_set(root, opened, expected, rejected)
    bad += _check_controls(root, opened, controls, expected)
    run_id, mixed = _check_run(root, made_in, set(run_files))
    bad += mixed
    if require_parity:
        bad += _check_parity(root, opened, expected)
        bad += _check_observed_models(root, opened, expected)
    if bad:
        raise ReduceFailed(bad)
    cells = sorted(opened, key=lambda c: c.record.cell.id)
    return Verified(root, cells, controls, digests, run_id or "")


def _check_run(
    root: Path, made_in: dict[Path, str | None], run_files: set[Path]
) -> tuple[str | None, list[Rejection]]:
    """One run id across every archive, controls result and ``run.json``: that of the run
    files when they agree, else the one most of everything names; the rest is named."""
    from_files = {made_in[p] for p in run_files if p in made_in}
    named = Counter(v for v in made_in.values() if v is not None)
    if len(from_files) == 1:
        run_id: str | None = next(iter(from_files))
    else:
        run_id = named.most_common(1)[0][0] if named else None
    bad: list[Rejection] = []
    for path, made in sorted(made_in.items()):
        if made == run_id and made is not None:
            continue
        what = (
            f"signed in run {made}; the run's id is {run_id}"
            if made is not None
            else "signed without a run id (made before runs had one): run the matrix again"
        )
        bad.append(Rejection(_rel(path, root), "run-mismatch", what))
    return run_id, bad


def _check_set(
    root: Path, opened: list[OpenedCell], expected: Expected, rejected: set[str]
) -> list[Rejection]:
    """Duplicates, unexpected and missing cells (a cell whose archive was already rejected
    is not reported missing again)."""
    bad: list[Rejection] = []
    by_id: dict[str, list[OpenedCell]] = defaultdict(list)
    for c in opened:
        by_id[c.record.cell.id].append(c)
    want = {c.id for c in expected.cells}
    for cid, group in sorted(by_id.items()):
        if len(group) > 1:
            where = ", ".join(_rel(g.path, root) for g in group)
            bad.append(Rejection(where, "duplicate-cell", f"{cid} appears {len(group)} times"))
        if cid not in want:
            for g in group:
                bad.append(
                    Rejection(_rel(g.path, root), "unexpected-cell", f"{cid} is not in the matrix")
                )
            continue
        meta = expected.meta[cid]
        for g in group:
            if _identity(g.meta) != _identity(meta):
                bad.append(
                    Rejection(
                        _rel(g.path, root),
                        "settings-mismatch",
                        f"{cid}: archive declares {_settings(g.meta)}, matrix {_settings(meta)}",
                    )
                )
    for cell in expected.cells:
        if cell.id not in by_id and f"{cell.folder}{SUFFIX}" not in rejected:
            bad.append(
                Rejection(".", "missing-cell", f"{cell.id} (expected {cell.folder}{SUFFIX})")
            )
    return bad


def _identity(m: CellMeta) -> CellMeta:
    """What must match the matrix exactly. The model's provider and version are left to
    parity: they describe what served the model, and a difference from the matrix is refused
    unless ``--no-parity`` (the report lists every version it saw)."""
    return m.model_copy(
        update={
            "matrix_digest": "",
            "model": m.model.model_copy(update={"provider": "", "version": ""}),
        }
    )


def _settings(m: CellMeta) -> str:
    return (
        f"agent={m.harness.agent} {m.harness.settings or ''} model={m.model.provider}/"
        f"{m.model.version} {m.model.settings or ''} profile={m.profile.settings or ''}"
    ).replace("  ", " ")


def _check_controls(
    root: Path, opened: list[OpenedCell], controls: dict[str, ControlsRecord], expected: Expected
) -> list[Rejection]:
    bad: list[Rejection] = []
    tasks = sorted({c.task for c in expected.cells})
    for t in tasks:
        if t not in controls:
            bad.append(Rejection(CONTROLS_FOLDER, "controls-missing", f"task {t!r}"))
    for t in sorted(set(controls) - set(tasks)):
        bad.append(Rejection(CONTROLS_FOLDER, "unexpected-cell", f"controls of task {t!r}"))
    by_task: dict[str, Counter[str]] = defaultdict(Counter)
    for c in opened:
        by_task[c.record.cell.task][c.record.task_digest] += 1
    for t, counts in sorted(by_task.items()):
        if len(counts) > 1:
            # The controls' digest is the reference when there is one; else the majority.
            common = controls[t].task_digest if t in controls else counts.most_common(1)[0][0]
            for c in opened:
                if c.record.cell.task == t and c.record.task_digest != common:
                    bad.append(
                        Rejection(
                            _rel(c.path, root),
                            "task-digest-mismatch",
                            f"task {t!r} {c.record.task_digest[:19]}…, expected {common[:19]}…",
                        )
                    )
        if t in controls:
            cd = controls[t].task_digest
            if cd not in counts:
                bad.append(
                    Rejection(
                        CONTROLS_FOLDER,
                        "task-digest-mismatch",
                        f"controls of {t!r} were run on {cd[:19]}…, the cells on "
                        f"{', '.join(d[:19] + '…' for d in counts)}",
                    )
                )
    return bad


def _check_parity(root: Path, opened: list[OpenedCell], expected: Expected) -> list[Rejection]:
    bad: list[Rejection] = []
    if not opened:
        return bad
    # Runtime: every key of the record's `versions` is the same in every archive.
    keys = sorted({k for c in opened for k in c.record.versions})
    for k in keys:
        counts = Counter(c.record.versions.get(k, "(absent)") for c in opened)
        if len(counts) > 1:
            common, n = counts.most_common(1)[0]
            for c in opened:
                v = c.record.versions.get(k, "(absent)")
                if v != common:
                    bad.append(
                        Rejection(
                            _rel(c.path, root),
                            "parity",
                            f"runtime {k} is {v!r}; {n} other archive(s) have {common!r}",
                        )
                    )
    bad += _check_programs(root, opened)
    # Provider and model version: what the matrix declares for the cell's model. Compared
    # with the matrix, not only across archives: a run whose cells all agree with each other
    # but were made with another provider or version than the matrix names is not this matrix.
    for c in opened:
        declared = expected.meta.get(c.record.cell.id)
        if declared is None:
            continue  # an unexpected cell, already rejected
        served = f"{c.meta.model.provider}/{c.meta.model.version}"
        named = f"{declared.model.provider}/{declared.model.version}"
        if (c.meta.model.provider, c.meta.model.version) != (
            declared.model.provider,
            declared.model.version,
        ):
            bad.append(
                Rejection(
                    _rel(c.path, root),
                    "parity",
                    f"model {c.meta.model.name!r} is {served}; the matrix declares {named}",
                )
            )
    # Task code: the cells were made from the task files the matrix names today.
    for c in opened:
        want = expected.task_digests.get(c.record.cell.task)
        if want is not None and c.record.task_digest != want:
            bad.append(
                Rejection(
                    _rel(c.path, root),
                    "parity",
                    f"task {c.record.cell.task!r} has changed since this cell ran",
                )
            )
    return bad


def declared_model(m: ModelSetting) -> str | None:
    """The model a matrix declares for a cell, as responses would name it: its version, else
    its name; None where it declares none (name, provider and version all ``none``)."""
    if m.version != "none":
        return m.version
    if m.name != "none" or m.provider != "none":
        return m.name
    return None


#: What a provider appends to an alias when it answers with the snapshot the alias points to.
_SNAPSHOT = re.compile(r"-(\d{4}-\d{2}-\d{2}|\d{8})$")


def is_declared(observed: str, declared: str) -> bool:
    """Whether the model a response named is the declared one, or a dated snapshot of it."""
    if observed == declared:
        return True
    m = _SNAPSHOT.search(observed)
    return m is not None and observed[: m.start()] == declared


def _check_observed_models(
    root: Path, opened: list[OpenedCell], expected: Expected
) -> list[Rejection]:
    """The models the recorder saw answer each cell are the one the matrix declares. A cell
    with no model observed is not refused here (its agent may call no model, or call it past
    every recorder): the report flags it as not verified."""
    bad: list[Rejection] = []
    for c in opened:
        meta = expected.meta.get(c.record.cell.id)
        usage = c.record.usage
        if meta is None or usage is None or not usage.models:
            continue
        declared = declared_model(meta.model)
        others = [m for m in usage.models if declared is None or not is_declared(m, declared)]
        if not others:
            continue
        named = f"declares {declared!r}" if declared is not None else "declares no model"
        bad.append(
            Rejection(
                _rel(c.path, root),
                "model-observed",
                f"{c.record.cell.id}: {', '.join(repr(m) for m in others)} answered its model "
                f"calls (seen at the egress recorder); the matrix {named}",
            )
        )
    return bad


def program_of(c: OpenedCell) -> str | None:
    """The agent program a cell's record names, as compared for parity: its version (or why
    there is none) and its file's sha256; None where no program was started."""
    inv = c.record.invocation
    prog = inv.program if inv is not None else None
    if prog is None:
        return None
    version = prog.version if prog.version is not None else f"no version ({prog.note})"
    return f"{prog.path}: {version}, sha256 {prog.sha256 or f'unknown ({prog.note})'}"


def _check_programs(root: Path, opened: list[OpenedCell]) -> list[Rejection]:
    """Within each harness, every cell that started a program started the same one: same file
    digest, same answer to ``--version``. Harnesses are not compared with each other (they
    are different agents), and a cell whose program never started has none to compare."""
    bad: list[Rejection] = []
    by_harness: dict[str, list[tuple[OpenedCell, str]]] = defaultdict(list)
    for c in opened:
        prog = program_of(c)
        if prog is not None:
            by_harness[c.record.cell.harness].append((c, prog))
    for harness, group in sorted(by_harness.items()):
        counts = Counter(prog for _, prog in group)
        if len(counts) < 2:
            continue
        common, n = counts.most_common(1)[0]
        for c, prog in group:
            if prog != common:
                bad.append(
                    Rejection(
                        _rel(c.path, root),
                        "parity",
                        f"harness {harness!r} ran agent program {prog}; {n} other archive(s) "
                        f"of it ran {common}",
                    )
                )
    return bad


def expected_from(matrix: Matrix) -> Expected:
    """The cells, settings and task digests a matrix promises (its task files are loaded)."""
    loaded = load_tasks(matrix.task_paths())
    if loaded.errors:
        raise MatrixError("; ".join(str(e) for e in loaded.errors))
    names = sorted(t.name for t in loaded.tasks)
    cells = matrix.cells(names)
    return Expected(
        cells=cells,
        meta={c.id: matrix.meta(c) for c in cells},
        task_digests={t.name: task_digest(t) for t in loaded.tasks},
        limits=matrix.limits,
    )
