"""One authenticated device connection, as the ConnectionNode and frame handlers see it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from qim.node.outbound import TextFrame

UserKey = tuple[int, str]  # (tenant pk, user_id): the directory's and index's key for a user


# Slots: one per authenticated socket, so no per-instance __dict__ (docs/performance.md,
# "Lean handshake, upgrade, frame and per-socket paths").
@dataclass(eq=False, slots=True)
class Connection:
    connection_id: str
    tenant_id: int
    tenant_name: str
    user_pk: int
    user_id: str
    device_id: str
    is_tenant_admin: bool
    client_version: str
    # A str, or a TextFrame framed once for many sockets (a room's batch).
    send_text: Callable[[str | TextFrame], Awaitable[None]]
    # A frame framed once for many sockets, written at once when the socket's direct path
    # takes it, without a coroutine (a room's tick, per member): answers outbound.DIRECT or
    # outbound.QUEUED, or 0 when `send_text` must be awaited instead (it decides: autobahn, the
    # 4429 close). The int is the most unread bytes the socket may hold. None: no such path,
    # or the socket is being closed (GatewayConsumer.direct_writer).
    write_now: Callable[[TextFrame, int], int] | None = None
    # Close the socket as too slow (4429), saying why in the log; the client reconnects and
    # heals by SYNC and room replay. None where there is no socket to close.
    drop_too_slow: Callable[[str], Awaitable[None]] | None = None
    # The qim.models.User row, read once at AUTH, for actions that take a user.
    user: Any = None
    # The token this socket authenticated with (its digest) and when it was issued: the node
    # closes the socket (4403) once it is revoked or expires (qim/gateway/revocation.py),
    # through `close_for_credentials(reason)`.
    token_digest: str = ""
    token_issued_ms: int = 0
    close_for_credentials: Callable[[str], Awaitable[None]] | None = None
    # Users whose PRESENCE this connection subscribed to.
    presence_watch: set[str] = field(default_factory=set)
    # What this connection was last told of each watched user (the ACK, then PRESENCE pushes):
    # ConnectionNode._reconcile_presence tells it again when the directory says otherwise.
    presence_told: dict[str, bool] = field(default_factory=dict)
    rooms: set[str] = field(default_factory=set)

    @property
    def user_key(self) -> UserKey:
        return (self.tenant_id, self.user_id)
