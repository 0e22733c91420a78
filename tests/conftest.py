"""Fixtures: real daphne nodes on real SQLite, PostgreSQL and Redis, and personas on them."""

from __future__ import annotations

import itertools
import shutil
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from pytest_redis import factories

from tests.harness.qim_process import (
    QimDatabase,
    QimNode,
    collect_static,
    last_json_line,
    make_pg_template,
    make_sqlite_template,
    manage,
    pg_database,
    sqlite_database,
)
from tests.harness.node_logs import crash_report, current_label, keep_logs, label_of, tail_since
from tests.harness.personas import TenantHandle
from tests.harness.services import PostgresServer


redis_proc = factories.redis_proc(
    executable=shutil.which("redis-server") or "/usr/bin/redis-server", port=None, db_count=64
)
_redis_db = itertools.count(1)
_deployment_serial = itertools.count(1)
# Deployments whose nodes may be running, so a failing test can point at their logs.
LIVE_DEPLOYMENTS: list["QimDeployment"] = []
_log_offsets: dict[Path, int] = {}

TENANT_NAMES = ("acme", "globex")


@dataclass
class QimDeployment:
    """Running nodes sharing one database (and Redis when there are several)."""

    db: QimDatabase
    nodes: list[QimNode]
    env: dict[str, str]
    tenants: dict[str, TenantHandle] = field(default_factory=dict)

    @property
    def node(self) -> QimNode:
        return self.nodes[0]

    def manage(self, *args: str) -> str:
        return manage(self.env, *args)

    def bootstrap(self, name: str) -> TenantHandle:
        line = last_json_line(self.manage("qim_bootstrap", "--tenant", name, "--admin", "admin", "--password", "admin-pw"))
        handle = TenantHandle(name=name, admin_token=line["token"], node=self.node)
        self.tenants[name] = handle
        return handle

    def __post_init__(self) -> None:
        LIVE_DEPLOYMENTS.append(self)

    @property
    def log_paths(self) -> list[Path]:
        return [node.log_path for node in self.nodes]

    def stop(self) -> None:
        """Stop every node, then fail if any handler crashed: an `internal` ERROR is a bug
        even when the test that caused it passed. The failure shows each whole traceback and
        names the copy of the logs that pytest's temp-dir rotation will not delete."""
        for node in self.nodes:
            node.stop()
        if self in LIVE_DEPLOYMENTS:
            LIVE_DEPLOYMENTS.remove(self)
        report = crash_report(self.log_paths, current_label())
        assert report is None, report


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Remember where each live node log ends, so a failure shows what this test added."""
    _log_offsets.clear()
    for deployment in LIVE_DEPLOYMENTS:
        for path in deployment.log_paths:
            _log_offsets[path] = path.stat().st_size if path.exists() else 0


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):  # type: ignore[no-untyped-def]
    """A failed test keeps the live nodes' logs (var/test-logs/<test>/) and shows what they
    logged while it ran."""
    outcome = yield
    report = outcome.get_result()
    if not report.failed or not LIVE_DEPLOYMENTS:
        return
    paths = [path for deployment in LIVE_DEPLOYMENTS for path in deployment.log_paths]
    kept = keep_logs(paths, label_of(item.nodeid))
    tails = "\n".join(f"--- {path.name} (since the test began) ---\n{tail_since(path, _log_offsets.get(path, 0))}"
                      for path in paths)
    report.sections.append(("qim node logs", f"kept in {kept}\n{tails}"))


@pytest.fixture(scope="session")
def work_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every node's QIM_VAR_DIR, with the static files collected into it once."""
    directory = tmp_path_factory.mktemp("qim")
    collect_static(directory)
    return directory


@pytest.fixture(scope="session")
def sqlite_template(work_dir: Path) -> Path:
    return make_sqlite_template(work_dir)


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    server = PostgresServer.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def pg_template(postgres: PostgresServer) -> str:
    return make_pg_template(postgres)


def start_embedded(sqlite_template: Path, work_dir: Path, extra_env: dict[str, str] | None = None) -> QimDeployment:
    serial = next(_deployment_serial)
    db = sqlite_database(sqlite_template, work_dir, f"embedded{serial}")
    env = {**db.env, "QIM_VAR_DIR": str(work_dir), **(extra_env or {})}
    node = QimNode(node_id=f"embedded{serial}", env=env, log_dir=work_dir)
    deployment = QimDeployment(db=db, nodes=[node], env=env)
    node.start()
    for name in TENANT_NAMES:
        deployment.bootstrap(name)
    return deployment


def start_cluster(
    postgres: PostgresServer,
    pg_template: str,
    redis_proc,  # type: ignore[no-untyped-def]
    work_dir: Path,
    nodes: int = 2,
    extra_env: dict[str, str] | None = None,
) -> QimDeployment:
    serial = next(_deployment_serial)
    db = pg_database(postgres, pg_template, f"qim_cluster{serial}")
    redis_url = f"redis://{redis_proc.host}:{redis_proc.port}/{next(_redis_db)}"
    env = {**db.env, "QIM_REDIS_URL": redis_url, "QIM_VAR_DIR": str(work_dir), **(extra_env or {})}
    members = [
        QimNode(node_id=f"c{serial}n{i}", env=env, log_dir=work_dir) for i in range(1, nodes + 1)
    ]
    deployment = QimDeployment(db=db, nodes=members, env=env)
    for node in members:
        node.start()
    for name in TENANT_NAMES:
        deployment.bootstrap(name)
    return deployment


@pytest.fixture(scope="module")
def embedded(sqlite_template: Path, work_dir: Path) -> Iterator[QimDeployment]:
    """One node on the embedded default: SQLite, in-memory channel layer."""
    deployment = start_embedded(sqlite_template, work_dir)
    yield deployment
    deployment.stop()


@pytest.fixture(scope="module")
def cluster(postgres, pg_template, redis_proc, work_dir) -> Iterator[QimDeployment]:  # type: ignore[no-untyped-def]
    """Two nodes sharing PostgreSQL and Redis, each with its own node id."""
    deployment = start_cluster(postgres, pg_template, redis_proc, work_dir)
    yield deployment
    deployment.stop()


@pytest.fixture(scope="module")
def capped(request: pytest.FixtureRequest, sqlite_template: Path, work_dir: Path) -> Iterator[QimDeployment]:
    """One embedded node whose outbound frame cap is the test module's `CAP`, so that a few
    big replies must be cut, with the per-user rate raised so the test can write them fast;
    the module's `CAPPED_ENV`, if any, adds settings."""
    deployment = start_embedded(sqlite_template, work_dir, extra_env={
        "QIM_MAX_OUTBOUND_FRAME_BYTES": str(request.module.CAP), "QIM_PER_USER_MSG_RATE": "1000",
        **getattr(request.module, "CAPPED_ENV", {}),
    })
    yield deployment
    deployment.stop()


def tenant_fixture(deployment_fixture: str, tenant: str = "acme"):  # type: ignore[no-untyped-def]
    """A fixture yielding `tenant`'s handle on the deployment fixture named `deployment_fixture`,
    its clients closed after each test, so one test's sockets never reach the next."""

    @pytest.fixture
    async def handle(request: pytest.FixtureRequest) -> AsyncIterator[TenantHandle]:
        tenant_handle = request.getfixturevalue(deployment_fixture).tenants[tenant]
        yield tenant_handle
        await tenant_handle.close_clients()

    return handle


capped_acme = tenant_fixture("capped")
acme = tenant_fixture("embedded")
globex = tenant_fixture("embedded", "globex")
cluster_acme = tenant_fixture("cluster")


@pytest.fixture
def operator_client():  # type: ignore[no-untyped-def]
    """A Django test client logged into the admin as an operator (a superuser)."""
    from django.contrib.auth.models import User as Operator
    from django.test import Client

    Operator.objects.create_superuser("operator", "op@example.com", "pw")
    client = Client()
    client.login(username="operator", password="pw")
    return client
