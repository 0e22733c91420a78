"""Two real daphne processes, one tuned (QIM_SERVER_TUNING=on) and one stock (off), serving
tests/server/echo_asgi.py; one raw TCP exchange with each; what each answered, normalised
only where stock daphne itself varies from run to run.

Why raw sockets: a WebSocket client library would answer pings, validate frames and hide
how the connection ended; the differential tests compare exactly what the server put on the
wire and when it closed."""

from __future__ import annotations

import json
import select
import socket
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.harness.qim_process import REPO, process_env, wait_until_healthy
from tests.harness.services import free_port

APP = "tests.server.echo_asgi:application"
# Small, so frames and messages over them cost little to send (daphne's
# --websocket-max-message-size and --websocket-max-frame-size, autobahn's
# maxMessagePayloadSize and maxFramePayloadSize): a frame between the two is over one only.
MAX_MESSAGE = 65536
MAX_FRAME = 32768
# How long a connection may stay silent before it counts as left open by the server. The
# server answers on loopback within a few milliseconds; this is the margin for a loaded
# two-core machine (a late answer is retried: `Pair.compare`).
QUIET_S = 0.3
# After the request of a handshake, how long to wait for the response head before sending on
# (a request Twisted still reads the body of gets none).
HEAD_WAIT_S = 1.0
# The longest one read (or one blocked write) may last: autobahn drops a socket whose close
# handshake it started after 1 s (closeHandshakeTimeout), so no stream needs longer.
READ_CAP_S = 4.0
HEAD_END = b"\r\n\r\n"


@dataclass
class DaphneServer:
    """One daphne serving the echo application with QIM_SERVER_TUNING=`mode`."""

    mode: str
    log_path: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen | None = None

    def start(self, timeout: float = 60.0) -> "DaphneServer":
        env = process_env({
            "QIM_SERVER_TUNING": self.mode,
            "DJANGO_SETTINGS_MODULE": "tests.settings",
            "QIM_VAR_DIR": str(self.log_path.parent),
        })
        log = open(self.log_path, "a")
        self.process = subprocess.Popen(
            [
                sys.executable, "-m", "daphne",
                "-e", f"tcp:port={self.port}:interface=127.0.0.1",
                "--websocket-max-message-size", str(MAX_MESSAGE),
                "--websocket-max-frame-size", str(MAX_FRAME),
                APP,
            ],
            env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
        )
        log.close()
        wait_until_healthy(self.process, self.port, f"http://127.0.0.1:{self.port}/tuning", self.log_path,
                           f"daphne ({self.mode})", timeout)
        return self

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)

    def get_json(self, path: str) -> Any:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as answer:
            return json.load(answer)

    def events(self, conn_id: str) -> list[dict[str, Any]]:
        """What the application saw on connection `conn_id`, once it has seen all of it: the
        client has closed by now, so every connection the application met ends with its
        disconnect, or with the exception it was asked to raise (a connection it never met
        stays empty)."""
        deadline = time.monotonic() + 3.0
        events = self.get_json(f"/events?id={conn_id}")
        if not events:
            time.sleep(0.05)  # a connect still on its way from daphne to the application
            events = self.get_json(f"/events?id={conn_id}")
        while events and events[-1]["type"] not in ("disconnect", "raised") and time.monotonic() < deadline:
            time.sleep(0.02)
            events = self.get_json(f"/events?id={conn_id}")
        return events


@dataclass(frozen=True)
class Chunk:
    """One client write; then either wait for the server's response head (a client awaiting
    the 101 before it sends frames) or a short pause while reading (a frame cut across TCP
    segments that arrive apart)."""

    data: bytes
    await_head: bool = False
    pause_s: float = 0.01


@dataclass
class Received:
    """What one connection got: the bytes, and how the TCP connection ended."""

    data: bytes = b""
    # "eof" (FIN), "reset" (RST) or "open" (still open after QUIET_S of silence).
    ending: str = "open"


def exchange(port: int, chunks: list[Chunk]) -> Received:
    """Send `chunks` over a fresh connection, reading all along; then read until the server
    closes or stays quiet for QUIET_S. A write the server no longer takes ends the writing."""
    received = Received()
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setblocking(False)
    try:
        for chunk in chunks:
            if received.ending != "open" or not send_all(sock, chunk.data):
                break
            if chunk.await_head:
                read_until(sock, received, HEAD_WAIT_S, lambda: HEAD_END in received.data)
            else:
                read_until(sock, received, chunk.pause_s, lambda: False)
        if received.ending == "open":
            read_until(sock, received, QUIET_S, lambda: False, quiet=True)
    finally:
        sock.close()
    return received


def send_all(sock: socket.socket, data: bytes) -> bool:
    """Whether all of `data` went out (False: the server closed or reset the connection)."""
    view = memoryview(data)
    deadline = time.monotonic() + READ_CAP_S
    while view:
        try:
            sent = sock.send(view)
        except BlockingIOError:
            if time.monotonic() > deadline:
                return False
            select.select([], [sock], [], 0.05)
            continue
        except OSError:
            return False
        view = view[sent:]
    return True


def read_until(sock: socket.socket, received: Received, wait_s: float, done: Any, quiet: bool = False) -> None:
    """Read for `wait_s` (or until `done()`); with `quiet`, `wait_s` counts from the last byte
    read, up to READ_CAP_S in all."""
    start = time.monotonic()
    deadline = start + wait_s
    while received.ending == "open" and not done():
        now = time.monotonic()
        left = min(deadline, start + READ_CAP_S) - now
        if left <= 0:
            return
        readable, _, _ = select.select([sock], [], [], left)
        if not readable:
            continue
        try:
            data = sock.recv(262144)
        except BlockingIOError:
            continue
        except ConnectionResetError:
            received.ending = "reset"
            return
        if not data:
            received.ending = "eof"
            return
        received.data += data
        if quiet:
            deadline = time.monotonic() + wait_s


# --- what a server answered, made comparable ----------------------------------------------


def parse_server_frames(data: bytes) -> tuple[list[dict[str, Any]], bytes]:
    """The whole frames in `data` (what the server sent after its 101) and the bytes after the
    last whole one."""
    frames: list[dict[str, Any]] = []
    at = 0
    while len(data) - at >= 2:
        first, second = data[at], data[at + 1]
        size, head = second & 0x7F, 2
        if size == 126:
            if len(data) - at < 4:
                break
            size, head = int.from_bytes(data[at + 2:at + 4], "big"), 4
        elif size == 127:
            if len(data) - at < 10:
                break
            size, head = int.from_bytes(data[at + 2:at + 10], "big"), 10
        if second & 0x80:
            head += 4  # a masked server frame (which would be a bug of its own): keep the mask
        if len(data) - at < head + size:
            break
        payload = data[at + head:at + head + size]
        frame: dict[str, Any] = {"fin": bool(first & 0x80), "rsv": (first >> 4) & 7, "opcode": first & 0x0F,
                                 "masked": bool(second & 0x80), "header": data[at:at + head].hex()}
        if first & 0x0F == 0x1:
            frame["text"] = payload.decode("utf-8", "replace")
        else:
            frame["payload"] = payload.hex()
        frames.append(frame)
        at += head + size
    return frames, data[at:]


def normalised_head(head: bytes) -> list[str]:
    """The status line and header lines. A Date header, were there one, carries the second
    the server answered in: its value is blanked (the only per-connection value of a head)."""
    lines = []
    for line in head.decode("latin-1").split("\r\n"):
        name, colon, _ = line.partition(":")
        lines.append(f"{name}: <date>" if colon and name.strip().lower() == "date" else line)
    return lines


def close_of(frames: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The server's first close frame: its code and reason (None: none was sent)."""
    for frame in frames:
        if frame["opcode"] == 0x8:
            payload = bytes.fromhex(frame["payload"])
            code = int.from_bytes(payload[:2], "big") if len(payload) >= 2 else None
            return {"code": code, "reason": payload[2:].decode("utf-8", "replace")}
    return None


def outcome(received: Received, events: list[dict[str, Any]]) -> dict[str, Any]:
    """Everything compared between the two servers, for one exchange."""
    data = received.data
    result: dict[str, Any] = {"events": events}
    head_end = data.find(HEAD_END)
    if data.startswith(b"HTTP/") and head_end >= 0:
        head, rest = data[:head_end], data[head_end + len(HEAD_END):]
        result["head"] = normalised_head(head)
        if head.startswith(b"HTTP/1.1 101 "):
            frames, trailing = parse_server_frames(rest)
            result["frames"], result["trailing"] = frames, trailing.hex()
            close = close_of(frames)
            result["close"] = close
        else:
            result["body"] = rest.decode("latin-1")
            close = None
    else:
        result["raw"] = data.decode("latin-1")
        close = None
    result["ending"] = connection_ending(received, close)
    return result


def connection_ending(received: Received, close: dict[str, Any] | None) -> str:
    """closed cleanly (a close frame, then the TCP close) / dropped (closed without one) /
    still open; "reset" marks a close by RST rather than FIN (autobahn's failByDrop aborts)."""
    if received.ending == "open":
        return "open" + (" after a close frame" if close is not None else "")
    how = "clean" if close is not None else "dropped"
    return f"{how} ({'RST' if received.ending == 'reset' else 'FIN'})"


@dataclass
class Pair:
    """The tuned and the stock server, and the ids that keep their connections apart."""

    tuned: DaphneServer
    stock: DaphneServer
    next_id: int = 0

    def fresh_id(self) -> str:
        self.next_id += 1
        return f"c{self.next_id}"

    def run(self, render: Any) -> tuple[dict[str, Any], dict[str, Any], list[Chunk]]:
        """`render(conn_id)` gives the chunks; the same bytes go to both servers at once."""
        conn_id = self.fresh_id()
        chunks = render(conn_id)
        with ThreadPoolExecutor(2) as pool:
            both = list(pool.map(lambda server: exchange(server.port, chunks), (self.tuned, self.stock)))
        results = [outcome(got, server.events(conn_id)) for got, server in zip(both, (self.tuned, self.stock))]
        return results[0], results[1], chunks

    def compare(self, render: Any, attempts: int = 3) -> None:
        """The tuned server answers `render`'s stream exactly as the stock one. Timing is not
        behaviour: a two-core machine running other work can stall either process past
        QUIET_S or a pause between writes, which changes what any daphne answers. So a
        difference is asserted only if it shows on every one of `attempts` fresh connections;
        a deterministic difference always does."""
        for attempt in range(attempts):
            tuned, stock, chunks = self.run(render)
            if tuned == stock:
                return
        raise AssertionError(f"tuned and stock daphne differ on the writes\n{describe_chunks(chunks)}\n"
                             f"{difference(tuned, stock)}")


def shortened(data: bytes, keep: int = 160) -> str:
    return repr(data) if len(data) <= keep else f"{data[:keep]!r}... ({len(data)} bytes)"


def describe_chunks(chunks: list[Chunk]) -> str:
    return "\n".join(f"  write {index}: {shortened(chunk.data)}" + (" (then awaits the head)" if chunk.await_head else "")
                     for index, chunk in enumerate(chunks))


def difference(tuned: dict[str, Any], stock: dict[str, Any]) -> str:
    """The entries of the two outcomes that differ, side by side."""
    lines = []
    for key in sorted(set(tuned) | set(stock)):
        if tuned.get(key, "<absent>") != stock.get(key, "<absent>"):
            lines.append(f"  {key}:\n    tuned: {tuned.get(key, '<absent>')!r}\n    stock: {stock.get(key, '<absent>')!r}")
    return "\n".join(lines)


def start_pair(directory: Path) -> Pair:
    """Both servers started at once (each takes a few seconds to set Django up)."""
    tuned = DaphneServer("on", directory / "daphne-on.log")
    stock = DaphneServer("off", directory / "daphne-off.log")
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(DaphneServer.start, (tuned, stock)))
    return Pair(tuned, stock)
