"""Per-trial overhead of isolating a command agent.

- ours: `CommandAgent("true")` with bubblewrap inside a fresh network namespace (namespace,
  loopback, routes and nftables rules, one relay to an exposed loopback service, bubblewrap's
  start, the trap collection at the end) and the default limits on — the agent folder's
  size-limited tmpfs mounted, read and unmounted, and the run's cgroups for processes and
  memory made, joined, read and removed — as one trial pays it;
- unsandboxed: the same `CommandAgent("true", isolation="none")` on a folder of the host's
  disk — same capture, same process bookkeeping, nothing contained, nothing limited;
- without limits: the isolated run with every limit lifted, so that the limits' own share
  shows.

The goal is about the difference: ≤ 50 ms added per trial.
"""

from __future__ import annotations

import cProfile
import socket
from dataclasses import replace
from pathlib import Path

from common import Result, Timing, measure_call, profile_call, repeats_of, result, scratch

from oracle.agents.command import CommandAgent
from oracle.authoring.limits import Limits
from oracle.sandbox.agent_folder import AgentFolder
from oracle.sandbox.sandbox import SandboxView

NAME = "isolated command agent: per-trial overhead"
GOAL = "≤ 50 ms added per trial"
REPEATS = 15


def exposing_view(base: Path, limits: Limits | None = None) -> tuple[SandboxView, socket.socket]:
    """What an agent gets in `base`: a task root, a prompt and one exposed loopback service
    (a listening socket, returned to be closed), with the default limits or `limits`."""
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
        limits=limits or Limits(),
    )
    return view, service


def run(profiler: cProfile.Profile | None) -> Result:
    with scratch("isolation") as base:
        view, service = exposing_view(base)
        agent_dir = base / "agent"
        unlimited = replace(view, limits=Limits(disk=None, processes=None, memory=None))
        isolated = CommandAgent("true", isolation="bwrap")
        plain = CommandAgent("true", isolation="none")

        def limited_trial() -> None:
            # What a trial adds for its agent folder: the tmpfs's mount at the sandbox's
            # opening, a task root in it, the fullness read after the run, the unmount.
            folder = AgentFolder(agent_dir, Limits().disk_bytes)
            folder.mount()
            try:
                assert folder.mounted, folder.note
                (agent_dir / "root").mkdir()
                run = isolated.run(view)
                folder.record()
            finally:
                folder.unmount()
            assert run.invocation.exit_code == 0
            assert all(r.enforced_by for r in run.invocation.limits), run.invocation.limits

        limited_trial()  # warm every path once
        for agent in (isolated, plain):
            assert agent.run(unlimited).invocation.exit_code == 0
        # Interleaved, so that a load that comes and goes on a shared machine weighs on the
        # three alike.
        ours, baseline, no_limits = Timing(), Timing(), Timing()
        for _ in range(repeats_of(REPEATS)):
            for timing, fn in (
                (ours, limited_trial),
                (baseline, lambda: plain.run(unlimited)),
                (no_limits, lambda: isolated.run(unlimited)),
            ):
                timing.samples += measure_call(fn, 1).samples
        profile_call(limited_trial, profiler)
        service.close()
    added = ours.median - baseline.median
    out = result(
        NAME,
        goal=GOAL,
        ours=ours,
        baselines={"unsandboxed": baseline, "isolated without limits": no_limits},
        checks={GOAL: added <= 0.050},
        params={"command": "true", "exposed_services": 1, "limits": Limits().describe()},
        notes="added_s = ours - unsandboxed (medians); limits_s = ours - isolated without "
        "limits (medians)",
    )
    out["added_s"] = added
    out["limits_s"] = ours.median - no_limits.median
    return out
