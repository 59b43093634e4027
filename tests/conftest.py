"""Shared test helpers.

Services: a test that needs a real server on loopback calls ``require_service(name, port)``.
When the server is down the test is skipped with a message naming it, except under
``ORACLE_REQUIRE_SERVICES=1`` (set by CI), where it fails. A test that needs a Docker engine
calls ``require_engine()`` (and ``require_images()`` for the locally built images): without one
it is skipped, and fails only where the engine was expected (``ORACLE_REQUIRE_ENGINE=1``, which
CI sets where it starts one), so a machine without Docker support stays honest.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import tempfile
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from oracle.sandbox.sandbox import SandboxView
from oracle.trial.agent import CallableAgent

REPO = Path(__file__).resolve().parent.parent
DEMO = REPO / "tasks" / "demo"


def require_service(name: str, port: int, host: str = "127.0.0.1") -> None:
    """Skip (or, under ORACLE_REQUIRE_SERVICES=1, fail) when `name` is not listening."""
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return
    except OSError as exc:
        message = f"{name} is not reachable on {host}:{port} ({exc})"
        if os.environ.get("ORACLE_REQUIRE_SERVICES") == "1":
            pytest.fail(message + " and ORACLE_REQUIRE_SERVICES=1")
        pytest.skip(message)


def alive(pid: int) -> bool:
    """Whether process `pid` runs (a zombie, waiting to be reaped, does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def require_tools(*tools: str, root: bool = False) -> None:
    """Skip (or, under ORACLE_REQUIRE_SERVICES=1, fail) when a program or root is missing."""
    import shutil

    missing = [t for t in tools if shutil.which(t) is None]
    if root and os.geteuid() != 0:
        missing.append("root")
    if missing:
        message = f"needs {', '.join(missing)} (`make system-deps` installs the programs)"
        if os.environ.get("ORACLE_REQUIRE_SERVICES") == "1":
            pytest.fail(message + " and ORACLE_REQUIRE_SERVICES=1")
        pytest.skip(message)


ENGINE_ENV = "ORACLE_REQUIRE_ENGINE"


def _engine_missing(message: str) -> None:
    if os.environ.get(ENGINE_ENV) == "1":
        pytest.fail(message + f" and {ENGINE_ENV}=1")
    pytest.skip(message)


def require_engine() -> None:
    """Skip (or, under ORACLE_REQUIRE_ENGINE=1, fail) when no Docker engine answers."""
    from oracle.agents.container import ContainerEngineMissingError, docker_client

    try:
        docker_client().close()
    except ContainerEngineMissingError as exc:
        _engine_missing(f"needs a Docker engine (`make engine` starts one as root): {exc}")


_images: dict[str, str] = {}


def require_images() -> dict[str, str]:
    """The locally built server and agent images (name → tag), built now where missing
    (`make images` does it ahead); skip (or fail, as `require_engine`) where they cannot be."""
    require_engine()
    if _images:
        return _images
    from oracle.fixtures.containers import images
    from oracle.isolation.engine import docker_client

    try:
        _images.update(images.build_all(docker_client(timeout=600)))
    except images.ImageBuildError as exc:
        _engine_missing(f"needs the locally built images (`make images`): {exc}")
    return _images


@contextlib.contextmanager
def project_folder(name: str) -> Iterator[Path]:
    """A fresh folder under the checkout (outside the temporary folder, which every sandbox
    hides wholesale), removed afterwards. Its name is unique, so tests side by side (in other
    worker processes, or other runs on the same checkout) never share or remove one another's.
    """
    top = REPO / ".test-archives"
    top.mkdir(exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=top))
    path.chmod(0o755)  # as a plain mkdir makes it: mkdtemp's 0700 would hide it from others
    try:
        yield path
    finally:
        # `top` stays: removing it could pull it away from a test beside this one making its own.
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def outside_tmp(tmp_path: Path) -> Iterator[Path]:
    """A folder outside the temporary folder: on the host's filesystem that an isolated agent
    sees read-only unless hidden, where a program can be an isolated agent's."""
    with project_folder(tmp_path.name) as path:
        yield path


def agent(fn: Callable[[SandboxView], object], name: str | None = None) -> CallableAgent:
    return CallableAgent(fn, name=name or getattr(fn, "__name__", "agent"))


@pytest.fixture
def write_task(tmp_path: Path) -> Callable[[str, str], Path]:
    """Write a task file (dedented source) into a fresh folder and return its path."""

    def write(source: str, name: str = "task_sample.py") -> Path:
        path = tmp_path / "tasks" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source))
        return path

    return write


def make_db(path: Path, sql: str) -> Path:
    conn = sqlite3.connect(path)
    conn.executescript(sql)
    conn.commit()
    conn.close()
    return path


# -- real servers ----------------------------------------------------------------------------
# Each fixture skips (or fails under ORACLE_REQUIRE_SERVICES=1) when its server is down, and
# names what it creates uniquely, so that tests of other engineers on the same servers and
# tests run side by side never collide.

PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"


def unique(prefix: str) -> str:
    import secrets

    return f"{prefix}_{os.getpid()}_{secrets.token_hex(4)}"


class PgServer:
    """Admin access to the local PostgreSQL server, and scratch databases dropped after."""

    def __init__(self) -> None:
        import psycopg

        self.admin = psycopg.connect(
            "host=127.0.0.1 port=5432 user=postgres dbname=postgres", autocommit=True
        )
        self.created: list[str] = []
        self.roles: list[str] = []

    def database(self, sql: str = "", *, encoding: str | None = None) -> str:
        """A fresh database holding `sql`; its name."""
        import psycopg

        name = unique("oracle_test")
        enc = f" ENCODING '{encoding}' LC_COLLATE 'C' LC_CTYPE 'C'" if encoding else ""
        self.admin.execute(f'CREATE DATABASE "{name}" TEMPLATE template0{enc}')
        self.created.append(name)
        if sql:
            with psycopg.connect(self.dsn(name), autocommit=True) as c:
                c.execute(sql)
        return name

    def dsn(self, name: str) -> str:
        return f"host=127.0.0.1 port=5432 user=postgres dbname={name}"

    def url(self, name: str, user: str = "postgres") -> str:
        return f"postgresql+psycopg://{user}@127.0.0.1:5432/{name}"

    def connect(self, name: str, **kw: object):  # type: ignore[no-untyped-def]
        import psycopg

        return psycopg.connect(self.dsn(name), autocommit=True, **kw)

    def run(self, name: str, sql: str) -> None:
        with self.connect(name) as c:
            c.execute(sql)

    def role(self) -> str:
        name = unique("oracle_role")
        self.admin.execute(f'CREATE ROLE "{name}" LOGIN')
        self.roles.append(name)
        return name

    def close(self) -> None:
        for name in self.created:
            self.admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        for role in self.roles:
            self.admin.execute(f'DROP ROLE IF EXISTS "{role}"')
        self.admin.close()


@pytest.fixture
def pg():  # type: ignore[no-untyped-def]
    require_service("PostgreSQL", 5432)
    server = PgServer()
    try:
        yield server
    finally:
        server.close()


class MariaServer:
    """Admin access to the local MariaDB server, and scratch databases dropped after."""

    def __init__(self) -> None:
        import pymysql
        from pymysql.constants import CLIENT

        self._pymysql = pymysql
        self.admin = pymysql.connect(
            host="127.0.0.1",
            user="root",
            password="",
            autocommit=True,
            client_flag=CLIENT.MULTI_STATEMENTS,
        )
        self.created: list[str] = []
        self.users: list[str] = []

    def database(self, sql: str = "") -> str:
        name = unique("oracle_test")
        with self.admin.cursor() as cur:
            cur.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
        self.created.append(name)
        if sql:
            self.run(name, sql)
        return name

    def connect(self, name: str):  # type: ignore[no-untyped-def]
        from pymysql.constants import CLIENT

        return self._pymysql.connect(
            host="127.0.0.1",
            user="root",
            password="",
            database=name,
            autocommit=True,
            client_flag=CLIENT.MULTI_STATEMENTS,
        )

    def run(self, name: str, sql: str) -> None:
        c = self.connect(name)
        try:
            with c.cursor() as cur:
                cur.execute(sql)
                while cur.nextset():
                    pass
        finally:
            c.close()

    def url(self, name: str, user: str = "root") -> str:
        return f"mariadb+pymysql://{user}@127.0.0.1:3306/{name}"

    def user(self) -> str:
        name = unique("oracle_u")[:30]
        with self.admin.cursor() as cur:
            cur.execute(f"CREATE USER '{name}'@'%' IDENTIFIED BY ''")
            cur.execute(f"CREATE USER '{name}'@'localhost' IDENTIFIED BY ''")
        self.users.append(name)
        return name

    def close(self) -> None:
        with self.admin.cursor() as cur:
            for name in self.created:
                cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
            for u in self.users:
                cur.execute(f"DROP USER IF EXISTS '{u}'@'%'")
                cur.execute(f"DROP USER IF EXISTS '{u}'@'localhost'")
        self.admin.close()


@pytest.fixture
def maria():  # type: ignore[no-untyped-def]
    require_service("MariaDB", 3306)
    server = MariaServer()
    try:
        yield server
    finally:
        server.close()


@dataclass(frozen=True)
class DemoOutput:
    """One `oracle demo tasks/demo` as a user runs it (COLUMNS=200, no colour)."""

    done: subprocess.CompletedProcess[str]
    out: Path


@pytest.fixture(scope="session")
def local_demo(tmp_path_factory: pytest.TempPathFactory) -> DemoOutput:
    """`oracle demo` of the nine demo tasks on the local servers (ORACLE_SERVERS=local, none
    of the runner's other ORACLE_ settings), run once for the tests that only read it: its
    printed table (`tests/cli/test_cli.py`) and its verdicts beside the same on servers in
    containers (`tests/cli/test_demo_containers.py`)."""
    out = tmp_path_factory.mktemp("local-demo") / "runs"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORACLE_")}
    env.update(ORACLE_SERVERS="local", COLUMNS="200", NO_COLOR="1")
    from tests.forked_cli import ORACLE as oracle

    done = subprocess.run(
        [oracle, "demo", str(DEMO), "--out", str(out)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    return DemoOutput(done, out)


@pytest.fixture
def redis_up() -> None:
    require_service("Redis", 6379)


@pytest.fixture
def rabbit_up() -> None:
    require_service("RabbitMQ", 5672)


#: Session fixtures that are dear to make (a demo run, a served viewer) → their group: the
#: tests that use one run in one worker when the suite runs side by side, so that it is made
#: once, not per worker (a fixture and those it is made from share a group).
SHARED_SESSION_FIXTURES = {
    "demo_run": "matrix demo run",
    "runs": "viewer",
    "view": "viewer",
    "local_demo": "demo on the local servers",
}
#: Where the workers of a side-by-side run write the group of each test (set by the
#: controller, inherited by its workers).
GROUPS_ENV = "ORACLE_TEST_GROUPS"


def _group_of(item: pytest.Item) -> str | None:
    """The group `item` runs in: the one its ``group`` mark names, the users of a dear session
    fixture together, and the tests of a module that share a fixture made once per module (a
    server, a sandbox, a browser)."""
    marked = item.get_closest_marker("group")
    if marked is not None:
        return str(marked.args[0])
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return None
    group = None
    for name in item.fixturenames:
        defs = info.name2fixturedefs.get(name)
        if not defs:
            continue
        scope = defs[-1].scope
        if scope == "session" and name in SHARED_SESSION_FIXTURES:
            return SHARED_SESSION_FIXTURES[name]
        if scope in ("module", "package", "class") and group is None:
            group = item.nodeid.split("::")[0]
    return group


def pytest_configure(config: pytest.Config) -> None:
    if (
        getattr(config, "workerinput", None) is None
        and config.getoption("dist", "no") == "loadgroup"
    ):
        folder = Path(tempfile.mkdtemp(prefix="oracle-test-groups-"))
        os.environ[GROUPS_ENV] = str(folder / "groups.json")
        config.add_cleanup(lambda: shutil.rmtree(folder, ignore_errors=True))
    if getattr(config, "workerinput", None) is not None or config.getoption("dist", "no") == "no":
        # A process that runs tests: its `oracle` commands fork from a CLI server.
        from tests import forked_cli

        forked_cli.start()
        config.add_cleanup(forked_cli.stop)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In a worker of a side-by-side run, write each test's group where the controller's
    scheduler reads it (`pytest_xdist_make_scheduler`)."""
    target = os.environ.get(GROUPS_ENV)
    if getattr(config, "workerinput", None) is None or not target:
        return
    groups = {item.nodeid: g for item in items if (g := _group_of(item)) is not None}
    tmp = Path(f"{target}.{os.getpid()}")
    tmp.write_text(json.dumps(groups))
    os.replace(tmp, target)


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """``--dist loadgroup`` (`make test`), done here: xdist's own reads groups from a node
    attribute that pytest 9 no longer has, and grouped nothing. Each test is its own unit of
    work, handed to whichever worker is free, except the tests of one group (`_group_of`),
    which go to one worker together."""
    target = os.environ.get(GROUPS_ENV)
    if config.getoption("dist", "no") != "loadgroup" or not target:
        return None
    from xdist.scheduler import LoadScopeScheduling

    class Grouped(LoadScopeScheduling):  # type: ignore[misc]
        _groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self._groups is None:
                # Read once all workers have collected (scheduling starts after that).
                self._groups = json.loads(Path(target).read_text())
            return self._groups.get(nodeid, nodeid)

    return Grouped(config, log)


def _sigint_ignored() -> bool:
    """Whether SIGINT is ignored in this process, as the kernel has it (a library's own
    sigaction is not seen by `signal.getsignal`); children started now inherit that."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("SigIgn:"):
                return bool(int(line.split()[1], 16) & (1 << (signal.SIGINT - 1)))
    except (OSError, ValueError):
        pass
    return False


@pytest.fixture(autouse=True)
def _sigint_not_left_ignored(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test that leaves SIGINT ignored in this process is named (a warning) and the default
    handler is put back: every process a later test starts would inherit the ignoring and
    outlive a Ctrl-C (test_the_container_goes_with_its_process[interrupt] slept its 60 s out
    twice in full runs)."""
    before = _sigint_ignored()
    yield
    if not before and _sigint_ignored():
        import warnings

        signal.signal(signal.SIGINT, signal.default_int_handler)
        warnings.warn(
            f"{request.node.nodeid} left SIGINT ignored in its process; handler restored",
            stacklevel=1,
        )
