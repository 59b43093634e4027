"""AgentDojo environments through the bytes an archive holds: the state comes back with the
environment type its spec names, the diff as an `EnvDiff`, and AgentDojo's own checks decide on
the rebuilt evidence exactly as they did in the trial."""

from __future__ import annotations

import pytest

pytest.importorskip("agentdojo", reason="the 'agentdojo' extra is not installed")

from oracle import run_trial
from oracle.evidence.snapshot import EvidenceFormatError, snapshot_from_json
from oracle.integrations.agentdojo import EnvState, environment, get_suite, pair_task
from tests.conftest import agent
from tests.roundtrip import archived, observe, rebuild, rescore, same

SUITE, USER, INJECTION = "banking", "user_task_0", "injection_task_0"


def obey_the_injection(view, sb):
    suite = get_suite(SUITE)
    inj = suite.get_injection_task_by_id(INJECTION)
    with environment(view) as env:
        for call in inj.ground_truth(env.env.model_copy(deep=True)):
            env.call(call.function, **dict(call.args))


def test_environment_round_trip_answers_every_query_alike():
    task = pair_task(SUITE, USER, INJECTION)
    live = observe(task.sinks, obey_the_injection)
    back = rebuild(live)
    st = lambda o, w="after": (o.after if w == "after" else o.before)["env"].state  # noqa: E731
    d = lambda o: o.diff["env"]  # noqa: E731
    for when in ("before", "after"):
        same(live, back, lambda o, w=when: st(o, w).get("bank_account/balance"))
        same(live, back, lambda o, w=when: st(o, w).get("bank_account/transactions/0"))
        same(live, back, lambda o, w=when: st(o, w).environment())
        same(live, back, lambda o, w=when: st(o, w).holds_text("**", "IBAN"))
        same(live, back, lambda o, w=when: st(o, w).names())
    assert "'nope'" in same(live, back, lambda o: st(o).get("nope"))
    env = back.after["env"].state.environment()
    assert type(env) is get_suite(SUITE).environment_type
    assert env == live.after["env"].state.environment()
    added = same(live, back, lambda o: d(o).added("bank_account/scheduled_transactions/*"))
    added += same(live, back, lambda o: d(o).added("bank_account/transactions/*"))
    assert added
    same(live, back, lambda o: d(o).changed())
    same(live, back, lambda o: d(o).removed())
    same(live, back, lambda o: d(o).added("**", recipient=lambda r: bool(r)))
    assert type(back.diff["env"]).__name__ == "EnvDiff"


def test_without_its_spec_the_state_cannot_rebuild_the_environment():
    task = pair_task(SUITE, USER, INJECTION)
    live = observe(task.sinks, lambda view, sb: None)
    raw = archived(live.after["env"].to_json())
    bare = snapshot_from_json(raw)
    assert isinstance(bare.state, EnvState) and bare.state.data == live.after["env"].state.data
    with pytest.raises(TypeError, match="does not know its AgentDojo type"):
        bare.state.environment()
    with pytest.raises(EvidenceFormatError, match="sink 'env' \\(kind 'agentdojo'\\): malformed"):
        snapshot_from_json(raw, _Named("env"))


class _Named:
    """A spec of the right name that is not an AgentDojo environment."""

    kind = "agentdojo"

    def __init__(self, name: str) -> None:
        self.name = name


@pytest.mark.parametrize("control", ["breach", "clean"])
def test_agentdojo_checks_rerun_on_the_archive_decide_as_in_the_trial(control):
    task = pair_task(SUITE, USER, INJECTION)
    (run,) = [c.run for c in task.controls if c.kind == control]
    result = run_trial(task, agent(run))
    again = rescore(result.files, task)
    assert again == result.predicates
    (security,) = again["security_breached"]
    assert security.value is (control == "breach")
