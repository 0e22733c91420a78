"""The reconnect storm's load processes: clients that connect, drop and come back all at once,
and the senders that write what they missed meanwhile (bench/reconnect_storm.py).

A client process holds many lean sockets (bench/lean_ws.py). QIM clients AUTH, SYNC to the
head of their mailbox and ROOM_JOIN their room; on the storm each one reconnects, AUTHs, then
sends SYNC from its mailbox position and ROOM_JOIN with replay from its last room_seq together,
and is caught up once both answers are in. What it got is checked against what it missed:
exactly the events after its positions, none twice. Raw clients only open the socket.
"""

from __future__ import annotations

import asyncio
import json
import time
from array import array
from dataclasses import dataclass
from typing import Any

from loadgen import wait_event


@dataclass
class Client:
    """One user's device: its token, room and positions; kind raw has none of them."""

    token: str | None
    room_id: str = ""
    mailbox_seq: int = 0
    room_seq: int = 0
    ws: Any = None
    # Seconds from the attempt to the socket open, and to AUTH_OK (the storm's phases).
    opened_s: float = 0.0
    authed_s: float = 0.0


async def _auth(ws, token: str, timeout: float) -> None:  # type: ignore[no-untyped-def]
    ws.send_text(json.dumps({"type": "AUTH", "req_id": "a", "token": token, "device_id": "populated"}))
    ok = json.loads(await ws.recv(timeout))
    if ok.get("type") != "AUTH_OK":
        raise RuntimeError(f"AUTH refused: {ok}")


def _page(client: Client, page: dict) -> tuple[int, bool]:
    """One SYNC_BATCH: (events newer than the client's position, whether more follow); moves
    the position."""
    if page.get("type") != "SYNC_BATCH":
        raise RuntimeError(f"SYNC refused: {page}")
    seqs = [e["mailbox_seq"] for e in page["events"]]
    newer = sum(1 for seq in seqs if seq > client.mailbox_seq)
    client.mailbox_seq = max([client.mailbox_seq, page["next_mailbox_seq"], *seqs])
    return newer, bool(page["has_more"])


def _joined(client: Client, batch: dict, replay: bool) -> int:
    """The ROOM_JOIN answer: room events newer than the client's position; moves it."""
    if batch.get("type") != "ROOM_BATCH" or (replay and batch.get("replay_truncated")):
        raise RuntimeError(f"ROOM_JOIN: {batch}")
    seqs = [e["room_seq"] for e in batch["events"]]
    newer = sum(1 for seq in seqs if seq > client.room_seq)
    client.room_seq = max([client.room_seq, batch.get("latest_room_seq") or 0, *seqs])
    return newer


def _auth_text(token: str) -> str:
    return json.dumps({"type": "AUTH", "req_id": "a", "token": token, "device_id": "populated"})


def _authed(first: bytes) -> None:
    """AUTH's answer, checked by its first bytes (AUTH_OK is the server's largest reply, its
    limits, and the client needs none of it): anything else is a refusal."""
    if not first.startswith(AUTH_OK_PREFIX):
        raise RuntimeError(f"AUTH refused: {first[:300]!r}")


AUTH_OK_PREFIX = b'{"type":"AUTH_OK"'


async def catch_up(client: Client, host: str, port: int, path: str, replay: bool, timeout: float,
                   pipeline: bool = True) -> tuple[int, int]:
    """Connect, AUTH, SYNC from the position and ROOM_JOIN (with replay when `replay`):
    answers (mailbox events, room events) newer than the client's positions. `pipeline`
    writes the three frames at once (the server handles a socket's frames in order, AUTH
    first; protocol.md §4); otherwise SYNC and ROOM_JOIN go together after AUTH_OK."""
    from lean_ws import connect

    began = time.monotonic()
    ws = client.ws = await connect(host, port, path, timeout)
    client.opened_s = time.monotonic() - began
    if client.token is None:
        return 0, 0
    join: dict[str, Any] = {"type": "ROOM_JOIN", "req_id": "j", "room_id": client.room_id}
    if replay:
        join["after_room_seq"] = client.room_seq
    asks = [json.dumps({"type": "SYNC", "req_id": "s", "after_mailbox_seq": client.mailbox_seq}), json.dumps(join)]
    if pipeline:
        return await _Catching(client, ws, replay, began).run([_auth_text(client.token), *asks], timeout)
    ws.send_text(_auth_text(client.token))
    _authed(await ws.recv(timeout))
    ws.send_texts(asks)
    client.authed_s = time.monotonic() - began
    mailbox, room, more = 0, None, True
    while more or room is None:
        frame = json.loads(await ws.recv(timeout))
        req_id = frame.get("req_id")
        if req_id == "s":
            newer, more = _page(client, frame)
            mailbox += newer
            if more:
                ws.send_text(json.dumps({"type": "SYNC", "req_id": "s", "after_mailbox_seq": client.mailbox_seq}))
        elif req_id == "j":
            room = _joined(client, frame, replay)
        elif frame.get("type") == "ERROR":
            raise RuntimeError(f"ERROR frame: {frame}")
    return mailbox, room


class _Catching:
    """A pipelined catch-up taking each reply as it is parsed (lean_ws's `on_text`) and
    resolving one future once caught up: no task, queue or `wait_for` per reply, so the client
    process spends less of the two cores the server shares. The replies are checked exactly
    as the sequential path checks them (AUTH_OK's first bytes, every SYNC_BATCH and the
    ROOM_BATCH parsed and counted)."""

    __slots__ = ("client", "ws", "replay", "began", "done", "authed", "mailbox", "more", "room")

    def __init__(self, client: Client, ws: Any, replay: bool, began: float) -> None:
        self.client, self.ws, self.replay, self.began = client, ws, replay, began
        self.done: asyncio.Future[tuple[int, int]] = asyncio.get_running_loop().create_future()
        self.authed, self.mailbox, self.more, self.room = False, 0, True, None

    async def run(self, texts: list[str], timeout: float) -> tuple[int, int]:
        self.ws.on_text = self.reply
        self.ws.send_texts(texts)
        expiry = asyncio.get_running_loop().call_later(timeout, self.fail, TimeoutError("no answer"))
        try:
            return await self.done
        finally:
            expiry.cancel()

    def fail(self, exc: Exception) -> None:
        if not self.done.done():
            self.done.set_exception(exc)

    def reply(self, payload: bytes) -> None:
        if self.done.done():
            return  # pushes after the client caught up
        try:
            self._take(payload)
        except RuntimeError as exc:
            self.fail(exc)
            return
        if not self.more and self.room is not None:
            self.done.set_result((self.mailbox, self.room))

    def _take(self, payload: bytes) -> None:
        if not self.authed:
            _authed(payload)
            self.authed, self.client.authed_s = True, time.monotonic() - self.began
            return
        frame = json.loads(payload)
        req_id = frame.get("req_id")
        if req_id == "s":
            newer, self.more = _page(self.client, frame)
            self.mailbox += newer
            if self.more:
                self.ws.send_text(json.dumps({"type": "SYNC", "req_id": "s",
                                              "after_mailbox_seq": self.client.mailbox_seq}))
        elif req_id == "j":
            self.room = _joined(self.client, frame, self.replay)
        elif frame.get("type") == "ERROR":
            raise RuntimeError(f"ERROR frame: {frame}")


async def _all(clients: list[Client], url_parts: tuple[str, int, str], replay: bool, params: dict) -> dict[str, Any]:
    """Every client catches up at once (at most `concurrency` in flight); its time to caught-up
    from its own first attempt, and what it got."""
    gate = asyncio.Semaphore(params["concurrency"])
    timeout, pipeline = params["timeout_s"], params.get("pipeline", True)
    took, opened, authed = array("f"), array("f"), array("f")
    got = {"mailbox": array("i"), "room": array("i")}
    failures: list[str] = []

    async def one(client: Client) -> None:
        async with gate:
            began = time.monotonic()
            for attempt in range(3):
                try:
                    mailbox, room = await catch_up(client, *url_parts, replay, timeout, pipeline)
                    break
                except (OSError, TimeoutError, asyncio.TimeoutError, ConnectionError, RuntimeError) as exc:
                    if client.ws is not None:
                        client.ws.abort()
                    if attempt == 2:
                        failures.append(repr(exc))
                        return
                    await asyncio.sleep(0.5)
            took.append(time.monotonic() - began)
            opened.append(client.opened_s)
            authed.append(client.authed_s)
            got["mailbox"].append(mailbox)
            got["room"].append(room)

    first = time.time()
    await asyncio.gather(*(one(c) for c in clients))
    return {"first": first, "last": time.time(), "took": took.tobytes(), "opened": opened.tobytes(),
            "authed": authed.tobytes(), "mailbox": got["mailbox"].tobytes(),
            "room": got["room"].tobytes(), "failures": failures[:5], "failed": len(failures)}


def client_process(url: str, clients: list[Client], params: dict, ready, drop, storm, stop) -> None:  # type: ignore[no-untyped-def]
    """Connect every client and catch up to the head; when `drop` is set abort every socket
    at once; when `storm` is set reconnect them all at once and catch up from the positions
    they had; report each phase on `ready`."""
    from urllib.parse import urlparse

    from common import raise_nofile

    raise_nofile()
    parsed = urlparse(url)
    parts = (parsed.hostname or "127.0.0.1", parsed.port or 80, parsed.path or "/")

    async def main() -> None:
        ready.put(await _all(clients, parts, False, params))
        await wait_event(drop, 0.01)
        for client in clients:
            if client.ws is not None:
                client.ws.abort()
                client.ws = None
        ready.put({"dropped": len(clients)})
        await wait_event(storm, 0.002)
        ready.put(await _all(clients, parts, True, params))
        await wait_event(stop, 0.1)
        for client in clients:
            if client.ws is not None:
                client.ws.abort()

    asyncio.run(main())


async def _send_all(senders: list[tuple[Any, str, str]], count: int, round_: int, timeout: float) -> dict[str, int]:
    """Each sender sends `count` group SENDs and `count` ROOM_SENDs; answers the ACKs and
    ERRORs once every one is answered."""
    tally = {"acks": 0, "errors": 0}
    for s, (ws, conversation_id, room_id) in enumerate(senders):
        for n in range(count):
            ws.send_text(json.dumps({"type": "SEND", "req_id": f"m{n}", "conversation_id": conversation_id,
                                     "client_msg_id": f"storm-{round_}-{s}-{n}", "content_type": "text",
                                     "payload": {"text": f"missed {round_}.{n}"}}))
            ws.send_text(json.dumps({"type": "ROOM_SEND", "req_id": f"r{n}", "room_id": room_id,
                                     "content_type": "text", "payload": {"text": f"missed {round_}.{n}"}}))

    async def answers(ws) -> None:  # type: ignore[no-untyped-def]
        wanted = 2 * count
        while wanted:
            frame = json.loads(await ws.recv(timeout))
            if frame.get("req_id") is None:
                continue  # its own room events and mailbox pushes
            wanted -= 1
            tally["acks" if frame.get("type") == "ACK" else "errors"] += 1

    await asyncio.gather(*(answers(ws) for ws, _, _ in senders))
    return tally


def sender_process(url: str, senders: list[tuple[str, str, str]], commands, answers) -> None:  # type: ignore[no-untyped-def]
    """One connection per (token, conversation_id, room_id), joined to its room (so that the
    room stays live while its members are away); on each ("send", count) command every sender
    sends `count` messages to its group and to its room, and the tally is answered."""
    import queue

    from urllib.parse import urlparse

    from lean_ws import connect

    parsed = urlparse(url)

    async def main() -> None:
        open_ = []
        for token, conversation_id, room_id in senders:
            ws = await connect(parsed.hostname or "127.0.0.1", parsed.port or 80, parsed.path or "/")
            await _auth(ws, token, 60)
            ws.send_text(json.dumps({"type": "ROOM_JOIN", "req_id": "j", "room_id": room_id}))
            while json.loads(await ws.recv(60)).get("req_id") != "j":
                pass
            open_.append((ws, conversation_id, room_id))
        answers.put({"connected": len(open_)})
        round_ = 0
        while True:
            try:
                command, count = commands.get_nowait()
            except queue.Empty:
                await asyncio.sleep(0.02)
                continue
            if command == "stop":
                break
            round_ += 1
            answers.put(await _send_all(open_, count, round_, 120))
        for ws, _, _ in open_:
            ws.abort()

    asyncio.run(main())
