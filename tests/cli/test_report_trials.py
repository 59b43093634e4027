"""`oracle report trials` through the real command, over folders a real `oracle trial` wrote."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from oracle.reports.model import Report
from oracle.reports.trials import UNSIGNED
from tests.cli.test_cli import oracle
from tests.conftest import DEMO

pytestmark = pytest.mark.e2e
TASKS = ("log-level", "user-rename")


@pytest.fixture(scope="module")
def trials(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two fast demo tasks × careful, obedient and an agent that never works (its verdicts
    unknown) × 2 repetitions: 12 trial folders."""
    out = tmp_path_factory.mktemp("trials") / "run"
    ran = oracle(
        "trial",
        str(DEMO),
        *[a for t in TASKS for a in ("--task", t)],
        "-a",
        "careful",
        "-a",
        "obedient",
        "-a",
        "cmd:/bin/false",
        "--isolation",
        "none",
        "-n",
        "2",
        "--out",
        str(out),
    )
    assert len(list(out.glob("*/record.json"))) == 12, ran.stdout + ran.stderr
    return out


@pytest.fixture
def copy(trials: Path, tmp_path: Path) -> Path:
    """A copy of the trial folders this test may tamper with."""
    return Path(shutil.copytree(trials, tmp_path / "run", symlinks=True))


def figures(report: Report, harness: str) -> dict[str, tuple[int, int, int]]:
    """metric -> (numerator, denominator, unknown) of one harness's group."""
    (group,) = [g for g in report.groups if g.harness == harness]
    return {f.metric: (f.numerator, f.denominator, f.unknown) for f in group.metrics}


def test_a_report_of_trial_folders_has_the_matrix_figures_and_says_it_is_unsigned(
    trials: Path, tmp_path: Path
):
    made = oracle("report", "trials", str(trials), "--out", str(tmp_path / "rep"))
    assert made.returncode == 0, made.stdout + made.stderr
    report = Report.model_validate_json((tmp_path / "rep" / "report.json").read_text())
    assert report.unsigned is True and report.schema_version == 6
    assert report.attempts == 12 and report.invalid == 0 and report.excluded == {}
    assert figures(report, "careful") == {
        "utility": (4, 4, 0),
        "security": (4, 4, 0),
        "attack_success": (0, 4, 0),
        "autonomy": (4, 4, 0),
    }
    assert figures(report, "obedient")["attack_success"] == (4, 4, 0)
    # An agent that never ran: every verdict unknown, none counted as an attack resisted.
    never = figures(report, "cmd:/bin/false")
    assert never["security"] == (0, 0, 4) and never["attack_success"] == (0, 0, 4)
    (careful,) = [g for g in report.groups if g.harness == "careful"]
    sec = next(f for f in careful.metrics if f.metric == "security")
    assert sec.text == "1.00 (4/4) [0.51, 1.00]"
    assert [t.task for t in careful.tasks] == list(TASKS)
    assert {c.task: c.security_proven for c in report.controls} == dict.fromkeys(TASKS, True)
    assert len(report.inputs) == 12 and all(len(i.sha256) == 64 for i in report.inputs)
    assert UNSIGNED in report.claim_boundary.does_not_claim
    md = (tmp_path / "rep" / "report.md").read_text()
    assert f"> **{UNSIGNED}**" in md and "archives signed by key" not in md
    page = (tmp_path / "rep" / "report.html").read_text()
    assert '<div class="banner unsigned" id="unsigned" role="alert">Unsigned: these' in page
    assert "archives signed by key" not in page
    # No envelope is written: it cannot pass for a signed report.
    assert not (tmp_path / "rep" / "report.dsse.json").exists()
    assert oracle("keys", "new", "--out", str(tmp_path / "keys")).returncode == 0
    key = str(tmp_path / "keys" / "oracle.pub")
    verified = oracle("report", "verify", str(tmp_path / "rep"), "--key", key)
    assert verified.returncode == 1 and "report.dsse.json" in verified.stdout + verified.stderr


@pytest.mark.parametrize("fmt", ["text", "markdown", "json", "html"])
def test_each_format_printed_says_unsigned(trials: Path, fmt: str):
    shown = oracle("report", "trials", str(trials), "--format", fmt)
    assert shown.returncode == 0, shown.stderr
    if fmt == "json":
        assert Report.model_validate_json(shown.stdout).unsigned is True
    else:
        assert "Unsigned: these trials come from unsigned trial folders" in shown.stdout
    if fmt == "text":
        assert "attack success: 0.00 (0/4) [0.00, 0.49]" in shown.stdout


def test_a_tampered_trial_is_left_out_and_named(copy: Path, tmp_path: Path):
    folder = copy / "log-level__careful__none__default__r0"
    record = folder / "record.json"
    text = record.read_text()
    assert '"security_breached": false' in text
    record.write_text(text.replace('"security_breached": false', '"security_breached": true'))
    made = oracle("report", "trials", str(copy), "--out", str(tmp_path / "rep"))
    assert made.returncode == 1
    assert f"left out {folder}: does not verify against its manifest" in made.stderr
    assert "record.json does not match its digest" in made.stderr
    report = Report.model_validate_json((tmp_path / "rep" / "report.json").read_text())
    assert list(report.excluded) == [str(folder)]
    assert report.attempts == 11
    # The forged breach is not counted: the careful agent's attack success stays 0 of 3.
    assert figures(report, "careful")["attack_success"] == (0, 3, 0)
    assert str(folder) in (tmp_path / "rep" / "report.md").read_text()


def test_a_record_forged_with_its_manifest_is_left_out_when_it_breaks_the_verdict_rules(
    copy: Path,
):
    """A manifest proves only that the files are whole: whoever edits a record can write the
    manifest again. A forged record that breaks the verdict rules is still refused."""
    folder = copy / "log-level__careful__none__default__r1"
    record = folder / "record.json"
    data = json.loads(record.read_text())
    data["autonomy_achieved"] = None  # utility and a negative verdict then have no invocation
    data["evaluation_errors"]["autonomy_achieved"] = "forged"
    record.write_text(json.dumps(data, indent=2) + "\n")
    lines = []
    for line in (folder / "manifest.sha256").read_text().splitlines():
        digest, _, rel = line.partition("  ")
        if rel == "record.json":
            digest = hashlib.sha256(record.read_bytes()).hexdigest()
        lines.append(f"{digest}  {rel}\n")
    (folder / "manifest.sha256").write_text("".join(lines))
    made = oracle("report", "trials", str(copy), "--format", "json")
    assert made.returncode == 1
    report = Report.model_validate_json(made.stdout)
    assert "contradicts the verdict rules" in report.excluded[str(folder)]
    assert "utility needs verified invocation" in report.excluded[str(folder)]


def test_a_copied_trial_counts_never_twice(copy: Path):
    original = copy / "user-rename__obedient__none__default__r0"
    twin = copy / "again" / original.name
    shutil.copytree(original, twin)
    made = oracle("report", "trials", str(copy), str(original), "--format", "json")
    assert made.returncode == 1
    report = Report.model_validate_json(made.stdout)
    assert sorted(report.excluded) == sorted([str(original), str(twin)])
    assert "holds the same trial as another folder" in report.excluded[str(twin)]
    # The folder named twice on the command line is read once, and both copies are out.
    assert figures(report, "obedient")["attack_success"] == (3, 3, 0)


def test_no_trial_folder_is_a_usage_error(tmp_path: Path):
    (tmp_path / "empty" / "sub").mkdir(parents=True)
    made = oracle("report", "trials", str(tmp_path / "empty"))
    assert made.returncode == 2
    assert "no trial folder (a folder with record.json and manifest.sha256)" in made.stderr
    gone = oracle("report", "trials", str(tmp_path / "nowhere"))
    assert gone.returncode == 2 and "no such folder" in gone.stderr


def test_control_runs_are_left_out_and_alone_make_no_report(tmp_path: Path):
    ran = oracle("controls", str(DEMO), "--task", "log-level", "--out", str(tmp_path / "c"))
    assert ran.returncode == 0, ran.stdout + ran.stderr
    made = oracle("report", "trials", str(tmp_path / "c"))
    assert made.returncode == 2
    assert "control runs left out" in made.stderr
    assert "only control runs" in made.stderr


def test_the_report_is_not_written_into_a_trial_folder(trials: Path):
    inside = trials / "log-level__careful__none__default__r0" / "rep"
    made = oracle("report", "trials", str(trials), "--out", str(inside))
    assert made.returncode == 2 and "is inside" in made.stderr
    assert not inside.exists()


def test_links_are_not_followed_and_staging_folders_are_skipped(copy: Path, tmp_path: Path):
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(copy / "log-level__obedient__none__default__r0", elsewhere / "t")
    (copy / "linked").symlink_to(elsewhere, target_is_directory=True)
    # A trial half-written by a crash sits in a hidden staging folder until it is renamed.
    shutil.copytree(
        copy / "log-level__obedient__none__default__r1", copy / ".log-level__x.tmp" / "t"
    )
    made = oracle("report", "trials", str(copy), "--format", "json")
    assert made.returncode == 1
    report = Report.model_validate_json(made.stdout)
    assert report.excluded == {str(copy / "linked"): "a linked folder (links are not followed)"}
    assert report.attempts == 12
    assert figures(report, "obedient")["attack_success"] == (4, 4, 0)


def test_an_unsigned_report_is_not_written_beside_a_signature(trials: Path, tmp_path: Path):
    (tmp_path / "rep").mkdir()
    (tmp_path / "rep" / "report.dsse.json").write_text("{}")
    made = oracle("report", "trials", str(trials), "--out", str(tmp_path / "rep"))
    assert made.returncode == 2 and "holds a signed report" in made.stderr
    assert not (tmp_path / "rep" / "report.json").exists()
