"""Differential tests (issue #33): the tuned server (QIM_SERVER_TUNING=on, every replacement of
qim/server/catalog.py installed) and the stock one (off: daphne, autobahn and Twisted as
shipped, plus the fixes of kind "fix") answer the same client byte streams with the same bytes, the
same close codes, the same connection endings, and hand the application the same events.

Two real daphne processes serve tests/server/echo_asgi.py; hypothesis draws streams (upgrade
requests, frames, cuts into TCP writes) and each is sent to both at once over raw sockets
(tests/server/differential.py). Examples are derandomized, so a run is reproducible."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qim.server.catalog import REPLACEMENTS
from tests.server.differential import Pair, start_pair
from tests.server.streams import (
    INVALID_REQUESTS,
    OP_BINARY,
    OP_CONT,
    OP_PING,
    OP_TEXT,
    PLAIN_REQUEST,
    Frame,
    Request,
    Stream,
    breaks_for,
    broken_frames,
    close_frames,
    cuts_for,
    messages,
    normal_close,
    odd_upgrade_requests,
    oversize_messages,
    pauses,
    pings_and_pongs,
)

DIFFERENTIAL = settings(
    derandomize=True,  # the same examples on every run, in CI and here
    database=None,
    deadline=None,
    print_blob=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)
FIXES = sorted(replacement.name for replacement in REPLACEMENTS if replacement.kind == "fix")
HI = Frame(OP_TEXT, b"hi")
ALL = sorted(replacement.name for replacement in REPLACEMENTS)


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    pair = start_pair(tmp_path_factory.mktemp("differential"))
    try:
        yield pair
    finally:
        pair.tuned.stop()
        pair.stock.stop()


def test_the_tuned_server_runs_the_replacements_and_the_stock_one_does_not(servers: Pair) -> None:
    """Otherwise every comparison below compares stock daphne with itself."""
    tuned, stock = servers.tuned.get_json("/tuning"), servers.stock.get_json("/tuning")
    assert (tuned["mode"], sorted(tuned["installed"]), tuned["stock"]) == ("on", ALL, {})
    assert (stock["mode"], sorted(stock["installed"])) == ("off", FIXES)
    # An echo's reply takes the direct write, and its upgrade the lean one, on the tuned server only.
    hello = Frame(OP_TEXT, b"hello")
    stream = Stream(frames=(hello, normal_close()), cuts=(len(hello.encode()),), pause_s=0.1)
    results = servers.run(stream.render)
    assert results[0] == results[1]
    assert results[0]["frames"][0]["text"].startswith('{"kind": "text"')
    tuned_paths, stock_paths = servers.tuned.get_json("/paths"), servers.stock.get_json("/paths")
    assert direct_writes(tuned_paths) > 0 and tuned_paths["upgrades_direct"] > 0
    assert direct_writes(stock_paths) == 0 and stock_paths["upgrades_direct"] == 0


def direct_writes(paths: dict[str, int]) -> int:
    return sum(paths.get(name, 0) for name in ("direct", "queued", "held"))


# --- upgrade requests --------------------------------------------------------------------------


@st.composite
def upgrade_streams(draw: st.DrawFn) -> Stream:
    """An odd but valid upgrade request, possibly cut into writes, with the first frames in
    its write, or with frames before the application accepts; the application accepting,
    refusing, or closing after a message; a couple of valid messages and often a close."""
    frames = [frame for message in draw(st.lists(messages(), max_size=2)) for frame in message]
    if draw(st.booleans()):
        frames.append(normal_close())
    option = draw(st.sampled_from(["", "", "", "&deny=1", "&close=1,4000", "&close=1,1000"]))
    return Stream(
        request=draw(odd_upgrade_requests()),
        frames=tuple(frames),
        breaks=draw(breaks_for(frames)),
        request_cuts=draw(st.one_of(st.just(()), st.lists(st.integers(1, 400), max_size=3).map(tuple))),
        handshake=draw(st.sampled_from(["await", "await", "pipelined", "early"])),
        cuts=draw(cuts_for()),
        pause_s=draw(pauses),
        options=option,
    )


@settings(DIFFERENTIAL, max_examples=80)
@given(stream=upgrade_streams())
def test_upgrade_requests(servers: Pair, stream: Stream) -> None:
    servers.compare(stream.render)


# --- data frames and fragmentation -------------------------------------------------------------

# Replies of tens of KiB (the direct write may not get all of one into the kernel at once), and
# over the message limit (which the direct write leaves to autobahn).
REPLY_PADDING = st.sampled_from(["", "", "", "&pad=30000", "&pad=70000"])


@st.composite
def data_streams(draw: st.DrawFn) -> Stream:
    """Text and binary messages, whole or fragmented with pings and pongs between fragments,
    cut into writes at random points; sometimes one with invalid UTF-8 (split across
    fragments too) or one over the message limit. A stream without such a message may be
    sent before the application accepts ("early")."""
    sent = draw(st.lists(messages(), min_size=1, max_size=4))
    bad = draw(st.sampled_from([None, None, None, "utf8", "oversize"]))
    at = draw(st.integers(0, len(sent)))
    if bad is not None:
        sent[at:at] = [draw(messages(valid_utf8=False)) if bad == "utf8" else draw(oversize_messages())]
    frames = [frame for message in sent for frame in message]
    if draw(st.integers(0, 9)) < 7:
        frames.append(normal_close())
    breaks = draw(breaks_for(frames))
    handshake = draw(st.sampled_from(["await", "await", "early"]))
    return Stream(frames=tuple(frames), cuts=draw(cuts_for()), breaks=breaks, handshake=handshake, pause_s=draw(pauses),
                  options=draw(REPLY_PADDING))


@settings(DIFFERENTIAL, max_examples=80)
@given(stream=data_streams())
def test_data_frames_and_fragmentation(servers: Pair, stream: Stream) -> None:
    servers.compare(stream.render)


# --- control and close frames ------------------------------------------------------------------


@st.composite
def control_streams(draw: st.DrawFn) -> Stream:
    """Pings and pongs (empty, up to the 125 bytes allowed), messages, then a close frame of
    any class (valid and invalid codes, reasons, a 1-byte or over-long payload), maybe with
    more frames after it; or the application closing first."""
    frames: list[Frame] = []
    for _ in range(draw(st.integers(0, 4))):
        frames += draw(st.one_of(pings_and_pongs().map(lambda frame: [frame]), messages()))
    frames.append(draw(close_frames()))
    if draw(st.booleans()):
        frames += draw(st.lists(st.one_of(
            st.just(Frame(OP_TEXT, b"after close")), st.just(Frame(OP_PING, b"late")), close_frames()), max_size=2))
    option = draw(st.sampled_from(["", "", "&close=1,1000", "&close=1,4123", "&close=2,3000"]))
    return Stream(frames=tuple(frames), cuts=draw(cuts_for()), breaks=draw(breaks_for(frames)), pause_s=draw(pauses),
                  options=option)


@settings(DIFFERENTIAL, max_examples=80)
@given(stream=control_streams())
def test_control_and_close_frames(servers: Pair, stream: Stream) -> None:
    servers.compare(stream.render)


# --- invalid streams ---------------------------------------------------------------------------


@st.composite
def invalid_streams(draw: st.DrawFn) -> Stream:
    """Requests that are no valid upgrade (bad version, missing key, POST, HTTP/1.0, broken
    header lines, bodies), or a valid handshake followed by frames a server must fail:
    reserved bits or opcodes, unmasked, non-minimal lengths, fragmented or long control
    frames, continuations out of place; with valid messages before and after."""
    if draw(st.booleans()):
        stream = Stream(request=draw(st.sampled_from(INVALID_REQUESTS)),
                        request_cuts=draw(st.sampled_from([(), (20,), (5, 60)])), pause_s=draw(pauses))
        if draw(st.booleans()):
            stream = replace(stream, frames=(Frame(OP_TEXT, b"after"), normal_close()))
        return stream
    frames = [frame for message in draw(st.lists(messages(), max_size=2)) for frame in message]
    frames += draw(broken_frames())
    frames += [frame for message in draw(st.lists(messages(), max_size=1)) for frame in message]
    if draw(st.booleans()):
        frames.append(normal_close())
    return Stream(frames=tuple(frames), cuts=draw(cuts_for()), breaks=draw(breaks_for(frames)), pause_s=draw(pauses))


@settings(DIFFERENTIAL, max_examples=80)
@given(stream=invalid_streams())
def test_invalid_streams(servers: Pair, stream: Stream) -> None:
    servers.compare(stream.render)


# --- the servers' own timers -------------------------------------------------------------------

@pytest.mark.parametrize("stream", [
    # The application raises: daphne's application checker (qim/server/daphne_checks.py when tuned) closes with 1011;
    # the client never answers, so autobahn drops the connection after its close handshake timeout.
    Stream(frames=(HI,), options="&fail=1", hold_s=3.0),
    # The application closes; the client never answers the close frame.
    Stream(frames=(HI,), options="&close=1,4000", hold_s=1.8),
], ids=["application-fails", "close-unanswered"])
def test_server_timers(servers: Pair, stream: Stream) -> None:
    servers.compare(stream.render)


# --- written, then a protocol error --------------------------------------------------------------

# What a server wrote before a frame that breaks RFC 6455 reaches the client, then the close
# frame, on both servers. With autobahn's default (failByDrop, daphne's) the connection was
# aborted: stock daphne lost what still sat in Twisted's buffer (the 101, a reply), while the
# tuned node's direct writes had already handed it to the kernel, so the two differed on the
# wire. qim/server/protocol_errors.py (a fix, installed in both modes) closes instead.
# The 101 written in the same call that reads the bad bytes: frames sent before the
# application accepted, or a request body, which daphne hands to autobahn after the request.
EARLY_RESERVED_OPCODE = Stream(frames=(Frame(0x3, b""),), handshake="early", delay_ms=150)
UPGRADE_WITH_BODY = Stream(request=Request(headers=PLAIN_REQUEST.headers + ("Content-Length: 4",), body=b"abcd"))


@pytest.mark.parametrize("stream", [EARLY_RESERVED_OPCODE, UPGRADE_WITH_BODY], ids=["early-frame", "request-body"])
def test_the_101_before_a_protocol_error_reaches_the_client(servers: Pair, stream: Stream) -> None:
    servers.compare(stream.render, attempts=1)


# A reply that goes out between two reads of one client write (64 KiB and more) whose second
# read breaks the protocol (a message over the limit, or a reserved opcode).
# 65 KiB of a binary message in frames within the frame limit: its end comes in a second read.
BIG_START, BIG_MIDDLE = Frame(OP_BINARY, bytes(32768), fin=False), Frame(OP_CONT, bytes(32760), fin=False)
REPLY_THEN_OVERSIZE = Stream(frames=(HI, BIG_START, BIG_MIDDLE, Frame(OP_CONT, bytes(10))))
REPLY_THEN_RESERVED_OPCODE = Stream(frames=(HI, BIG_START, replace(BIG_MIDDLE, fin=True), Frame(0x3, b"")))


@pytest.mark.parametrize("stream", [REPLY_THEN_OVERSIZE, REPLY_THEN_RESERVED_OPCODE],
                         ids=["oversize-message", "reserved-opcode"])
def test_a_reply_before_a_protocol_error_reaches_the_client(servers: Pair, stream: Stream) -> None:
    servers.compare(stream.render, attempts=1)
