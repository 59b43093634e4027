"""``--json``: through the real CLI, stdout holds one document that validates against the
schema exported for its command, and holds the right values."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from oracle.cli.output import MODELS, cli_schemas
from tests.cli.test_cli import oracle
from tests.conftest import DEMO, REPO

pytestmark = pytest.mark.e2e
SCHEMAS = REPO / "schemas" / "cli"


def document(out: subprocess.CompletedProcess[str], command: str) -> dict[str, Any]:
    """The one document on stdout, validated against its command's schema file; its exit
    code is the process's."""
    doc = json.loads(out.stdout)  # the whole of stdout: one document, nothing else
    jsonschema.validate(doc, json.loads((SCHEMAS / f"{command}.schema.json").read_text()))
    assert doc["command"] == command and doc["schema_version"] == 1
    assert doc["exit_code"] == out.returncode, out.stderr
    return doc


def test_the_schema_files_match_the_models(tmp_path: Path):
    on_disk = {p.name: json.loads(p.read_text()) for p in sorted(SCHEMAS.glob("*.json"))}
    assert on_disk == {
        f"{n}.schema.json": json.loads(json.dumps(s)) for n, s in cli_schemas().items()
    }, "schemas/cli/ is out of date: run `make schema` and commit it"
    assert set(MODELS) == {"list", "check", "trial", "controls", "show", "reduce"}
    written = oracle("schema", "--out", str(tmp_path))
    assert written.returncode == 0, written.stdout + written.stderr
    for name in on_disk:
        assert (tmp_path / "cli" / name).read_text() == (SCHEMAS / name).read_text()


def test_list_json():
    out = oracle("list", str(DEMO), "--json")
    doc = document(out, "list")
    tasks = {t["name"]: t for t in doc["tasks"]}
    assert out.returncode == 0 and doc["problems"] == [] and doc["load_errors"] == []
    rename = tasks["user-rename"]
    assert rename["source"] == str(DEMO / "task_user_rename.py")
    assert [(s["name"], s["kind"]) for s in rename["sinks"]] == [("app", "sql")]
    assert sorted(c["kind"] for c in rename["controls"]) == ["breach", "clean", "mirror"]
    assert "user-rename" in out.stderr  # the listing itself went to stderr


def test_check_json_names_the_refused_predicate(tmp_path: Path):
    (tmp_path / "task_peek.py").write_text(
        "from oracle import Task, sqlite\n"
        "def said_so(ev):\n    return 'sent nothing' in ev.transcript\n"
        "task = Task(name='peek', prompt='p', sinks=[sqlite('db', sql='select 1')],"
        " security=said_so)\n"
    )
    shutil.copy(DEMO / "task_user_rename.py", tmp_path / "task_user_rename.py")
    out = oracle("check", str(tmp_path), "--json")
    doc = document(out, "check")
    assert out.returncode == 1
    checked = {t["name"]: t for t in doc["tasks"]}
    assert checked["user-rename"]["ok"] is True and checked["user-rename"]["refused"] == []
    assert checked["peek"]["ok"] is False
    refused = checked["peek"]["refused"]
    assert {r["predicate"] for r in refused} == {"said_so"}
    assert "reads evidence.transcript, which evidence does not have" in {
        r["message"] for r in refused
    }
    assert len(doc["problems"]) == len(refused) and all("said_so" in p for p in doc["problems"])


def test_trial_and_show_json_hold_the_verdicts(tmp_path: Path):
    runs = tmp_path / "runs"
    args = ("trial", str(DEMO), "-t", "user-rename", "-a", "careful", "-a", "obedient")
    out = oracle(*args, "--out", str(runs), "--json")
    doc = document(out, "trial")
    assert out.returncode == 0 and doc["problems"] == [], out.stderr
    assert doc["archives"] == str(runs)
    verdicts = {
        r["cell"]["harness"]: (
            r["utility_achieved"],
            r["security_breached"],
            r["autonomy_achieved"],
        )
        for r in doc["records"]
    }
    assert verdicts == {"careful": (True, False, True), "obedient": (True, True, True)}
    assert "Verdicts" in out.stderr  # the table went to stderr
    # show: the record it verified, the same as the archived one
    (folder,) = [p.parent for p in runs.rglob("record.json") if "obedient" in p.parent.name]
    shown = oracle("show", str(folder), "--json")
    sdoc = document(shown, "show")
    assert shown.returncode == 0 and sdoc["verified"] == "manifest"
    assert sdoc["record"] == json.loads((folder / "record.json").read_text())
    # a record that does not match its manifest is not shown, and says why
    record = folder / "record.json"
    record.write_text(
        record.read_text().replace('"security_breached": true', '"security_breached": false')
    )
    refused = oracle("show", str(folder), "--json")
    rdoc = document(refused, "show")
    assert refused.returncode == 1 and rdoc["record"] is None and rdoc["verified"] is None
    assert any("record.json does not match its digest" in p for p in rdoc["problems"])


def test_controls_json(tmp_path: Path):
    task = tmp_path / "task_user_rename.py"
    shutil.copy(DEMO / "task_user_rename.py", task)
    out = oracle("controls", str(task), "--json")
    doc = document(out, "controls")
    assert out.returncode == 0 and doc["problems"] == [], out.stderr
    statuses = {p["predicate"]: p["status"] for p in doc["predicates"]}
    assert statuses == {"user_renamed": "proven", "someone_made_admin": "proven"}
    runs = {r["control"]: r for r in doc["runs"] if not r["derived"]}
    breach = runs["make_mallory_admin"]
    assert breach["kind"] == "breach" and breach["behaved"] is True
    assert breach["security_breached"] is True
    assert breach["fired"]["security_breached:someone_made_admin"] is True
    assert runs["no-op"]["security_breached"] is False
    assert all(r["behaved"] for r in doc["runs"])


def test_reduce_json(tmp_path: Path):
    from oracle.base.signing import load_private_key, new_key, write_key_pair
    from oracle.matrix.run import run_matrix
    from oracle.matrix.spec import load_matrix
    from tests.matrix_helpers import EMBEDDED, write_matrix

    keys = tmp_path / "keys"
    write_key_pair(new_key(), keys / "oracle.key", keys / "oracle.pub")
    matrix = write_matrix(tmp_path / "m", tasks=EMBEDDED[3])  # user-rename
    run_matrix(load_matrix(matrix), tmp_path / "run", load_private_key(keys / "oracle.key"))
    args = ("reduce", str(tmp_path / "run"), "--expect", str(matrix))
    args += ("--key", str(keys / "oracle.pub"))
    out = oracle(*args, "--out", str(tmp_path / "report"), "--json")
    doc = document(out, "reduce")
    assert out.returncode == 0 and doc["problems"] == [], out.stderr
    report = doc["report"]
    assert report["matrix"] == "test" and report["attempts"] == 2
    assert sorted(doc["written"]) == sorted(p.name for p in (tmp_path / "report").iterdir())
    assert json.loads((tmp_path / "report" / "report.json").read_text()) == report
    # a tampered archive: rejected, no report
    cell = sorted((tmp_path / "run" / "cells").glob("*obedient*.tar.gz"))[0]
    data = bytearray(cell.read_bytes())
    data[len(data) // 2] ^= 0xFF
    cell.write_bytes(bytes(data))
    bad = oracle(*args, "--out", str(tmp_path / "report2"), "--json")
    bdoc = document(bad, "reduce")
    assert bad.returncode == 1 and bdoc["report"] is None
    assert [r["rule"] for r in bdoc["rejections"]] == ["archive-digest-mismatch"]
    assert not (tmp_path / "report2").exists()


def test_a_usage_error_is_a_document_too(tmp_path: Path):
    for command in ("list", "check", "trial", "controls"):
        out = oracle(command, str(tmp_path / "nowhere"), "--json")
        doc = document(out, command)
        assert out.returncode == 2
        assert doc["problems"] == [f"{tmp_path / 'nowhere'}: does not exist"]
        assert f"error: {tmp_path / 'nowhere'}: does not exist" in out.stderr
