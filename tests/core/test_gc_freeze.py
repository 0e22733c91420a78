"""QIM_GC_FREEZE (qim/infra/gc_freeze.py) over a real daphne: what the collector's passes leave alive
is frozen (GET /api/v1/node's `gc_frozen` grows with the sockets), and the cyclic garbage of
sockets that closed meanwhile is found by the next thaw, on the period its setting shortens here:
the frozen count comes back to where it was before the sockets opened."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import QimDeployment, start_embedded
from tests.harness.ping_socket import PingSocket

SOCKETS = 120


@pytest.fixture(scope="module")
def freezing(sqlite_template: Path, work_dir: Path) -> Iterator[QimDeployment]:
    """Small young passes so that the sockets' objects are frozen as they are made; a thaw a
    second at most, and never for growth alone (the period is what is tested)."""
    deployment = start_embedded(sqlite_template, work_dir, extra_env={
        "QIM_GC_FREEZE": "true", "QIM_GC_YOUNG_THRESHOLD": "700", "QIM_GC_UNFREEZE_PERIOD_S": "1", "QIM_GC_UNFREEZE_GROWTH": "1000",
        "QIM_PER_USER_MSG_RATE": "1000",
    })
    yield deployment
    deployment.stop()


def wait_for(deployment: QimDeployment, admin: str, done: Any, what: str) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while True:
        stats = deployment.node.stats(admin)
        if done(stats):
            return stats
        assert time.monotonic() < deadline, f"{what}: {stats}"
        time.sleep(0.2)


async def open_authenticated(port: int, tokens: list[tuple[str, str]]) -> list[PingSocket]:
    sockets = []
    for device_id, token in tokens:
        sock = await PingSocket.open(port)
        sock.send({"type": "AUTH", "req_id": "a", "token": token, "device_id": device_id})
        assert (await sock.text())["type"] == "AUTH_OK"
        sockets.append(sock)
    return sockets


async def test_closed_sockets_garbage_is_collected_by_the_periodic_thaw(freezing: QimDeployment) -> None:
    acme = freezing.tenants["acme"]
    admin = acme.admin_token
    alice = acme.persona("alice")
    tokens = [(f"d{i}", alice.token(f"d{i}")) for i in range(SOCKETS)]
    # A thaw after start-up's settling, so that `before` is what a thaw leaves.
    thaws = wait_for(freezing, admin, lambda s: s["gc_thaws"] >= 1, "no thaw after start")["gc_thaws"]
    before = wait_for(freezing, admin, lambda s: s["gc_thaws"] > thaws, "no second thaw")
    assert before["gc_thresholds"][:2] == [700, 1]  # the middle threshold's default with freezing

    sockets = await open_authenticated(freezing.node.port, tokens)
    # A thaw after the opens freezes whatever the sockets hold: from here only a thaw can
    # collect their cycles (a middle pass never scans frozen objects).
    thaws = freezing.node.stats(admin)["gc_thaws"]
    opened = wait_for(freezing, admin, lambda s: s["gc_thaws"] > thaws, "no thaw after the opens")
    assert opened["connections"] == SOCKETS
    # Every socket's objects are frozen (about a hundred each), not scanned by the young passes.
    assert opened["gc_frozen"] > before["gc_frozen"] + SOCKETS * 50, (before, opened)

    for sock in sockets:
        sock.close()
    for sock in sockets:
        await sock.writer.wait_closed()
    closed = wait_for(freezing, admin, lambda s: s["connections"] == 0, "sockets still open")
    thawed = wait_for(freezing, admin, lambda s: s["gc_thaws"] > closed["gc_thaws"], "no thaw after the closes")
    # The thaws since they opened found the closed sockets' cycles (about 5 objects each; 25
    # before the upgrade skipped Twisted's request and daphne's Deferreds; reference counting
    # freed the rest at the close), and most of what the sockets held is no longer
    # frozen (what stays: a device's cached token and lookups, about 40 objects each).
    assert thawed["gc_thaws_found"] - opened["gc_thaws_found"] >= SOCKETS * 3, (opened, thawed)
    assert thawed["gc_frozen"] - before["gc_frozen"] < (opened["gc_frozen"] - before["gc_frozen"]) / 2, (
        before, opened, thawed)
