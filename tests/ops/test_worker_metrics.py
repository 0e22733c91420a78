"""The push worker's own /metrics (QIM_WORKER_METRICS_PORT): a real `qim_push_worker` in
forever mode reports the outbox by state and its oldest pending task's age, read from the
database it shares with the node, behind the same guard as the nodes' /metrics."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from tests.conftest import QimDeployment, start_embedded, tenant_fixture
from tests.core.conversation_helpers import create_group, send_text
from tests.core.test_offline_push import register_push
from tests.harness.personas import TenantHandle
from tests.harness.qim_process import REPO, process_env
from tests.harness.services import free_port, wait_for_port
from tests.ops.metrics_helpers import get_metrics, scrape, scrape_until

TOKEN = "worker-scrape-secret"


@pytest.fixture(scope="module")
def outbox(sqlite_template, work_dir) -> Iterator[QimDeployment]:  # type: ignore[no-untyped-def]
    deployment = start_embedded(sqlite_template, work_dir, extra_env={"QIM_METRICS_TOKEN": TOKEN})
    yield deployment
    deployment.stop()


acme = tenant_fixture("outbox")


@pytest.fixture
def worker(outbox: QimDeployment, work_dir) -> Iterator[str]:  # type: ignore[no-untyped-def]
    """A worker whose every send fails and is retried an hour later: its tasks stay pending.
    Answers its /metrics URL; it must stop cleanly."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, str(REPO / "manage.py"), "qim_push_worker", "--idle-sleep", "0.05"],
        env=process_env({
            **outbox.env, "QIM_WORKER_METRICS_PORT": str(port), "QIM_METRICS_TOKEN": TOKEN,
            "QIM_PUSH_SENDER": "tests.harness.push_senders.FlakyFileSender",
            "QIM_TEST_PUSH_OUTBOX": str(work_dir / "metrics-worker-outbox.jsonl"),
            "QIM_TEST_PUSH_FAIL_TIMES": "1000", "QIM_PUSH_RETRY_BASE_S": "3600",
        }),
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        wait_for_port("127.0.0.1", port, 60)
        yield f"http://127.0.0.1:{port}/metrics"
    finally:
        process.terminate()
        try:
            _, stderr = process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            _, stderr = process.communicate(timeout=30)
    assert process.returncode == 0, stderr
    assert "Traceback" not in stderr, stderr


def pending_rows(deployment: QimDeployment) -> int:
    return deployment.db.count("qim_pushtask", "state = ?", ("pending",))


async def test_the_worker_reports_pending_tasks_and_the_oldest_ones_age(
    outbox: QimDeployment, acme: TenantHandle, worker: str
) -> None:
    alice, bob = acme.persona("alice"), acme.persona("bob")
    register_push(bob, "phone")  # bob's phone is offline: each SEND leaves it a push task
    group = create_group(alice, bob)
    a = await alice.connect()
    await send_text(a, group, "while you were out")
    sent_at = time.time()
    await send_text(a, group, "and again")
    assert pending_rows(outbox) == 2

    scraped_after = time.time()
    current = scrape_until(worker, TOKEN, lambda s: s.value("qim_push_tasks", state="pending") == 2)
    assert current.families["qim_push_tasks"] == "gauge"
    assert current.value("qim_push_tasks", state="pending") == 2
    assert current.value("qim_push_tasks", state="sent") == 0
    assert current.value("qim_push_tasks", state="failed") == 0
    assert current.value("qim_push_outbox_readable") == 1
    assert all(name.startswith("qim_") for name in current.families)
    # The oldest was made before `sent_at` and read after `scraped_after` (ms rounding aside).
    assert current.value("qim_push_oldest_pending_age_seconds") >= scraped_after - sent_at - 0.002
    assert current.value("qim_push_oldest_pending_age_seconds") > 0

    # Each failed attempt puts its task back, an hour away: pending, but not due.
    after = scrape_until(worker, TOKEN, lambda s: s.value("qim_push_tasks_due") == 0)
    assert after.value("qim_push_tasks_due") == 0 and after.value("qim_push_tasks", state="pending") == 2
    # What this worker did, its own counters: two attempts, both put back for a retry.
    mine = scrape_until(worker, TOKEN, lambda s: s.value("qim_push_worker_tasks_total", outcome="retried") == 2)
    assert mine.families["qim_push_worker_tasks"] == "counter"
    assert [mine.value("qim_push_worker_tasks_total", outcome=o) for o in ("sent", "failed", "lost")] == [0, 0, 0]


def test_the_workers_metrics_have_the_same_guard(worker: str) -> None:
    for answer in (get_metrics(worker), get_metrics(worker, "wrong"), get_metrics(worker, Authorization=TOKEN)):
        assert answer.status_code == 401 and answer.json()["code"] == "unauthenticated", answer.text
        assert TOKEN not in answer.text
    elsewhere = get_metrics(worker.replace("/metrics", "/other"), TOKEN)
    assert (elsewhere.status_code, elsewhere.json()["code"]) == (404, "not_found")
    assert get_metrics(worker, TOKEN).status_code == 200


def test_the_dashboard_queries_only_names_the_node_and_the_worker_export(outbox: QimDeployment, worker: str) -> None:
    """docs/grafana/qim-dashboard.json: a renamed metric would leave a panel silently empty."""
    dashboard = json.loads((REPO / "docs" / "grafana" / "qim-dashboard.json").read_text())
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    queried = {name for expr in exprs for name in re.findall(r"\bqim_[a-z0-9_]+", expr)}
    exported = {name for current in (scrape(f"{outbox.node.http_url}/metrics", TOKEN), scrape(worker, TOKEN))
                for name, _ in current.samples}
    assert queried and queried <= exported, sorted(queried - exported)
    titles = {panel["title"] for panel in dashboard["panels"]}
    for first_look in ("Connections open", "SEND latency (frame to ACK)", "ERRORs by code",
                       "Rate-limit refusals by limit", "Push backlog", "ChannelFull drops"):
        assert first_look in titles, first_look
    assert len({panel["id"] for panel in dashboard["panels"]}) == len(dashboard["panels"])


def test_a_metrics_port_the_worker_cannot_take_stops_it_with_a_clear_error(outbox: QimDeployment, worker: str) -> None:
    taken = worker.rsplit(":", 1)[1].split("/")[0]  # the running worker's port
    done = subprocess.run(
        [sys.executable, str(REPO / "manage.py"), "qim_push_worker"],
        env=process_env({**outbox.env, "QIM_WORKER_METRICS_PORT": taken}),
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert f"cannot serve metrics on 127.0.0.1:{taken}" in done.stderr and "Traceback" not in done.stderr
