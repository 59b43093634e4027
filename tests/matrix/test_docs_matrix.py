"""docs/matrix.md's Python example runs as written: as a script, with worker processes."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from oracle.base.signing import load_public_key, new_key, write_key_pair
from oracle.reports.pages import verify_report
from tests.conftest import REPO

DOC = REPO / "docs" / "matrix.md"


def python_blocks(doc: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", doc.read_text(), re.S)


def test_the_library_example_runs_as_a_script_with_workers(tmp_path: Path):
    (code,) = python_blocks(DOC)
    assert "jobs=2" in code and 'Path("matrices/demo.toml")' in code
    # The demo matrix as the example names it, with one repetition; its task glob
    # ("../tasks/demo/task_*.py") finds copies of two embedded-default demo tasks.
    tasks = tmp_path / "tasks" / "demo"
    tasks.mkdir(parents=True)
    for name in ("task_log_level.py", "task_user_rename.py"):
        shutil.copy(REPO / "tasks" / "demo" / name, tasks / name)
    source = (REPO / "matrices" / "demo.toml").read_text()
    assert 'tasks = ["../tasks/demo/task_*.py"]' in source
    narrowed = source.replace("repetitions = 3", "repetitions = 1")
    assert narrowed != source
    (tmp_path / "matrices").mkdir()
    (tmp_path / "matrices" / "demo.toml").write_text(narrowed)
    keys = tmp_path / "config" / "oracle" / "keys"  # the default key folder, for this test
    write_key_pair(new_key(), keys / "oracle.key", keys / "oracle.pub")
    script = tmp_path / "example.py"
    script.write_text(code)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
    }
    out = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert len(list((tmp_path / "runs" / "matrix" / "cells").glob("*.tar.gz"))) == 4
    verify_report(tmp_path / "reports" / "demo", load_public_key(keys / "oracle.pub"))
    report = json.loads((tmp_path / "reports" / "demo" / "report.json").read_text())
    assert report["attempts"] == 4 and report["invalid"] == 0
