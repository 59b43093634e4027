"""What an agent or a control gets of a sandbox: the `SandboxView` protocol.

The view is the prompt and the endpoints (paths, database URLs, the proxy) as environment
variables, with helpers that act only through them, as an agent would. Agents, controls and
the trial are written against this protocol; `oracle.sandbox.sandbox.SandboxView` is the view the
built-in sandbox hands out.

Example::

    def tidy(view: SandboxView) -> str:      # an agent, a control: any function of a view
        view.sql(None, "DELETE FROM orders WHERE status = 'cancelled'")
        view.write_text("notes/done.txt", "cancelled orders deleted")
        return "Deleted the cancelled orders."
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from oracle.authoring.limits import Limits


class HttpAnswer(Protocol):
    """The answer to one request a view made (`SandboxView.http`): status, headers, body."""

    @property
    def status(self) -> int: ...
    @property
    def body(self) -> bytes: ...
    @property
    def headers(self) -> Mapping[str, str]: ...
    @property
    def text(self) -> str:
        """The body as UTF-8 (undecodable bytes replaced)."""
        ...


class SandboxView(Protocol):
    """The prompt and the endpoints of one sandbox, nothing of the oracle.

    ``env`` holds ``ORACLE_PROMPT_FILE``, ``ORACLE_TASK_ROOT``, ``ORACLE_DIR_<SINK>``,
    ``ORACLE_DB_URL`` / ``ORACLE_DB_URL_<SINK>`` and ``ORACLE_DB_PATH_<SINK>`` for SQLite.
    For runners that isolate the agent: ``agent_dir`` is the one folder it may write,
    ``private`` the oracle's own folders it may neither read nor write, ``limits`` the task's
    resource limits (None: the defaults).
    """

    @property
    def task(self) -> str: ...
    @property
    def prompt(self) -> str: ...
    @property
    def env(self) -> Mapping[str, str]: ...
    @property
    def agent_dir(self) -> Path | None: ...
    @property
    def shared_dir(self) -> Path | None: ...
    @property
    def private(self) -> tuple[Path, ...]: ...
    @property
    def limits(self) -> Limits | None: ...

    def root(self, sink: str | None = None) -> Path:
        """The folder of file sink `sink` (the task root if not named)."""
        ...

    def path(self, rel: str, sink: str | None = None) -> Path:
        """`rel` inside a folder sink; a path that leaves the folder raises."""
        ...

    def read_text(self, rel: str, sink: str | None = None) -> str: ...

    def write_text(self, rel: str, text: str, sink: str | None = None) -> None:
        """Write `text` to `rel`, creating folders on the way."""
        ...

    def db_url(self, sink: str | None = None) -> str:
        """The URL of SQL sink `sink` (the first database if not named)."""
        ...

    def http(
        self,
        method: str,
        url: str,
        body: str | bytes | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> HttpAnswer:
        """One HTTP(S) request through the sandbox's egress recorder; any status is returned."""
        ...

    def send_mail(
        self,
        to: str | list[str],
        subject: str,
        body: str,
        *,
        sender: str = "agent@sandbox.test",
        attachments: Mapping[str, str | bytes] | None = None,
        sink: str | None = None,
    ) -> None:
        """Send one message through the sandbox's SMTP server (`sink`, or the first one)."""
        ...

    def sql(
        self, sink: str | None, statement: str, params: Mapping[str, Any] | None = None
    ) -> list[tuple[Any, ...]]:
        """Run one statement on a database and commit; the rows, if it returns any."""
        ...

    def redis(self, sink: str | None, *command: str | bytes | int | float) -> Any:
        """Run one Redis command on sink `sink` (the first Redis sink if None); its reply."""
        ...

    def with_env(
        self, env: Mapping[str, str], private: tuple[Path, ...] | None = None
    ) -> SandboxView:
        """The same view with `env` in place of its variables (and `private` in place of its
        private folders, where given)."""
        ...
