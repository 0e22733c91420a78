"""Traffic for fault tests: devices that fail over between nodes, SEND with retries, and record
everything they send, get ACKed and are handed into a checker History."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from qimclient import QimClient
from qimclient.backoff import Backoff
from qimclient.errors import AuthError, ConnectionLost, QimError
from tests.harness.checker import History
from tests.harness.personas import Persona
from tests.harness.qim_process import QimNode

# ERROR codes after which the same client_msg_id is sent again: the server's database is away
# (unavailable), it may be recovering (internal), or it asks to slow down.
RETRIED_CODES = ("unavailable", "internal", "rate_limited")
_ids = itertools.count(1)


class FailoverClient(QimClient):
    """A QimClient that, when opening a socket fails, tries the next node of its list: what a
    client behind a load balancer sees when one node dies."""

    def __init__(self, ws_urls: Sequence[str], token: str, device_id: str, **kwargs: Any) -> None:
        super().__init__(ws_urls[0], token, device_id, **kwargs)
        self.ws_urls = list(ws_urls)
        self.node_changes = 0

    async def _open_and_authenticate(self, *args: Any):  # type: ignore[no-untyped-def]
        try:
            return await super()._open_and_authenticate(*args)
        except AuthError:
            raise
        except Exception:
            index = self.ws_urls.index(self.ws_url) if self.ws_url in self.ws_urls else -1
            self.ws_url = self.ws_urls[(index + 1) % len(self.ws_urls)]
            self.node_changes += 1
            raise


@dataclass
class Device:
    """One persona's device on a list of nodes (the first is its home), recording into `history`
    under `name` every message it is handed."""

    name: str
    persona: Persona
    client: FailoverClient
    history: History
    codes: list[str] = field(default_factory=list)

    @classmethod
    async def open(
        cls, name: str, persona: Persona, nodes: Sequence[QimNode], history: History, device_id: str = "phone"
    ) -> "Device":
        token = persona.token(device_id, nodes[0])
        client = FailoverClient(
            [node.ws_url for node in nodes], token, device_id, reconnect=True, request_timeout=15.0,
            backoff=Backoff(initial=0.1, maximum=1.0),
        )
        device = cls(name, persona, client, history)
        client.on_event(lambda event: history.observed(name, event))
        await client.connect()
        return device

    async def send(
        self, conversation_id: str, deadline: float, client_msg_id: str | None = None, pause: float = 0.2
    ) -> str:
        """SEND one checked message (a new one, or `client_msg_id` again), retrying that id after
        a lost connection, a timeout or a retried ERROR until ACKed or `deadline` (monotonic);
        answers the id."""
        client_msg_id = client_msg_id or f"{self.name}-{next(_ids)}"
        while True:
            self.history.sent(self.name, conversation_id, client_msg_id)
            try:
                ack = await self.client.request(
                    "SEND", conversation_id=conversation_id, client_msg_id=client_msg_id,
                    content_type="text", payload=History.payload(client_msg_id),
                )
            except (ConnectionLost, TimeoutError) as error:
                self.history.failed(client_msg_id, repr(error))
                await asyncio.sleep(0)  # let the reader see the drop before waiting for the reconnect
                await self.wait_connected(deadline)
            except QimError as error:
                self.codes.append(error.code)
                if error.code not in RETRIED_CODES:
                    self.history.refused(client_msg_id, error.code)
                    return client_msg_id
                self.history.failed(client_msg_id, error.code)
                await asyncio.sleep(max(pause, (error.retry_after_ms or 0) / 1000))
            else:
                self.history.acked(client_msg_id, ack["message_id"], ack.get("conversation_seq"))
                return client_msg_id
            if time.monotonic() > deadline:
                return client_msg_id

    async def wait_connected(self, deadline: float) -> None:
        """Until the client is connected again or `deadline` (monotonic) passes."""
        try:
            await self.client.wait_connected(timeout=max(0.1, deadline - time.monotonic()))
        except TimeoutError:
            pass

    async def close(self) -> None:
        await self.client.close()


async def send_steadily(
    device: Device, conversations: Sequence[str], count: int, interval: float, deadline: float
) -> None:
    """`count` checked SENDs from `device`, round-robin over `conversations`, `interval` apart."""
    for index in range(count):
        await device.send(conversations[index % len(conversations)], deadline)
        await asyncio.sleep(interval)


async def retry_unacked(devices: Iterable[Device], history: History, deadline: float) -> None:
    """Send every un-ACKed message again with its own client_msg_id until ACKed (or refused):
    what a client does with its outbox after reconnecting."""
    by_name = {device.name: device for device in devices}
    while history.unacked() and time.monotonic() < deadline:
        for send in history.unacked():
            await by_name[send.sender].send(send.conversation_id, deadline, send.client_msg_id)


async def wait_until(
    condition: Callable[[], bool], timeout: float, what: str, poll: float = 0.1,
    describe: Callable[[], str] | None = None,
) -> None:
    """Poll `condition` until true; fail naming `what` (and `describe()`, e.g. a checker verdict)
    after `timeout` s (generous: CI is loaded)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            detail = f"\n{describe()}" if describe is not None else ""
            raise AssertionError(f"not {what} after {timeout} s{detail}")
        await asyncio.sleep(poll)
