"""How type checkers and editors see `oracle.Evidence`: the evidence with a typed accessor for
every built-in sink kind, so that ``ev.diff.sql("app")`` is a `SqlDiff` and completes, and a
misspelt query is a type error::

    from oracle import Evidence

    def renamed(ev: Evidence) -> bool:
        return bool(ev.diff.sql("app").changed("users", "name"))

At run time `oracle.Evidence` is `oracle.evidence.evidence.Evidence`, whose accessors answer
through the
sink-kind registry (`oracle.evidence.kinds`): the classes here exist for type checkers only, and
only
`oracle/__init__.py` names them. A sink kind declared elsewhere is read, typed, as
``ev.diff.of(KIND, "name")``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from oracle.evidence import boundary, diff, evidence, snapshot
    from oracle.sinks.amqp import AmqpDiff, AmqpState
    from oracle.sinks.egress import EgressDiff, EgressState
    from oracle.sinks.files import FileDiff, FolderState
    from oracle.sinks.github import GitHubDiff, GitHubState
    from oracle.sinks.inbox import InboxDiff, InboxState
    from oracle.sinks.mail import MailDiff, MailState
    from oracle.sinks.redis import RedisDiff, RedisState
    from oracle.sinks.reply import ReplyDiff, ReplyState
    from oracle.sinks.sql import SqlDiff, SqlState

    class Diff(diff.Diff):
        """`oracle.evidence.diff.Diff` with the built-in kinds' accessors typed."""

        def sql(self, sink: str) -> SqlDiff:
            """The diff of the SQL sink `sink`."""

        def files(self, sink: str) -> FileDiff:
            """The diff of the file sink `sink`."""

        def egress(self, sink: str) -> EgressDiff:
            """The diff of the egress sink `sink`: the requests made during the trial."""

        def mail(self, sink: str) -> MailDiff:
            """The diff of the SMTP mailbox `sink`: the messages sent during the trial."""

        def inbox(self, sink: str) -> InboxDiff:
            """The diff of the Maildir or mbox `sink`: messages added, removed, re-flagged."""

        def reply(self, sink: str = "reply") -> ReplyDiff:
            """The diff of the reply sink: what the agent published as its reply."""

        def redis(self, sink: str) -> RedisDiff:
            """The diff of the Redis sink `sink`."""

        def amqp(self, sink: str) -> AmqpDiff:
            """The diff of the message-queue sink `sink` (RabbitMQ)."""

        def github(self, sink: str) -> GitHubDiff:
            """The diff of the GitHub world `sink`: ``agent_artifacts()``, ``reviews(…)``…"""

    class States(snapshot.States):
        """`oracle.evidence.snapshot.States` with the built-in kinds' accessors typed."""

        def sql(self, sink: str) -> SqlState:
            """The state of the SQL sink `sink`: ``rows(table)``, ``row(table, key)``…"""

        def files(self, sink: str) -> FolderState:
            """The state of the file sink `sink`: ``text(path)``, ``exists(path)``…"""

        def egress(self, sink: str) -> EgressState:
            """The state of the egress sink `sink`: ``requests(host=…)``."""

        def mail(self, sink: str) -> MailState:
            """The state of the SMTP mailbox `sink`: the messages captured so far."""

        def inbox(self, sink: str) -> InboxState:
            """The state of the Maildir or mbox `sink`: ``messages()``, ``message(key)``."""

        def reply(self, sink: str = "reply") -> ReplyState:
            """The state of the reply sink: the reply, once the agent has run."""

        def redis(self, sink: str) -> RedisState:
            """The state of the Redis sink `sink`: ``value(key)``, ``keys(pattern)``…"""

        def amqp(self, sink: str) -> AmqpState:
            """The state of the message-queue sink `sink`: ``published(...)``, ``queued(...)``."""

        def github(self, sink: str) -> GitHubState:
            """The state of the GitHub world `sink`: ``issue(n)``, ``file(path, ref=…)``…"""

    class Boundary(boundary.Boundary):
        """`oracle.evidence.boundary.Boundary` with the boundary kinds' accessors typed."""

        def egress(self, sink: str | None = None) -> EgressDiff:
            """The requests that reached the egress recorder `sink`."""

        def mail(self, sink: str | None = None) -> MailDiff:
            """The mail that reached the SMTP server `sink`."""

        def reply(self, sink: str | None = None) -> ReplyDiff:
            """The reply the agent published."""

    class Evidence(evidence.Evidence):
        """`oracle.evidence.evidence.Evidence`, its diff, snapshots and boundary typed as above."""

        @property
        def diff(self) -> Diff:
            """The typed changes of every sink."""

        @property
        def before(self) -> States:
            """Every sink's snapshot before the agent ran."""

        @property
        def after(self) -> States:
            """Every sink's snapshot after the agent ran."""

        @property
        def boundary(self) -> Boundary:
            """What crossed the sandbox's edge: egress requests, mail sent, the reply."""

        def fresh(self) -> Evidence:
            """The same evidence with an empty record of what was read."""
