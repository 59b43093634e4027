"""Inspect AI end to end: `inspect eval` (the real CLI) with the mock model over oracle tasks."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from oracle.evidence.record import TrialRecord
from tests.lazy import Lazy, installed

if not installed("inspect_ai"):
    pytest.skip("the 'inspect' extra is not installed", allow_module_level=True)

# Inspect (1.4 s to import) loads with the first test that reads a log, not at collection.
inspect_log = Lazy("inspect_ai.log")

HERE = Path(__file__).resolve().parent
INSPECT = Path(sys.executable).with_name("inspect")
METRICS = ("utility_achieved", "security_breached", "autonomy_achieved")


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    """Every task of inspect_tasks.py, run once through `inspect eval`; logs by task name."""
    tmp = tmp_path_factory.mktemp("inspect")
    env = {
        **os.environ,
        "INSPECT_LOG_DIR": str(tmp / "logs"),
        "NO_COLOR": "1",
        "ORACLE_TEST_OPEN_TRIALS": str(tmp / "open_trials.json"),
    }
    proc = subprocess.run(
        [
            str(INSPECT),
            "eval",
            "inspect_tasks.py",
            "--model",
            "mockllm/model",
            "--log-dir",
            str(tmp / "logs"),
            "-T",
            f"out={tmp / 'runs'}",
            "--display",
            "plain",
            "--max-tasks",
            "4",
        ],
        capture_output=True,
        text=True,
        cwd=HERE,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    found = {}
    for info in inspect_log.list_eval_logs(str(tmp / "logs")):
        log = inspect_log.read_eval_log(info)
        found[log.eval.task] = log
    return tmp, found


def _scores(log):
    return {str(s.id): s.scores for s in log.samples}


def _value(score):
    return None if isinstance(score.value, float) and math.isnan(score.value) else score.value


def test_logs_stay_in_the_tmp_path(logs):
    tmp, found = logs
    assert len(list((tmp / "logs").glob("*.eval"))) == 6
    assert sorted(found) == [
        "broken",
        "careful_demo",
        "crash",
        "no_oracle_scorer",
        "obedient_demo",
        "only_security",
    ]
    assert not (HERE / "logs").exists()


def test_careful_agent_each_metric_its_own_score(logs):
    _, found = logs
    log = found["careful_demo"]
    assert log.status == "success"
    for sample, scores in _scores(log).items():
        assert set(scores) == set(METRICS), sample
        assert [_value(scores[m]) for m in METRICS] == [1.0, 0.0, 1.0], sample
    # the metrics are rates over the known verdicts
    results = {s.name: s.metrics["mean"].value for s in log.results.scores}
    assert results == {"utility_achieved": 1.0, "security_breached": 0.0, "autonomy_achieved": 1.0}


def test_obedient_agent_breaches_and_the_record_is_in_the_metadata(logs):
    _, found = logs
    for sample, scores in _scores(found["obedient_demo"]).items():
        s = scores["security_breached"]
        assert _value(s) == 1.0, sample
        path = Path(s.metadata["record"])
        record = TrialRecord.model_validate_json(path.read_bytes())
        assert record.security_breached is True
        assert record.cell.task == sample and record.cell.harness == "inspect"
        assert record.cell.model == "mockllm/model"
        assert record.invocation is not None and record.invocation.adapter == "inspect"
        assert record.final_message == "On it."


def test_a_sample_whose_sandbox_failed_is_unscored_not_zero(logs):
    _, found = logs
    scores = _scores(found["broken"])
    broken = scores["broken-seed"]
    for m in METRICS:
        assert _value(broken[m]) is None, m
        assert "could not be prepared" in broken[m].explanation
        assert broken[m].metadata["error"].startswith("sandbox could not open")
    # the other sample is scored, and the failed one is out of the denominator
    assert [_value(scores["user-rename"][m]) for m in METRICS] == [1.0, 0.0, 1.0]
    results = {s.name: s.metrics["mean"].value for s in found["broken"].results.scores}
    assert results["utility_achieved"] == 1.0 and results["security_breached"] == 0.0


def test_a_solver_that_raises_is_recorded_and_scores_nothing(logs):
    tmp, found = logs
    log = found["crash"]
    sample = log.samples[0]
    assert sample.error is not None and "the agent fell over" in sample.error.message
    assert not sample.scores
    records = list((tmp / "runs").glob("*/user-rename__inspect__*__crash__r0*/record.json"))
    assert len(records) == 1, sorted(p.name for p in (tmp / "runs").iterdir())
    record = TrialRecord.model_validate_json(records[0].read_bytes())
    assert record.error == "solver raised RuntimeError: the agent fell over"
    assert record.security_breached is True  # the breach it made before falling over stands
    assert record.utility_achieved is None


def test_no_trial_is_held_once_the_eval_is_over(logs):
    tmp, found = logs
    # every sample's trial (its snapshots included) is let go when Inspect ends the sample,
    # also the crashed one, whose scorers never ran
    assert json.loads((tmp / "open_trials.json").read_text()) == []
    assert sum(len(log.samples) for log in found.values()) == 9


def test_a_task_with_only_some_oracle_scorers_still_gets_them(logs):
    _, found = logs
    (sample,) = found["only_security"].samples
    assert set(sample.scores) == {"security_breached"}
    assert _value(sample.scores["security_breached"]) == 1.0


def test_a_trial_no_scorer_finished_is_abandoned_when_the_sample_ends(logs):
    tmp, found = logs
    (sample,) = found["no_oracle_scorer"].samples
    assert not sample.scores
    (path,) = (tmp / "runs").glob("*/user-rename__inspect__*__no_oracle_scorer__r0*/record.json")
    record = TrialRecord.model_validate_json(path.read_bytes())
    assert record.error is not None and "Inspect ended the sample" in record.error
    assert (record.utility_achieved, record.security_breached) == (None, None)


def test_every_trial_archived_apart(logs):
    tmp, found = logs
    folders = sorted(p.relative_to(tmp / "runs") for p in (tmp / "runs").glob("*/*"))
    # careful and obedient ran the same oracle tasks: their archives do not overwrite each other
    assert len(folders) == 2 + 2 + 2 + 1 + 1 + 1, folders
    # one folder per eval: <Inspect task>-<parameters>-<eval id>
    runs = {p.parts[0] for p in folders}
    assert runs == {
        f"{name}-args-{_args_digest(log.eval.task_args)}-{log.eval.eval_id}"
        for name, log in found.items()
    }


def _args_digest(args):
    import hashlib

    text = json.dumps(args, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def test_two_evals_of_one_task_with_other_parameters_keep_their_own_records(tmp_path):
    """`-T kind=careful`, then `-T kind=obedient`, into the same archive folder: each log's
    record path leads to the record its score came from."""
    runs = tmp_path / "runs"
    for kind in ("careful", "obedient"):
        proc = subprocess.run(
            [
                str(INSPECT),
                "eval",
                "inspect_param_task.py",
                "--model",
                "mockllm/model",
                "--log-dir",
                str(tmp_path / "logs"),
                "-T",
                f"out={runs}",
                "-T",
                f"kind={kind}",
                "--display",
                "plain",
            ],
            capture_output=True,
            text=True,
            cwd=HERE,
            env={**os.environ, "INSPECT_LOG_DIR": str(tmp_path / "logs"), "NO_COLOR": "1"},
            timeout=300,
        )
        assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    seen = {}
    for info in inspect_log.list_eval_logs(str(tmp_path / "logs")):
        log = inspect_log.read_eval_log(info)
        (sample,) = log.samples
        score = sample.scores["security_breached"]
        record = TrialRecord.model_validate_json(Path(score.metadata["record"]).read_bytes())
        assert record.security_breached is (_value(score) == 1.0)
        seen[log.eval.task_args["kind"]] = (score.metadata["record"], _value(score))
    assert seen["careful"][1] == 0.0 and seen["obedient"][1] == 1.0
    assert seen["careful"][0] != seen["obedient"][0]


def test_endpoints_in_sample_metadata_have_their_passwords_masked():
    from oracle.integrations.inspect import _masked

    assert _masked("postgresql+psycopg://role:s3cret@127.0.0.1:5432/db") == (
        "postgresql+psycopg://role:***@127.0.0.1:5432/db"
    )
    assert _masked("redis://u:p@127.0.0.1:6379/3") == "redis://u:***@127.0.0.1:6379/3"
    assert _masked("/tmp/sandbox/agent/root") == "/tmp/sandbox/agent/root"


def _doc_blocks(lang):
    doc = (HERE.parent.parent / "docs" / "inspect.md").read_text()
    return re.findall(rf"```{lang}\n(.*?)```", doc, re.S)


def test_the_docs_example_runs_offline_with_the_mock_model(tmp_path):
    (example,) = [b for b in _doc_blocks("python") if b.startswith("# rename.py\n")]
    (tmp_path / "rename.py").write_text(example)
    shutil.copytree(HERE.parent.parent / "tasks" / "demo", tmp_path / "tasks" / "demo")
    (command,) = [
        line.split("#")[0].split()
        for block in _doc_blocks("sh")
        for line in block.splitlines()
        if "mockllm" in line and "rename.py" in line
    ]
    assert command[:3] == ["inspect", "eval", "rename.py"]
    logs = tmp_path / "logs"
    proc = subprocess.run(
        [str(INSPECT), *command[1:], "--log-dir", str(logs), "--display", "plain"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "INSPECT_LOG_DIR": str(logs), "NO_COLOR": "1"},
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    (info,) = inspect_log.list_eval_logs(str(logs))
    log = inspect_log.read_eval_log(info)
    assert log.status == "success", log.error
    (sample,) = log.samples
    assert [_value(sample.scores[m]) for m in METRICS] == [1.0, 0.0, 1.0]
    path = Path(sample.scores["utility_achieved"].metadata["record"])
    assert path.parts[:2] == ("runs", "inspect")  # as the page says, beside where it ran
    record = TrialRecord.model_validate_json((tmp_path / path).read_bytes())
    assert record.final_message == "Renamed bob to robert."
