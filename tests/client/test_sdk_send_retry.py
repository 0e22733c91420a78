"""qimclient's SEND retry when the socket is found closed before the reader noticed (a node
killed mid-traffic): the retry waits for the reconnect instead of spending its tries at once."""

from __future__ import annotations

import asyncio

from qimclient import Backoff, QimClient
from tests.conftest import QimDeployment
from tests.core.conversation_helpers import create_group
from tests.harness.personas import TenantHandle


async def test_a_send_on_a_socket_closed_under_it_waits_for_the_reconnect(
    embedded: QimDeployment, acme: TenantHandle
) -> None:
    alice, bob = acme.persona("alice"), acme.persona("bob")
    group = create_group(alice, bob)
    client = QimClient(
        embedded.node.ws_url, alice.token(), "phone", reconnect=True, sync=False,
        backoff=Backoff(initial=0.05, maximum=0.5, jitter=0.0),
    )
    await client.connect()
    acme.clients.append(client)
    assert client._ws is not None
    client._ws.transport.abort()
    # One turn of the loop: the transport reports the loss (the socket is CLOSED), while the
    # reader task, woken by it, has not run yet. SEND now finds the socket closed at once.
    await asyncio.sleep(0)
    ack = await client.send_text(group, "after the drop", retries=2)
    assert ack["conversation_seq"] == 1
    assert client.reconnects == 1
    assert embedded.db.count("qim_messagerecord", "conversation_id = ?", (group,)) == 1
