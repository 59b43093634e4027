"""Model usage through the reducer: archives whose records say what the egress recorder saw
answer are reduced into a report whose groups show models, tokens and cost by a price table
(`oracle reduce --prices`), with the cells whose model was not observed named, never guessed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from oracle.base.signing import write_key_pair
from oracle.cli.app import app
from oracle.evidence.prices import PriceTable
from oracle.evidence.record import TrialRecord
from oracle.evidence.usage import ModelCall, ModelUsage
from oracle.matrix.cell_archive import manifest_bytes, open_cell, pack
from oracle.matrix.reduce import expected_from, verify_run
from oracle.matrix.spec import load_matrix
from oracle.reports.html import html_page
from oracle.reports.markdown import markdown
from oracle.reports.model import build_report
from tests.matrix.conftest import DemoRun
from tests.matrix_helpers import sign_bytes, write_matrix

MODEL = '[models.none]\nprovider = "p"\nversion = "gpt-x"'


def call(request_id: int, model: str | None = "gpt-x-2025-01-31") -> ModelCall:
    return ModelCall(
        provider="openai",
        api="chat.completions",
        sink="net",
        request_id=request_id,
        host="api.test",
        path="/v1/chat/completions",
        status=200,
        model=model,
        requested_model="gpt-x",
        input_tokens=100 if model else None,
        output_tokens=20 if model else None,
        streamed=False,
    )


def with_usage(demo: DemoRun, run: Path, unobserved: str) -> list[str]:
    """Every archive of `run` signed again declaring model p/gpt-x, its record with one
    observed call, except the cell `unobserved`, whose record has no usage."""
    ids = []
    for path in sorted((run / "cells").glob("*.tar.gz")):
        opened = open_cell(path, demo.key.public_key(), keep_files=True)
        files = {k: v for k, v in opened.files.items() if k != "manifest.sha256"}
        files["cell.json"] = (
            files["cell.json"]
            .replace(b'"provider": "none"', b'"provider": "p"')
            .replace(b'"version": "none"', b'"version": "gpt-x"')
        )
        raw = json.loads(files["record.json"])
        cell = opened.record.cell.id
        usage = None if cell == unobserved else ModelUsage.of([call(1)]).model_dump(mode="json")
        files["record.json"] = json.dumps({**raw, "usage": usage}, indent=2).encode() + b"\n"
        record = TrialRecord.model_validate_json(files["record.json"])
        sign_bytes(
            path.parent, path.name, pack(files), demo.key, record, manifest=manifest_bytes(files)
        )
        ids.append(cell)
    return ids


@pytest.fixture
def usage_run(demo_run: DemoRun, tmp_path: Path) -> tuple[Path, Path, str]:
    run = demo_run.copy(tmp_path / "run")
    unobserved = sorted(c.id for c in demo_run.expected.cells if c.harness == "obedient")[0]
    with_usage(demo_run, run, unobserved)
    return run, write_matrix(tmp_path / "m", extra=MODEL), unobserved


def test_the_report_shows_models_tokens_and_cost_and_names_unverified_cells(
    demo_run: DemoRun, usage_run: tuple[Path, Path, str], tmp_path: Path
):
    run, matrix_file, unobserved = usage_run
    matrix = load_matrix(matrix_file)
    verified = verify_run(run, expected_from(matrix), demo_run.key.public_key())
    table_file = tmp_path / "prices.json"
    table_file.write_text(json.dumps({"models": {"gpt-x-2025-01-31": {"input": 1, "output": 4}}}))
    report = build_report(
        verified,
        matrix=matrix.name,
        matrix_digest=matrix.digest,
        signer_key_id="k",
        require_parity=True,
        prices=PriceTable.load(table_file),
    )
    usage = {g.harness: g.usage for g in report.groups}
    careful, obedient = usage["careful"], usage["obedient"]
    assert careful is not None and obedient is not None
    assert (careful.calls, careful.models, careful.input_tokens, careful.output_tokens) == (
        4,
        ["gpt-x-2025-01-31"],
        400,
        80,
    )
    assert careful.cost_usd == pytest.approx(4 * (100 * 1 + 20 * 4) / 1e6)
    assert careful.cost_note == f"priced by {table_file}"
    assert (careful.observed, careful.unverified) == (4, [])
    # One cell's usage was not observed: its model is not verified, and the group has no cost.
    assert (obedient.observed, obedient.cells, obedient.unverified) == (3, 4, [unobserved])
    assert obedient.cost_usd is None
    assert obedient.cost_note == "no cost: 1 cell(s) without observed usage"
    md = markdown(report)
    assert "## Model usage (observed at the egress recorder)" in md
    assert "| careful · none · default | gpt-x-2025-01-31 | 4 | 400 | 80 | 0 | 0.0007 | 4/4 |" in md
    assert unobserved in md
    page = html_page(report)
    assert "<h2>Model usage (observed at the egress recorder)</h2>" in page
    assert '<table class="usage">' in page and unobserved in page


def test_reduce_takes_a_price_table_and_refuses_a_bad_one_naming_it(
    demo_run: DemoRun, usage_run: tuple[Path, Path, str], tmp_path: Path
):
    run, matrix_file, _ = usage_run
    keys = tmp_path / "keys"
    write_key_pair(demo_run.key, keys / "oracle.key", keys / "oracle.pub")
    base = ["reduce", str(run), "--expect", str(matrix_file), "--key", str(keys / "oracle.pub")]
    bad = tmp_path / "prices.toml"
    bad.write_text('[models."gpt-x-2025-01-31"]\ninput = "cheap"\noutput = 4\n')
    result = CliRunner().invoke(app, [*base, "--out", str(tmp_path / "r0"), "--prices", str(bad)])
    assert result.exit_code == 2, result.output
    assert f"price table {bad}: models.gpt-x-2025-01-31.input" in " ".join(result.output.split())
    good = tmp_path / "good.toml"
    good.write_text('[models."gpt-x-2025-01-31"]\ninput = 1\noutput = 4\n')
    out = tmp_path / "r1"
    result = CliRunner().invoke(app, [*base, "--out", str(out), "--prices", str(good)])
    assert result.exit_code == 0, result.output
    report = json.loads((out / "report.json").read_text())
    assert report["schema_version"] == 6
    careful = next(g for g in report["groups"] if g["harness"] == "careful")
    assert careful["usage"]["cost_usd"] == pytest.approx(0.00072)
