"""A report over trial folders (`oracle trial`, `oracle demo`): unsigned, and saying so.

The figures follow the rules of a matrix report (`oracle.reports.model`): each metric over its
own known verdicts, unknowns and invalid executions beside it, a metric whose predicates were
not proven withheld with the reason. What differs is where the trials come from:

- each trial folder is checked against its ``manifest.sha256`` exactly as ``oracle show`` does
  (every file listed once, every digest right, nothing else there) and its record against the
  verdict rules; a folder that fails is left out and named, never counted;
- no signature is checked, as none exists: a folder edited together with its manifest still
  verifies. The report says so in its JSON (``unsigned``), its Markdown and its HTML;
- there is no matrix, so no cell set is promised: a missing trial cannot be detected. Two
  folders holding the same trial (the same cell started at the same time: a copy, or a rescore
  beside its original) are all left out, as the reducer refuses a duplicate cell;
- a task's controls are what its trials recorded when they ran (``controls`` in each record,
  read from the task's saved controls status). A metric is withheld for a task when any of its
  trials ran with that metric unproven, or when its trials ran different task code. Trial
  folders hold no judge calibration, so no judge rate is corrected.

Control runs (``oracle demo`` archives them under ``controls/``) are scripted, not an agent's
trials: they are left out, and counted.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import os
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import Field, ValidationError

from oracle.evidence.archive import MANIFEST, ArchiveError, read_verified
from oracle.evidence.record import TrialRecord
from oracle.judging.verdict import Metric, contradictions
from oracle.matrix.controls_record import ControlsRecord
from oracle.reports.model import (
    CLAIMS,
    NOT_CLAIMED,
    ClaimBoundary,
    InputArchive,
    Report,
    comparisons_of,
    controls_statuses,
    group_figures,
    metric_label,
)

RECORD = "record.json"
#: Why a report over trial folders is weaker than one over signed cell archives.
UNSIGNED = (
    "Unsigned: these trials come from unsigned trial folders (oracle trial, oracle demo), not "
    "signed cell archives, so they were not checked against a signature. Each folder was "
    "checked against its manifest.sha256 (whole, nothing added or missing), which shows "
    "nothing about who wrote it."
)
PARITY_UNSIGNED = "not checked (unsigned trial folders)"
#: What that leaves open.
UNSIGNED_PARITY = (
    "its trials may come from mixed oracle, Python, package or agent program versions; every "
    "version seen is listed under Versions"
)
CONTROL_RUN = "a control run (scripted, not an agent's trial)"
_METRICS = (Metric.UTILITY.value, Metric.SECURITY.value)


class NoTrials(ValueError):
    """No trial folder was found under the paths given (nothing to report)."""


@dataclass(frozen=True)
class TrialFolder:
    """One trial folder that verified: where, the sha256 of its manifest, its record."""

    path: Path
    sha256: str
    record: TrialRecord


@dataclass
class Gathered:
    """The trial folders found under some paths: those that verified, and those left out
    (folder → why)."""

    trials: list[TrialFolder] = field(default_factory=list)
    excluded: dict[str, str] = field(default_factory=dict)

    @property
    def refused(self) -> dict[str, str]:
        """The folders left out for a fault (a control run is no fault)."""
        return {k: v for k, v in self.excluded.items() if v != CONTROL_RUN}


def _candidates(root: Path, excluded: dict[str, str]) -> Iterable[Path]:
    """Every folder under `root` (itself included) that holds a manifest or a record, without
    following links and without looking inside one (its snapshots and logs are its own).
    Hidden folders are skipped: an archive is staged in one until it is renamed into place."""
    if root.is_file():
        root = root.parent
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        d = Path(dirpath)
        if MANIFEST in filenames or RECORD in filenames:
            dirnames[:] = []
            yield d
            continue
        for name in list(dirnames):
            if (d / name).is_symlink():
                excluded[str(d / name)] = "a linked folder (links are not followed)"
        dirnames[:] = sorted(
            n for n in dirnames if not n.startswith(".") and not (d / n).is_symlink()
        )


def _read(folder: Path) -> TrialFolder | str:
    """The verified trial in `folder`, or why it is left out."""
    try:
        data = read_verified(folder, RECORD)
    except ArchiveError as exc:
        return "does not verify against its manifest: " + "; ".join(str(exc).splitlines())
    except OSError as exc:
        return f"cannot be read: {exc}"
    try:
        record = TrialRecord.model_validate_json(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"])
        return f"{RECORD} is not a trial record: {where}: {first['msg']}"
    if record.controls is not None and record.controls.status == "control":
        return CONTROL_RUN
    wrong = contradictions(record)
    if wrong:
        return f"{RECORD} contradicts the verdict rules: " + "; ".join(wrong)
    manifest = (folder / MANIFEST).read_bytes()
    return TrialFolder(folder, hashlib.sha256(manifest).hexdigest(), record)


def gather(paths: Sequence[Path]) -> Gathered:
    """Every trial folder under `paths`, each verified (`_read`); a folder reached twice is
    read once, and two folders holding the same trial are both left out. `NoTrials` where
    no trial folder is found at all."""
    out = Gathered()
    seen: set[Path] = set()
    for root in paths:
        for folder in _candidates(root, out.excluded):
            real = folder.resolve()
            if real in seen:
                continue
            seen.add(real)
            got = _read(folder)
            if isinstance(got, str):
                out.excluded[str(folder)] = got
            else:
                out.trials.append(got)
    if not out.trials and not out.excluded:
        raise NoTrials(
            "no trial folder (a folder with record.json and manifest.sha256) under "
            + ", ".join(str(p) for p in paths)
        )
    same: dict[tuple[str, float], list[TrialFolder]] = defaultdict(list)
    for t in out.trials:
        same[(t.record.cell.id, t.record.started_at)].append(t)
    for group in same.values():
        if len(group) > 1:
            where = ", ".join(str(t.path) for t in group)
            for t in group:
                out.excluded[str(t.path)] = (
                    f"holds the same trial as another folder (cell {t.record.cell.id}, same "
                    f"start): a copy or a rescore of one trial; all of {where} are left out, "
                    "give only the folders you mean"
                )
    out.trials = sorted(
        (t for t in out.trials if str(t.path) not in out.excluded),
        key=lambda t: (t.record.cell.id, t.record.started_at, str(t.path)),
    )
    return out


class RecordedControls(ControlsRecord):
    """A task's controls as its trials recorded them when they ran: a metric is proven when
    every trial of the task ran with it proven, from the same task code."""

    unproven: dict[str, str] = Field(default_factory=dict)

    def status(self, metric: str) -> tuple[bool, str]:
        if metric in self.unproven:
            return False, self.unproven[metric]
        return True, "proven when its trials ran (the status each trial recorded)"


def recorded_controls(records: Sequence[TrialRecord]) -> dict[str, ControlsRecord]:
    """Per task, `RecordedControls` from the controls status each of its records holds."""
    by_task: dict[str, list[TrialRecord]] = defaultdict(list)
    for r in records:
        by_task[r.cell.task].append(r)
    out: dict[str, ControlsRecord] = {}
    for task, recs in sorted(by_task.items()):
        why: dict[str, str] = {}
        digests = sorted({r.task_digest for r in recs})
        if len(digests) > 1:
            code = (
                f"its trials ran {len(digests)} versions of the task's code (task digests "
                + ", ".join(d[:19] + "…" for d in digests)
                + "): report each version apart"
            )
            why = dict.fromkeys(_METRICS, code)
        for r in recs:
            c = r.controls
            if c is None:
                for m in _METRICS:
                    why.setdefault(m, f"trial {r.cell.id} recorded no controls status")
            elif c.status == "unproven" and c.metrics:
                for m, reason in c.metrics.items():
                    why.setdefault(m, f"unproven when trial {r.cell.id} ran: {reason}")
            elif c.status != "proven":
                for m in _METRICS:
                    why.setdefault(m, f"{c.status} when trial {r.cell.id} ran: {c.reason}")
        out[task] = RecordedControls(task=task, task_digest=digests[0], unproven=why)
    return out


def unsigned_report(gathered: Gathered, *, title: str | None = None) -> Report:
    """The report of the verified trials of `gathered`, marked unsigned, with every folder
    left out named."""
    trials = gathered.trials
    records = [t.record for t in trials]
    controls = recorded_controls(records)
    versions: dict[str, set[str]] = defaultdict(set)
    for r in records:
        for k, v in r.versions.items():
            versions[k].add(v)
        prog = r.invocation.program if r.invocation is not None else None
        if prog is not None:
            version = prog.version if prog.version is not None else f"no version ({prog.note})"
            versions[f"agent {r.cell.harness}"].add(
                f"{prog.path}: {version}, sha256 {prog.sha256 or f'unknown ({prog.note})'}"
            )
    groups = group_figures(trials, controls)
    claims = [c for c in CLAIMS if not c.startswith("Every input archive was verified")]
    return Report(
        title=title or "oracle report: trial folders (unsigned)",
        generated_at=_dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        matrix="",
        matrix_digest="",
        run_id="",
        signer_key_id="",
        require_parity=False,
        parity=PARITY_UNSIGNED,
        attempts=len(records),
        invalid=sum(r.error is not None for r in records),
        invalid_cells={r.cell.id: r.error for r in records if r.error is not None},
        versions={k: sorted(v) for k, v in sorted(versions.items())},
        groups=groups,
        comparisons=comparisons_of(trials, controls),
        controls=controls_statuses(controls, {}),
        inputs=[
            InputArchive(
                path=str(t.path),
                sha256=t.sha256,
                cell=t.record.cell.id,
                status="invalid" if t.record.error is not None else "valid",
            )
            for t in trials
        ],
        claim_boundary=ClaimBoundary(
            claims=[
                *claims,
                "Every input trial folder was checked against its manifest.sha256 and its "
                "record against the verdict rules; folders that failed are listed as left out.",
            ],
            does_not_claim=[
                UNSIGNED,
                "That these are all the trials that ran: trial folders promise no set of "
                "cells, so a trial left out or never copied cannot be detected.",
                *NOT_CLAIMED,
            ],
        ),
        unsigned=True,
        excluded=dict(sorted(gathered.excluded.items())),
    )


def text_summary(r: Report) -> str:
    """The report for a terminal: the unsigned mark, the figures of each group and task, and
    the folders left out."""
    out = [UNSIGNED, ""]
    out.append(
        f"{r.attempts} trials from {len(r.inputs)} trial folders; {r.invalid} invalid "
        f"executions (in no denominator); {len(r.excluded)} folders left out"
    )
    for g in r.groups:
        out += ["", f"{g.harness} · {g.model} · {g.profile}: {g.attempts} attempts"]
        out += [f"  {metric_label(f.metric)}: {f.text} · unknown {f.unknown}" for f in g.metrics]
        for t in g.tasks:
            figs = "; ".join(f"{f.metric} {f.text}" for f in t.metrics)
            out.append(f"    {t.task} ({t.attempts}): {figs}")
    if r.excluded:
        out += ["", "left out:"]
        out += [f"  {k}: {v}" for k, v in r.excluded.items() if v != CONTROL_RUN]
        controls = sum(v == CONTROL_RUN for v in r.excluded.values())
        if controls:
            out.append(f"  {controls} control runs ({CONTROL_RUN})")
    return "\n".join(out) + "\n"
