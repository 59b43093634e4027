"""Agents under a name of their own: ``oracle trial -a 'cmd:…' --name mine``."""

from __future__ import annotations

import json

import pytest

from oracle.agents.alias import Aliased, aliased
from oracle.agents.spec import resolve_agent
from oracle.base.errors import UsageError
from tests.cli.test_cli import oracle
from tests.conftest import DEMO


def test_names_pair_with_agents_in_order():
    agents = [resolve_agent("careful"), resolve_agent("cmd:python agent.py --x")]
    named = aliased(agents, ["c", "mine"])
    assert [a.name for a in named] == ["c", "mine"]
    assert isinstance(named[1], Aliased) and named[1].agent is agents[1]
    assert aliased(agents, []) == agents


def test_a_count_mismatch_names_both_sides():
    agents = [resolve_agent("careful"), resolve_agent("obedient")]
    with pytest.raises(UsageError) as info:
        aliased(agents, ["only"])
    assert str(info.value) == (
        "1 --name ('only') for 2 --agent ('careful', 'obedient'): give one --name per "
        "--agent, in the same order"
    )


def test_one_name_for_two_agents_is_refused_naming_both():
    agents = [resolve_agent("careful"), resolve_agent("cmd:./a.sh")]
    with pytest.raises(UsageError) as info:
        aliased(agents, ["same", "same"])
    assert str(info.value) == (
        "--name 'same' names two agents: 'careful' and 'cmd:./a.sh': give each --agent its "
        "own --name"
    )


@pytest.mark.parametrize("bad", ["../up", "a b", "", "x/y", "-flag"])
def test_a_name_that_cannot_be_part_of_a_cell_id_is_refused(bad):
    with pytest.raises(UsageError, match=r"--name .* \(for --agent 'careful'\): use letters"):
        aliased([resolve_agent("careful")], [bad])


def test_the_trial_records_the_alias_as_the_harness(tmp_path):
    out = oracle(
        "trial", str(DEMO), "-t", "user-rename",
        "-a", "cmd:true --quiet", "--name", "mine", "-a", "obedient", "--name", "ob",
        "--isolation", "none", "--scorer", "in-process", "--out", str(tmp_path),
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    folders = sorted(p.name for p in tmp_path.iterdir())
    assert folders == ["user-rename__mine__none__default__r0", "user-rename__ob__none__default__r0"]
    mine = json.loads((tmp_path / folders[0] / "record.json").read_text())
    assert mine["cell"]["harness"] == "mine"
    # The alias names the cell; what ran is still on record under its own name.
    assert mine["invocation"]["agent"] == "cmd:true --quiet"
    assert mine["invocation"]["adapter"] == "command"
    ob = json.loads((tmp_path / folders[1] / "record.json").read_text())
    assert ob["cell"]["harness"] == "ob" and ob["security_breached"] is True
    assert "│ user-rename │ mine " in out.stdout and "cmd:true" not in out.stdout


def test_bad_pairs_are_a_usage_error_before_anything_runs(tmp_path):
    out = oracle(
        "trial", str(DEMO), "-t", "user-rename", "-a", "careful", "-a", "obedient",
        "--name", "one", "--out", str(tmp_path / "runs"),
    )  # fmt: skip
    assert out.returncode == 2
    text = " ".join(out.stdout.split())
    assert "1 --name ('one') for 2 --agent ('careful', 'obedient')" in text
    assert not (tmp_path / "runs").exists()
