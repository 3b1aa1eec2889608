"""Shared fixtures: anyio's pytest plugin on asyncio, a fresh SQLite file per test, and a
fresh PostgreSQL database per test.

PostgreSQL is found through ``LEASEWARD_TEST_PG_URL``, else the standard ``PG*``
variables, else ``postgresql://postgres@127.0.0.1:5432/postgres``. The URL names a
maintenance database where the tests may create and drop databases. Once per
session a template database is created there with the schema migrated; each test
then gets its own database copied from it (``CREATE DATABASE ... TEMPLATE``), so
tests never see each other's rows, and drops it afterwards. Without a reachable
server the PostgreSQL tests skip, saying why (they fail instead when
``LEASEWARD_TEST_PG_REQUIRED`` is set, as `.ci/run` does after making sure the
server is up).
"""

from __future__ import annotations

import asyncio
import gc
import os
import shutil
import tempfile
import traceback
import uuid
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode, urlsplit, urlunsplit

import attrs
import pytest
from hypothesis import HealthCheck, settings

# Property tests run on machines shared with other work: an example that took longer
# than Hypothesis's deadline (200 ms) there, or examples generated slowly, are the
# machine's pause, not the code's, and failed the suite as flaky.
settings.register_profile(
    "shared-machines", deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("shared-machines")

DEFAULT_PG_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
PG_CONNECT_TIMEOUT_SECONDS = 3.0
DIALECTS = ["sqlite", "postgresql"]


# -- child processes' bytecode ---------------------------------------------------------------

NO_BYTECODE_VARIABLE = "PYTHONDONTWRITEBYTECODE"
PYCACHE_VARIABLE = "PYTHONPYCACHEPREFIX"
# The private directory and the value of PYTHONDONTWRITEBYTECODE it stands in for.
_pycache: tuple[str, str] | None = None


def pytest_configure(config: pytest.Config) -> None:
    """Where PYTHONDONTWRITEBYTECODE is set, the hundreds of processes the tests start (the
    CLI, daemons, workers, benchmarks) would each compile leaseward from its source again:
    a tenth of a second apiece. Instead they share bytecode in a private directory of this
    session's own (PYTHONPYCACHEPREFIX), which keeps the checkout free of __pycache__ as
    the variable meant to; it is removed at the end. This process is left as it started."""
    global _pycache
    no_bytecode = os.environ.get(NO_BYTECODE_VARIABLE)
    if not no_bytecode or os.environ.get(PYCACHE_VARIABLE):
        return
    directory = tempfile.mkdtemp(prefix="leaseward-test-pycache-")
    _pycache = (directory, no_bytecode)
    os.environ[PYCACHE_VARIABLE] = directory
    del os.environ[NO_BYTECODE_VARIABLE]


def pytest_unconfigure(config: pytest.Config) -> None:
    global _pycache
    if _pycache is None:
        return
    directory, no_bytecode = _pycache
    os.environ[NO_BYTECODE_VARIABLE] = no_bytecode
    del os.environ[PYCACHE_VARIABLE]
    shutil.rmtree(directory, ignore_errors=True)
    _pycache = None


@pytest.fixture(autouse=True)
def no_run_crashes(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    """Fails a test in whose process a run's actor failed unexpectedly, unless it is
    marked ``run_crash``: the worker goes on and the reaper recovers the run, so the test
    would otherwise pass over a fault of leaseward's own."""
    from leaseward.actors.metrics import Metrics

    crashes: list[str] = []
    counted = Metrics.run_crashed

    def run_crashed(metrics: Metrics) -> None:
        # Counted inside the handler of the actor's exception: its traceback is at hand.
        crashes.append(traceback.format_exc())
        counted(metrics)

    monkeypatch.setattr(Metrics, "run_crashed", run_crashed)
    yield
    if crashes and request.node.get_closest_marker("run_crash") is None:
        pytest.fail("a run crashed:\n" + "\n".join(crashes), pytrace=False)


@pytest.fixture
def anyio_backend() -> str:
    # leaseward runs on asyncio; anyio's own plugin drives the async tests so
    # they use the same primitives (task groups, cancel scopes) as the code.
    return "asyncio"


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'runs.db'}"


@pytest.fixture
def interpreter_collector() -> Iterator[None]:
    """CPython's own collection thresholds for the test, nothing frozen, and the
    process's thresholds after it."""
    before = gc.get_threshold()
    gc.unfreeze()
    gc.set_threshold(700, 10, 10)
    try:
        yield
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()


# -- PostgreSQL ------------------------------------------------------------------------------


def pg_admin_url() -> str:
    """Where the test server is, from LEASEWARD_TEST_PG_URL or the PG* variables."""
    explicit = os.environ.get("LEASEWARD_TEST_PG_URL")
    if explicit:
        return explicit
    if not any(os.environ.get(name) for name in ("PGHOST", "PGPORT", "PGUSER", "PGDATABASE")):
        return DEFAULT_PG_URL
    host = os.environ.get("PGHOST") or "127.0.0.1"
    port = os.environ.get("PGPORT") or "5432"
    user = quote(os.environ.get("PGUSER") or "postgres", safe="")
    database = quote(os.environ.get("PGDATABASE") or "postgres", safe="")
    # PGPASSWORD is read by the driver itself; it does not go into URLs we print.
    if host.startswith("/"):
        # A socket directory goes in the query: postgresql://user@/db?host=/run/postgresql
        return f"postgresql://{user}@/{database}?" + urlencode({"host": host, "port": port})
    return f"postgresql://{user}@{host}:{port}/{database}"


def with_database(url: str, database: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, f"/{database}", parts.query, ""))


def run_async(body: Callable[[], Awaitable[Any]]) -> Any:
    """Run ``body`` on an event loop of its own, in a thread: sync fixtures may be set up
    while the anyio test runner owns this thread's loop."""

    async def main() -> Any:
        return await body()

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, main()).result()


@attrs.define
class PgServer:
    """The test server: runs admin statements on the maintenance database.

    Copying the template is most of a PostgreSQL test's setup, and hundreds of tests want
    a copy. While a test that does not use the server runs (the SQLite twin of a test of
    both stores, say), the copies the next tests of the server will get are made on a
    thread of its own, one after the other, by the same statement. Never while a test of
    the server runs: a transaction anywhere on the server holds back what its database
    may prune, which a test can see. Every way a test reaches the server first calls off
    the copies not begun and waits for the one being made."""

    admin_url: str
    template: str | None = None
    _spares: list[Future[str]] = attrs.field(factory=list, init=False)
    _maker: ThreadPoolExecutor | None = attrs.field(default=None, init=False)

    def run(self, *statements: str) -> None:
        self.settle()
        self._run_now(statements)

    def _run_now(self, statements: tuple[str, ...]) -> None:
        run_async(lambda: self._run(statements))

    async def _run(self, statements: tuple[str, ...]) -> None:
        import asyncpg

        connection = await asyncpg.connect(self.admin_url, timeout=PG_CONNECT_TIMEOUT_SECONDS)
        try:
            for statement in statements:
                await connection.execute(statement)
        finally:
            await connection.close()

    def url_for(self, database: str, **options: str) -> str:
        self.settle()
        url = with_database(self.admin_url, database)
        if options:
            url += ("&" if "?" in url else "?") + urlencode(options)
        return url

    def create_database(self, *, migrated: bool = True) -> str:
        """A new database (from the migrated template, or empty); dropped by drop()."""
        self.settle()
        if migrated and self._spares:
            return self._spares.pop(0).result()
        template = self.template if migrated else "template0"
        assert template is not None
        return self._copy(template)

    def _copy(self, template: str) -> str:
        name = f"lw_{uuid.uuid4().hex[:16]}"
        self._run_now((f'CREATE DATABASE "{name}" TEMPLATE "{template}"',))
        return name

    def prepare_spares(self, count: int) -> None:
        """Start copying the template until ``count`` copies are made or being made."""
        if self.template is None or len(self._spares) >= count:
            return
        if self._maker is None:
            self._maker = ThreadPoolExecutor(1, thread_name_prefix="pg-spares")
        while len(self._spares) < count:
            self._spares.append(self._maker.submit(self._copy, self.template))

    def settle(self) -> None:
        """Call off the copies not begun and wait for the one being made. A copy that
        failed (the server restarted meanwhile, say) is forgotten: the test that would
        have taken it gets one made as before."""
        for spare in self._spares:
            spare.cancel()
        made: list[Future[str]] = []
        for spare in self._spares:
            if spare.cancelled():
                continue
            try:
                spare.result()
            except Exception:
                continue
            made.append(spare)
        self._spares = made

    def close(self) -> None:
        """Drop the copies no test took."""
        self.settle()
        spares, self._spares = self._spares, []
        if self._maker is not None:
            self._maker.shutdown()
            self._maker = None
        for spare in spares:
            self.drop(spare.result())

    def drop(self, database: str) -> None:
        self.run(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')


def _unreachable(admin_url: str) -> str | None:
    """Why the server cannot be used, or None."""
    try:
        import asyncpg  # noqa: F401
    except ImportError:
        return "asyncpg is not installed (pip install -e '.[postgres]')"
    try:
        PgServer(admin_url).run("SELECT 1")
    except Exception as exc:
        return (
            f"PostgreSQL is not reachable at {urlsplit(admin_url).netloc or admin_url} "
            f"({type(exc).__name__}: {exc}); set LEASEWARD_TEST_PG_URL or PG* variables"
        )
    return None


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """The server with this session's template database; skips the test when unreachable."""
    global _spares_from
    admin_url = pg_admin_url()
    reason = _unreachable(admin_url)
    if reason is not None:
        if os.environ.get("LEASEWARD_TEST_PG_REQUIRED"):
            pytest.fail(f"LEASEWARD_TEST_PG_REQUIRED is set, but {reason}")
        pytest.skip(reason)
    server = PgServer(admin_url)
    template = f"lw_template_{uuid.uuid4().hex[:12]}"
    server.run(f'CREATE DATABASE "{template}"')
    try:
        run_async(lambda: _migrate(server.url_for(template)))
        # A template must have no sessions while it is copied: _migrate closed its own.
        server.template = template
        _spares_from = server
        yield server
    finally:
        _spares_from = None
        try:
            server.close()
        finally:
            server.drop(template)


# The server whose template is copied ahead, and how many copies to have ready while each
# test that does not use it runs (pytest_runtest_setup below).
_spares_from: PgServer | None = None
_spares_wanted: dict[str, int] = {}
MAX_SPARES = 8


def _uses_postgresql(item: pytest.Item) -> bool:
    """Whether a test asks for the server: through a fixture of it, or as the PostgreSQL
    case of a fixture of both stores. (A test that asks for one in its body reaches the
    server through PgServer's methods, which stop the copying first.)"""
    names = set(getattr(item, "fixturenames", ()))
    if names & {"pg_server", "pg_database", "pg_url"}:
        return True
    callspec = getattr(item, "callspec", None)
    params: dict[str, Any] = {} if callspec is None else callspec.params
    return any(value == "postgresql" for value in params.values())


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Each test that does not use the server wants as many copies ready as the next
    tests of the server in a row will take (at most MAX_SPARES)."""
    _spares_wanted.clear()
    upcoming = in_a_row = 0
    for item in reversed(items):
        if _uses_postgresql(item):
            in_a_row += 1
            continue
        if in_a_row:
            upcoming, in_a_row = in_a_row, 0
        _spares_wanted[item.nodeid] = min(upcoming, MAX_SPARES)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    server = _spares_from
    if server is None:
        return
    if _uses_postgresql(item):
        server.settle()
    else:
        server.prepare_spares(_spares_wanted.get(item.nodeid, 0))


async def _migrate(url: str) -> None:
    from leaseward.storage import open_store

    store = await open_store(url)
    await store.aclose()


@pytest.fixture
def pg_database(pg_server: PgServer) -> Iterator[str]:
    """The name of a fresh database with the schema, dropped after the test."""
    name = pg_server.create_database()
    try:
        yield name
    finally:
        pg_server.drop(name)


@pytest.fixture
def pg_url(pg_server: PgServer, pg_database: str) -> str:
    """A store URL for a fresh PostgreSQL database with the schema."""
    return pg_server.url_for(pg_database)


@pytest.fixture(params=DIALECTS)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh store of each dialect in turn: the conformance fixture."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'runs.db'}"
    url: Any = request.getfixturevalue("pg_url")
    return str(url)


@pytest.fixture
def dialect(store_url: str) -> str:
    return "postgresql" if store_url.startswith("postgresql") else "sqlite"
