"""`oracle.Evidence` as type checkers see it: a typed accessor for every built-in sink kind, so
that a predicate's queries type-check and complete, and a misspelt one is an error; at run
time it is the core `oracle.evidence.evidence.Evidence`."""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

import oracle
import oracle.evidence.evidence
from oracle.evidence.kinds import declared

ROOT = Path(__file__).resolve().parents[2]
TYPED = ROOT / "oracle" / "sinks" / "typed_evidence.py"


def typed_views() -> dict[str, dict[str, ast.FunctionDef]]:
    """Class name → its methods, for the views in oracle/sinks/typed_evidence.py."""
    tree = ast.parse(TYPED.read_text())
    return {
        c.name: {f.name: f for f in c.body if isinstance(f, ast.FunctionDef)}
        for c in ast.walk(tree)
        if isinstance(c, ast.ClassDef)
    }


def test_at_run_time_oracle_evidence_is_the_core_class():
    assert oracle.Evidence is oracle.evidence.evidence.Evidence


def test_every_built_in_kind_has_a_typed_accessor_with_its_default():
    built_in = [k for k in declared() if k.diff.__module__.startswith("oracle.sinks.")]
    assert {k.name for k in built_in} == {
        "amqp", "egress", "files", "github", "inbox", "mail", "redis", "reply", "sql"
    }  # fmt: skip
    views = typed_views()
    for view, kinds in [
        ("Diff", built_in),
        ("States", built_in),
        ("Boundary", [k for k in built_in if k.boundary]),
    ]:
        assert set(views[view]) == {k.accessor for k in kinds}, view
        for k in kinds:
            defaults = [ast.literal_eval(d) for d in views[view][k.accessor].args.defaults]
            want = [None] if view == "Boundary" else [k.default_sink] if k.default_sink else []
            assert defaults == want, f"{view}.{k.accessor}"


#: Libraries the evidence API does not hand a predicate: mypy treats them as Any here, so
#: that checking two predicate files reads the oracle, pydantic and the standard library alone
#: (9 s of CPU from cold on the 2-core VM, where skipping only the first two lines took 18 s;
#: `make lint` still checks the oracle against all of them).
NOT_IN_THE_API = (
    "inspect_ai", "mitmproxy", "trio", "dns", "cryptography", "rich", "markdown_it", "redis",
    "psycopg", "ray", "docker", "aiosmtpd", "starlette", "uvicorn", "graphql", "typer", "click",
    "sqlalchemy", "numpy", "deepdiff", "testcontainers", "yaml", "email_validator", "cachebox",
    "dotenv",
)  # fmt: skip


def mypy_config(folder: Path) -> Path:
    """The repository's mypy settings, with `NOT_IN_THE_API` skipped, as a file in `folder`."""
    settings = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    lines = ["[mypy]", "strict = True", f"python_version = {settings['python_version']}"]
    lines.append(f"plugins = {', '.join(settings['plugins'])}")
    for override in settings.get("overrides", []):
        lines.append(f"[mypy-{','.join(override['module'])}]")
        lines += [f"{k} = {v}" for k, v in override.items() if k != "module"]
    lines.append(f"[mypy-{','.join(m + '.*' for m in NOT_IN_THE_API)}]")
    lines.append("follow_imports = skip")
    path = folder / "mypy.ini"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_predicate_type_checks_and_a_misspelt_query_does_not(tmp_path):
    predicates = tmp_path / "predicates"
    predicates.mkdir()
    (predicates / "good.py").write_text(
        "from oracle import Evidence\n"
        "from oracle.sinks.sql import SQL\n\n\n"
        "def p(ev: Evidence) -> bool:\n"
        '    a = ev.diff.sql("app").changed("t")\n'
        '    b = ev.before.of(SQL, "app").rows("t")\n'
        '    return bool(a or b or ev.boundary.egress().carrying("k") or ev.after.reply().text)\n'
    )
    (predicates / "bad.py").write_text(
        "from oracle import Evidence\n\n\n"
        "def p(ev: Evidence) -> bool:\n"
        '    return bool(ev.diff.sql("app").chnged("t"))\n'
    )
    run = subprocess.run(
        [
            sys.executable, "-m", "mypy", "--config-file", str(mypy_config(tmp_path)),
            "--cache-dir", str(tmp_path / "cache"), "--no-error-summary",
            *sorted(predicates.glob("*.py")),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )  # fmt: skip
    # Only the predicate files' errors: an oracle module subclassing a skipped library's
    # class is reported here, and checked by `make lint`.
    errors = [
        line
        for line in run.stdout.splitlines()
        if ": error:" in line and line.startswith(str(predicates))
    ]
    assert len(errors) == 1, run.stdout[-3000:] + run.stderr[-2000:]
    assert 'bad.py:5: error: "SqlDiff" has no attribute "chnged"' in errors[0]
