"""SYNC_BATCH and HISTORY_BATCH stay under QIM_MAX_OUTBOUND_FRAME_BYTES (qim/node/fit.py):
a backlog of big messages arrives in pages that each fit the cap, every event and row once
and in order, `has_more` until the end, on a real node read by clients whose max message
size is the cap."""

from __future__ import annotations

import pytest

from qimclient import QimClient
from tests.core.conversation_helpers import create_group, send_text
from tests.harness.capped import CappedReader, summary
from tests.harness.personas import TenantHandle

CAP = 128 * 1024  # four 30 kB messages a frame: 40 of them need ten pages
BIG = 30_000
SENT = 40
LONG_REQ_ID = "r" * 2000  # echoed in the reply: the page still fits


def text_of(n: int) -> str:
    return f"{n:03d}" + chr(0x41 + n % 26) * BIG


async def send_big(client: QimClient, group: str, count: int) -> list[dict]:
    return [await send_text(client, group, text_of(n)) for n in range(count)]


async def sync_pages(reader: CappedReader, limit: int | None = None) -> list[dict]:
    """SYNC from 0 until has_more is false, each page asked with a long req_id."""
    pages: list[dict] = []
    after = 0
    while not pages or pages[-1]["has_more"]:
        frame = {"type": "SYNC", "req_id": f"s{len(pages)}-{LONG_REQ_ID}", "after_mailbox_seq": after}
        if limit is not None:
            frame["limit"] = limit
        pages.append(await reader.request(frame))
        assert pages[-1]["type"] == "SYNC_BATCH", summary(pages[-1])
        after = pages[-1]["next_mailbox_seq"]
        assert len(pages) <= 4 * SENT, "SYNC does not end"
    return pages


async def history_pages(reader: CappedReader, group: str, forward: bool, **bounds: int) -> list[dict]:
    """HISTORY paged with after_seq (forward) or before_seq until has_more is false."""
    pages: list[dict] = []
    while not pages or pages[-1]["has_more"]:
        if pages:
            messages = pages[-1]["messages"]
            bounds["after_seq" if forward else "before_seq"] = (
                messages[-1] if forward else messages[0])["conversation_seq"]
        pages.append(await reader.request({"type": "HISTORY", "req_id": f"h{len(pages)}-{LONG_REQ_ID}",
                                           "conversation_id": group, "limit": 200, **bounds}))
        assert pages[-1]["type"] == "HISTORY_BATCH", summary(pages[-1])
        assert len(pages) <= SENT, "HISTORY does not end"
    return pages


def assert_cut_pages(pages: list[dict], listed: str) -> None:
    """Every page but the last says has_more and holds more than one item and less than all."""
    assert len(pages) >= SENT * BIG // CAP
    assert [page["has_more"] for page in pages] == [True] * (len(pages) - 1) + [False]
    assert all(1 < len(page[listed]) < SENT for page in pages[:-1])


async def test_sync_of_a_big_backlog_pages_under_the_cap_and_skips_nothing(capped_acme: TenantHandle) -> None:
    alice, bob = capped_acme.persona("alice"), capped_acme.persona("bob")
    group = create_group(alice, bob)
    a, b = await alice.connect(sync=False), await bob.connect(sync=False)
    acks, edits = [], 0
    for n in range(SENT):
        acks.append(await send_text(a, group, text_of(n)))
        if n % 5 == 4:  # bob's phone edits: edit events of his mailbox that his phone skips
            own = await send_text(b, group, f"own {n}")
            await b.request("EDIT", conversation_id=group, conversation_seq=own["conversation_seq"],
                            payload={"text": f"edited {n}"})
            edits += 1

    # The tablet sees every entry: the mailbox's order and seqs, the phone's edits included.
    tablet = await CappedReader.open(bob, CAP, device_id="tablet")
    everything = [e for page in await sync_pages(tablet) for e in page["events"]]
    mailbox_seqs = [e["mailbox_seq"] for e in everything]
    assert mailbox_seqs == sorted(set(mailbox_seqs))
    assert [e["message"]["message_id"] for e in everything if e["kind"] == "message"
            and e["message"]["sender_id"] == alice.user_id] == [ack["message_id"] for ack in acks]
    skipped = [e for e in everything if e["kind"] == "control" and e["control"]["origin_device_id"] == "phone"]
    assert len(skipped) == edits and everything[-1] in skipped

    # The phone: every entry but its own edits, once, in order; the cursor ends past them.
    phone = await CappedReader.open(bob, CAP)
    for limit in (None, 1000):
        pages = await sync_pages(phone, limit)
        assert_cut_pages(pages, "events")
        events = [e for page in pages for e in page["events"]]
        assert [e["mailbox_seq"] for e in events] == [e["mailbox_seq"] for e in everything if e not in skipped]
        assert [e["message"]["payload"]["text"] for e in events if e["message"]["sender_id"] == alice.user_id] == [
            text_of(n) for n in range(SENT)]
        # A cut page's cursor is its last event: the next page starts right after it.
        assert all(page["next_mailbox_seq"] == page["events"][-1]["mailbox_seq"] for page in pages[:-1])
        assert pages[-1]["next_mailbox_seq"] == mailbox_seqs[-1]
    for reader in (tablet, phone):
        reader.assert_under_cap()
        await reader.assert_nothing_more()

    # Nothing new: an empty page, the same cursor, has_more false.
    done = await phone.request({"type": "SYNC", "req_id": "end", "after_mailbox_seq": mailbox_seqs[-1]})
    assert (done["events"], done["next_mailbox_seq"], done["has_more"]) == ([], mailbox_seqs[-1], False)
    for reader in (tablet, phone):
        await reader.close()


async def test_a_small_sync_page_is_one_frame_as_before(capped_acme: TenantHandle) -> None:
    alice, bob = capped_acme.persona("alice"), capped_acme.persona("bob")
    group = create_group(alice, bob)
    a = await alice.connect(sync=False)
    acks = [await send_text(a, group, f"small {n}") for n in range(5)]
    reader = await CappedReader.open(bob, CAP)
    page = await reader.request({"type": "SYNC", "req_id": "s", "after_mailbox_seq": 0, "limit": 3})
    assert [e["message"]["message_id"] for e in page["events"]] == [ack["message_id"] for ack in acks[:3]]
    assert page["has_more"] is True and page["next_mailbox_seq"] == page["events"][-1]["mailbox_seq"]
    rest = await reader.request({"type": "SYNC", "req_id": "t", "after_mailbox_seq": page["next_mailbox_seq"]})
    assert [e["message"]["message_id"] for e in rest["events"]] == [ack["message_id"] for ack in acks[3:]]
    assert rest["has_more"] is False
    await reader.assert_nothing_more()
    await reader.close()


async def test_history_pages_under_the_cap_in_both_directions(capped_acme: TenantHandle) -> None:
    alice, bob = capped_acme.persona("alice"), capped_acme.persona("bob")
    group = create_group(alice, bob)
    a = await alice.connect(sync=False)
    seqs = [ack["conversation_seq"] for ack in await send_big(a, group, SENT)]
    reader = await CappedReader.open(bob, CAP)

    # Backwards from the head: each page holds the newest rows before its cursor.
    backwards = await history_pages(reader, group, forward=False)
    assert_cut_pages(backwards, "messages")
    assert backwards[0]["messages"][-1]["conversation_seq"] == seqs[-1]
    rows = [m for page in reversed(backwards) for m in page["messages"]]
    assert [m["conversation_seq"] for m in rows] == seqs
    assert [m["payload"]["text"] for m in rows] == [text_of(n) for n in range(SENT)]

    # Forwards from the start: each page holds the oldest rows after its cursor.
    forwards = await history_pages(reader, group, forward=True, after_seq=0)
    assert_cut_pages(forwards, "messages")
    assert [m["conversation_seq"] for page in forwards for m in page["messages"]] == seqs

    # Between two bounds: forwards, stopping before before_seq.
    window = await history_pages(reader, group, forward=True, after_seq=seqs[4], before_seq=seqs[35])
    assert [m["conversation_seq"] for page in window for m in page["messages"]] == seqs[5:35]
    reader.assert_under_cap()
    await reader.assert_nothing_more()
    await reader.close()


async def test_history_says_has_more_when_the_limit_leaves_rows_out(capped_acme: TenantHandle) -> None:
    alice, bob = capped_acme.persona("alice"), capped_acme.persona("bob")
    group = create_group(alice, bob)
    a, b = await alice.connect(sync=False), await bob.connect(sync=False)
    seqs = [(await send_text(a, group, f"m{n}"))["conversation_seq"] for n in range(5)]
    newest = await b.request("HISTORY", conversation_id=group, limit=3)
    assert ([m["conversation_seq"] for m in newest["messages"]], newest["has_more"]) == (seqs[2:], True)
    oldest = await b.request("HISTORY", conversation_id=group, before_seq=seqs[2], limit=3)
    assert ([m["conversation_seq"] for m in oldest["messages"]], oldest["has_more"]) == (seqs[:2], False)
    forward = await b.request("HISTORY", conversation_id=group, after_seq=0, limit=5)
    assert ([m["conversation_seq"] for m in forward["messages"]], forward["has_more"]) == (seqs, False)
    ahead = await b.request("HISTORY", conversation_id=group, after_seq=seqs[-1])
    assert (ahead["messages"], ahead["has_more"]) == ([], False)


async def test_the_sdk_catches_up_and_reads_history_across_cut_pages(capped_acme: TenantHandle) -> None:
    alice, bob = capped_acme.persona("alice"), capped_acme.persona("bob")
    group = create_group(alice, bob)
    a = await alice.connect(sync=False)
    seqs = [ack["conversation_seq"] for ack in await send_big(a, group, SENT)]

    b = await bob.connect()  # its MailboxSync pages SYNC on has_more
    events = [await b.next_event(timeout=10) for _ in range(SENT)]
    assert [e["message"]["payload"]["text"] for e in events] == [text_of(n) for n in range(SENT)]
    with pytest.raises(TimeoutError):
        await b.next_event(timeout=0.3)

    # history() asks on while a cut reply says has_more, until it holds `limit` rows.
    assert [m["conversation_seq"] for m in await b.history(group, limit=200)] == seqs
    assert [m["conversation_seq"] for m in await b.history(group, after_seq=0, limit=200)] == seqs
    assert [m["conversation_seq"] for m in await b.history(group, limit=25)] == seqs[-25:]
    assert [m["conversation_seq"] for m in await b.history(group, after_seq=seqs[9], limit=12)] == seqs[10:22]
    assert [m["conversation_seq"] for m in await b.history(group)] == seqs[:SENT][-50:]
