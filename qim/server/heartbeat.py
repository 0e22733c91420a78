"""The keepalive without a wake-up: kernel TCP keepalive for direct sockets, an unsolicited
Pong per idle socket where a proxy stands in between, dead peers found by the kernel.

Why (docs/performance.md, "Idle cost: the timing wheel and the kernel's TCP keepalive"): daphne's
keepalive is a Ping through autobahn (a frame built per socket, a `callLater` for the pong
timeout, Twisted's buffered writer) and a Pong to parse: about 0.1 ms of node CPU per idle
socket per interval, 8.7 % of a core at 18 000 sockets pinged every 25 s. RFC 6455 §5.5.3 lets
an endpoint send an unsolicited Pong as a unidirectional heartbeat, no answer expected
(browsers, `websockets`, Node's `ws` and our SDKs ignore it). Two bytes, framed once, written
straight to the socket when Twisted holds nothing for it (qim/server/wire.py's path): but each
is still a `send()` from the node's loop that wakes the client's process, the largest part of
an idle node's CPU. What the keepalive is for decides which one a socket gets:
- dead-peer detection and NAT / L4 balancer state need packets, not WebSocket data: the
  kernel's TCP keepalive (SO_KEEPALIVE, first probe after the interval of silence) sends them
  from its own timers, wakes neither the node nor the client's process, and aborts the
  connection when probes go unanswered;
- an HTTP proxy in front (nginx's proxy_read_timeout, cloud L7 balancers) counts only data it
  relays, so a socket that came through one (the handshake carries a forwarding header) gets
  the Pong heartbeat.
QIM_WS_KEEPALIVE=auto (the default) chooses per socket that way; `pong` and `tcp` force one;
`ping` keeps daphne's ping (its `check_timeouts`, unchanged). In every mode but `ping`,
TCP_USER_TIMEOUT, set once at connect, makes the kernel abort a connection whose data or
probes stay unacknowledged (QIM_WS_USER_TIMEOUT_S after the Pong, or after the first of
several probes: `kernel_schedule`), and Twisted's `connectionLost` takes the user offline
exactly as after an unanswered ping.
"""

from __future__ import annotations

import logging
import random
import socket
from typing import Any, NamedTuple

from autobahn.websocket.protocol import WebSocketProtocol
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from qim.server.daphne_timers import BY_KERNEL
from qim.node.connection_node import get_node
from qim.server.wire import write_control

logger = logging.getLogger(__name__)

# An unmasked, empty, final Pong frame (opcode 0xA): RFC 6455 §5.2 and §5.5.3.
HEARTBEAT = b"\x8a\x00"
MODES = ("auto", "pong", "tcp", "ping")
# Handshake headers an HTTP proxy adds (RFC 7239, the de facto X-Forwarded-*, nginx's usual
# X-Real-IP, RFC 9110's Via): a socket whose upgrade carried one gets the Pong heartbeat in auto.
PROXY_HEADERS = ("forwarded", "x-forwarded-for", "x-forwarded-proto", "x-forwarded-host", "x-real-ip", "via")
# The kernel keepalive's probes over QIM_WS_USER_TIMEOUT_S once the first went out: this many
# must all go unanswered before the kernel aborts (kernel_schedule).
PROBES = 6
# Their spacing when QIM_WS_USER_TIMEOUT_S is 0 (no TCP_USER_TIMEOUT: the probe count decides).
PROBE_INTERVAL_S = 10
# The first probe comes after the interval less up to this share of it, drawn per socket.
JITTER = 0.2
STATE_OPEN = WebSocketProtocol.STATE_OPEN
# Linux's option number (18), for a Python built without the constant.
TCP_USER_TIMEOUT = getattr(socket, "TCP_USER_TIMEOUT", 18)


class KernelSchedule(NamedTuple):
    """SO_KEEPALIVE's timings for one socket (TCP_KEEPIDLE, _KEEPINTVL, _KEEPCNT) and its
    TCP_USER_TIMEOUT in ms (0: not set)."""
    idle_s: int
    probe_interval_s: int
    probe_count: int
    user_timeout_ms: int


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
    if now - protocol.last_ping >= server.ping_interval and not protocol.__dict__.get(BY_KERNEL):
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


def wants_frames(protocol: Any, chosen: str) -> bool:
    """Whether this socket's keepalive must be WebSocket data: always in pong mode; in auto
    when its upgrade came through an HTTP proxy (autobahn keeps the headers, lower-cased)."""
    if chosen != "auto":
        return chosen == "pong"
    headers = getattr(protocol, "http_headers", None) or {}
    return any(name in headers for name in PROXY_HEADERS)


def kernel_schedule(interval_s: float, user_timeout_s: float, draw: float) -> KernelSchedule:
    """The kernel keepalive's timings for one socket, `draw` in [0, 1) its random share.

    - The first probe after `interval_s` less up to JITTER of it: never later than the Pong
      would be, and sockets that went quiet together (a reconnect storm, a bench) do not arm
      their timers into the same slot of the kernel's timer wheel (2 s wide at 25 s on HZ=250).
      A slot's probes leave in one softirq, and on loopback more than
      `net.core.netdev_max_backlog` (1 000) of them at once are dropped.
    - Then PROBES probes spread over `user_timeout_s`, and TCP_USER_TIMEOUT at the first probe's
      moment plus `user_timeout_s`: a dead peer is aborted when the Pong's would be (its
      unacknowledged Pong plus the timeout), but only after every one of those probes went
      unanswered. With TCP_USER_TIMEOUT at `user_timeout_s` alone, as first built, the first
      probe lost aborted a live connection
      (docs/performance.md, "Idle cost: the timing wheel and the kernel's TCP keepalive").
    """
    idle = max(1, int(interval_s * (1 - JITTER * draw)))
    if user_timeout_s <= 0:
        return KernelSchedule(idle, PROBE_INTERVAL_S, PROBES, 0)
    return KernelSchedule(idle, max(1, int(user_timeout_s / PROBES)), PROBES + 1, int((idle + user_timeout_s) * 1000))


def set_kernel_keepalive(sock: socket.socket, schedule: KernelSchedule) -> bool:
    """SO_KEEPALIVE on `schedule`; answers whether it is set."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, schedule.idle_s)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, schedule.probe_interval_s)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, schedule.probe_count)
        if schedule.user_timeout_ms:
            sock.setsockopt(socket.IPPROTO_TCP, TCP_USER_TIMEOUT, schedule.user_timeout_ms)
    except (OSError, AttributeError) as exc:  # AttributeError: a platform without TCP_KEEPIDLE
        logger.warning("TCP keepalive not set on a WebSocket (%s): it gets the Pong heartbeat", exc)
        return False
    return True


def on_connected(protocol: Any) -> None:
    """At a WebSocket's connect (not in ping mode): the kernel's keepalive where the socket
    needs no frames, else the kernel's dead-peer timeout under the Pong (counted on the node
    either way)."""
    chosen = mode()
    if not isinstance(protocol, WebSocketProtocol) or chosen == "ping":
        return
    user_timeout = settings.QIM_WS_USER_TIMEOUT_S
    sock = tcp_socket(protocol)
    by_kernel = (not wants_frames(protocol, chosen) and sock is not None
                 and sock.family in (socket.AF_INET, socket.AF_INET6)
                 and set_kernel_keepalive(sock, kernel_schedule(interval_of(protocol), user_timeout, random.random())))
    if by_kernel:
        protocol.__dict__[BY_KERNEL] = True
    else:
        set_user_timeout(protocol, user_timeout)
    get_node().counters["keepalive_by_kernel" if by_kernel else "keepalive_by_frames"] += 1


def interval_of(protocol: Any) -> float:
    """The keepalive interval in force: QIM_WS_PING_INTERVAL_S, else daphne's --ping-interval."""
    configured = settings.QIM_WS_PING_INTERVAL_S
    return configured if configured > 0 else protocol.server.ping_interval
