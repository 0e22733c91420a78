"""Calls whose device vanished: when the last connection of a device taking part in a call
goes (socket closed, client crashed, network lost) and the device is not back anywhere within
rtc_disconnect_grace_s, the server ends the call for it (rtc/lifecycle.py end_abandoned_call),
so neither party stays busy until the call's record expires."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from qim.infra.background import every, spawn
from qim.clock import now_ms
from qim.conf import limit
from qim.node.connection import Connection
from qim.node.connection_node import ConnectionNode
from rtc.calls import ACCEPTED, Call, CallStore

logger = logging.getLogger(__name__)

DeviceKey = tuple[int, str, str]  # (tenant, user_id, device_id)
# end(tenant_id, call_id, user_id, device_id, vanished_at_ms): idempotent, compare-and-set.
End = Callable[[int, str, str, str, int], Awaitable[bool]]
TakesPart = Callable[[Call, str, str], bool]  # (call, user_id, device_id)


class CallDepartures:
    """This node's devices that left a call: one grace task per device, restarted when the
    device leaves again.

    The grace covers a reconnect (a network switch mid-call: the media runs through the
    SFU/TURN, not this socket); it runs on the node the device left, so if that node dies
    meanwhile the call is not ended here (ringing calls still time out; accepted ones are
    ended by OrphanedCalls, below).
    """

    def __init__(
        self, end: End, takes_part: TakesPart, store: Callable[[], CallStore], node: Callable[[], ConnectionNode],
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self._end = end
        self._takes_part = takes_part
        self._store = store
        self._node = node
        self._clock = clock
        self._pending: dict[DeviceKey, asyncio.Task[None]] = {}

    @staticmethod
    def grace_s() -> float:
        return float(limit("rtc_disconnect_grace_s"))

    async def connection_closed(self, conn: Connection) -> None:
        """A connection left this node's index: if it was its device's last one here and that
        device takes part in a call, start the device's grace (one store read otherwise)."""
        node = self._node()
        if self._still_here(node, conn.user_key, conn.device_id):
            return
        calls = await self._store().active_calls(conn.tenant_id, conn.user_id)
        call_ids = [c.call_id for c in calls if self._takes_part(c, conn.user_id, conn.device_id)]
        if not call_ids:
            return
        key = (conn.tenant_id, conn.user_id, conn.device_id)
        previous = self._pending.pop(key, None)
        if previous is not None:
            previous.cancel()
        task = asyncio.create_task(self._after_grace(key, call_ids, self._clock()), name=f"qim-rtc-left-{conn.device_id}")
        self._pending[key] = task
        task.add_done_callback(lambda done: self._pending.pop(key, None) if self._pending.get(key) is done else None)

    async def _after_grace(self, key: DeviceKey, call_ids: list[str], vanished_at_ms: int) -> None:
        tenant_id, user_id, device_id = key
        await asyncio.sleep(self.grace_s())
        try:
            if await self._device_online(key):
                return  # back (here or on another node): the call goes on
            for call_id in call_ids:
                await self._end(tenant_id, call_id, user_id, device_id, vanished_at_ms)
        except Exception:
            logger.exception("ending the calls of departed device %s of %s failed", device_id, user_id)

    async def _device_online(self, key: DeviceKey) -> bool:
        tenant_id, user_id, device_id = key
        node = self._node()
        if self._still_here(node, (tenant_id, user_id), device_id):
            return True
        # This node's own entry may outlive the closed connection by an await or two.
        return bool(await node.directory.device_nodes(tenant_id, user_id, device_id) - {node.node_id})

    @staticmethod
    def _still_here(node: ConnectionNode, user_key: tuple[int, str], device_id: str) -> bool:
        """A connection of the device still indexed on this node (the closed one has left
        `node.connections` before the disconnect hooks run)."""
        return any(
            c.device_id == device_id and c.connection_id in node.connections
            for c in node.local_connections_of(user_key)
        )


class OrphanedCalls:
    """Accepted calls whose device went with its node: CallDepartures runs the grace on the
    node a device left, so a node that dies takes its devices' graces with it, and their calls
    would keep both users busy until the record expires (3 h).

    Every node that handles RTC traffic sweeps the accepted calls, a page a second: a party's
    device that the presence directory shows on no node (a dead node's entries go after
    presence_ttl_s) and that stays so for rtc_disconnect_grace_s has its call ended as a
    departure would (`end`, compare-and-set, so several sweepers and the departure itself
    end it once). The call's end is when the sweep first saw the device gone: up to
    presence_ttl_s later than it really went.
    """

    period_s = 1.0
    page = 200

    def __init__(
        self, end: End, store: Callable[[], CallStore], node: Callable[[], ConnectionNode],
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self._end = end
        self._store = store
        self._node = node
        self._clock = clock
        self._offset = 0
        # (tenant, call_id, user_id, device_id) -> when this node first saw the device gone.
        self._gone_since: dict[tuple[int, str, str, str], int] = {}
        # The accepted calls seen since the sweep last started from the first page: at the
        # end of each round, what it remembers of calls no longer accepted is let go.
        self._round: set[tuple[int, str]] = set()
        self._sweeper: asyncio.Task[None] | None = None

    def ensure_sweeping(self) -> None:
        if self._sweeper is None or self._sweeper.done():
            sweep = every(self.period_s, self.sweep_once, log=logger, failed="sweep of accepted calls failed; retrying")
            self._sweeper = spawn(sweep, name="qim-rtc-orphaned-calls")

    async def sweep_once(self) -> int:
        """Look at the next page of accepted calls; answers how many this sweep ended."""
        store, directory = self._store(), self._node().directory
        calls = await store.accepted_page(self._offset, self.page)
        grace_ms = CallDepartures.grace_s() * 1000
        ended = 0
        for tenant_id, call_id in calls:
            call = await store.get(tenant_id, call_id)
            if call is None:
                await store.forget_accepted(tenant_id, call_id)  # its record expired
                continue
            if call.state != ACCEPTED:
                continue
            self._round.add((tenant_id, call_id))
            for user_id, device_id in ((call.caller_id, call.caller_device_id), (call.callee_id, call.callee_device_id)):
                key = (tenant_id, call_id, user_id, device_id)
                if await directory.device_nodes(tenant_id, user_id, device_id):
                    self._gone_since.pop(key, None)
                    continue
                since = self._gone_since.setdefault(key, self._clock())
                if self._clock() - since >= grace_ms and await self._end(tenant_id, call_id, user_id, device_id, since):
                    ended += 1
        if len(calls) == self.page:
            self._offset += len(calls)
        else:  # the round is over: start again from the first page
            self._offset = 0
            self._gone_since = {k: v for k, v in self._gone_since.items() if k[:2] in self._round}
            self._round = set()
        return ended
