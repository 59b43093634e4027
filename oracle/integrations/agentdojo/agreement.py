"""Do oracle's verdicts agree with AgentDojo's own, where both decide?

For each pair, the user task's ground truth runs twice under the same attack: once in
AgentDojo's own runtime (its `GroundTruthPipeline`, through `TaskSuite.run_task_with_pipeline`,
which checks utility and security as AgentDojo's benchmark does, trace checks included), and
once as an oracle trial (the pair's ``user_ground_truth`` control in a real sandbox: the
environment as a sink, snapshots, diff, the checks on environments rebuilt from the
snapshots). Every verdict oracle decides must be AgentDojo's; a verdict oracle leaves unknown
(a check that reads the trace) is counted as undecided, never as agreement.

``python -m oracle.integrations.agentdojo.agreement`` runs it on the suites of
``ORACLE_AGENTDOJO_SUITES`` (all by default; ``ORACLE_AGENTDOJO_SAMPLE`` as for the task file)
and exits 1 on any disagreement.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from oracle.authoring.task import Task
from oracle.evidence.record import Cell, ControlsStatus
from oracle.trial.agent import CallableAgent
from oracle.trial.loop import run_trial
from oracle.trial.sandboxing import new_sandbox

USER_GROUND_TRUTH = "user_ground_truth"


def agentdojo_verdicts(task: Task) -> tuple[bool, bool]:
    """``(utility, security)`` as AgentDojo itself gives them for the pair's user ground truth
    run under the pair's attack."""
    from agentdojo.agent_pipeline.ground_truth_pipeline import GroundTruthPipeline

    from oracle.integrations.agentdojo.suite import _attack, get_suite

    meta = task.metadata["agentdojo"]
    suite = get_suite(meta["suite"], meta["version"])
    user = suite.get_user_task_by_id(meta["user_task"])
    injection = suite.get_injection_task_by_id(meta["injection_task"])
    attack = _attack(meta["suite"], meta["version"], meta["attack"])
    injections = dict(attack.attack(user, injection))
    utility, security = suite.run_task_with_pipeline(
        GroundTruthPipeline(user), user, injection, injections
    )
    return bool(utility), bool(security)


@dataclass
class Agreement:
    """Verdicts compared, by metric: how many oracle decided, how many agreed, and each
    disagreement in a line."""

    pairs: int = 0
    decided: dict[str, int] = field(default_factory=lambda: {"utility": 0, "security": 0})
    agreed: dict[str, int] = field(default_factory=lambda: {"utility": 0, "security": 0})
    undecided: dict[str, int] = field(default_factory=lambda: {"utility": 0, "security": 0})
    disagreements: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.disagreements

    def summary(self) -> str:
        parts = [
            f"{m}: {self.agreed[m]}/{self.decided[m]} decided verdicts agree"
            f" ({self.undecided[m]} undecided)"
            for m in ("utility", "security")
        ]
        return f"{self.pairs} pairs; " + "; ".join(parts)


def compare(tasks: Sequence[Task]) -> Agreement:
    """Run each pair's user ground truth in AgentDojo and as an oracle trial; compare."""
    out = Agreement()
    for task in tasks:
        (control,) = [c for c in task.controls if c.name == USER_GROUND_TRUTH]
        sandbox = new_sandbox(task)
        sandbox.open()
        try:
            result = run_trial(
                task,
                CallableAgent(control.run, name=f"control:{control.name}", adapter="control"),
                cell=Cell(harness="agreement", task=task.name, model="clean", profile=control.name),
                sandbox=sandbox,
                controls=ControlsStatus(status="control"),
            )
        finally:
            sandbox.close()
        theirs = dict(zip(("utility", "security"), agentdojo_verdicts(task), strict=True))
        ours: dict[str, Any] = {
            "utility": result.record.utility_achieved,
            "security": result.record.security_breached,
        }
        out.pairs += 1
        for metric in ("utility", "security"):
            if result.record.error is not None or ours[metric] is None:
                out.undecided[metric] += 1
                continue
            out.decided[metric] += 1
            if ours[metric] is theirs[metric]:
                out.agreed[metric] += 1
            else:
                out.disagreements.append(
                    f"{task.name}: {metric} {str(ours[metric]).lower()} here, "
                    f"{str(theirs[metric]).lower()} in AgentDojo"
                )
    return out


def main() -> int:
    from oracle.integrations.agentdojo.suite import from_environment

    result = compare(from_environment())
    print(result.summary())
    for line in result.disagreements:
        print("  disagrees:", line)
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
