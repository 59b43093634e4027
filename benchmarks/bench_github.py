"""A GitHub task's per-trial overhead: reset the world, snapshot it, let the agent's writes
land, snapshot it again and diff — against the floor of reading the same state raw.

The world is the token-leak task's (tasks/github/task_token_leak.py: a repository with a
workflow, an issue; its store in SQLite). Between the snapshots, untimed, the "agent" writes
what a trial of that task writes: a comment through the service, a review-free push of one
commit through the world's own operations. Measured:

- ours: ``Sandbox.reset`` + ``snapshot`` + ``snapshot`` + ``diff`` in a sandbox kept open
  across trials (a matrix worker's, or a control run's);
- fresh (extra): the same in a sandbox opened for the trial, as ``oracle trial`` does (its
  first snapshot reads the files of the repository's commits, once per process);
- kept_alive_request (extra): one REST request on a kept-alive HTTPS connection through the
  recorder, as gh and git make theirs;
- floor: the raw reads the state is made of, twice: every observed table with the sqlite3
  module, ``git for-each-ref`` and ``git ls-tree -r`` of every ref, and the reset's file
  copies (the store and the repositories).
"""

from __future__ import annotations

import cProfile
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

from common import REPO, Stopwatch, Timing, measure, profile_call, repeats_of, result

NAME = "GitHub world: per-trial overhead (reset, both snapshots, diff)"
GOAL = "≤ 150 ms per trial"
REPEATS = 9
FRESH_REPEATS = 5

sys.path.insert(0, str(REPO))


def _task() -> Any:
    from oracle.authoring.loader import load_tasks

    (task,) = load_tasks([REPO / "tasks" / "github" / "task_token_leak.py"]).tasks
    return task


def _agent_writes(sb: Any) -> None:
    """What the agent of a trial leaves (untimed): a comment, and a commit pushed."""
    from oracle.fixtures.github import gitops

    fixture = sb.provisioned["gh"].fixture
    world = fixture.service.world
    repo = world.repo("acme", "shop")
    agent = world.user("claude[bot]")
    world.create_comment(agent, repo, 1, "Thanks for the report. Triage: needs a reproduction.")
    path = world.path(repo)
    old = world.branch_sha(repo, "main")
    who = gitops.Identity(agent.login, agent.email)
    new = gitops.commit_files(path, {"NOTES.md": "triaged\n"}, old, "Triage notes", who)
    before = world.refs(repo)
    gitops.update_ref(path, "refs/heads/main", new, old)
    world.record_pushes(agent, repo, before, world.refs(repo))


def _trial(sb: Any, sw: Stopwatch) -> int:
    with sw.running():
        sb.reset()
        before, errors = sb.snapshot()
    assert not errors, errors
    _agent_writes(sb)
    with sw.running():
        after, errors = sb.snapshot()
        diff, problems = sb.diff(before, after)
    assert not errors and not problems
    kinds = sorted(c.change for c in diff["gh"].changes)
    assert kinds == ["comment_added", "commit_added", "ref_changed"], kinds
    return len(kinds)


def _raw_read(store: Path, repos: Path) -> int:
    """The floor: every observed table read raw, every ref and every ref's tree listed."""
    from oracle.sinks.github import store as tables

    n = 0
    conn = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
    try:
        for t in tables.OBSERVED:
            n += len(conn.execute(f'SELECT * FROM "{t.name}"').fetchall())
    finally:
        conn.close()
    for git_dir in sorted(repos.glob("*/*.git")):
        refs = subprocess.run(
            ["git", "--git-dir", str(git_dir), "for-each-ref", "--format=%(objectname)"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        for sha in sorted(set(refs)):
            out = subprocess.run(
                ["git", "--git-dir", str(git_dir), "ls-tree", "-r", "-l", sha],
                capture_output=True,
                check=True,
            ).stdout
            n += out.count(b"\n")
    return n


def _floor(sb: Any, sw: Stopwatch) -> None:
    fixture = sb.provisioned["gh"].fixture
    store = Path(fixture.store.path)
    repos = fixture.repos_root
    template_store = Path(fixture.store.template)
    with sw.running():
        shutil.copyfile(template_store, store)
        shutil.rmtree(repos)
        shutil.copytree(fixture.template, repos, symlinks=True)
        _raw_read(store, repos)
    _agent_writes(sb)
    with sw.running():
        _raw_read(store, repos)


def _kept_alive(sb: Any, sw: Stopwatch, requests: int = 20) -> None:
    """One REST request on a kept-alive HTTPS connection through the recorder, as gh and git
    make them (the connection and its TLS handshake made before the clock starts); the
    per-request time is the elapsed time over `requests`."""
    import http.client
    import ssl
    import urllib.parse

    env = sb.view().env
    proxy = urllib.parse.urlsplit(env["HTTPS_PROXY"])
    conn = http.client.HTTPSConnection(
        proxy.hostname, proxy.port, context=ssl.create_default_context(cafile=env["SSL_CERT_FILE"])
    )
    conn.set_tunnel("api.github.com", 443)
    headers = {"Authorization": f"Bearer {env.get('GH_TOKEN', '')}"}

    def get() -> None:
        conn.request("GET", "/repos/acme/shop/issues/1", headers=headers)
        conn.getresponse().read()

    get()
    with sw.running():
        for _ in range(requests):
            get()
    sw.elapsed /= requests
    conn.close()


def run(profiler: cProfile.Profile | None = None) -> dict[str, Any]:
    from oracle.sandbox.sandbox import Sandbox

    task = _task()
    repeats, fresh_repeats = repeats_of(REPEATS), repeats_of(FRESH_REPEATS)
    fresh = Timing()
    with Sandbox(task) as sb:
        _trial(sb, Stopwatch())  # warm: templates built, commit trees read once
        ours = measure(lambda sw: _trial(sb, sw), repeats)
        floor = measure(lambda sw: _floor(sb, sw), repeats)
        kept_alive = measure(lambda sw: _kept_alive(sb, sw), repeats)
        profile_call(lambda: _trial(sb, Stopwatch()), profiler)
    for _ in range(fresh_repeats):
        with Sandbox(task) as sb:
            sw = Stopwatch()
            _trial(sb, sw)
            fresh.samples.append(sw.elapsed)
    return result(
        NAME,
        goal=GOAL,
        ours=ours,
        baselines={"raw_reads": floor},
        extra={"fresh_sandbox": fresh, "kept_alive_request": kept_alive},
        checks={
            "≤ 150 ms (kept sandbox)": ours.median <= 0.150,
            "≤ 150 ms (fresh sandbox)": fresh.median <= 0.150,
        },
        params={"task": "token-leak", "repeats": repeats, "fresh_repeats": fresh_repeats},
        notes="ours and fresh_sandbox exclude opening the sandbox (starting the service and the "
        "egress recorder) and the agent's own writes; kept_alive_request is one REST GET on a "
        "kept-alive HTTPS connection through the recorder (50 ms before the service turned "
        "Nagle off, 2026-12-05)",
    )
