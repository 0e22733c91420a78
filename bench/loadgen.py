"""Load processes for the room benchmarks: lean receivers and room senders, each in its own
process (multiprocessing, spawn), driven by the benchmark through queues and events.

One message is 64 bytes of text carrying its send time: `t=<time_ns> i=<n> xxx...`. Every
server under test (QIM, the tutorial room, raw websockets) delivers that text inside its own
JSON, so a receiver finds the send times of every event in a frame with one regex over the raw
bytes, whether the frame carries one event (baselines) or many (QIM's merged ROOM_BATCH). A
delivery is one event received by one receiver; latency is receive time minus send time, on
the same machine's clock.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from array import array
from collections import Counter
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

STAMP = re.compile(rb"t=(\d+) i=")
PAYLOAD_BYTES = 64
# A ROOM_JOIN refused with retry_after_ms (a join storm across nodes can outlast the writer
# call's deadline) is sent again, as a client does, this many times in all.
JOIN_ATTEMPTS = 10


def message_text(n: int, tag: str = "") -> str:
    head = f"t={time.time_ns()} i={tag}{n} "
    return head + "x" * max(0, PAYLOAD_BYTES - len(head))


# An event's send time and message id, as message_text writes them (the id ends at a space).
STAMP_AND_ID = re.compile(rb"t=(\d+) i=([^ ]+) ")


def stamps_in(payload: bytes) -> list[tuple[bytes, bytes]]:
    """Each event's send time and message id (`i=`, the sender's req_id) in a frame, so that
    loss is counted per message (room_cases.count_loss). One regex `findall`, in C: a loop of
    `bytes.find` in Python was faster on a 3-event frame but several times slower on the
    fan-out's ~190-event frames, where it made the receivers the bottleneck and cut the
    deliveries/s to about a third of the room "max" figure (docs/performance.md,
    "Other figures of the same run")."""
    return STAMP_AND_ID.findall(payload)


@dataclass(frozen=True)
class Target:
    """Where and how to join the room: `kind` is qim, tutorial or raw."""

    kind: str
    url: str
    room_id: str = ""

    @property
    def host_port_path(self) -> tuple[str, int, str]:
        parsed = urlparse(self.url)
        return parsed.hostname or "127.0.0.1", parsed.port or 80, parsed.path or "/"

    def send_frame(self, text: str, req_id: str) -> str:
        if self.kind == "qim":
            return json.dumps({"type": "ROOM_SEND", "req_id": req_id, "room_id": self.room_id,
                               "content_type": "text", "payload": {"text": text}})
        return json.dumps({"message": text})


async def open_member(target: Target, token: str | None, timeout: float = 60.0):  # type: ignore[no-untyped-def]
    """Connect (QIM: AUTH, then ROOM_JOIN) and answer the lean socket, set-up done."""
    from lean_ws import connect

    host, port, path = target.host_port_path
    ws = await connect(host, port, path, timeout)
    if target.kind == "qim":
        ws.send_text(json.dumps({"type": "AUTH", "token": token, "device_id": "populated"}))
        ok = json.loads(await ws.recv(timeout))
        if ok.get("type") != "AUTH_OK":
            raise RuntimeError(f"AUTH refused: {ok}")
        for attempt in range(JOIN_ATTEMPTS) if target.room_id else ():
            ws.send_text(json.dumps({"type": "ROOM_JOIN", "req_id": "join", "room_id": target.room_id}))
            while True:
                frame = json.loads(await ws.recv(timeout))
                if frame.get("req_id") == "join":
                    break
            if frame.get("type") == "ROOM_BATCH":
                break
            if "retry_after_ms" not in frame or attempt == JOIN_ATTEMPTS - 1:  # as a client does: retry when told to
                raise RuntimeError(f"ROOM_JOIN refused: {frame}")
            await asyncio.sleep(frame["retry_after_ms"] / 1000)
    return ws


async def open_all(target: Target, tokens: list[str | None], concurrency: int = 100) -> list[Any]:
    gate = asyncio.Semaphore(concurrency)

    async def one(token: str | None):  # type: ignore[no-untyped-def]
        async with gate:
            for attempt in range(3):
                try:
                    return await open_member(target, token)
                except (OSError, TimeoutError, asyncio.TimeoutError, ConnectionError):
                    if attempt == 2:
                        raise
                    await asyncio.sleep(0.5)

    return list(await asyncio.gather(*(one(t) for t in tokens)))


async def wait_event(event, poll: float = 0.05) -> None:  # type: ignore[no-untyped-def]
    while not event.is_set():
        await asyncio.sleep(poll)


# --- senders -----------------------------------------------------------------------------


def sender_process(target: Target, tokens: list[str | None], mode: str, params: dict, ready, start, stop, results) -> None:  # type: ignore[no-untyped-def]
    """Room senders (one connection per token), run when `start` is set:

    - window: one sender keeps `window` messages in flight; a message leaves the window when
      the sender receives it back as a member (the same rule for every server), until `stop`.
    - rate: one sender at `rate` msg/s for `seconds`, on an absolute schedule (open loop).
    - burst: every sender sends `count` messages back to back, all at once.

    QIM answers each ROOM_SEND with ACK or ERROR: `accepted` counts ACKs; the baselines have
    no answer, so every message sent counts as accepted.
    """
    from common import raise_nofile

    raise_nofile()
    tally = {"sent": 0, "acks": 0, "errors": {}, "echoed": 0}
    # The message ids (= req_ids) sent, and those QIM acknowledged (rate and burst modes).
    sent_ids: list[str] = []
    acked: list[str] = []

    def on_text_for(ws, state: dict):  # type: ignore[no-untyped-def]
        def on_text(payload: bytes) -> None:
            echoed = len(STAMP.findall(payload))
            if echoed:
                tally["echoed"] += echoed
                state["in_flight"] -= echoed
                state["wake"].set()
                return
            if target.kind == "qim" and b'"req_id"' in payload:
                frame = json.loads(payload)
                if frame.get("type") == "ACK":
                    tally["acks"] += 1
                    acked.append(str(frame.get("req_id")))
                elif frame.get("type") == "ERROR":
                    code = frame.get("code", "?")
                    tally["errors"][code] = tally["errors"].get(code, 0) + 1

        return on_text

    async def window(ws, state: dict) -> None:  # type: ignore[no-untyped-def]
        size = params["window"]
        echoed, quiet_since = tally["echoed"], time.monotonic()
        while not stop.is_set():
            while state["in_flight"] < size:
                tally["sent"] += 1
                state["in_flight"] += 1
                ws.send_text(target.send_frame(message_text(tally["sent"]), str(tally["sent"])))
            state["wake"].clear()
            try:
                await asyncio.wait_for(state["wake"].wait(), 0.2)
            except (TimeoutError, asyncio.TimeoutError):
                pass
            if tally["echoed"] != echoed:
                echoed, quiet_since = tally["echoed"], time.monotonic()
            elif time.monotonic() - quiet_since > 3.0:
                # Our own copies were dropped (a full channel): reopen the window, and say so.
                tally["window_resets"] = tally.get("window_resets", 0) + 1
                state["in_flight"], quiet_since = 0, time.monotonic()

    async def rate(ws) -> None:  # type: ignore[no-untyped-def]
        period = 1.0 / params["rate"]
        total = int(params["rate"] * params["seconds"])
        began = time.monotonic()
        for n in range(1, total + 1):
            delay = began + (n - 1) * period - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            tally["sent"] += 1
            sent_ids.append(str(n))
            ws.send_text(target.send_frame(message_text(n), str(n)))

    async def burst(sockets: list) -> None:  # type: ignore[no-untyped-def]
        for round_ in range(params["count"]):
            for s, ws in enumerate(sockets):
                tally["sent"] += 1
                sent_ids.append(f"{s}.{round_}")
                ws.send_text(target.send_frame(message_text(round_, f"{s}."), f"{s}.{round_}"))
            await asyncio.sleep(0)

    async def main() -> None:
        try:
            sockets = [await open_member(target, token) for token in tokens]
        except Exception as exc:
            ready.put({"error": repr(exc)})
            return
        states = []
        for ws in sockets:
            state = {"in_flight": 0, "wake": asyncio.Event()}
            ws.on_text = on_text_for(ws, state)
            states.append(state)
        ready.put({"connected": len(sockets)})
        await wait_event(start, 0.005)
        began = time.monotonic()
        if mode == "window":
            await window(sockets[0], states[0])
        elif mode == "rate":
            await rate(sockets[0])
        else:
            await burst(sockets)
        elapsed = time.monotonic() - began
        # Let the last ACKs arrive, then report.
        settle = time.monotonic() + params.get("settle_s", 2.0)
        while time.monotonic() < settle and target.kind == "qim" and tally["acks"] + sum(tally["errors"].values()) < tally["sent"]:
            await asyncio.sleep(0.05)
        accepted = tally["acks"] if target.kind == "qim" else tally["sent"]
        results.put({**tally, "accepted": accepted, "elapsed": elapsed,
                     "accepted_ids": acked if target.kind == "qim" else sent_ids})
        await wait_event(stop)
        for ws in sockets:
            ws.abort()

    asyncio.run(main())


# --- the benchmark's side: start, watch and collect the load processes ----------------------


def _ctx():  # type: ignore[no-untyped-def]
    import multiprocessing as mp

    return mp.get_context("spawn")


def _get_while_alive(queue, processes: list, timeout: float) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    """queue.get, but give up as soon as one of the processes died."""
    import queue as queue_module

    deadline = time.monotonic() + timeout
    while True:
        try:
            return queue.get(timeout=0.5)
        except queue_module.Empty:
            # A process that answered and exited is fine; one that failed, or all gone, is not.
            failed = [p for p in processes if p.exitcode not in (None, 0)]
            if failed:
                raise RuntimeError(f"a load process exited with code {failed[0].exitcode}") from None
            if all(p.exitcode is not None for p in processes):
                try:
                    return queue.get(timeout=1.0)
                except queue_module.Empty:
                    raise RuntimeError("every load process exited without answering") from None
            if time.monotonic() > deadline:
                raise TimeoutError("a load process did not answer in time") from None


class Members:
    """Receiver processes (one per (target, tokens) part), all recording together."""

    def __init__(self, parts: list[tuple[Target, list[str | None]]]) -> None:
        from room_receivers import receiver_process  # it imports this module

        ctx = _ctx()
        self.ready, self.results = ctx.Queue(), ctx.Queue()
        self.stop = ctx.Event()
        self.recording = ctx.RawValue("b", 0)
        self.counters = [ctx.RawValue("q", 0) for _ in parts]
        self.processes = [
            ctx.Process(target=receiver_process, daemon=True,
                        args=(target, tokens, self.ready, self.stop, self.recording, counter, self.results))
            for (target, tokens), counter in zip(parts, self.counters)
        ]
        self.size = sum(len(tokens) for _, tokens in parts)
        self.connect_s = 0.0
        for process in self.processes:
            process.start()

    def wait_ready(self, timeout: float = 180.0) -> None:
        for _ in self.processes:
            answer = _get_while_alive(self.ready, self.processes, timeout)
            if "error" in answer:
                raise RuntimeError(f"a receiver process failed to connect: {answer['error']}")
            self.connect_s = max(self.connect_s, answer["connect_s"])

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.processes if p.pid]

    def delivered(self) -> int:
        return sum(c.value for c in self.counters)

    def collect(self, timeout: float = 60.0) -> dict[str, Any]:
        self.stop.set()
        latencies = array("f")
        frames: list[int] = []
        first, last = [], []
        max_per_second = 0
        seen: Counter[bytes] = Counter()
        for _ in self.processes:
            part = self.results.get(timeout=timeout)
            max_per_second = max(max_per_second, part["max_frames_per_second"])
            seen.update(part["seen"])
            latencies.frombytes(part["latencies"])
            frames += part["frames"]
            if part["first_last"][0]:
                first.append(part["first_last"][0])
                last.append(part["first_last"][1])
        self.close()
        return {"latencies": latencies, "frames": frames, "first": min(first, default=0.0),
                "last": max(last, default=0.0), "delivered": self.delivered(),
                "max_frames_per_second": max_per_second, "seen": seen}

    def close(self) -> None:
        self.stop.set()
        for process in self.processes:
            process.join(timeout=10)
            if process.is_alive():
                process.kill()
                process.join(timeout=5)


class Senders:
    """One sender process (`sender_process`) with its connections open, waiting for start()."""

    def __init__(self, target: Target, tokens: list[str | None], mode: str, params: dict) -> None:
        ctx = _ctx()
        self.ready, self.results = ctx.Queue(), ctx.Queue()
        self.start_event, self.stop = ctx.Event(), ctx.Event()
        self.process = ctx.Process(target=sender_process, daemon=True,
                                   args=(target, tokens, mode, params, self.ready, self.start_event, self.stop, self.results))
        self.process.start()

    def wait_ready(self, timeout: float = 120.0) -> None:
        answer = _get_while_alive(self.ready, [self.process], timeout)
        if "error" in answer:
            raise RuntimeError(f"the sender failed to connect: {answer['error']}")

    def start(self) -> None:
        self.start_event.set()

    def result(self, timeout: float) -> dict[str, Any]:
        """Its tally, once it finished sending (window mode: once stop_sending() was called)."""
        return self.results.get(timeout=timeout)

    def stop_sending(self) -> None:
        self.stop.set()

    def close(self) -> None:
        self.stop.set()
        self.process.join(timeout=10)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(timeout=5)
