"""The matrix file: schema, cells, and errors that name the file, the line and the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from oracle.matrix.spec import MatrixError, line_of, load_matrix, parse_matrix
from tests.conftest import DEMO, REPO
from tests.matrix_helpers import write_matrix


def test_the_example_matrix_loads_and_expands():
    m = load_matrix(REPO / "matrices" / "demo.toml")
    assert m.name == "demo" and m.digest.startswith("sha256:")
    paths = m.task_paths()
    assert [p.name for p in paths] == sorted(p.name for p in DEMO.glob("task_*.py"))
    cells = m.cells(["a", "b"])
    assert len(cells) == 2 * 2 * 3  # tasks × harnesses × repetitions
    assert len({c.id for c in cells}) == len(cells)
    assert cells[0].id == "a/careful/none/default/r0"


def test_cell_ids_hold_all_five_parts(tmp_path: Path):
    path = write_matrix(
        tmp_path,
        repetitions=2,
        extra='models = ["m1", "m2"]\nprofiles = ["p1", "p2", "p3"]',
    )
    cells = load_matrix(path).cells(["t"])
    assert len(cells) == 2 * 2 * 2 * 3
    assert {c.id.split("/")[2] for c in cells} == {"m1", "m2"}
    assert {c.id.split("/")[3] for c in cells} == {"p1", "p2", "p3"}
    assert {c.id.split("/")[4] for c in cells} == {"r0", "r1"}


def test_model_tables_carry_provider_version_and_settings(tmp_path: Path):
    path = write_matrix(
        tmp_path,
        extra=(
            '[models.small]\nprovider = "acme"\nversion = "2026-01"\nsettings = {temperature = 0}\n'
        ),
    )
    m = load_matrix(path)
    (cell,) = [c for c in m.cells(["t"]) if c.harness == "careful"]
    meta = m.meta(cell)
    assert (meta.model.provider, meta.model.version) == ("acme", "2026-01")
    assert meta.model.settings == {"temperature": 0}
    assert meta.harness.agent == "careful"


def test_malformed_toml_names_the_line(tmp_path: Path):
    path = tmp_path / "bad.toml"
    path.write_text('name = "x"\ntasks = ["a"]\nrepetitions = = 3\n')
    with pytest.raises(MatrixError) as info:
        load_matrix(path)
    assert str(info.value).startswith(f"{path}:3:")
    assert "not valid TOML" in str(info.value)


def test_a_schema_error_names_the_line_and_the_key(tmp_path: Path):
    path = tmp_path / "bad.toml"
    path.write_text(
        'name = "x"\ntasks = ["a"]\nrepetitions = 0\n\n[harnesses.careful]\nagent = "careful"\n'
        "colour = 3\n"
    )
    with pytest.raises(MatrixError) as info:
        load_matrix(path)
    text = str(info.value)
    assert f"{path}:3: repetitions: Input should be greater than or equal to 1" in text
    assert f"{path}:7: harnesses.careful.colour: Extra inputs are not permitted" in text


def test_missing_keys_and_bad_names_are_named(tmp_path: Path):
    path = tmp_path / "bad.toml"
    path.write_text('tasks = []\nmodels = ["a b"]\n[harnesses.x]\nagent = "careful"\n')
    with pytest.raises(MatrixError) as info:
        load_matrix(path)
    text = str(info.value)
    assert f"{path}:1: tasks: List should have at least 1 item" in text
    assert f"{path}:2: models: Value error, a name 'a b'" in text


def test_tasks_that_match_nothing_are_named(tmp_path: Path):
    path = write_matrix(tmp_path, tasks="nowhere/task_*.py")
    with pytest.raises(MatrixError, match=r"tasks: .*matches nothing"):
        load_matrix(path).task_paths()


def test_cells_whose_safe_names_are_alike_get_archives_of_their_own(tmp_path: Path):
    path = write_matrix(tmp_path, harnesses='"a+b" = {agent = "careful"}\n"a@b" = {agent = "noop"}')
    cells = load_matrix(path).cells(["t"])
    assert {c.harness for c in cells} == {"a+b", "a@b"}
    assert len({c.folder for c in cells}) == len(cells)


def test_line_of_finds_nested_and_dotted_keys():
    text = 'name = "x"\n[harnesses]\ncareful.agent = 1\n[models.big]\nversion = 2\n'
    assert line_of(text, ["harnesses", "careful", "agent"]) == 3
    assert line_of(text, ["models", "big", "version"]) == 5
    assert line_of(text, ["models", "big", "settings"]) == 4
    assert line_of(text, ["profiles"]) is None


def test_not_utf8(tmp_path: Path):
    with pytest.raises(MatrixError, match="not UTF-8"):
        parse_matrix(b"\xff\xfe", tmp_path / "m.toml")
