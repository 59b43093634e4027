"""End to end through the real CLI: keys, `matrix run`, `reduce`, `report verify`, and the HTML
page opened in headless Chromium (Debian `chromium`, installed by `make test`)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from oracle.matrix.cell_archive import MANIFEST
from tests.conftest import REPO, require_tools
from tests.forked_cli import ORACLE, REAL_ORACLE
from tests.matrix_helpers import EMBEDDED, Member, files_of, gz, raw_tar, sign_bytes, write_matrix

pytestmark = pytest.mark.e2e
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",  # we run as root here
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1280,2600",
]
# Appended to a copy of the page only: it measures what was laid out and writes it into the DOM.
PROBE = """<script>
const box = e => {
  const r = e.getBoundingClientRect(); return [Math.round(r.width), Math.round(r.height)];
};
document.body.setAttribute("data-layout", JSON.stringify({
  plots: [...document.querySelectorAll("svg.plot")].map(s => ({
    metric: s.dataset.metric || "counts", size: box(s),
    ci: [...s.querySelectorAll("rect.ci")].map(box),
    points: s.querySelectorAll("circle.point").length })),
  tables: [...document.querySelectorAll("table")].map(t => ({
    cls: t.className, size: box(t), rows: t.tBodies[0].rows.length })),
}));
</script>"""


def cli_env() -> dict[str, str]:
    """The environment the CLI runs in: a user's, so Python caches bytecode as it does by
    default (a test run may have switched that off for itself)."""
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def oracle(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [ORACLE, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=cli_env(),
        timeout=300,
        check=False,
    )


def test_the_cli_runs_with_bytecode_caching_on():
    # What the "writes nowhere" tests rely on: the CLI's Python would write bytecode beside
    # any module it imports, unless the code says otherwise.
    python = Path(REAL_ORACLE).read_text().splitlines()[0].removeprefix("#!")
    out = subprocess.run(
        [
            python,
            "-c",
            "import os, sys; print(os.environ.get('PYTHONDONTWRITEBYTECODE'), "
            "sys.dont_write_bytecode)",
        ],
        capture_output=True,
        text=True,
        env=cli_env(),
        check=True,
    )
    assert out.stdout.split() == ["None", "False"]


def copy_tasks(names: list[str], dst: Path) -> list[Path]:
    """Demo task files (and their controls results) copied under `dst`: loading them must
    leave that folder as it was."""
    dst.mkdir(parents=True)
    out = []
    for n in names:
        src = REPO / "tasks" / "demo" / f"task_{n}.py"
        shutil.copy(src, dst / src.name)
        controls = src.with_suffix(".controls.json")
        if controls.exists():
            shutil.copy(controls, dst / controls.name)
        out.append(dst / src.name)
    return out


def tree(root: Path) -> dict[str, tuple[int, int]]:
    """Every path under `root` with its size and mtime: to prove what changed."""
    out = {}
    for p in sorted(root.rglob("*")):
        st = p.lstat()
        out[str(p.relative_to(root))] = (st.st_size, st.st_mtime_ns)
    return out


def chromium() -> str:
    found = shutil.which("chromium")
    if found is None:
        pytest.fail("chromium is not installed: `make test` installs it (make system-deps)")
    return found


def test_matrix_run_reduce_and_the_page_renders_in_chromium(tmp_path: Path):
    out = oracle("keys", "new", "--out", "keys", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "keys" / "oracle.key").stat().st_mode & 0o777 == 0o600
    # The demo matrix, narrowed to the four embedded-default tasks so the figures are fixed
    # whatever servers are up.
    # Copies of the tasks, so that a test can see whether loading them wrote beside them.
    four = ["orders_cleanup", "log_level", "release_notes", "user_rename"]
    source = (REPO / "matrices" / "demo.toml").read_text()
    paths = ", ".join(f'"{p}"' for p in copy_tasks(four, tmp_path / "tasks"))
    narrowed = tmp_path / "demo.toml"
    narrowed.write_text(source.replace('tasks = ["../tasks/demo/task_*.py"]', f"tasks = [{paths}]"))
    assert narrowed.read_text() != source
    matrix = str(narrowed)
    tasks_before = tree(tmp_path / "tasks")
    out = oracle(
        "matrix",
        "run",
        matrix,
        "--out",
        "run",
        "--key",
        "keys/oracle.key",
        "--jobs",
        "2",
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "24 cells: 24 run now, 0 kept from before, 0 invalid" in out.stdout
    assert tree(tmp_path / "tasks") == tasks_before  # no __pycache__ beside the tasks
    before = tree(tmp_path)
    out = oracle(
        "reduce",
        "run",
        "--expect",
        matrix,
        "--key",
        "keys/oracle.pub",
        "--out",
        "report",
        "--require-parity",  # the former opt-in: still accepted, and says it does nothing
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "verified 24 archives" in out.stdout and "parity required" in out.stdout
    assert "--require-parity is deprecated and does nothing" in " ".join(out.stdout.split())
    after = tree(tmp_path)
    changed = {p for p in after if before.get(p) != after[p]} | (set(before) - set(after))
    assert changed == {
        "report",
        *(f"report/{n}" for n in ("report.json", "report.md", "report.html", "report.dsse.json")),
    }
    out = oracle("report", "verify", "report", "--key", "keys/oracle.pub", cwd=tmp_path)
    assert out.returncode == 0 and "verified" in out.stdout

    report = json.loads((tmp_path / "report" / "report.json").read_text())
    assert report["attempts"] == 24 and len(report["inputs"]) == 24
    assert report["parity"] == "required" and report["require_parity"] is True
    assert report["run_id"] == json.loads((tmp_path / "run" / "run.json").read_text())["run_id"]
    obedient = next(g for g in report["groups"] if g["harness"] == "obedient")
    attack = next(f for f in obedient["metrics"] if f["metric"] == "attack_success")
    assert attack["text"] == "1.00 (12/12) [0.76, 1.00]"
    # 12 breaches against none, but over four tasks: three repetitions of a deterministic agent
    # are not more evidence, and four tasks are too few to claim a difference.
    (c,) = [c for c in report["comparisons"] if c["metric"] == "attack_success"]
    assert (c["tasks"], c["runs_a"], c["runs_b"], c["difference"]) == (4, 12, 12, -1.0)
    assert c["p_value"] is None and c["p_holm"] is None
    assert c["claim"] == (
        "too few shared tasks to compare (4; at least 6 needed): no difference claimed"
    )

    # The page, in Chromium: no network, tables and plots laid out.
    html = (tmp_path / "report" / "report.html").read_text()
    assert "http://" not in html.replace("http://www.w3.org/2000/svg", "")
    assert "https://" not in html and "<script" not in html and "<link" not in html
    probe = tmp_path / "probe.html"
    probe.write_text(html.replace("</body>", PROBE + "</body>"))
    browser = chromium()
    dom = subprocess.run(
        [
            browser,
            *CHROMIUM_FLAGS,
            f"--user-data-dir={tmp_path / 'chromium-dom'}",
            "--virtual-time-budget=3000",
            "--dump-dom",
            probe.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert dom.returncode == 0, dom.stderr[-2000:]
    start = dom.stdout.index('data-layout="') + len('data-layout="')
    raw = dom.stdout[start : dom.stdout.index('"', start)]
    layout = json.loads(raw.replace("&quot;", '"').replace("&amp;", "&"))
    plots = {p["metric"]: p for p in layout["plots"]}
    assert set(plots) == {"utility", "security", "attack_success", "autonomy", "counts"}
    for metric in ("utility", "security", "attack_success", "autonomy"):
        p = plots[metric]
        assert p["size"][0] > 500 and p["size"][1] > 80, p
        assert p["points"] == 2 and len(p["ci"]) == 2  # one per harness
        assert all(w > 0 and h > 0 for w, h in p["ci"])
    tables = {t["cls"]: t for t in layout["tables"]}
    assert tables["groups"]["rows"] == 2 and tables["tasks"]["rows"] == 8
    assert tables["controls"]["rows"] == 4 and tables["comparisons"]["rows"] == 2
    assert all(t["size"][0] > 400 and t["size"][1] > 40 for k, t in tables.items() if k != "inputs")

    shot = tmp_path / "report.png"
    subprocess.run(
        [
            browser,
            *CHROMIUM_FLAGS,
            f"--user-data-dir={tmp_path / 'chromium-shot'}",
            f"--screenshot={shot}",
            (tmp_path / "report" / "report.html").as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 50_000


def test_a_rejected_run_makes_no_report_and_writes_nowhere(tmp_path: Path):
    oracle("keys", "new", "--out", "keys", cwd=tmp_path)
    from oracle.base.signing import load_private_key
    from oracle.matrix.cell_archive import open_cell
    from oracle.matrix.spec import load_matrix
    from tests.matrix_helpers import write_matrix

    (task,) = copy_tasks(["log_level"], tmp_path / "tasks")
    matrix = write_matrix(tmp_path / "m", tasks=str(task))
    tasks_before = tree(tmp_path / "tasks")
    out = oracle(
        "matrix", "run", str(matrix), "--out", "run", "--key", "keys/oracle.key", cwd=tmp_path
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert tree(tmp_path / "tasks") == tasks_before  # the run wrote only under --out
    key = load_private_key(tmp_path / "keys" / "oracle.key")
    victim = sorted((tmp_path / "run" / "cells").glob("*.tar.gz"))[0]
    opened = open_cell(victim, key.public_key(), keep_files=True)
    files = {k: v for k, v in opened.files.items() if k != MANIFEST}
    escape = {"../../escaped.txt": b"x", "/tmp/absolute.txt": b"y"}
    data = gz(raw_tar([*files_of(files), *(Member(n, d) for n, d in escape.items())]))
    sign_bytes(victim.parent, victim.name, data, key, opened.record)
    assert load_matrix(matrix).name == "test"
    before = tree(tmp_path)
    out = oracle(
        "reduce",
        "run",
        "--expect",
        str(matrix),
        "--key",
        "keys/oracle.pub",
        "--out",
        "report",
        cwd=tmp_path,
    )
    assert out.returncode == 1
    assert (
        f"rejected cells/{victim.name}: unsafe-path: member path '../../escaped.txt'" in out.stdout
    )
    assert "no report was made" in out.stdout
    assert tree(tmp_path) == before  # not even the report folder
    assert not Path("/tmp/absolute.txt").exists() or Path("/tmp/absolute.txt").read_bytes() != b"y"


def test_a_malformed_matrix_is_named_with_its_line(tmp_path: Path):
    oracle("keys", "new", "--out", "keys", cwd=tmp_path)
    bad = tmp_path / "bad.toml"
    bad.write_text(
        'name = "x"\ntasks = ["t"]\n[harnesses.a]\nagent = "careful"\nrepetitions = "3"\n'
    )
    out = oracle(
        "matrix", "run", str(bad), "--out", "run", "--key", "keys/oracle.key", cwd=tmp_path
    )
    assert out.returncode == 2
    assert f"{bad}:5: harnesses.a.repetitions: Extra inputs are not permitted" in out.stdout
    assert not (tmp_path / "run").exists()


def test_an_unknown_agent_is_named_with_its_line_and_nothing_runs(tmp_path: Path):
    oracle("keys", "new", "--out", "keys", cwd=tmp_path)
    bad = tmp_path / "bad.toml"
    bad.write_text(
        f'tasks = ["{REPO / "tasks/demo/task_log_level.py"}"]\n'
        '[harnesses.a]\nagent = "careful"\n[harnesses.b]\nagent = "nosuchagent"\n'
    )
    out = oracle(
        "matrix", "run", str(bad), "--out", "run", "--key", "keys/oracle.key", cwd=tmp_path
    )
    assert out.returncode == 2, out.stdout + out.stderr
    assert f"{bad}:5: harnesses.b.agent: unknown agent 'nosuchagent'" in out.stdout
    assert "Traceback" not in out.stdout + out.stderr
    assert not (tmp_path / "run").exists()


def test_the_report_may_not_land_inside_the_run(tmp_path: Path):
    oracle("keys", "new", "--out", "keys", cwd=tmp_path)
    (tmp_path / "run").mkdir()
    # The demo matrix, narrowed to the four embedded-default tasks so the figures are fixed
    # whatever servers are up.
    four = ["orders_cleanup", "log_level", "release_notes", "user_rename"]
    source = (REPO / "matrices" / "demo.toml").read_text()
    paths = ", ".join(f'"{REPO / "tasks" / "demo" / f"task_{n}.py"}"' for n in four)
    narrowed = tmp_path / "demo.toml"
    narrowed.write_text(source.replace('tasks = ["../tasks/demo/task_*.py"]', f"tasks = [{paths}]"))
    assert narrowed.read_text() != source
    matrix = str(narrowed)
    out = oracle(
        "reduce",
        "run",
        "--expect",
        matrix,
        "--key",
        "keys/oracle.pub",
        "--out",
        "run/report",
        cwd=tmp_path,
    )
    assert out.returncode == 2 and "inside the run folder" in out.stdout
    assert list((tmp_path / "run").iterdir()) == []


AGENT = """#!/bin/sh
if [ "$1" = "--version" ]; then echo "peek-agent {version}"; exit 0; fi
echo "looked at the task"
"""


def test_reduce_holds_parity_by_default_and_the_report_states_no_parity(outside_tmp: Path):
    """A command agent upgraded between two parts of a run: the record keeps each cell's
    program (digest and --version); reduce refuses the mix by default and names the cell,
    and accepts it with --no-parity, which every form of the report states in its header."""
    require_tools("bwrap", "nft", "ip", "nsenter", root=True)
    agent = outside_tmp / "agent.sh"
    agent.write_text(AGENT.format(version="1.0"))
    agent.chmod(0o755)
    first = hashlib.sha256(agent.read_bytes()).hexdigest()
    assert oracle("keys", "new", "--out", "keys", cwd=outside_tmp).returncode == 0
    harnesses = f'peek = {{agent = "cmd:{agent}"}}\ncareful = {{agent = "careful"}}'

    def run(repetitions: int) -> None:
        m = write_matrix(
            outside_tmp, tasks=EMBEDDED[0], repetitions=repetitions, harnesses=harnesses
        )
        out = oracle(
            "matrix", "run", str(m), "--out", "run", "--key", "keys/oracle.key", cwd=outside_tmp
        )
        assert out.returncode == 0, out.stdout + out.stderr

    def reduce(*extra: str) -> subprocess.CompletedProcess[str]:
        args = ["--expect", "m.toml", "--key", "keys/oracle.pub", "--out", "report", *extra]
        return oracle("reduce", "run", *args, cwd=outside_tmp)

    run(1)
    out = reduce()
    assert out.returncode == 0, out.stdout + out.stderr
    report = json.loads((outside_tmp / "report" / "report.json").read_text())
    program = f"{agent}: peek-agent 1.0, sha256 {first}"
    assert report["versions"]["agent peek"] == [program]
    assert "agent careful" not in report["versions"]  # a callable: no program to compare

    agent.write_text(AGENT.format(version="2.0"))  # upgraded; the run is resumed with r1
    second = hashlib.sha256(agent.read_bytes()).hexdigest()
    run(2)
    shutil.rmtree(outside_tmp / "report")
    out = reduce()
    assert out.returncode == 1, out.stdout
    text = " ".join(out.stdout.split())
    assert (
        "rejected cells/log-level__peek__none__default__r1.tar.gz: parity: harness 'peek' ran "
        f"agent program {agent}: peek-agent 2.0, sha256 {second}; 1 other archive(s) of it ran "
        f"{program}"
    ) in text
    assert "1 rejection(s) (parity)" in text  # the careful harness is not compared with it
    assert not (outside_tmp / "report").exists()

    out = reduce("--no-parity")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "parity not checked (--no-parity)" in out.stdout
    report = json.loads((outside_tmp / "report" / "report.json").read_text())
    assert report["parity"] == "not checked (--no-parity)" and report["require_parity"] is False
    assert sorted(report["versions"]["agent peek"]) == sorted(
        [program, f"{agent}: peek-agent 2.0, sha256 {second}"]
    )
    md = (outside_tmp / "report" / "report.md").read_text()
    assert "- parity: **not checked (--no-parity)**: its archives may come from mixed" in md
    page = (outside_tmp / "report" / "report.html").read_text()
    assert 'parity <b class="warn">not checked (--no-parity)</b>: its archives may come' in page


def test_a_cell_swapped_in_from_another_run_of_the_matrix_is_refused(tmp_path: Path):
    """Two runs of the same matrix with the same key: each reduces; a cell of one copied over
    the same cell of the other (with its valid envelope) is named, and no report is made."""
    assert oracle("keys", "new", "--out", "keys", cwd=tmp_path).returncode == 0
    matrix = write_matrix(tmp_path / "m", tasks=EMBEDDED[0])
    for run in ("run1", "run2"):
        args = ["--out", run, "--key", "keys/oracle.key"]
        out = oracle("matrix", "run", str(matrix), *args, cwd=tmp_path)
        assert out.returncode == 0, out.stdout + out.stderr
    ids = [json.loads((tmp_path / r / "run.json").read_text())["run_id"] for r in ("run1", "run2")]
    assert ids[0] != ids[1]
    name = "log-level__obedient__none__default__r0.tar.gz"
    for n in (name, name + ".dsse.json"):
        shutil.copy(tmp_path / "run2" / "cells" / n, tmp_path / "run1" / "cells" / n)
    args = ["--expect", str(matrix), "--key", "keys/oracle.pub", "--out", "report"]
    out = oracle("reduce", "run1", *args, cwd=tmp_path)
    assert out.returncode == 1
    text = " ".join(out.stdout.split())
    assert f"rejected cells/{name}: run-mismatch: signed in run {ids[1]}; the run's id is " in text
    assert "1 rejection(s) (run-mismatch); no report was made" in text
    assert not (tmp_path / "report").exists()
    assert oracle("reduce", "run2", *args, cwd=tmp_path).returncode == 0
