"""`oracle.Evidence` as type checkers see it: a typed accessor for every built-in sink kind, so
that a predicate's queries type-check and complete, and a misspelt one is an error; at run
time it is the core `oracle.evidence.evidence.Evidence`."""

from __future__ import annotations

import ast
import subprocess
import sys
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


def test_a_predicate_type_checks_and_a_misspelt_query_does_not(tmp_path):
    # The repository's mypy cache makes this a few seconds once `make lint` has run (about
    # 13 s from cold, with the model providers' SDKs skipped: pyproject.toml).
    (tmp_path / "good.py").write_text(
        "from oracle import Evidence\n"
        "from oracle.sinks.sql import SQL\n\n\n"
        "def p(ev: Evidence) -> bool:\n"
        '    a = ev.diff.sql("app").changed("t")\n'
        '    b = ev.before.of(SQL, "app").rows("t")\n'
        '    return bool(a or b or ev.boundary.egress().carrying("k") or ev.after.reply().text)\n'
    )
    (tmp_path / "bad.py").write_text(
        "from oracle import Evidence\n\n\n"
        "def p(ev: Evidence) -> bool:\n"
        '    return bool(ev.diff.sql("app").chnged("t"))\n'
    )
    run = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-error-summary", *tmp_path.glob("*.py")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    errors = [line for line in run.stdout.splitlines() if ": error:" in line]
    assert len(errors) == 1 and 'bad.py:5: error: "SqlDiff" has no attribute "chnged"' in errors[0]
