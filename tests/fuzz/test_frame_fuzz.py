"""Frame fuzzing (issue #17): hostile frames of every registered type, and things that are not
frames at all, against a real daphne node, before and after AUTH. Every answer is a typed
ERROR (or a valid reply), the connection stays open past AUTH (4401 before it), a control
connection keeps answering PING, and the node logs no traceback."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import websockets
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import QimDeployment
from tests.core.conversation_helpers import create_group
from tests.fuzz.deploy import start_node
from tests.fuzz.frames import NOT_OBJECTS, any_text_frames, deep, frame_types, frames_of, hostile_values, to_json
from tests.fuzz.wire import LogWatch, LoopThread, open_authed, ping, recv_frame, refused_before_auth, round_trip
from tests.harness.personas import api_ok

# Rates raised so fuzzed SENDs and REACTs reach their handlers instead of the rate limiter.
FUZZ_ENV = {"QIM_PER_USER_MSG_RATE": "100000", "QIM_PER_USER_REACTION_RATE": "100000", "QIM_ROOM_MSG_RATE": "100000"}
FIRE_AND_FORGET = {"TYPING"}
REQ_ID = "FUZZ"

BASE_SETTINGS = settings(
    derandomize=True,  # the same examples on every run, in CI and here
    database=None,
    deadline=None,
    print_blob=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)

_req_ids = itertools.count(1)

# Opaque payloads are stored as JSON text: these must be stored (or refused) cleanly too.
ODD_PAYLOADS: list[Any] = [
    {"text": "nul \u0000 inside"}, {"text": "big", "n": 2**70}, {"text": "\U0001F600 \u202e"}, {"text": ""},
]


def fuzz_settings(max_examples: int) -> settings:
    """Bounded, so the file runs in well under two minutes on a loaded two-core machine."""
    return settings(BASE_SETTINGS, max_examples=max_examples)


@dataclass
class FuzzTarget:
    """The node, a fuzzed connection (alice), a control connection (bob), and what exists."""

    deployment: QimDeployment
    loop: LoopThread
    log: LogWatch
    fuzz: Any = None
    control: Any = None
    known: dict[str, list[Any]] = field(default_factory=dict)
    token: str = ""
    counts: dict[str, int] = field(default_factory=lambda: {"frames": 0, "control_pings": 0})

    def exchange(self, text: str | bytes) -> list[dict[str, Any]]:
        """Send one fuzzed frame; answers what came back, after the control connection's
        PING was answered meanwhile and the log was found clean."""

        async def both() -> list[dict[str, Any]]:
            if self.fuzz.close_code is not None:
                # An earlier failure closed it: that test failed; later ones start afresh.
                self.fuzz = await open_authed(self.deployment.node.ws_url, self.token, "phone")
            frames = await round_trip(self.fuzz, text)
            await ping(self.control)
            return frames

        frames = self.loop.run(both())
        self.counts["frames"] += 1
        self.counts["control_pings"] += 1
        self.log.assert_clean()
        return frames

    def first_frame(self, text: str | bytes) -> None:
        """`text` as a new socket's first frame: refused with 4401, the control connection
        answering meanwhile."""

        async def both() -> None:
            await refused_before_auth(self.deployment.node.ws_url, text)
            await ping(self.control)

        self.loop.run(both())
        self.counts["frames"] += 1
        self.counts["control_pings"] += 1
        self.log.assert_clean()


BACKEND = "sqlite"  # tests/fuzz/test_frame_fuzz_postgres.py runs these tests on PostgreSQL


@pytest.fixture(scope="module")
def target(request: pytest.FixtureRequest) -> Iterator[FuzzTarget]:
    backend = request.module.BACKEND
    deployment = start_node(request, FUZZ_ENV)
    acme = deployment.tenants["acme"]
    alice, bob = acme.persona("alice"), acme.persona("bob")
    conversation = create_group(alice, bob)
    room_id = f"fuzz-{alice.user_id}".lower()
    api_ok(deployment.node, "POST", "rooms", alice.token(), json={"room_id": room_id})
    # bob's offline tablet takes pushes: fuzzed SENDs write PushTask rows (JSON columns) too.
    api_ok(deployment.node, "POST", "devices/tablet/push", bob.token("tablet"), json={"platform": "ios", "push_token": "t"})
    loop = LoopThread()
    target = FuzzTarget(deployment, loop, LogWatch(deployment.node.log_path))
    target.fuzz = loop.run(open_authed(deployment.node.ws_url, alice.token(), "phone"))
    target.control = loop.run(open_authed(deployment.node.ws_url, bob.token(), "phone"))
    sent = target.exchange(json.dumps({
        "type": "SEND", "req_id": "seed", "conversation_id": conversation, "client_msg_id": "seed",
        "content_type": "text", "payload": {"text": "fuzz me"},
    }))
    assert [f["type"] for f in sent if f.get("req_id") == "seed"] == ["ACK"]
    target.known = {
        "req_id": [REQ_ID], "conversation_id": [conversation, "no-such-conversation", "会话-😀"],
        "room_id": [room_id], "target_user_id": [bob.user_id, "nobody"], "user_ids": [[bob.user_id], ["ü", ""]],
        "content_type": ["text", "qim.recall.v1", "no.such.type"], "conversation_seq": [1, 2],
        "read_conversation_seq": [0, 1], "payload": [{"text": "hi"}, {"text": 5}, None] + ODD_PAYLOADS,
        "signal_payload": ODD_PAYLOADS,
        "reaction_key": ["👍", "+1", "ключ", "a" * 32],
    }
    target.token = alice.token()
    yield target
    print(f"\nframe fuzz ({backend}): {target.counts}")
    loop.run(target.fuzz.close())
    loop.run(target.control.close())
    loop.close()
    deployment.stop()


def unique_req_id(frame: dict[str, Any]) -> str | None:
    """Replace the plausible req_id by a unique one, so its answer can be told apart."""
    if frame.get("req_id") == REQ_ID:
        frame["req_id"] = f"fz-{next(_req_ids)}"
        return frame["req_id"]
    return None


def check_answered(frame_type: str, req_id: str | None, frames: list[dict[str, Any]]) -> None:
    """A request with a req_id gets exactly one answer echoing it (none for a valid TYPING),
    unless the frame could not be read at all (too large, not JSON, too deep): then one ERROR
    without req_id, as the server cannot know it."""
    if req_id is None:
        return
    answers = [f for f in frames if f.get("req_id") == req_id]
    unreadable = [f for f in frames if f["type"] == "ERROR" and "req_id" not in f]
    if unreadable and not answers:
        assert len(unreadable) == 1 and unreadable[0]["code"] in ("bad_frame", "too_large"), frames
        return
    if frame_type in FIRE_AND_FORGET:
        assert len(answers) <= 1 and all(f["type"] == "ERROR" for f in answers), answers
    else:
        assert len(answers) == 1, (frame_type, frames)


@pytest.mark.parametrize("frame_type", frame_types())
def test_fuzzed_frames_of_every_type_get_typed_answers(target: FuzzTarget, frame_type: str) -> None:
    @fuzz_settings(60)
    @given(frame=frames_of(frame_type, target.known))
    def fuzz(frame: dict[str, Any]) -> None:
        req_id = unique_req_id(frame)
        check_answered(frame_type, req_id, target.exchange(to_json(frame)))

    fuzz()


@fuzz_settings(150)
@given(text=any_text_frames())
def test_fuzzed_text_and_bytes_get_typed_errors(target: FuzzTarget, text: str | bytes) -> None:
    frames = target.exchange(text)
    # Whatever it was, at most one answer, and it names no req_id it was not given.
    assert len([f for f in frames if f["type"] == "ERROR"]) <= 1, frames


@fuzz_settings(80)
@given(first=st.sampled_from(frame_types()).flatmap(lambda t: frames_of(t, {})).map(to_json) | any_text_frames()
       | st.fixed_dictionaries({"type": st.just("AUTH"), "token": st.text(), "device_id": st.text()}).map(to_json))
def test_fuzzed_first_frames_are_refused_with_4401(target: FuzzTarget, first: str | bytes) -> None:
    target.first_frame(first)


@fuzz_settings(30)
@given(fields=st.dictionaries(st.sampled_from(["client_version", "req_id", "extra"]), hostile_values(), max_size=3))
def test_auth_with_a_good_token_and_hostile_fields(target: FuzzTarget, fields: dict[str, Any]) -> None:
    """AUTH with the right token and device: AUTH_OK when the other fields are well typed,
    else ERROR unauthenticated and 4401; never anything else."""
    text = to_json({**fields, "type": "AUTH", "token": target.token, "device_id": "phone"})

    async def authenticate() -> None:
        async with websockets.connect(target.deployment.node.ws_url, max_size=None) as ws:
            await ws.send(text)
            answer = await recv_frame(ws)
            if answer["type"] == "AUTH_OK":
                assert isinstance(fields.get("client_version", ""), str), fields
                assert isinstance(fields.get("req_id"), str | None), fields
                return
            assert (answer["type"], answer["code"]) == ("ERROR", "unauthenticated"), answer
            try:
                await asyncio.wait_for(ws.recv(), 30)
            except websockets.ConnectionClosed as closed:
                assert closed.rcvd is not None and closed.rcvd.code == 4401
            else:
                raise AssertionError("a frame after the refusal")

    async def with_control() -> None:
        await authenticate()
        await ping(target.control)

    target.loop.run(with_control())
    target.counts["frames"] += 1
    target.counts["control_pings"] += 1
    target.log.assert_clean()


# The named hostile inputs of issue #17, written out: (frame, expected code, req_id echoed).
HOSTILE_CASES = [
    pytest.param('{"type": "PING", "req_id": "r", "x": ' + deep(1000).text + "}", "bad_frame", None, id="1000-deep-array"),
    pytest.param('{"type": "PING", "req_id": "r", "x": ' + deep(1000, '{"a":', "}", "1").text + "}", "bad_frame", None, id="1000-deep-object"),
    pytest.param(deep(1000).text, "bad_frame", None, id="1000-deep-top-level"),
    pytest.param('{"type": "PING", "req_id": "r", "x": ' + deep(33).text + "}", "bad_frame", None, id="33-deep"),
    pytest.param('{"type": "SYNC", "req_id": "r", "after_mailbox_seq": 18446744073709551616}', "bad_frame", "r", id="int-2^64"),
    pytest.param('{"type": "SYNC", "req_id": "r", "after_mailbox_seq": 9223372036854775808}', "bad_frame", "r", id="int-2^63"),
    pytest.param('{"type": "REGISTRY_GET", "req_id": "r", "since_version": -18446744073709551617}', "bad_frame", "r", id="int-minus-2^64"),
    pytest.param('{"type": "SYNC", "req_id": "r", "after_mailbox_seq": -1}', "bad_frame", "r", id="negative-seq"),
    pytest.param('{"type": "SYNC", "req_id": "r", "limit": NaN}', "bad_frame", None, id="NaN"),
    pytest.param('{"type": "SYNC", "req_id": "r", "limit": Infinity}', "bad_frame", None, id="Infinity"),
    pytest.param('{"type": "SYNC", "req_id": "r", "limit": 1e999}', "bad_frame", None, id="1e999"),
    pytest.param('{"type": "PING", "req_id": "\\ud800"}', "bad_frame", None, id="lone-high-surrogate"),
    pytest.param('{"type": "HISTORY", "req_id": "r", "conversation_id": "a\\udc00"}', "bad_frame", None, id="lone-low-surrogate"),
    pytest.param('{"type": "HISTORY", "req_id": "r", "conversation_id": "a\\u0000b"}', "bad_frame", "r", id="nul-in-id"),
    pytest.param('{"type": "HISTORY", "req_id": "r", "conversation_id": "会话-😀"}', "not_found", "r", id="unicode-id"),
    pytest.param('{"type": "HISTORY", "req_id": "r", "conversation_id": null}', "bad_frame", "r", id="null-field"),
    pytest.param('{"type": "HISTORY", "req_id": "r"}', "bad_frame", "r", id="missing-field"),
    pytest.param('{"type": "HISTORY", "req_id": "r", "conversation_id": 7}', "bad_frame", "r", id="wrong-type"),
    pytest.param('{"type": "REACT", "req_id": "r", "conversation_id": "c", "conversation_seq": 1, "reaction_key": "a b", "action": "add"}', "bad_frame", "r", id="reaction-key-space"),
    pytest.param('{"type": "PING", "req_id": "r", "x": "' + "é" * 40_000 + '"}', "too_large", None, id="huge-string"),
    pytest.param("[1, 2, 3]", "bad_frame", None, id="top-level-array"),
    pytest.param("not json", "bad_frame", None, id="non-json"),
    pytest.param(b"\x00\x01binary", "bad_frame", None, id="binary"),
    pytest.param('{"type": ' + "9" * 5000 + "}", "bad_frame", None, id="5000-digit-int"),
]


@pytest.mark.parametrize(("frame", "code", "req_id"), HOSTILE_CASES)
def test_named_hostile_inputs_after_auth(target: FuzzTarget, frame: str | bytes, code: str, req_id: str | None) -> None:
    frames = target.exchange(frame)
    errors = [f for f in frames if f["type"] == "ERROR"]
    assert len(errors) == 1, frames
    assert (errors[0]["code"], errors[0].get("req_id")) == (code, req_id)


@pytest.mark.parametrize("frame", [p.values[0] for p in HOSTILE_CASES] + NOT_OBJECTS[:6])
def test_named_hostile_inputs_before_auth(target: FuzzTarget, frame: str | bytes) -> None:
    target.first_frame(frame)


def test_auth_ok_announces_the_depth_limit_and_it_holds(target: FuzzTarget) -> None:
    async def auth_ok() -> dict[str, Any]:
        ws = await websockets.connect(target.deployment.node.ws_url)
        await ws.send(json.dumps({"type": "AUTH", "token": target.token, "device_id": "phone"}))
        frame = json.loads(await ws.recv())
        await ws.close()
        return frame

    depth = target.loop.run(auth_ok())["limits"]["max_inbound_frame_depth"]
    assert depth == 32
    # The frame object is level 1: a payload nested depth - 1 deep passes, one more does not.
    at_limit = target.exchange('{"type": "PING", "req_id": "at", "x": ' + deep(depth - 1).text + "}")
    assert [f["type"] for f in at_limit if f.get("req_id") == "at"] == ["PONG"], at_limit
    over = target.exchange('{"type": "PING", "req_id": "over", "x": ' + deep(depth).text + "}")
    assert [(f["type"], f["code"]) for f in over] == [("ERROR", "bad_frame")], over


def send_text(target: FuzzTarget, payload: dict[str, Any]) -> dict[str, Any]:
    client_msg_id = f"odd-{next(_req_ids)}"
    sent = target.exchange(json.dumps({
        "type": "SEND", "req_id": client_msg_id, "conversation_id": target.known["conversation_id"][0],
        "client_msg_id": client_msg_id, "content_type": "text", "payload": payload,
    }))
    return next(f for f in sent if f.get("req_id") == client_msg_id)


def test_nul_in_a_payload_is_refused(target: FuzzTarget) -> None:
    """PostgreSQL stores no NUL in its JSON columns (bob's offline tablet gets a push task
    holding the preview): it was an `internal` ERROR there, and is bad_frame everywhere."""
    answer = send_text(target, ODD_PAYLOADS[0])
    assert (answer["type"], answer["code"]) == ("ERROR", "bad_frame"), answer
    # A backslash followed by "u0000" is text, not NUL.
    assert send_text(target, {"text": "\\u0000"})["type"] == "ACK"


@pytest.mark.parametrize("payload", ODD_PAYLOADS[1:], ids=["big-int", "unicode", "empty"])
def test_odd_text_payloads_are_stored_and_read_back(target: FuzzTarget, payload: dict[str, Any]) -> None:
    """SEND, then HISTORY: the payload comes back as sent (and bob's offline tablet got a
    push task), on either database."""
    conversation = target.known["conversation_id"][0]
    ack = send_text(target, payload)
    assert ack["type"] == "ACK", ack
    seq = ack["conversation_seq"]
    history = target.exchange(json.dumps({
        "type": "HISTORY", "req_id": "h", "conversation_id": conversation, "after_seq": seq - 1, "limit": 1,
    }))
    batch = next(f for f in history if f.get("req_id") == "h")
    assert [m["payload"] for m in batch["messages"]] == [payload], batch


def test_unicode_reaction_key_is_accepted(target: FuzzTarget) -> None:
    conversation = target.known["conversation_id"][0]
    frames = target.exchange(json.dumps({
        "type": "REACT", "req_id": "uni", "conversation_id": conversation, "conversation_seq": 1,
        "reaction_key": "ключ-👍", "action": "add",
    }))
    ack = next(f for f in frames if f.get("req_id") == "uni")
    assert ack["type"] == "ACK" and ack["counts"].get("ключ-👍") == 1, ack


def test_a_fuzzed_connection_is_still_usable_afterwards(target: FuzzTarget) -> None:
    frames = target.exchange(json.dumps({"type": "SYNC", "req_id": "after-fuzz", "after_mailbox_seq": 0}))
    batch = next(f for f in frames if f.get("req_id") == "after-fuzz")
    assert batch["type"] == "SYNC_BATCH" and batch["events"], batch
