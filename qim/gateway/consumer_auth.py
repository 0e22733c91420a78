"""The AUTH handshake of a gateway socket (protocol.md §4): the first frame must be AUTH, its
token is looked up (batched across sockets, qim/gateway/auth_lookup.py), the connection is
announced on the node, and AUTH_OK carries the limits. A mixin of GatewayConsumer, kept apart
so that the consumer's module holds the frame loop and the writes."""

from __future__ import annotations

import logging
from typing import Any

import msgspec
from django.conf import settings
from ulid import ULID

from qim.clock import now_ms
from qim.conf import all_limits
from qim.infra.db_outage import is_database_unavailable
from qim.errors import Refused
from qim.gateway.auth_lookup import identity_for_auth
from qim.gateway.close_codes import CLOSE_TRY_AGAIN_LATER, CLOSE_UNAUTHENTICATED
from qim.node.connection import Connection
from qim.gateway.errors import error_frame, outage_frame, unavailable_or_internal
from qim.gateway.inbound import convert_frame, parse_frame
from qim.node.connection_node import get_node
from qim.node.outbound import outbound_frame_cap
from qim.infra.log_context import bind_connection
from qim.infra import instruments as metrics
from qim.infra.outage import outage_of
from qim.queries.identity import Identity, token_expires_at_ms

logger = logging.getLogger("qim.gateway.consumer")


class AuthFrame(msgspec.Struct):
    token: str
    device_id: str
    client_version: str = ""
    req_id: str | None = None
    type: str = "AUTH"


class AuthenticatingConsumer:
    """What GatewayConsumer does with the first frame; it supplies send_frame, close,
    send_text, direct_writer, _drop_slow_socket and _close_for_credentials; the AUTH deadline's
    timer is stopped before the first frame comes here."""

    async def _authenticate(self, text: str | None, size: int) -> None:
        """The first frame must be AUTH with a token issued for the named device."""
        frame = self._auth_frame_of(text, size)
        if frame is None:
            await self._refuse("the first frame must be AUTH {token, device_id}")
            return
        metrics.count_frame_in("AUTH")
        identity = await self._identity_or_refuse(frame)
        if identity is None:
            return
        self.conn = self._connection_of(identity, frame)
        bind_connection(self.conn)
        if await self._register_or_refuse(frame):
            await self.send_frame(self._auth_ok(identity, get_node().node_id, frame.req_id))

    @staticmethod
    def _auth_frame_of(text: str | None, size: int) -> AuthFrame | None:
        """The AUTH frame, or None for anything else (too big, not JSON, another type, bad fields)."""
        if text is None or size > settings.QIM_MAX_INBOUND_FRAME_BYTES:
            return None
        try:
            raw = parse_frame(text)
            if raw.get("type") == "AUTH":
                return convert_frame(raw, AuthFrame, "AUTH", text)
        except Refused:
            pass
        return None

    async def _identity_or_refuse(self, frame: AuthFrame) -> Identity | None:
        """The token's identity; None once the client was answered and the socket closed
        (an unknown token, or a database that cannot be asked)."""
        try:
            identity = await identity_for_auth(frame.token, frame.device_id)
        except Exception as exc:
            if not is_database_unavailable(exc):
                raise
            # Not the client's fault: say so, and close so that it reconnects after a pause.
            logger.warning("AUTH refused: database unavailable (%s)", str(exc).strip().splitlines()[0])
            await self.send_frame(unavailable_or_internal(exc, frame.req_id))
            await self.close(code=CLOSE_TRY_AGAIN_LATER)
            return None
        if identity is None:
            await self._refuse("unknown token, or a token of another device", frame.req_id)
        return identity

    def _connection_of(self, identity: Identity, frame: AuthFrame) -> Connection:
        return Connection(
            connection_id=str(ULID()),
            tenant_id=identity.tenant_id,
            tenant_name=identity.tenant_name,
            user_pk=identity.user_pk,
            user_id=identity.user_id,
            device_id=identity.device_id,
            is_tenant_admin=identity.is_tenant_admin,
            client_version=frame.client_version,
            send_text=self.send_text,
            write_now=self.direct_writer(),
            drop_too_slow=self._drop_slow_socket,
            user=identity.user,
            token_digest=identity.token_digest,
            token_issued_ms=identity.token_issued_ms,
            close_for_credentials=self._close_for_credentials,
        )

    async def _register_or_refuse(self, frame: AuthFrame) -> bool:
        """Announce the connection on this node; False once the client was told to come back
        later (Redis unreachable) and the socket closed."""
        node = get_node()
        try:
            await node.register(self.conn)
        except Exception as exc:
            if outage_of(exc) is None:
                raise
            logger.warning("AUTH refused: Redis unreachable (%s)", outage_of(exc))
            node.counters["redis_unavailable_replies"] += 1
            await self.send_frame(outage_frame(frame.req_id))
            await self.close(code=CLOSE_TRY_AGAIN_LATER)
            return False
        return True

    def _auth_ok(self, identity: Identity, node_id: str, req_id: str | None) -> dict[str, Any]:
        reply = {
            "type": "AUTH_OK",
            "user_id": identity.user_id,
            "tenant": identity.tenant_name,
            "device_id": identity.device_id,
            "connection_id": self.conn.connection_id,
            "node_id": node_id,
            "server_time_ms": now_ms(),
            "registry_version": identity.registry_version,
            "token_expires_at_ms": token_expires_at_ms(identity.token_issued_ms),
            # The frame cap as this process applies it (daphne's limit may be lower).
            "limits": {
                **all_limits(),
                "max_outbound_frame_bytes": outbound_frame_cap(),
                "max_inbound_frame_depth": settings.QIM_MAX_INBOUND_FRAME_DEPTH,
            },
        }
        if req_id is not None:
            reply["req_id"] = req_id
        return reply

    async def _refuse(self, message: str, req_id: str | None = None) -> None:
        await self.send_frame(error_frame("unauthenticated", message, req_id))
        await self.close(code=CLOSE_UNAUTHENTICATED)
