"""Client byte streams for the differential tests: upgrade requests and RFC 6455 frames as a
client would (or should never) write them, and hypothesis strategies that draw them.

A drawn stream is a `Stream`: a request rendered per connection id (the application keys
what it saw by it), frames as bytes, and where to cut them into separate TCP writes."""

from __future__ import annotations

import base64
from dataclasses import dataclass

from hypothesis import strategies as st

from tests.server.differential import MAX_FRAME, MAX_MESSAGE, Chunk

OP_CONT, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA
RESERVED_OPCODES = (0x3, 0x4, 0x5, 0x6, 0x7, 0xB, 0xC, 0xD, 0xE, 0xF)
KEY = base64.b64encode(b"differential-key").decode()
# The host is not the servers' address: the two servers get the same bytes.
HOST = "qim.test"


# --- frames ------------------------------------------------------------------------------------


def xor_mask(mask: bytes, data: bytes) -> bytes:
    """RFC 6455 §5.3 masking, one big-integer XOR (a 64 KiB payload in microseconds)."""
    if not data:
        return b""
    stream = (mask * (len(data) // 4 + 1))[:len(data)]
    return (int.from_bytes(data, "big") ^ int.from_bytes(stream, "big")).to_bytes(len(data), "big")


@dataclass(frozen=True)
class Frame:
    """One client frame, as RFC 6455 §5.2 lays it out; every field may break the rules."""

    opcode: int
    payload: bytes = b""
    fin: bool = True
    rsv: int = 0
    # None: sent unmasked (a client must mask: §5.1).
    mask: bytes | None = b"\x37\xfa\x21\x3d"
    # "min", or "16" / "64": the extended length form even where a shorter one fits (§5.2
    # says the minimal number of bytes MUST be used).
    length_form: str = "min"
    # The length the header claims, when not the payload's (a frame over the limit, announced).
    declared: int | None = None

    def encode(self) -> bytes:
        size = len(self.payload) if self.declared is None else self.declared
        first = (0x80 if self.fin else 0) | (self.rsv & 7) << 4 | (self.opcode & 0x0F)
        masked = 0x80 if self.mask is not None else 0
        if self.length_form == "64" or size > 0xFFFF:
            head = bytes([first, masked | 127]) + size.to_bytes(8, "big")
        elif self.length_form == "16" or size > 125:
            head = bytes([first, masked | 126]) + size.to_bytes(2, "big")
        else:
            head = bytes([first, masked | size])
        if self.mask is None:
            return head + self.payload
        return head + self.mask + xor_mask(self.mask, self.payload)


def close_payload(code: int | None, reason: bytes = b"") -> bytes:
    """A close frame's payload (§5.5.1): the code in two bytes, then the reason."""
    return b"" if code is None else code.to_bytes(2, "big") + reason


# --- requests ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    """An HTTP request, rendered with the connection id in its query string."""

    method: str = "GET"
    path: str = "/ws"
    # The query string after `id=N` (options of tests/server/echo_asgi.py, or noise).
    query: str = ""
    version: str = "HTTP/1.1"
    # Whole header lines ("Name: value"), as sent: odd spacing and casing included.
    headers: tuple[str, ...] = ()
    body: bytes = b""
    line_end: str = "\r\n"

    def render(self, conn_id: str) -> bytes:
        end = self.line_end
        lines = [f"{self.method} {self.path}?id={conn_id}{self.query} {self.version}", *self.headers]
        return (end.join(lines) + end + end).encode("latin-1") + self.body


STANDARD_HEADERS = (
    ("Host", HOST), ("Upgrade", "websocket"), ("Connection", "Upgrade"),
    ("Sec-WebSocket-Key", KEY), ("Sec-WebSocket-Version", "13"),
)
PLAIN_REQUEST = Request(headers=tuple(f"{name}: {value}" for name, value in STANDARD_HEADERS))


# --- streams -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Stream:
    """What one connection sends: the request, then the frames, cut into writes.

    `handshake`: "await" sends the frames once the response head is in (what clients do);
    "pipelined" sends the request and the frames' first piece in one write; "early" asks the
    application to accept `delay_ms` after the connect, and sends the frames before that, so
    autobahn buffers them and reads them in the call that writes the 101."""

    request: Request = PLAIN_REQUEST
    frames: tuple[Frame, ...] = ()
    # Offsets into the frames' bytes where one write ends and the next begins (taken modulo
    # their length: anywhere, inside a header, a mask or a payload).
    cuts: tuple[int, ...] = ()
    # Frame indices a write ends after (a client writing frame by frame, the application's
    # reply to one frame out before the next arrives).
    breaks: tuple[int, ...] = ()
    # Offsets into the request where it is cut into writes (its first read is then partial).
    request_cuts: tuple[int, ...] = ()
    handshake: str = "await"
    pause_s: float = 0.01
    delay_ms: int = 150
    # Appended to the query string (tests/server/echo_asgi.py's options: close, deny, fail, pad).
    options: str = ""
    # After the last write, read this long before waiting for quiet (the server's own timers).
    hold_s: float = 0.0

    @property
    def frame_bytes(self) -> bytes:
        return b"".join(frame.encode() for frame in self.frames)

    def write_cuts(self) -> tuple[int, ...]:
        """Byte offsets of `cuts` and of the frame boundaries in `breaks`."""
        data_size = len(self.frame_bytes)
        ends, at = [], 0
        for frame in self.frames:
            at += len(frame.encode())
            ends.append(at)
        at_frames = [ends[index] for index in self.breaks if index < len(ends) and ends[index] < data_size]
        return tuple(cut % data_size for cut in self.cuts) + tuple(at_frames) if data_size else ()

    def render(self, conn_id: str) -> list[Chunk]:
        query = self.request.query + self.options
        if self.handshake == "early":
            query += f"&delay={self.delay_ms}"
        request = Request(**{**self.request.__dict__, "query": query}).render(conn_id)
        pieces = split(request, self.request_cuts)
        data = self.frame_bytes
        chunks = [Chunk(piece, pause_s=self.pause_s) for piece in pieces[:-1]]
        frame_pieces = split(data, self.write_cuts()) if data else []
        if self.handshake == "pipelined" and frame_pieces:
            chunks.append(Chunk(pieces[-1] + frame_pieces[0], await_head=True))
            frame_pieces = frame_pieces[1:]
        else:
            await_head = self.handshake == "await" and bool(frame_pieces)
            chunks.append(Chunk(pieces[-1], await_head=await_head, pause_s=self.pause_s))
        chunks += [Chunk(piece, pause_s=self.pause_s) for piece in frame_pieces]
        if self.hold_s:
            chunks.append(Chunk(b"", pause_s=self.hold_s))
        return chunks


def split(data: bytes, cuts: tuple[int, ...]) -> list[bytes]:
    """`data` cut at the given offsets (taken modulo its length, empty pieces dropped)."""
    if not data:
        return [data]
    points = sorted({cut % len(data) for cut in cuts} - {0})
    bounds = [0, *points, len(data)]
    return [data[a:b] for a, b in zip(bounds, bounds[1:])]


# --- strategies: payloads and frames -----------------------------------------------------------

masks = st.one_of(
    st.just(b"\x37\xfa\x21\x3d"),
    st.just(b"\x00\x00\x00\x00"),  # a zero mask is a valid mask (the payload goes as it is)
    st.binary(min_size=4, max_size=4),
)


def sizes() -> st.SearchStrategy[int]:
    """Payload sizes around every boundary that changes a path: 125/126 (the 16-bit length),
    1024 (qim's big-integer unmasking and lean frame read stop there)."""
    return st.one_of(
        st.integers(0, 130),
        st.sampled_from([124, 125, 126, 127, 1022, 1023, 1024, 1025]),
        st.integers(126, 1100),
    )


@st.composite
def texts(draw: st.DrawFn, max_size: int | None = None) -> bytes:
    """The UTF-8 of a text: ASCII, or with 2-, 3- and 4-byte characters, about `sizes()` long."""
    target = draw(sizes()) if max_size is None else draw(st.integers(0, max_size))
    alphabet = draw(st.sampled_from(["ascii", "wide"]))
    if alphabet == "ascii":
        return draw(st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), min_size=target,
                            max_size=target)).encode()
    unit = draw(st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=12)).encode()
    return (unit * (target // len(unit) + 1))[:max(target, len(unit))].decode("utf-8", "ignore").encode()


@st.composite
def binaries(draw: st.DrawFn) -> bytes:
    """`sizes()` bytes: a drawn block repeated (cheap to draw at a kilobyte)."""
    size = draw(sizes())
    block = draw(st.binary(min_size=1, max_size=64))
    return (block * (size // len(block) + 1))[:size]


INVALID_UTF8 = (
    b"\xff", b"\xc0\xaf", b"\xed\xa0\x80",  # a byte never in UTF-8, an overlong slash, a surrogate
    b"\xf4\x90\x80\x80", b"\xe2\x82", b"\x80",  # over U+10FFFF, a cut character, a lone continuation
)


@st.composite
def invalid_texts(draw: st.DrawFn) -> bytes:
    """UTF-8 text with one invalid sequence somewhere in it (a cut character at its end too)."""
    text = draw(texts(max_size=200))
    at = draw(st.integers(0, len(text)))
    bad = draw(st.sampled_from(INVALID_UTF8))
    return text[:at] + bad + text[at:]


def fragment(payload: bytes, cuts: list[int]) -> list[bytes]:
    """`payload` in pieces, one per fragment (empty fragments included: they are valid)."""
    points = sorted({cut % (len(payload) + 1) for cut in cuts})
    bounds = [0, *points, len(payload)]
    return [payload[a:b] for a, b in zip(bounds, bounds[1:])]


control_payloads = st.binary(max_size=125)


@st.composite
def pings_and_pongs(draw: st.DrawFn) -> Frame:
    return Frame(draw(st.sampled_from([OP_PING, OP_PONG])), draw(control_payloads), mask=draw(masks))


@st.composite
def messages(draw: st.DrawFn, valid_utf8: bool = True) -> list[Frame]:
    """One text or binary message: whole or fragmented (cuts may fall inside a UTF-8
    character), with pings and pongs between its fragments."""
    kind = draw(st.sampled_from([OP_TEXT, OP_TEXT, OP_BINARY]))
    if kind == OP_TEXT:
        payload = draw(texts()) if valid_utf8 else draw(invalid_texts())
    else:
        payload = draw(binaries())
    pieces = fragment(payload, draw(st.lists(st.integers(0, 1 << 16), max_size=3)))
    frames = []
    for index, piece in enumerate(pieces):
        frames.append(Frame(kind if index == 0 else OP_CONT, piece, fin=index == len(pieces) - 1, mask=draw(masks)))
        if index < len(pieces) - 1:
            frames += draw(st.lists(pings_and_pongs(), max_size=2))
    return frames


def oversize_messages() -> st.SearchStrategy[list[Frame]]:
    """At and over --websocket-max-frame-size and --websocket-max-message-size: a frame that
    announces more than either (its bytes need not follow: autobahn refuses at the header), a
    whole frame just over the frame limit (the message under its own), fragments each within
    the frame limit that add up to the message limit or just over it."""
    text_or_binary = st.sampled_from([OP_TEXT, OP_BINARY])
    return st.one_of(
        st.builds(lambda n, kind: [Frame(kind, b"x" * 16, declared=n)],
                  st.sampled_from([MAX_FRAME + 1, MAX_MESSAGE + 1, MAX_MESSAGE * 2, 1 << 40]), text_or_binary),
        st.builds(lambda n, kind: [Frame(kind, b"a" * n)], st.sampled_from([MAX_FRAME, MAX_FRAME + 1]), text_or_binary),
        st.builds(lambda n, kind: [Frame(kind, b"b" * MAX_FRAME, fin=False), Frame(OP_CONT, b"c" * MAX_FRAME, fin=n == 0),
                                   *([Frame(OP_CONT, b"d" * n)] if n else [])],
                  st.sampled_from([0, 1, 100]), text_or_binary),
    )


# Close codes by class (RFC 6455 §7.4): autobahn accepts some, fails the connection for others.
CLOSE_CODES = st.one_of(
    st.sampled_from([1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011]),
    st.sampled_from([1004, 1005, 1006, 1012, 1013, 1014, 1015, 1016, 2000, 2999]),
    st.integers(3000, 4999),
    st.sampled_from([0, 1, 999, 500]),
    st.sampled_from([5000, 5001, 65535]),
)


@st.composite
def close_frames(draw: st.DrawFn) -> Frame:
    """A close frame of any class: no payload, a 1-byte one, every class of code, with a
    reason or not, a reason that is not UTF-8, a payload over the 125 a control frame may carry."""
    shape = draw(st.sampled_from(["code", "code", "reason", "empty", "one_byte", "bad_reason", "long"]))
    code = draw(CLOSE_CODES)
    if shape == "empty":
        payload = b""
    elif shape == "one_byte":
        payload = bytes([draw(st.integers(0, 255))])
    elif shape == "reason":
        payload = close_payload(code, draw(st.text(max_size=30)).encode()[:123])
    elif shape == "bad_reason":
        payload = close_payload(code, b"bye" + draw(st.sampled_from(INVALID_UTF8)))
    elif shape == "long":
        payload = close_payload(code, b"r" * 124)
    else:
        payload = close_payload(code)
    return Frame(OP_CLOSE, payload, mask=draw(masks))


def normal_close() -> Frame:
    return Frame(OP_CLOSE, close_payload(1000))


@st.composite
def broken_frames(draw: st.DrawFn) -> list[Frame]:
    """Frames a server must fail the connection for (or must read past safely)."""
    shape = draw(st.sampled_from([
        "rsv", "reserved_opcode", "unmasked", "non_minimal_16", "non_minimal_64", "length_64_high_bit",
        "fragmented_control", "long_control", "orphan_continuation", "new_message_inside",
        "unfinished", "truncated_header",
    ]))
    payload = draw(texts(max_size=60))
    opcode = draw(st.sampled_from([OP_TEXT, OP_BINARY]))
    if shape == "rsv":
        return [Frame(opcode, payload, rsv=draw(st.integers(1, 7)))]
    if shape == "reserved_opcode":
        return [Frame(draw(st.sampled_from(RESERVED_OPCODES)), payload, fin=draw(st.booleans()))]
    if shape == "unmasked":
        return [Frame(draw(st.sampled_from([OP_TEXT, OP_BINARY, OP_PING, OP_CLOSE])), payload[:100], mask=None)]
    if shape == "non_minimal_16":
        return [Frame(opcode, payload[:draw(st.integers(0, 125))], length_form="16")]
    if shape == "non_minimal_64":
        return [Frame(opcode, draw(st.sampled_from([payload, b"y" * 200])), length_form="64")]
    if shape == "length_64_high_bit":
        return [Frame(opcode, b"z" * 8, declared=(1 << 63) + draw(st.integers(0, 10)))]
    if shape == "fragmented_control":
        return [Frame(draw(st.sampled_from([OP_PING, OP_PONG, OP_CLOSE])), b"", fin=False)]
    if shape == "long_control":
        return [Frame(draw(st.sampled_from([OP_PING, OP_PONG])), b"p" * draw(st.integers(126, 300)))]
    if shape == "orphan_continuation":
        return [Frame(OP_CONT, payload, fin=draw(st.booleans()))]
    if shape == "new_message_inside":
        return [Frame(opcode, payload, fin=False), Frame(draw(st.sampled_from([OP_TEXT, OP_BINARY])), payload)]
    if shape == "unfinished":  # a fragmented message that never ends, then a close
        return [Frame(opcode, payload, fin=False), normal_close()]
    # A frame header cut short by the end of the stream (the server waits for the rest).
    return [Frame(opcode, payload, declared=len(payload) + draw(st.integers(1, 20)))]


def cuts_for() -> st.SearchStrategy[tuple[int, ...]]:
    """Where to cut a byte stream into TCP writes besides frame boundaries: mostly not at all,
    else at a few random offsets (inside headers, masks and payloads alike)."""
    return st.one_of(st.just(()), st.just(()), st.lists(st.integers(1, 1 << 17), min_size=1, max_size=4).map(tuple))


@st.composite
def breaks_for(draw: st.DrawFn, frames: list[Frame]) -> tuple[int, ...]:
    """After which frames a write ends: none (all in one write), every one, or some; the last
    but one usually (a closing frame then arrives after the replies to what came before)."""
    last = len(frames) - 1
    if last < 1:
        return ()
    shape = draw(st.sampled_from(["none", "every", "some", "before_last", "before_last"]))
    if shape == "none":
        return ()
    if shape == "every":
        return tuple(range(last))
    chosen = set(draw(st.lists(st.integers(0, last - 1), max_size=3)))
    if shape == "before_last":
        chosen.add(last - 1)
    return tuple(sorted(chosen))


# Between two writes: long enough for the server to read the first alone and (usually) for the
# application's reply to go out before the next arrives.
pauses = st.sampled_from([0.01, 0.02, 0.03])


# --- strategies: upgrade requests --------------------------------------------------------------


@st.composite
def recased(draw: st.DrawFn, word: str) -> str:
    """`word` with each letter's case drawn (header names are case-insensitive)."""
    flips = draw(st.lists(st.booleans(), min_size=len(word), max_size=len(word)))
    return "".join(c.swapcase() if flip else c for c, flip in zip(word, flips))


# How a header line may separate its name and value (RFC 9110 §5.5: optional whitespace).
SEPARATORS = (": ", ":", ":  ", ":\t", ": \t ")
TRAILERS = ("", "", " ", "\t", "  ")
# Headers a client may add, each ordinary or interesting to daphne or autobahn.
EXTRA_HEADERS = (
    ("Origin", "http://allowed.example"),
    ("User-Agent", "differential/1.0 (test)"),
    ("Sec-WebSocket-Protocol", "chat, superchat"),
    ("Sec-WebSocket-Protocol", "v1.qim"),
    ("Sec-WebSocket-Extensions", "permessage-deflate; client_max_window_bits"),
    ("Cookie", "a=b; c=d"),
    ("X-Forwarded-For", "10.0.0.1"),  # daphne reads it only with --proxy-headers
    ("X_Underscore", "dropped by daphne (CVE-2015-0219)"),
    ("Daphne-Root-Path", "/root%20path"),
    ("Pragma", "no-cache"),
    ("Cache-Control", "no-cache"),
    ("Accept-Encoding", "gzip, deflate, br"),
    ("Accept-Language", "en-US,en;q=0.9"),
    ("Authorization", "Token abc"),
    ("X-Empty", ""),
    ("X-Quotes", '"quoted", \'single\''),
    ("X-Symbols", "!#$%&'*+-.^_`|~()<>@,;:\\/[]?={}"),
)
# Headers sent twice: those a client may repeat, and the handshake's own (which autobahn
# then reads joined, "13,13", and refuses).
DUPLICABLE = (
    ("Host", HOST), ("Connection", "Upgrade"), ("Upgrade", "websocket"), ("Cookie", "e=f"),
    ("Sec-WebSocket-Protocol", "chat"), ("Sec-WebSocket-Extensions", "x-unknown"), ("Origin", "http://other.example"),
    ("User-Agent", "second"), ("X-Forwarded-For", "10.0.0.2"), ("X_Underscore", "again"),
    ("Sec-WebSocket-Version", "13"), ("Sec-WebSocket-Key", KEY),
)
UPGRADE_VALUES = ("websocket", "WebSocket", "WEBSOCKET")
CONNECTION_VALUES = ("Upgrade", "upgrade", "keep-alive, Upgrade", "Upgrade, keep-alive", "UPGRADE")
PATHS = ("/ws", "/ws/v1", "/", "/a%20b", "/%E2%82%AC", "//double", "/ws/", "/x;p=1", "/~user/a.b")
QUERY_EXTRAS = st.one_of(
    st.sampled_from(["", "", "", "&a=1", "&x=%20y", "&q=a+b", "&empty=", "&&", "&id=second", "&u=%E2%82%AC"]),
    st.just("&k=v#frag"),  # a fragment in a request target: autobahn refuses it
    st.text(st.sampled_from("abcXYZ019-._~%=&+!$'()*,;:@/?"), max_size=20).map(lambda tail: "&" + tail),
)


@st.composite
def header_lines(draw: st.DrawFn, headers: tuple[tuple[str, str], ...]) -> list[str]:
    return [f"{draw(recased(name))}{draw(st.sampled_from(SEPARATORS))}{value}{draw(st.sampled_from(TRAILERS))}"
            for name, value in headers]


@st.composite
def odd_upgrade_requests(draw: st.DrawFn) -> Request:
    """Valid upgrade requests as clients really vary them: header names in any case, values
    with spaces and tabs around, extra and duplicate headers, any order, query strings."""
    standard = dict(STANDARD_HEADERS)
    standard["Upgrade"] = draw(st.sampled_from(UPGRADE_VALUES))
    standard["Connection"] = draw(st.sampled_from(CONNECTION_VALUES))
    headers = list(standard.items())
    headers += draw(st.lists(st.sampled_from(EXTRA_HEADERS), max_size=4, unique=True))
    if draw(st.integers(0, 2)) == 0:  # a header twice (daphne joins the values; qim's lean upgrade declines)
        headers += draw(st.lists(st.sampled_from(DUPLICABLE), min_size=1, max_size=2))
    headers = draw(st.permutations(headers))
    return Request(
        path=draw(st.sampled_from(PATHS)),
        query=draw(QUERY_EXTRAS),
        headers=tuple(draw(header_lines(tuple(headers)))),
    )


def without(name: str) -> tuple[str, ...]:
    return tuple(f"{n}: {v}" for n, v in STANDARD_HEADERS if n != name)


def replaced(name: str, value: str) -> tuple[str, ...]:
    return tuple(f"{n}: {value if n == name else v}" for n, v in STANDARD_HEADERS)


PLAIN = PLAIN_REQUEST.headers
BODY_FRAME = Frame(OP_TEXT, b"in the body").encode()
# Requests that are not a valid WebSocket upgrade, each its own way.
INVALID_REQUESTS: tuple[Request, ...] = (
    Request(headers=PLAIN + ("Content-Length: 4",), body=b"abcd"),  # a body autobahn reads as frames
    Request(method="POST", headers=PLAIN),
    Request(method="POST", headers=PLAIN + ("Content-Length: 5",), body=b"hello"),
    Request(method="PUT", headers=PLAIN),
    Request(method="HEAD", headers=PLAIN),
    Request(method="get", headers=PLAIN),
    Request(method="GET", headers=(f"Host: {HOST}",)),  # a plain GET, no upgrade at all
    Request(version="HTTP/1.0", headers=PLAIN),
    Request(version="HTTP/1.2", headers=PLAIN),
    Request(version="HTTP/2.0", headers=PLAIN),
    Request(version="http/1.1", headers=PLAIN),
    Request(headers=without("Sec-WebSocket-Key")),
    Request(headers=without("Sec-WebSocket-Version")),
    Request(headers=without("Connection")),
    Request(headers=without("Host")),
    Request(headers=without("Upgrade") + ("Upgrade: h2c",)),
    Request(headers=replaced("Upgrade", "websocket, h2c")),
    Request(headers=replaced("Sec-WebSocket-Version", "8")),
    Request(headers=replaced("Sec-WebSocket-Version", "12")),
    Request(headers=replaced("Sec-WebSocket-Version", "abc")),
    Request(headers=replaced("Sec-WebSocket-Version", "13, 8")),
    Request(headers=replaced("Sec-WebSocket-Key", "short")),
    Request(headers=replaced("Sec-WebSocket-Key", "!!not base64 at all!!!==")),
    Request(headers=replaced("Connection", "close")),
    Request(headers=PLAIN + ("Content-Length: 0",)),
    Request(headers=PLAIN + ("Content-Length: 10",), body=b"abc"),  # a body still on its way
    # A body that is a frame: daphne hands the body to autobahn, which reads it after the 101.
    Request(headers=PLAIN + (f"Content-Length: {len(BODY_FRAME)}",), body=BODY_FRAME),
    Request(headers=PLAIN + ("Transfer-Encoding: chunked",), body=b"0\r\n\r\n"),
    Request(headers=PLAIN + ("Expect: 100-continue",)),
    Request(headers=PLAIN + ("No colon here",)),
    Request(headers=PLAIN + ("X-Space : before colon",)),
    Request(headers=PLAIN + (": empty name",)),
    Request(headers=PLAIN + ("X-Folded: first", " continued"),),
    Request(headers=PLAIN + ("X-Nul: a\x00b",)),
    Request(headers=PLAIN + ("X-Del: a\x7fb",)),
    Request(headers=PLAIN + ("X-Vt: a\x0bb",)),
    Request(headers=PLAIN + ("X-Latin: caf\xe9",)),
    Request(headers=PLAIN + ("X-Utf8: \xe2\x82\xac",)),  # the UTF-8 of a character outside Latin-1
    Request(headers=PLAIN + ("Sec-WebSocket-Protocol: caf\xc3\xa9",)),  # a subprotocol daphne cannot decode
    Request(path="/caf\xc3\xa9", headers=PLAIN),
    Request(headers=PLAIN + ("X-Long: " + "v" * 9000,)),
    Request(headers=PLAIN + tuple(f"X-Many-{i}: {i}" for i in range(70))),
    Request(headers=PLAIN, line_end="\n"),
    Request(path="/caf\xe9", headers=PLAIN),
    Request(path="/a\x01b", headers=PLAIN),
    Request(path="/a b", headers=PLAIN),
    Request(path="http://qim.test/ws", headers=PLAIN),  # absolute form: valid HTTP, odd here
    Request(path="*", headers=PLAIN),
)
