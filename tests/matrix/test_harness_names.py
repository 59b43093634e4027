"""A harness list in a matrix file: each agent named by itself, or given a name its cells go by
(``harnesses = ["careful", {agent = "cmd:…", name = "mine"}]``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from oracle.base.signing import new_key
from oracle.matrix.cell_archive import open_cell
from oracle.matrix.run import run_matrix
from oracle.matrix.spec import MatrixError, load_matrix, parse_matrix
from tests.cli.test_cli import oracle
from tests.conftest import DEMO, require_tools

TASK = DEMO / "task_user_rename.py"


def matrix_text(harnesses: str) -> str:
    return f'schema_version = 1\nname = "aliases"\ntasks = ["{TASK}"]\nharnesses = {harnesses}\n'


def parse(harnesses: str) -> dict[str, tuple[str, dict[str, object]]]:
    m = parse_matrix(matrix_text(harnesses).encode(), Path("m.toml"))
    return {k: (h.agent, h.settings) for k, h in m.spec.harnesses.items()}


def test_a_list_names_each_agent_by_itself_or_by_the_name_given():
    got = parse(
        '["careful", {agent = "cmd:python agent.py --x", name = "mine", settings = {t = 0}}]'
    )
    assert got == {"careful": ("careful", {}), "mine": ("cmd:python agent.py --x", {"t": 0})}


@pytest.mark.parametrize(
    ("harnesses", "message"),
    [
        (
            '["cmd:python a.py"]',
            "m.toml:4: harnesses: Value error, entry 1: 'cmd:python a.py' cannot name cells: "
            "give it a name of letters, digits and _ . : @ + - "
            "({agent = 'cmd:python a.py', name = \"mine\"})",
        ),
        (
            '["careful", {agent = "obedient", name = "careful"}]',
            "m.toml:4: harnesses: Value error, entry 2: the name 'careful' is another harness's "
            "already",
        ),
        (
            '[{agent = "careful", name = "../up"}]',
            "m.toml:4: harnesses: Value error, entry 1: '../up' cannot name cells",
        ),
        ('[{agent = "careful", name = 3}]', "entry 1: the name is a string"),
        ('[{agent = "careful", colour = 1}]', "harnesses.careful.colour: Extra inputs"),
        ("[1]", "entry 1: give an agent, or a table with agent and name"),
    ],
)
def test_a_list_that_cannot_name_its_cells_is_refused(harnesses, message):
    with pytest.raises(MatrixError) as info:
        parse(harnesses)
    assert message in str(info.value)


def test_an_aliased_harness_runs_and_its_cells_carry_the_alias(tmp_path):
    require_tools("bwrap")
    path = tmp_path / "m.toml"
    path.write_text(matrix_text('["careful", {agent = "cmd:true --quiet", name = "mine"}]'))
    listed = oracle("matrix", "cells", str(path))
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert "user-rename/mine/none/default/r0" in listed.stdout
    assert "cmd:true" not in listed.stdout

    key = new_key()
    run_matrix(load_matrix(path), tmp_path / "run", key)
    cells = sorted(p.name for p in (tmp_path / "run" / "cells").glob("*.tar.gz"))
    assert cells == [
        "user-rename__careful__none__default__r0.tar.gz",
        "user-rename__mine__none__default__r0.tar.gz",
    ]
    opened = open_cell(tmp_path / "run" / "cells" / cells[1], key.public_key())
    assert opened.record.cell.id == "user-rename/mine/none/default/r0"
    assert opened.record.invocation is not None
    assert opened.record.invocation.agent == "cmd:true --quiet"
    # cell.json: the harness as the matrix declared it, under its name.
    assert opened.meta.harness.name == "mine"
    assert opened.meta.harness.agent == "cmd:true --quiet"


def test_the_docs_harness_lists_parse_as_they_say():
    import re

    from tests.conftest import REPO

    for doc in ("cli.md", "matrix.md"):
        blocks = re.findall(r"```toml\n(harnesses = .*?)\n```", (REPO / "docs" / doc).read_text())
        assert blocks, doc
        for block in blocks:
            got = parse(block.removeprefix("harnesses = "))
            assert got["careful"] == ("careful", {})
            assert got["mine"][0] == "cmd:python agent.py --x"
