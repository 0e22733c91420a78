"""The keepalive without a reply: an unsolicited Pong per idle socket, dead peers found by the
kernel.

Why (docs/performance.md, "Issue 22: density and idle cost"): daphne's keepalive is a Ping
through autobahn (a frame built per socket, a `callLater` for the pong timeout, Twisted's
buffered writer) and a Pong to parse: about 0.1 ms of node CPU per idle socket per interval,
8.7 % of a core at 18 000 sockets pinged every 25 s. RFC 6455 §5.5.3 lets an endpoint send
an unsolicited Pong as a unidirectional heartbeat, no answer expected (browsers, `websockets`,
Node's `ws` and our SDKs ignore it). Two bytes, framed once, written straight to the socket
when Twisted holds nothing for it (qim/gateway/wire.py's path), keep every middlebox's idle
timer fed at a few microseconds a socket and wake the node for no reply. A dead peer does not
acknowledge the heartbeat: TCP_USER_TIMEOUT, set once at connect, makes the kernel abort the
connection after QIM_WS_USER_TIMEOUT_S, and Twisted's `connectionLost` takes the user offline
exactly as after an unanswered ping.

QIM_WS_KEEPALIVE=ping keeps daphne's ping (its `check_timeouts`, unchanged).
"""

from __future__ import annotations

import logging
import socket
from typing import Any

from autobahn.websocket.protocol import WebSocketProtocol
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from qim.gateway.wire import write_control

logger = logging.getLogger(__name__)

# An unmasked, empty, final Pong frame (opcode 0xA): RFC 6455 §5.2 and §5.5.3.
HEARTBEAT = b"\x8a\x00"
MODES = ("pong", "ping")
STATE_OPEN = WebSocketProtocol.STATE_OPEN
# Linux's option number (18), for a Python built without the constant.
TCP_USER_TIMEOUT = getattr(socket, "TCP_USER_TIMEOUT", 18)


def mode() -> str:
    """QIM_WS_KEEPALIVE, checked (a typo must not silently turn dead-peer detection off)."""
    value = settings.QIM_WS_KEEPALIVE
    if value not in MODES:
        raise ImproperlyConfigured(f"QIM_WS_KEEPALIVE must be one of {', '.join(MODES)}, not {value!r}")
    return value


def send_heartbeat(protocol: Any) -> None:
    """One heartbeat to an open socket: straight to the kernel where that is safe, else
    through autobahn (TLS, a queued or fragmented write in progress)."""
    if not write_control(protocol, HEARTBEAT):
        protocol.sendPong()


def check_timeouts(server: Any, protocol: Any, now: float) -> None:
    """Daphne's `check_timeouts` with the ping replaced by a heartbeat: close past
    websocket_timeout, reject a handshake past its deadline, heartbeat an idle open socket."""
    if not isinstance(protocol, WebSocketProtocol) or protocol.state != STATE_OPEN:
        protocol.check_timeouts()  # the handshake deadline and the lifetime: daphne's own
        return
    if server.websocket_timeout >= 0 and now - protocol.socket_opened > server.websocket_timeout:
        protocol.serverClose()
        return
    if now - protocol.last_ping >= server.ping_interval:
        send_heartbeat(protocol)
        protocol.last_ping = now


def tcp_socket(protocol: Any) -> socket.socket | None:
    """The TCP socket under a protocol's transport, through a TLS wrapper's `transport`."""
    transport = getattr(protocol, "transport", None)
    for _ in range(4):
        handle = getattr(transport, "socket", None)
        if isinstance(handle, socket.socket):
            return handle
        transport = getattr(transport, "transport", None)
    return None


def set_user_timeout(protocol: Any, seconds: float) -> None:
    """TCP_USER_TIMEOUT on the socket under a new WebSocket (nothing for a transport without
    a TCP socket, an in-process test's or a Unix socket's)."""
    sock = tcp_socket(protocol)
    if seconds <= 0 or sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return
    try:
        sock.setsockopt(socket.IPPROTO_TCP, TCP_USER_TIMEOUT, int(seconds * 1000))
    except OSError as exc:
        logger.warning("TCP_USER_TIMEOUT not set on a WebSocket (%s): dead peers stay until the OS finds them", exc)


def on_connected(protocol: Any) -> None:
    """At a WebSocket's connect, in pong mode: the kernel's dead-peer timeout."""
    if isinstance(protocol, WebSocketProtocol) and mode() == "pong":
        set_user_timeout(protocol, settings.QIM_WS_USER_TIMEOUT_S)
