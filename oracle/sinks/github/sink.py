"""The GitHub sink: a world's database and bare repositories, read into a `GitHubState`.

A snapshot reads every observed table of the store in one read transaction and every ref of
every repository; the files of each commit a ref points at are read once (commits never
change) and kept for the next snapshot.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from oracle.base.canonical import digest_json
from oracle.evidence.snapshot import Snapshot, SnapshotError
from oracle.judging.reach import ReachProbe
from oracle.sinks.github import git, store
from oracle.sinks.github.diff import KIND, GitHubDiff, diff_states
from oracle.sinks.github.git import CommitInfo, GitError
from oracle.sinks.github.model import (
    Actor,
    Comment,
    Config,
    Issue,
    JobRecord,
    LabelOn,
    Pull,
    Push,
    Reaction,
    Repository,
    Review,
    ReviewComment,
    Run,
    StepRecord,
    TreeEntry,
    Trigger,
    Write,
)
from oracle.sinks.github.state import GitHubState
from oracle.sinks.github.store import iso

#: Makes the reach probe of an injection planted at `where` holding `text`, or None.
ProbeFactory = Callable[[str, str, GitHubState], ReachProbe | None]

#: The files of commits already read, by (commit, text limit). A commit never changes (its
#: name is the digest of its content), so every sink of the process shares what was read;
#: a fresh sandbox of the same task reads nothing twice.
_TREES: dict[tuple[str, int], dict[str, TreeEntry]] = {}
_TREES_KEPT = 4096


class _Reader:
    """The repositories, as the diff reads commits from them."""

    def __init__(self, paths: Mapping[str, Path]) -> None:
        self.paths = paths

    def commits(self, repo: str, new: Iterable[str], old: Iterable[str]) -> list[CommitInfo]:
        return git.commits_between(self.paths[repo], new, old)

    def is_ancestor(self, repo: str, old: str, new: str) -> bool:
        return git.is_ancestor(self.paths[repo], old, new)

    def texts(self, repo: str, blobs: Iterable[str]) -> Mapping[str, str | None]:
        path = self.paths[repo]
        small = [b for b in set(blobs) if _blob_size(path, b) <= git.TEXT_LIMIT]
        return git.blobs_text(path, small)


def _blob_size(repo: Path, blob: str) -> int:
    try:
        return int(git.git(repo, "cat-file", "-s", blob).strip())
    except (GitError, ValueError):
        return git.TEXT_LIMIT + 1


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
        return diff_states(self.name, before.state, after.state, _Reader(self.repos))

    def reach_probe(self, where: str, text: str, before: Snapshot) -> ReachProbe | None:
        """A probe that tells whether the agent was served the injection planted at
        `where` (see `oracle.fixtures.github`), or None where none can tell."""
        if self.probes is None:
            return None
        return self.probes(where, text, before.state)


def read_state(
    conn: sa.Connection,
    config: Config,
    refs_of: Callable[[str], dict[str, str]],
    tree_of: Callable[[str, str], dict[str, TreeEntry]],
) -> GitHubState:
    """A world's state from its store (`conn`) and its repositories (`refs_of`, `tree_of`)."""
    t = store
    with conn.begin():
        users = {r.id: r for r in conn.execute(sa.select(t.users).order_by(t.users.c.id))}
        repo_rows = list(conn.execute(sa.select(t.repos).order_by(t.repos.c.id)))
        issue_rows = list(conn.execute(sa.select(t.issues).order_by(t.issues.c.id)))
        rows: dict[str, list[Any]] = {
            name: list(conn.execute(sa.select(table).order_by(*table.primary_key.columns)))
            for name, table in (
                ("pulls", t.pulls),
                ("comments", t.comments),
                ("reviews", t.reviews),
                ("review_comments", t.review_comments),
                ("labels", t.labels),
                ("issue_labels", t.issue_labels),
                ("reactions", t.reactions),
                ("triggers", t.triggers),
                ("runs", t.runs),
                ("jobs", t.jobs),
                ("steps", t.steps),
                ("pushes", t.pushes),
                ("audit", t.audit),
            )
        }

    def login(uid: int | None) -> str | None:
        return users[uid].login if uid is not None and uid in users else None

    def kind(uid: int) -> Any:
        return users[uid].type if uid in users else "User"

    repo_name = {r.id: f"{r.owner}/{r.name}" for r in repo_rows}
    issue_of = {i.id: i for i in issue_rows}
    label_name = {x.id: x.name for x in rows["labels"]}
    labels_by_issue: dict[int, list[str]] = {}
    for x in rows["issue_labels"]:
        labels_by_issue.setdefault(x.issue_id, []).append(label_name.get(x.label_id, "?"))

    def at(issue_id: int) -> tuple[str, int]:
        i = issue_of[issue_id]
        return repo_name[i.repo_id], i.number

    repos: list[Repository] = []
    trees: dict[str, dict[str, TreeEntry]] = {}
    for r in repo_rows:
        full = repo_name[r.id]
        refs = refs_of(full)
        repos.append(
            Repository(
                id=r.id,
                full_name=full,
                private=bool(r.private),
                default_branch=r.default_branch,
                fork_of=repo_name.get(r.fork_of) if r.fork_of is not None else None,
                refs=refs,
            )
        )
        for commit in sorted(set(refs.values())):
            if git.is_commit_sha(commit):
                trees[commit] = tree_of(full, commit)
    issues = [
        Issue(
            id=i.id,
            repo=repo_name[i.repo_id],
            number=i.number,
            title=i.title,
            body=i.body,
            state=i.state,
            state_reason=i.state_reason,
            author=login(i.author_id) or "ghost",
            author_type=kind(i.author_id),
            is_pull=bool(i.is_pull),
            locked=bool(i.locked),
            labels=sorted(labels_by_issue.get(i.id, [])),
            created_at=iso(i.created_at) or "",
            updated_at=iso(i.updated_at) or "",
            closed_at=iso(i.closed_at),
            closed_by=login(i.closed_by),
        )
        for i in issue_rows
    ]
    pulls = [
        Pull(
            repo=at(p.issue_id)[0],
            number=at(p.issue_id)[1],
            head_repo=repo_name.get(p.head_repo_id, "?"),
            head_ref=p.head_ref,
            head_sha=p.head_sha,
            base_ref=p.base_ref,
            base_sha=p.base_sha,
            draft=bool(p.draft),
            merged=bool(p.merged),
            merged_at=iso(p.merged_at),
            merged_by=login(p.merged_by),
            merge_sha=p.merge_sha,
        )
        for p in rows["pulls"]
    ]
    comments = [
        Comment(
            id=c.id,
            repo=at(c.issue_id)[0],
            number=at(c.issue_id)[1],
            author=login(c.author_id) or "ghost",
            author_type=kind(c.author_id),
            body=c.body,
            created_at=iso(c.created_at) or "",
            updated_at=iso(c.updated_at) or "",
        )
        for c in rows["comments"]
    ]
    reviews = [
        Review(
            id=r.id,
            repo=at(r.issue_id)[0],
            number=at(r.issue_id)[1],
            author=login(r.author_id) or "ghost",
            author_type=kind(r.author_id),
            state=r.state,
            body=r.body,
            commit_id=r.commit_id,
            created_at=iso(r.created_at) or "",
            submitted_at=iso(r.submitted_at),
        )
        for r in rows["reviews"]
    ]
    review_comments = [
        ReviewComment(
            id=c.id,
            repo=at(c.issue_id)[0],
            number=at(c.issue_id)[1],
            review_id=c.review_id,
            author=login(c.author_id) or "ghost",
            author_type=kind(c.author_id),
            path=c.path,
            line=c.line,
            side=c.side,
            body=c.body,
            commit_id=c.commit_id,
            in_reply_to=c.in_reply_to,
            created_at=iso(c.created_at) or "",
            updated_at=iso(c.updated_at) or "",
        )
        for c in rows["review_comments"]
    ]
    labels = sorted(
        (
            LabelOn(
                repo=at(x.issue_id)[0],
                number=at(x.issue_id)[1],
                label=label_name.get(x.label_id, "?"),
                added_by=login(x.added_by) or "ghost",
                added_at=iso(x.added_at) or "",
            )
            for x in rows["issue_labels"]
        ),
        key=lambda x: (x.repo, x.number, x.label),
    )
    reactions = [
        Reaction(
            id=r.id,
            subject=r.subject,
            subject_id=r.subject_id,
            author=login(r.author_id) or "ghost",
            author_type=kind(r.author_id),
            content=r.content,
            created_at=iso(r.created_at) or "",
        )
        for r in rows["reactions"]
    ]
    triggers = [
        Trigger(
            id=x.id,
            event=x.event,
            action=x.action,
            repo=repo_name.get(x.repo_id) if x.repo_id is not None else None,
            subject=x.subject,
            number=x.number,
            actor=login(x.actor_id),
            at=iso(x.at) or "",
        )
        for x in rows["triggers"]
    ]
    steps_of: dict[int, list[StepRecord]] = {}
    for s in rows["steps"]:
        steps_of.setdefault(s.job_id, []).append(
            StepRecord(
                number=s.number,
                name=s.name,
                status=s.status,
                conclusion=s.conclusion,
                agent=bool(s.agent),
            )
        )
    jobs_of: dict[int, list[JobRecord]] = {}
    for j in rows["jobs"]:
        jobs_of.setdefault(j.run_id, []).append(
            JobRecord(
                id=j.id,
                name=j.name,
                status=j.status,
                conclusion=j.conclusion,
                started_at=iso(j.started_at),
                completed_at=iso(j.completed_at),
                steps=sorted(steps_of.get(j.id, []), key=lambda s: s.number),
            )
        )
    runs = [
        Run(
            id=r.id,
            repo=repo_name[r.repo_id],
            workflow=r.workflow,
            name=r.name,
            event=r.event,
            status=r.status,
            conclusion=r.conclusion,
            head_branch=r.head_branch,
            head_sha=r.head_sha,
            pull_number=r.pull_number,
            actor=login(r.actor_id),
            trigger_id=r.trigger_id,
            run_number=r.run_number,
            created_at=iso(r.created_at) or "",
            updated_at=iso(r.updated_at) or "",
            jobs=jobs_of.get(r.id, []),
        )
        for r in rows["runs"]
    ]
    pushes = [
        Push(
            id=p.id,
            repo=repo_name[p.repo_id],
            login=login(p.user_id) or "ghost",
            ref=p.ref,
            old_sha=p.old_sha,
            new_sha=p.new_sha,
            forced=bool(p.forced),
            via=p.via,
            at=iso(p.at) or "",
        )
        for p in rows["pushes"]
    ]
    writes = [
        Write(
            id=w.id,
            at=iso(w.at) or "",
            login=login(w.user_id) or "ghost",
            action=w.action,
            repo=repo_name.get(w.repo_id) if w.repo_id is not None else None,
            subject=w.subject,
            subject_id=w.subject_id,
        )
        for w in rows["audit"]
    ]
    actors = [Actor(login=u.login, id=u.id, type=u.type, role=u.role) for u in users.values()]
    return GitHubState(
        config=config,
        actors=tuple(actors),
        repos=tuple(repos),
        trees=trees,
        issues_=tuple(issues),
        pulls_=tuple(pulls),
        comments_=tuple(comments),
        reviews_=tuple(reviews),
        review_comments_=tuple(review_comments),
        labels_=tuple(labels),
        reactions_=tuple(reactions),
        triggers_=tuple(triggers),
        runs_=tuple(runs),
        pushes_=tuple(pushes),
        writes_=tuple(writes),
    )
