"""The replacements qim/server/daphne_timers.py puts on daphne's Server: the same work as
daphne 4's application_checker and timeout_checker, over the due protocols only."""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from asyncio import CancelledError
from concurrent.futures import CancelledError as FutureCancelledError
from functools import partial
from typing import Any

from qim.server.lean_queue import LeanQueue
from qim.server.daphne_timers import TICK_S, next_check_at, timers_of

logger = logging.getLogger("daphne.server")
NO_CONTEXT = contextvars.Context()
# The scope's `asgi` entry, one dict for every scope (daphne made one per connection); read only.
ASGI_3 = {"version": "3.0"}
# Set on a protocol at its disconnect: daphne forgets it only then, so a due check asks this
# attribute instead of `protocol in server.connections`, which calls daphne's Python __hash__
# and __eq__ per due socket.
GONE = "_qim_disconnected"


def install() -> bool:
    """Patch daphne's Server; answers whether it did (False: no daphne, or done before)."""
    try:
        from daphne.server import Server
    except ImportError:
        return False
    if getattr(Server, "_qim_timers_installed", False):
        return False
    patch(Server)
    Server._qim_timers_installed = True
    return True


def patch(server_class: Any) -> None:
    from qim.server import heartbeat

    heartbeat.mode()  # a bad QIM_WS_KEEPALIVE stops the node at start, not at the first tick
    connected, disconnected = server_class.protocol_connected, server_class.protocol_disconnected

    def protocol_connected(self: Any, protocol: Any) -> None:
        connected(self, protocol)
        heartbeat.on_connected(protocol)
        timers_of(self).schedule(protocol, time.time() + TICK_S)

    def protocol_disconnected(self: Any, protocol: Any) -> None:
        disconnected(self, protocol)
        protocol.__dict__[GONE] = True  # its wheel entry is skipped (no `in connections` per check)
        timers_of(self).mark(protocol)

    server_class.protocol_connected = protocol_connected
    server_class.protocol_disconnected = protocol_disconnected
    server_class.create_application = create_application
    server_class.application_checker = application_checker
    server_class.timeout_checker = timeout_checker


def create_application(self: Any, protocol: Any, scope: dict) -> LeanQueue | None:
    """Daphne 4's create_application with a LeanQueue for asyncio.Queue, and the finished
    application marked for the checker."""
    assert "application_instance" not in self.connections[protocol]
    input_queue = LeanQueue()
    scope.setdefault("asgi", ASGI_3)
    application_instance = self.application(scope=scope, receive=input_queue.get,
                                            send=partial(self.handle_reply, protocol))
    if protocol not in self.connections:
        return None
    instance = asyncio.ensure_future(application_instance, loop=asyncio.get_event_loop())
    self.connections[protocol]["application_instance"] = instance
    # An empty context, shared: not a copy of the current one per connection.
    instance.add_done_callback(partial(timers_of(self).mark, protocol), context=NO_CONTEXT)
    return input_queue


def application_checker(self: Any) -> None:
    """Daphne's checker, for the protocols marked since: kill an application that outlived
    its disconnect by application_close_timeout, reap a finished one, forget a closed protocol."""
    from twisted.internet import reactor

    timers = timers_of(self)
    for protocol in list(timers.pending):
        if check_application(self, protocol):
            timers.pending.discard(protocol)
    reactor.callLater(TICK_S, self.application_checker)


def check_application(self: Any, protocol: Any) -> bool:
    """One protocol as daphne checks it; True once nothing more is left to check."""
    details = self.connections.get(protocol)
    if details is None:
        return True
    disconnected = details.get("disconnected")
    instance = details.get("application_instance")
    if disconnected and time.time() - disconnected > self.application_close_timeout:
        if instance and not instance.done():
            logger.warning("Application instance %r for connection %s took too long to shut down and was killed.",
                           instance, repr(protocol))
            instance.cancel()
    if instance and instance.done():
        reap(self, protocol, instance, disconnected)
        del details["application_instance"]
        instance = None
    if not instance and disconnected:
        del self.connections[protocol]
        return True
    # Still running after its disconnect: checked again next tick (the close timeout).
    return not disconnected


def reap(self: Any, protocol: Any, instance: Any, disconnected: Any) -> None:
    try:
        exception = instance.exception()
    except (CancelledError, FutureCancelledError):
        return
    if not exception:
        return
    if isinstance(exception, KeyboardInterrupt):
        self.stop()
        return
    logger.error("Exception inside application: %s", exception, exc_info=exception)
    if not disconnected:
        protocol.handle_exception(exception)


def timeout_checker(self: Any) -> None:
    """Daphne's check_timeouts for each protocol whose check is due, then its next moment; outside
    ping mode the keepalive is qim/server/heartbeat.py's (a Pong, or nothing where the
    kernel's keepalive runs), all due sockets in one tick (a
    burst: measured cheaper per loopback `send()` than the same sends spread out)."""
    from twisted.internet import reactor

    from qim.server import heartbeat

    timers = timers_of(self)
    apply_ping_interval(self)
    check = None if heartbeat.mode() == "ping" else partial(heartbeat.check_timeouts, self)
    now = time.time()
    for entry in timers.take_due(now):
        protocol = entry()
        if protocol is None or protocol.__dict__.get(GONE):
            continue
        if check is not None:
            check(protocol, now)
        else:
            protocol.check_timeouts()
        timers.schedule(protocol, next_check_at(self, protocol, now))
    reactor.callLater(TICK_S, self.timeout_checker)


def apply_ping_interval(self: Any) -> None:
    """QIM_WS_PING_INTERVAL_S over daphne's --ping-interval, when set (daphne's check_timeouts
    reads it from the server)."""
    from django.conf import settings

    configured = settings.QIM_WS_PING_INTERVAL_S
    if configured > 0:
        self.ping_interval = configured
