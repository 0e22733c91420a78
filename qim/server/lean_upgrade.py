"""A plain WebSocket upgrade request handed to autobahn as it arrived, without Twisted's HTTP
request in between.

Under daphne a WebSocket's opening request is parsed twice: Twisted's HTTP channel reads it
line by line into a `Request` with its `Headers`, daphne's `WebRequest.process` (an
inlineCallbacks generator) checks it, registers the request as a connection and unregisters it
again, writes the request back out as bytes, and feeds those to autobahn, which parses them
again. In a reconnect storm that first pass was about 14 % of the node's CPU
(docs/performance.md, "Lean handshake, upgrade, frame and per-socket paths").

When the first read of a plain-TCP connection is exactly one request of the boring kind every
WebSocket client sends (`is_plain_upgrade`), the bytes go to daphne's WebSocket protocol at
once, as daphne would hand them over. Boring means: `GET target HTTP/1.1`, every line
printable ASCII (tab allowed in values), every header a token name and a value, no name twice,
no body or `Expect`, `Upgrade: websocket`, at most 8 KiB and 64 headers, nothing after the
blank line. Each such request passes every check Twisted and daphne make before the upgrade,
and autobahn reads the same headers from it as from daphne's rewrite (names lowercased and
values stripped by autobahn either way; only duplicates, which daphne joins, could differ, and
they are not boring). Anything else, TLS included, takes Twisted's and daphne's path unchanged,
so their answers to odd requests (a 400 for a bad header, a 100 Continue) stay theirs.

What Twisted's channel did at the connect is undone as its request's end and daphne's upgrade
would: its idle timeout cancelled, and its registration as the socket's producer dropped (a
no-op producer once upgraded: qim/server/handshake.py `release_upgraded_request`). The node
counts these upgrades `websocket_upgrades_direct` (`GET /api/v1/node`).
"""

from __future__ import annotations

import re
from typing import Any

from twisted.web.http import HTTPChannel, _GenericHTTPChannelProtocol

from qim.node.connection_node import get_node
from qim.server.patching import patch_once
from qim.server.wire import plain_tcp

MAX_REQUEST_BYTES = 8192
MAX_HEADERS = 64
_REQUEST_LINE = re.compile(rb"GET ([\x21-\x7e]+) HTTP/1\.1")
# A token name (RFC 9110 §5.6.2, daphne's HEADER_NAME_RE) and a value of visible ASCII, spaces and tabs.
_HEADER_LINE = re.compile(rb"([-!#$%&'*+.^_`|~0-9A-Za-z]+):([\x20-\x7e\t]*)")
# Headers whose handling by Twisted is more than storing them: a body, or a 100 Continue first.
_NOT_PLAIN = frozenset((b"content-length", b"transfer-encoding", b"expect"))


def is_plain_upgrade(data: bytes) -> bytes | None:
    """The request target's query string when `data` is exactly one boring WebSocket upgrade
    request (above); None for anything else."""
    if len(data) > MAX_REQUEST_BYTES or not data.endswith(b"\r\n\r\n"):
        return None
    lines = data[:-4].split(b"\r\n")
    if len(lines) > MAX_HEADERS + 1 or (request := _REQUEST_LINE.fullmatch(lines[0])) is None:
        return None
    seen: set[bytes] = set()
    upgrade = None
    for line in lines[1:]:
        header = _HEADER_LINE.fullmatch(line)
        if header is None:
            return None
        name = header[1].lower()
        if name in seen or name in _NOT_PLAIN:
            return None
        seen.add(name)
        if name == b"upgrade":
            upgrade = header[2].strip(b" \t").lower()
    if upgrade != b"websocket":
        return None
    _, _, query_string = request[1].partition(b"?")
    return query_string


def upgrade_directly(generic: _GenericHTTPChannelProtocol, data: bytes) -> bool:
    """Hand a boring upgrade request on a plain TCP socket to a new daphne WebSocket protocol,
    as daphne's `WebRequest.process` does; False (nothing done) for any other first read."""
    channel = generic._channel
    transport = channel.transport
    if not plain_tcp(transport):
        return False
    query_string = is_plain_upgrade(data)
    if query_string is None:
        return False
    protocol = channel.factory.server.ws_factory.buildProtocol(transport.getPeer())
    protocol._raw_query_string = query_string
    channel.setTimeout(None)
    if transport.producer is channel:
        transport.unregisterProducer()
    transport.protocol = protocol
    protocol.makeConnection(transport)
    get_node().counters["websocket_upgrades_direct"] += 1
    protocol.dataReceived(data)
    return True


class UpgradingHTTPChannelProtocol(_GenericHTTPChannelProtocol):
    """Twisted's HTTP/1.1 protocol, which sends a boring upgrade request in the first read
    straight to daphne's WebSocket protocol."""

    def dataReceived(self, data: bytes) -> Any:
        if self._negotiatedProtocol is None and upgrade_directly(self, data):
            return None
        return super().dataReceived(data)


def _upgrading_channel(factory: Any) -> UpgradingHTTPChannelProtocol:
    """What Twisted's `_genericHTTPChannelProtocolFactory` builds, upgrading."""
    return UpgradingHTTPChannelProtocol(HTTPChannel())


def install() -> bool:
    """Once, at start-up, before daphne accepts a connection (qim/asgi.py); whether it did."""
    from daphne.http_protocol import HTTPFactory

    return patch_once(HTTPFactory, "qim_lean_upgrade", protocol=_upgrading_channel)
