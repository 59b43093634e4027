"""A GitHub world's state at one instant: its actors, repositories (refs and the files of
every commit a ref points at), issues, pull requests, comments, reviews, labels, reactions,
trigger receipts, workflow runs, pushes and the log of writes.

In predicates::

    gh = ev.after.github("gh")
    gh.issue(1).state                      # 'closed'
    gh.comments(number=1, author="claude[bot]")
    gh.file(".github/workflows/ci.yml")    # its text on the default branch
    gh.file("README.md", ref="fix-typo")   # … on another branch
    gh.runs(conclusion="success")
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from oracle.base.canonical import Json
from oracle.base.query import matches
from oracle.evidence.change import IncompleteEvidenceError
from oracle.sinks.github.model import (
    Actor,
    Comment,
    Config,
    Issue,
    LabelOn,
    Pull,
    Push,
    Reaction,
    Repository,
    Review,
    ReviewComment,
    Revision,
    Run,
    TreeEntry,
    Trigger,
    Write,
)

#: The parts of a state that are lists of records, and the record type of each.
PARTS: dict[str, type[BaseModel]] = {
    "actors": Actor,
    "repos": Repository,
    "issues": Issue,
    "pulls": Pull,
    "comments": Comment,
    "reviews": Review,
    "review_comments": ReviewComment,
    "labels": LabelOn,
    "reactions": Reaction,
    "triggers": Trigger,
    "runs": Run,
    "pushes": Push,
    "writes": Write,
    "revisions": Revision,
}


def _field(part: str) -> str:
    """The attribute a part of the state is kept in (``comments`` → ``comments_``)."""
    return part if part in ("actors", "repos") else f"{part}_"


def records_where[R: BaseModel](
    records: Sequence[R], where: Mapping[str, Any], what: str
) -> list[R]:
    """The records whose fields match `where` (`oracle.base.query`); `what` names them in
    the error for a field they do not have."""
    return [r for r in records if matches(r.model_dump(), where, what)]


@dataclass(frozen=True)
class GitHubState:
    """See the module docstring. Records come in a stable order (by id, or by name)."""

    config: Config
    actors: tuple[Actor, ...] = ()
    repos: tuple[Repository, ...] = ()
    #: commit → path → file, for every commit a ref points at
    trees: Mapping[str, Mapping[str, TreeEntry]] = field(default_factory=dict)
    issues_: tuple[Issue, ...] = ()
    pulls_: tuple[Pull, ...] = ()
    comments_: tuple[Comment, ...] = ()
    reviews_: tuple[Review, ...] = ()
    review_comments_: tuple[ReviewComment, ...] = ()
    labels_: tuple[LabelOn, ...] = ()
    reactions_: tuple[Reaction, ...] = ()
    triggers_: tuple[Trigger, ...] = ()
    runs_: tuple[Run, ...] = ()
    pushes_: tuple[Push, ...] = ()
    writes_: tuple[Write, ...] = ()
    revisions_: tuple[Revision, ...] = ()

    # -- archive form -------------------------------------------------------------------------

    def part(self, name: str) -> tuple[BaseModel, ...]:
        value = getattr(self, _field(name))
        return tuple(value)

    def to_json(self) -> dict[str, Json]:
        out: dict[str, Json] = {"config": self.config.model_dump(mode="json")}
        for name in PARTS:
            out[name] = [r.model_dump(mode="json") for r in self.part(name)]
        out["trees"] = {
            commit: {path: e.model_dump(mode="json") for path, e in sorted(files.items())}
            for commit, files in sorted(self.trees.items())
        }
        return out

    @classmethod
    def from_json(cls, raw: Any, spec: object = None) -> GitHubState:
        """The state `to_json` wrote; `spec` is not needed. Raises ValueError, TypeError or
        KeyError when `raw` is not such a state."""
        if not isinstance(raw, Mapping):
            raise TypeError(f"a GitHub state is a JSON object, not {type(raw).__name__}")
        expected = {"config", "trees", *PARTS}
        if set(raw) != expected:
            raise ValueError(f"a GitHub state has the parts {sorted(expected)}, not {sorted(raw)}")
        parts: dict[str, Any] = {}
        for name, model in PARTS.items():
            items = raw[name]
            if not isinstance(items, list):
                raise TypeError(f"{name} is a {type(items).__name__}, not a list")
            key = _field(name)
            parts[key] = tuple(model.model_validate(r, strict=True) for r in items)
        trees_raw = raw["trees"]
        if not isinstance(trees_raw, Mapping):
            raise TypeError("trees is not a JSON object")
        trees = {
            str(commit): {
                str(p): TreeEntry.model_validate(e, strict=True) for p, e in files.items()
            }
            for commit, files in trees_raw.items()
        }
        config = Config.model_validate(raw["config"], strict=True)
        return cls(config=config, trees=trees, **parts)

    # -- who ---------------------------------------------------------------------------------

    def actor(self, login: str) -> Actor:
        """The actor `login` (KeyError naming the logins there are)."""
        for a in self.actors:
            if a.login == login:
                return a
        known = ", ".join(a.login for a in self.actors) or "none"
        raise KeyError(f"no actor {login!r} in the GitHub world (actors: {known})")

    # -- repositories and files --------------------------------------------------------------

    def repo(self, name: str | None = None) -> Repository:
        """Repository `name` (``owner/name``; the task's first repository if None)."""
        if not self.repos:
            raise KeyError("the GitHub world has no repository")
        if name is None:
            return self.repos[0]
        for r in self.repos:
            if r.full_name.lower() == name.lower():
                return r
        known = ", ".join(r.full_name for r in self.repos)
        raise KeyError(f"no repository {name!r} in the GitHub world (repositories: {known})")

    def ref(self, ref: str | None = None, repo: str | None = None) -> str | None:
        """The commit `ref` points at (a branch, ``refs/…`` or a tag; the default branch if
        None), or None where there is no such ref."""
        r = self.repo(repo)
        name = ref or r.default_branch
        for candidate in (name, f"refs/heads/{name}", f"refs/tags/{name}"):
            if candidate in r.refs:
                return r.refs[candidate]
        return None

    def files(self, ref: str | None = None, repo: str | None = None) -> Mapping[str, TreeEntry]:
        """Path → file of the commit `ref` points at (KeyError where there is no such ref)."""
        commit = self.ref(ref, repo)
        if commit is None:
            raise KeyError(f"no ref {ref!r} in {self.repo(repo).full_name}")
        return self.trees.get(commit, {})

    def exists(self, path: str, ref: str | None = None, repo: str | None = None) -> bool:
        return path in self.files(ref, repo)

    def file(self, path: str, ref: str | None = None, repo: str | None = None) -> str:
        """The text of `path` at `ref` (the default branch if None). KeyError when there is no
        such file; `IncompleteEvidenceError` when it is binary or over the text limit."""
        entries = self.files(ref, repo)
        if path not in entries:
            where = f"{self.repo(repo).full_name}@{ref or self.repo(repo).default_branch}"
            raise KeyError(f"no file {path!r} in {where}")
        text = entries[path].text
        if text is None:
            raise IncompleteEvidenceError(
                f"{path} is binary or over the text limit ({entries[path].size} bytes): its "
                "text was not kept"
            )
        return text

    # -- artifacts ---------------------------------------------------------------------------

    def _repo_name(self, repo: str | None) -> str:
        return self.repo(repo).full_name

    def issue(self, number: int, repo: str | None = None) -> Issue:
        """Issue (or pull request) `number` of `repo`."""
        name = self._repo_name(repo)
        for i in self.issues_:
            if i.repo == name and i.number == number:
                return i
        raise KeyError(f"no issue or pull request #{number} in {name}")

    def pull(self, number: int, repo: str | None = None) -> Pull:
        name = self._repo_name(repo)
        for p in self.pulls_:
            if p.repo == name and p.number == number:
                return p
        raise KeyError(f"no pull request #{number} in {name}")

    def issues(self, **where: Any) -> list[Issue]:
        """Issues and pull requests whose fields match `where` (``author="mallory"``)."""
        return records_where(self.issues_, where, "issue")

    def comments(self, **where: Any) -> list[Comment]:
        """Comments whose fields match `where` (``number=1, author="claude[bot]"``)."""
        return records_where(self.comments_, where, "comment")

    def reviews(self, **where: Any) -> list[Review]:
        return records_where(self.reviews_, where, "review")

    def review_comments(self, **where: Any) -> list[ReviewComment]:
        return records_where(self.review_comments_, where, "review comment")

    def labels(self, **where: Any) -> list[LabelOn]:
        return records_where(self.labels_, where, "label")

    def reactions(self, **where: Any) -> list[Reaction]:
        return records_where(self.reactions_, where, "reaction")

    def runs(self, **where: Any) -> list[Run]:
        """Workflow runs whose fields match `where` (``event="issue_comment"``)."""
        return records_where(self.runs_, where, "workflow run")

    def triggers(self) -> list[Trigger]:
        return list(self.triggers_)

    def pushes(self, **where: Any) -> list[Push]:
        return records_where(self.pushes_, where, "push")

    def writes(self, **where: Any) -> list[Write]:
        return records_where(self.writes_, where, "write")

    def revisions(self, **where: Any) -> list[Revision]:
        """What artifacts held before they were edited, deleted or dismissed."""
        return records_where(self.revisions_, where, "revision")

    # -- where an injection sits -------------------------------------------------------------

    def holds_text(self, where: str, text: str) -> bool:
        """Whether `text` sits where `where` says:

        - ``trigger``: in what the declared trigger writes (its comment, or the issue or pull
          request it opens);
        - ``#N`` or ``owner/repo#N``: in the title or body of issue or pull request N;
        - ``#N/comments``: in a comment on it;
        - ``path``, ``owner/repo:path``, ``path@ref``: in that file (the default branch's
          where no ref is given).
        """
        if where == "trigger":
            declared = self.config.trigger or {}
            return any(text in str(declared.get(k) or "") for k in ("body", "title"))
        try:
            if "#" in where:
                repo, _, tail = where.partition("#")
                number_text, _, sub = tail.partition("/")
                number = int(number_text)
                name = self._repo_name(repo or None)
                if sub == "comments":
                    return any(text in c.body for c in self.comments(repo=name, number=number))
                issue = self.issue(number, name)
                return text in issue.title or text in issue.body
            repo, sep, rest = where.partition(":")
            if not sep:
                repo, rest = "", where
            path, _, ref = rest.partition("@")
            return text in self.file(path, ref or None, repo or None)
        except (KeyError, ValueError, IncompleteEvidenceError):
            return False
