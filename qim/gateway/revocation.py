"""Each node's side of revocation: close (4403) the local sockets whose token was revoked,
expired or whose user was deactivated. Two paths, either one enough: the notice every node
gets at once (qim/revocation.py), and a re-check each tenth of QIM_TOKEN_RECHECK_S of the
sockets qim/gateway/credentials_watch.py names (all of them when the credentials generation
moved, else the new ones and a backstop slice; expired ones from a heap), which closes them
even when a notice was lost."""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings

from qim.infra.background import every
from qim.clock import now_ms
from qim.gateway.db import in_db_thread
from qim.node.connection import Connection
from qim.node.connection_node import ConnectionNode, node_message_handler, on_node_start
from qim.gateway.credentials_watch import CredentialsWatch
from qim.gateway.recheck_slices import SLICES
from qim.queries.identity import live_digests_among
from qim.revocation import CREDENTIALS_GROUP, MESSAGE_TYPE, TOKEN_EXPIRED, TOKEN_REVOKED

logger = logging.getLogger(__name__)


async def close_for_credentials(node: ConnectionNode, conn: Connection, reason: str, counter: str) -> None:
    if conn.close_for_credentials is None:
        return
    node.counters[counter] += 1
    try:
        await conn.close_for_credentials(reason)
    except Exception:
        logger.warning("closing connection %s (%s) failed", conn.connection_id, reason)


@node_message_handler(MESSAGE_TYPE, group=CREDENTIALS_GROUP)
async def on_credentials_revoked(node: ConnectionNode, message: dict[str, Any]) -> None:
    digests = message["digests"]
    for conn in list(node.local_connections_of((message["tenant"], message["user"]))):
        if digests is None or conn.token_digest in digests:
            await close_for_credentials(node, conn, message["reason"], "credentials_closed_by_notice")


# The re-check runs in RECHECK_SLICES steps per QIM_TOKEN_RECHECK_S, each over the sockets of
# one slice (qim/gateway/recheck_slices.py), so every socket is still checked once per period but
# the node never stops for all of them at once: 18 000 sockets took about 165 ms in one go, a
# burst of several percent of a core in any 10 s window that held it
# (docs/performance.md, "Idle cost: the timing wheel and the kernel's TCP keepalive").
RECHECK_SLICES = SLICES


async def recheck_credentials(node: ConnectionNode, conns: list[Connection] | None = None) -> None:
    """Close every local socket (of `conns`, or all) whose token no longer authenticates."""
    conns = [c for c in (node.connections.values() if conns is None else conns) if c.token_digest]
    if not conns:
        return
    live = await in_db_thread(live_digests_among)(sorted({c.token_digest for c in conns}))
    ttl_ms = settings.QIM_TOKEN_TTL_S * 1000
    for conn in conns:
        if conn.token_digest in live:
            continue
        expired = ttl_ms > 0 and now_ms() - conn.token_issued_ms >= ttl_ms
        await close_for_credentials(node, conn, TOKEN_EXPIRED if expired else TOKEN_REVOKED, "credentials_closed_by_recheck")


async def recheck_step(node: ConnectionNode, watch: CredentialsWatch) -> None:
    """One step: the expired sockets closed, then the named ones re-checked."""
    check, expired = await watch.due(node)
    for conn in expired:
        await close_for_credentials(node, conn, TOKEN_EXPIRED, "credentials_closed_by_recheck")
    closed = {id(conn) for conn in expired}
    await recheck_credentials(node, [conn for conn in check if id(conn) not in closed])


@on_node_start
async def recheck_forever(node: ConnectionNode) -> None:
    if settings.QIM_TOKEN_RECHECK_S <= 0:
        return  # off: only notices close sockets, and expiry is enforced at AUTH and REST only
    watch = CredentialsWatch()
    await every(
        lambda: settings.QIM_TOKEN_RECHECK_S / RECHECK_SLICES,
        lambda: recheck_step(node, watch),
        log=logger, failed="credentials re-check failed; retrying",
    )
