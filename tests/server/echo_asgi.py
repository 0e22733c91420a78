"""The ASGI application the differential tests (tests/server/test_differential.py) serve with
daphne: a WebSocket echo that describes every event it gets, and an HTTP side that tells the
test what the application saw.

It installs the server tuning at import exactly as qim/asgi.py does (before daphne accepts a
connection), in the mode QIM_SERVER_TUNING names, so the same stream can be sent to a tuned
and a stock daphne and everything compared: the bytes on the wire and the events here.

WebSocket (`/ws...?id=N[&deny=1][&delay=MS][&close=K,CODE][&fail=K][&pad=BYTES]`):
- `deny`: refuse the handshake (a 403 from daphne) instead of accepting;
- `delay`: accept that many milliseconds after the connect (frames the client sent meanwhile
  wait in autobahn's buffer, and are read in the same call that writes the 101);
- `close`: after the K-th message, close with CODE (a server-initiated close handshake);
- `fail`: raise after the K-th message (daphne's application checker closes with 1011);
- `pad`: make every reply that many bytes longer (replies of tens of KiB, some over the limit).
Every `websocket.receive` gets one text frame back describing it (`describe`), written with
qim/server/wire.py's direct write when the tuning offers it (the path pushes take in
production) and through the ASGI `send` otherwise; a connection is served as the gateway's
consumer serves one (`EchoConnection`), so the tuning's paths are the ones production takes.

HTTP: `GET /events?id=N` the events of connection N (JSON list), `GET /tuning` this process's
`qim.server.tuning.STATE`, `GET /paths` how many replies took each write path (and how many
upgrades the lean upgrade took), anything else a
small fixed 404 (the answer to requests that are not an upgrade).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from collections import Counter
from typing import Any
from urllib.parse import parse_qs

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
django.setup()

from qim.node.connection_node import get_node  # noqa: E402
from qim.node.outbound import DIRECT, HELD, QUEUED, TextFrame  # noqa: E402
from qim.server.handshake import release_handshake  # noqa: E402
from qim.server.tuning import STATE, install  # noqa: E402
from qim.server.wire import DaphneSocket  # noqa: E402

install(os.environ["QIM_SERVER_TUNING"])

# Connection id (from the query string) -> what the application saw, in order.
EVENTS: dict[str, list[dict[str, Any]]] = {}
# How the replies went out: by DaphneSocket.write ("direct" into the kernel, "queued" behind
# what Twisted holds, "held" until the socket's release) or through daphne's send ("asgi").
PATHS: Counter[str] = Counter()
WRITTEN = {DIRECT: "direct", QUEUED: "queued", HELD: "held"}
# A payload longer than this is described by its length and digest only, so a reply stays
# far below the message limit (a reply over it would fail on both servers alike, unseen).
SHOWN_BYTES = 64


def describe(index: int, event: dict[str, Any]) -> dict[str, Any]:
    """A deterministic description of one `websocket.receive` (what the reply carries)."""
    text, data = event.get("text"), event.get("bytes")
    raw = text.encode() if text is not None else data
    shown: Any = None
    if raw is not None and len(raw) <= SHOWN_BYTES:
        shown = text if text is not None else data.hex()
    return {
        "n": index,
        "kind": "text" if text is not None else ("bytes" if data is not None else None),
        "size": None if raw is None else len(raw),
        "sha": None if raw is None else hashlib.sha256(raw).hexdigest()[:16],
        "shown": shown,
    }


def options(scope: dict[str, Any]) -> dict[str, list[str]]:
    try:
        return parse_qs(scope.get("query_string", b"").decode("latin-1"))
    except ValueError:
        return {}


def connection_id(query: dict[str, list[str]]) -> str:
    return (query.get("id") or ["?"])[0]


class EchoConnection:
    """One WebSocket, served as qim/gateway/consumer.py serves one: accepted, its handshake's
    leftovers released (qim/server/handshake.py, tuned only), and the messages already queued
    behind one served with their replies held and written together (DaphneSocket.hold)."""

    def __init__(self, scope: dict[str, Any], send: Any) -> None:
        self.scope, self.send = scope, send
        self.query = query = options(scope)
        self.events = EVENTS.setdefault(connection_id(query), [])
        self.close_after = None
        if "close" in query:
            count, _, code = query["close"][0].partition(",")
            self.close_after = (int(count), int(code or 1000))
        self.fail_after = int(query["fail"][0]) if "fail" in query else None
        self.pad = int(query["pad"][0]) if "pad" in query else 0
        self.socket: DaphneSocket | None = None
        self.received = 0

    async def serve(self, receive: Any) -> None:
        # daphne's input queue (an asyncio.Queue stock, qim's LeanQueue tuned): how many wait.
        waiting = getattr(getattr(receive, "__self__", None), "qsize", None)
        while True:
            event = await receive()
            behind = waiting() if waiting is not None and self.socket is not None else 0
            if not behind:
                if not await self.handle(event):
                    return
                continue
            self.socket.hold()
            try:
                if not await self.handle(event):
                    return
                for _ in range(behind):
                    if not await self.handle(await receive()):
                        return
            finally:
                self.socket.release()

    async def handle(self, event: dict[str, Any]) -> bool:
        """Serve one event; False once the connection is over for the application."""
        kind, events, query = event["type"], self.events, self.query
        if kind == "websocket.connect":
            scope = self.scope
            events.append({
                "type": "connect",
                "path": scope["path"],
                "raw_path": scope["raw_path"].decode("latin-1"),
                "query_string": scope["query_string"].decode("latin-1"),
                "headers": [[name.decode("latin-1"), value.decode("latin-1")] for name, value in scope["headers"]],
                "subprotocols": list(scope["subprotocols"]),
            })
            if "deny" in query:
                await self.send({"type": "websocket.close"})
                return True
            if "delay" in query:
                await asyncio.sleep(int(query["delay"][0]) / 1000)
            await self.send({"type": "websocket.accept"})
            self.socket = DaphneSocket.under(self.send)
            release_handshake(self.send, scope)
        elif kind == "websocket.receive":
            self.received += 1
            description = describe(self.received, event)
            events.append({"type": "receive", **description})
            text = json.dumps({**description, "pad": "p" * self.pad} if self.pad else description, sort_keys=True)
            await reply(self.socket, self.send, text, events)
            if self.close_after is not None and self.received == self.close_after[0]:
                await self.send({"type": "websocket.close", "code": self.close_after[1]})
            if self.fail_after is not None and self.received == self.fail_after:
                events.append({"type": "raised"})
                raise RuntimeError("the application fails, as asked (echo_asgi's fail option)")
        elif kind == "websocket.disconnect":
            events.append({"type": "disconnect", "code": event.get("code")})
            return False
        return True


async def reply(socket: DaphneSocket | None, send: Any, text: str, events: list[dict[str, Any]]) -> None:
    """One text frame: straight to the socket when the tuning's direct write takes it, else
    through daphne. A send daphne refuses is an event too (both servers must refuse alike)."""
    frame = TextFrame.of(text)
    if socket is not None and socket.writable(frame):
        PATHS[WRITTEN[socket.write(frame)]] += 1
        return
    PATHS["asgi"] += 1
    try:
        await send({"type": "websocket.send", "text": text})
    except Exception as exc:  # noqa: BLE001 - recorded for comparison, not hidden
        events.append({"type": "send_error", "error": type(exc).__name__})


async def http(scope: dict[str, Any], receive: Any, send: Any) -> None:
    while (await receive()).get("more_body"):
        pass
    path, query = scope["path"], options(scope)
    if path == "/events":
        status, body = 200, EVENTS.get(connection_id(query), [])
    elif path == "/tuning":
        status, body = 200, STATE.as_json()
    elif path == "/paths":
        upgrades = get_node().counters["websocket_upgrades_direct"]  # qim/server/lean_upgrade.py's
        status, body = 200, {**PATHS, "upgrades_direct": upgrades}
    else:
        status, body = 404, {"not": "found"}
    data = json.dumps(body, sort_keys=True).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]})
    await send({"type": "http.response.body", "body": data})


async def application(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "websocket":
        await EchoConnection(scope, send).serve(receive)
    elif scope["type"] == "http":
        await http(scope, receive, send)
