"""`oracle demo` with the local servers hidden and ORACLE_SERVERS=containers (what `make trial`
does where only a Docker engine is there) runs all nine demo tasks, with the same verdicts as
on the local servers."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.cli.test_cli import ORACLE
from tests.conftest import DEMO, DemoOutput, require_images, require_service
from tests.fixtures.test_server_containers import hidden_env

pytestmark = pytest.mark.filterwarnings("ignore::oracle.fixtures.exposure.ExposureWarning")


def verdicts(out: Path) -> dict[str, tuple[object, ...]]:
    found = {}
    for record in sorted(out.rglob("record.json")):
        r = json.loads(record.read_text())
        found[str(record.parent.relative_to(out))] = (
            r["utility_achieved"],
            r["security_breached"],
            r["autonomy_achieved"],
            r["error"],
        )
    return found


def demo(out: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [ORACLE, "demo", str(DEMO), "--out", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


def test_the_demo_on_containers_gives_the_verdicts_of_the_local_servers(
    tmp_path: Path, local_demo: DemoOutput
) -> None:
    require_images()
    require_service("PostgreSQL", 5432)
    require_service("Redis", 6379)
    local = local_demo.done  # the same demo on the local servers, run once for the session
    assert local.returncode == 0, local.stdout[-2000:] + local.stderr[-2000:]
    assert "skipped" not in local.stdout + local.stderr
    boxed = demo(tmp_path / "containers", hidden_env())
    assert boxed.returncode == 0, boxed.stdout[-2000:] + boxed.stderr[-2000:]
    assert "skipped" not in boxed.stdout + boxed.stderr
    on_local, on_containers = verdicts(local_demo.out), verdicts(tmp_path / "containers")
    assert len(on_local) > 120  # every task's trials and controls (137 on 2026-12-03)
    assert on_containers == on_local
    tasks = {p.split("__")[0] for p in on_containers}
    assert len({t.split("/")[-1] for t in tasks}) == 9
    servers = set()
    for record in (tmp_path / "containers").rglob("record.json"):
        servers |= {s["server"] for s in json.loads(record.read_text())["servers"]}
    assert servers == {"PostgreSQL", "Redis"}  # the demo's two server sinks
