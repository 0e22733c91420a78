"""The token re-check's kept slices (qim/gateway/recheck_slices.py) over a real node: sockets
opened in waves across the re-check's steps, some closed in between (so the newest entries of
the node's index hold older sockets too), all still re-checked: every one whose token row goes
without a notice is closed 4403 token_revoked, and a socket whose token stays is not."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import QimDeployment, start_embedded
from tests.core.credential_helpers import frames_until_closed, new_token, open_session, revocation_error, still_open

ENV = {
    "QIM_TOKEN_RECHECK_S": "1",
    "QIM_AUTH_TOKEN_RATE_PER_ACCOUNT": "100/minute",
    "QIM_AUTH_TOKEN_RATE_PER_ADDRESS": "300/minute",
}


@pytest.fixture(scope="module")
def deployment(sqlite_template: Path, work_dir: Path) -> Iterator[QimDeployment]:
    deployment = start_embedded(sqlite_template, work_dir, extra_env=ENV)
    yield deployment
    deployment.stop()


async def test_sockets_opened_across_steps_are_all_rechecked(deployment: QimDeployment) -> None:
    acme = deployment.tenants["acme"]
    keeper = acme.persona("keeper")
    kept = await open_session(acme.node, new_token(keeper, "phone"), "phone")
    doomed: list[tuple[object, str]] = []
    closed_early = []
    for wave in range(4):
        for n in range(6):
            persona = acme.persona(f"w{wave}u{n}")
            token = new_token(persona, "phone")
            doomed.append((await open_session(acme.node, token, "phone"), token))
        # Two of each wave leave again before the next step: the newest entries then include
        # sockets opened before them.
        for ws, _ in doomed[-2:]:
            await ws.close()
            closed_early.append(ws)
        await asyncio.sleep(0.15)  # spread the waves over the 0.1 s steps (not a speed assumption)
    doomed = [(ws, token) for ws, token in doomed if ws not in closed_early]
    assert len(doomed) == 16
    for _, token in doomed:  # the rows go without any notice, as if every notice were lost
        digest = hashlib.sha256(token.encode()).hexdigest()
        deployment.db.query("DELETE FROM qim_devicetoken WHERE digest = ?", (digest,))
    results = await asyncio.gather(*(frames_until_closed(ws) for ws, _ in doomed))
    for frames, code in results:
        assert code == 4403
        assert revocation_error(frames)["reason"] == "token_revoked"
    assert await still_open(kept)
    await kept.close()
