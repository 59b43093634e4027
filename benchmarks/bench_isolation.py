"""Per-trial overhead of isolating a command agent.

- ours: `CommandAgent("true")` with bubblewrap inside a fresh network namespace (namespace,
  loopback, routes and nftables rules, one relay to an exposed loopback service, bubblewrap's
  start, the trap collection at the end), as one trial pays it;
- unsandboxed: the same `CommandAgent("true", isolation="none")` — same capture, same process
  bookkeeping, nothing contained.

The goal is about the difference: ≤ 50 ms added per trial.
"""

from __future__ import annotations

import cProfile
import socket
from pathlib import Path

from common import Result, measure_call, profile_call, result, scratch

from oracle.command import CommandAgent
from oracle.sandbox import SandboxView

NAME = "isolated command agent: per-trial overhead"
GOAL = "≤ 50 ms added per trial"
REPEATS = 30


def run(profiler: cProfile.Profile | None) -> Result:
    with scratch("isolation") as base:
        agent_dir = base / "agent"
        (agent_dir / "root").mkdir(parents=True)
        prompt = base / "prompt.txt"
        prompt.write_text("nothing to do")
        service = socket.socket()
        service.bind(("127.0.0.1", 0))
        service.listen()
        view = SandboxView(
            task="bench",
            prompt="nothing to do",
            env={
                "ORACLE_TASK_ROOT": str(agent_dir / "root"),
                "ORACLE_PROMPT_FILE": str(prompt),
                "ORACLE_EXPOSE": f"127.0.0.1:{service.getsockname()[1]}",
            },
            agent_dir=agent_dir,
            private=(Path(base),),
        )
        isolated = CommandAgent("true", isolation="bwrap")
        plain = CommandAgent("true", isolation="none")
        for agent in (isolated, plain):  # warm both paths once
            assert agent.run(view).invocation.exit_code == 0
        ours = measure_call(lambda: isolated.run(view), REPEATS)
        baseline = measure_call(lambda: plain.run(view), REPEATS)
        profile_call(lambda: isolated.run(view), profiler)
        service.close()
    added = ours.median - baseline.median
    out = result(
        NAME,
        goal=GOAL,
        ours=ours,
        baselines={"unsandboxed": baseline},
        checks={GOAL: added <= 0.050},
        params={"command": "true", "exposed_services": 1},
        notes="added_s = ours - unsandboxed (medians)",
    )
    out["added_s"] = added
    return out
