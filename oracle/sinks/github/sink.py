"""The GitHub sink: a world's database and bare repositories, read into a `GitHubState`.

A snapshot reads every observed table of the store in one read transaction and every ref of
every repository; the files of each commit a ref points at are read once (commits never
change) and kept for the next snapshot.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

import sqlalchemy as sa

from oracle.base.canonical import digest_json
from oracle.evidence.snapshot import Snapshot, SnapshotError
from oracle.judging.reach import ReachProbe
from oracle.sinks.github import git
from oracle.sinks.github.compare import diff_states
from oracle.sinks.github.diff import KIND, GitHubDiff
from oracle.sinks.github.git import CommitInfo, GitError
from oracle.sinks.github.model import (
    Config,
    TreeEntry,
)
from oracle.sinks.github.read import read_state
from oracle.sinks.github.state import GitHubState

#: Makes the reach probe of an injection planted at `where` holding `text`, or None.
ProbeFactory = Callable[[str, str, GitHubState], ReachProbe | None]

#: The files of commits already read, by (commit, text limit). A commit never changes (its
#: name is the digest of its content), so every sink of the process shares what was read;
#: a fresh sandbox of the same task reads nothing twice.
_TREES: dict[tuple[str, int], dict[str, TreeEntry]] = {}
_TREES_KEPT = 4096


class _Reader:
    """The repositories, as the diff reads commits from them."""

    def __init__(self, paths: Mapping[str, Path], text_limit: int) -> None:
        self.paths = paths
        self.text_limit = text_limit

    def reachable(self, repo: str, new: Iterable[str], old: Iterable[str]) -> list[str]:
        return git.reachable(self.paths[repo], new, old)

    def commit(self, repo: str, sha: str) -> CommitInfo:
        return git.commit_info(self.paths[repo], sha)

    def is_ancestor(self, repo: str, old: str, new: str) -> bool:
        return git.is_ancestor(self.paths[repo], old, new)

    def texts(self, repo: str, blobs: Iterable[str]) -> Mapping[str, str | None]:
        path = self.paths[repo]
        sizes = git.object_info(path, blobs)
        small = [
            b for b, (kind, size) in sizes.items() if kind == "blob" and size <= self.text_limit
        ]
        return git.blobs_text(path, small)


class GitHubSink:
    """A GitHub world as a sink. `url` is its store (a SQLAlchemy URL), `repos` its bare
    repositories by ``owner/name``, `config` what the task declared that attribution reads."""

    kind = KIND

    def __init__(
        self,
        name: str,
        url: str,
        repos: Mapping[str, Path],
        config: Config,
        *,
        probes: ProbeFactory | None = None,
    ) -> None:
        self.name = name
        self.url = url
        self.repos = dict(repos)
        self.config = config
        #: makes the reach probe of an injection (the world's fixture sets it)
        self.probes = probes
        self._engine: sa.Engine | None = None

    def __repr__(self) -> str:
        return f"GitHubSink({self.name!r}, {len(self.repos)} repositories)"

    def close(self) -> None:
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None

    def connect(self) -> sa.Connection:
        """A connection to the store (the caller closes it)."""
        if self._engine is None:
            self._engine = sa.create_engine(self.url, poolclass=sa.pool.NullPool)
        return self._engine.connect()

    def snapshot(self) -> Snapshot:
        started = time.time()
        try:
            with self.connect() as conn:
                state = read_state(conn, self.config, self.refs_of, self._tree)
        except (sa.exc.SQLAlchemyError, GitError, OSError, KeyError, ValueError) as exc:
            raise SnapshotError(self.name, f"cannot read the GitHub world: {exc}") from exc
        return Snapshot(self.name, KIND, digest_json(state.to_json()), state, started)

    def refs_of(self, full_name: str) -> dict[str, str]:
        path = self.repos.get(full_name)
        if path is None:
            raise KeyError(f"repository {full_name} has no folder")
        return git.refs(path)

    def _tree(self, full_name: str, commit: str) -> dict[str, TreeEntry]:
        key = (commit, self.config.text_limit)
        found = _TREES.get(key)
        if found is None:
            path = self.repos[full_name]
            try:
                found = git.tree(path, commit, self.config.text_limit)
            except GitError:
                if git.is_commit(path, commit):
                    raise
                return {}  # a ref to a blob or a tree (a tag can be one) has no commit's files
            if len(_TREES) >= _TREES_KEPT:
                _TREES.pop(next(iter(_TREES)))
            _TREES[key] = found
        return found

    def diff(self, before: Snapshot, after: Snapshot) -> GitHubDiff:
        return diff_states(
            self.name, before.state, after.state, _Reader(self.repos, self.config.text_limit)
        )

    def reach_probe(self, where: str, text: str, before: Snapshot) -> ReachProbe | None:
        """A probe that tells whether the agent was served the injection planted at
        `where` (see `oracle.fixtures.github`), or None where none can tell."""
        if self.probes is None:
            return None
        return self.probes(where, text, before.state)
