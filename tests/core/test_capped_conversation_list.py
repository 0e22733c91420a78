"""CONVERSATION_LIST stays under QIM_MAX_OUTBOUND_FRAME_BYTES: a user in many conversations
pages through the list by `next_before`, every conversation once and in the list's order, the
whole badge on every page; a short list answers in one frame as before; bad cursors answer
`bad_frame` on an open connection. A real node, read by clients whose max message size is
the cap."""

from __future__ import annotations

import pytest

from qimclient import QimError
from tests.conftest import QimDeployment
from tests.core.conversation_helpers import create_group, send_text
from tests.harness.capped import CappedReader
from tests.harness.personas import Persona, TenantHandle

CAP = 8 * 1024  # about a dozen of these items a frame: GROUPS of them need five pages
GROUPS = 60
LONG_REQ_ID = "r" * 1500  # echoed in the reply: the page still fits
ITEM_KEYS = {
    "conversation_id", "kind", "title", "last_seq", "last_activity_ms", "preview", "unread", "member",
    "role", "tier", "mention_count",
}


async def busy_bob(capped_acme: TenantHandle) -> tuple[Persona, list[str]]:
    """bob in GROUPS groups with long CJK titles, each with alice's messages (1 to 3 of them:
    unread differs) and bob's own in some (not unread)."""
    alice, bob = capped_acme.persona("alice"), capped_acme.persona("bob")
    a, b = await alice.connect(sync=False), await bob.connect(sync=False)
    groups = []
    for n in range(GROUPS):
        group = create_group(alice, bob, title=f"{n:02d} " + "会话标题" * 25)
        groups.append(group)
        for m in range(1 + n % 3):
            await send_text(a, group, f"{n}.{m} " + "预览文字" * 15)
        if n % 4 == 0:
            await send_text(b, group, f"bob {n}")
    return bob, groups


async def list_pages(reader: CappedReader, **fields: object) -> list[dict]:
    """CONVERSATIONS from the top, on by next_before until has_more is false."""
    pages: list[dict] = []
    while not pages or pages[-1]["has_more"]:
        frame = {"type": "CONVERSATIONS", "req_id": f"c{len(pages)}-{LONG_REQ_ID}", **fields}
        if pages:
            frame["before"] = pages[-1]["next_before"]
        pages.append(await reader.request(frame))
        assert pages[-1]["type"] == "CONVERSATION_LIST", pages[-1]
        assert len(pages) <= GROUPS, "CONVERSATIONS does not end"
    return pages


def key(item: dict) -> tuple[int, str]:
    return (item["last_activity_ms"], item["conversation_id"])


async def test_a_long_list_pages_under_the_cap_once_in_order_with_the_whole_badge(capped_acme: TenantHandle) -> None:
    bob, groups = await busy_bob(capped_acme)
    reader = await CappedReader.open(bob, CAP)
    for fields in ({}, {"limit": 1000}, {"limit": 7}):
        pages = await list_pages(reader, **fields)
        assert len(pages) >= 5
        assert [page["has_more"] for page in pages] == [True] * (len(pages) - 1) + [False]
        items = [item for page in pages for item in page["items"]]
        assert sorted(item["conversation_id"] for item in items) == sorted(groups)  # each once
        assert [key(item) for item in items] == sorted(map(key, items), reverse=True)
        # Each cut page's cursor is its last item; the last page has none.
        assert all(page["next_before"] == {"last_activity_ms": page["items"][-1]["last_activity_ms"],
                                           "conversation_id": page["items"][-1]["conversation_id"]}
                   for page in pages[:-1])
        assert "next_before" not in pages[-1]
        assert {page["badge"] for page in pages} == {sum(item["unread"] for item in items)}
        assert sum(item["unread"] for item in items) == sum(1 + n % 3 for n in range(GROUPS))
        if "limit" in fields and fields["limit"] < 10:
            assert all(len(page["items"]) == fields["limit"] for page in pages[:-1])
    assert all(set(item) == ITEM_KEYS for item in items)
    reader.assert_under_cap()
    await reader.assert_nothing_more()
    await reader.close()

    # The SDK joins the pages into one frame: the whole list, in order, the whole badge.
    b = await bob.connect(sync=False)
    merged = await b.conversations()
    assert [item["conversation_id"] for item in merged["items"]] == [item["conversation_id"] for item in items]
    assert (merged["badge"], merged["has_more"]) == (pages[0]["badge"], False) and "next_before" not in merged


async def test_a_short_list_is_one_frame_as_before(capped_acme: TenantHandle) -> None:
    alice, carol = capped_acme.persona("alice"), capped_acme.persona("carol")
    quiet, chatty = create_group(alice, carol, title="quiet"), create_group(alice, carol, title="chatty")
    a = await alice.connect(sync=False)
    await send_text(a, chatty, "hi")
    reader = await CappedReader.open(carol, CAP)
    listing = await reader.request({"type": "CONVERSATIONS", "req_id": "c"})
    assert set(listing) == {"type", "req_id", "items", "badge", "has_more"}
    assert (listing["badge"], listing["has_more"]) == (1, False)
    assert [(i["conversation_id"], i["title"], i["last_seq"], i["preview"], i["unread"], i["member"])
            for i in listing["items"]] == [(chatty, "chatty", 1, "hi", 1, True), (quiet, "quiet", 0, "", 0, True)]
    await reader.assert_nothing_more()
    await reader.close()


async def test_bad_cursors_answer_bad_frame_and_reveal_nothing(capped_acme: TenantHandle, capped: QimDeployment) -> None:
    alice, bob = capped_acme.persona("alice"), capped_acme.persona("bob")
    group = create_group(alice, bob)
    elsewhere = capped.tenants["globex"]
    other, outsider = elsewhere.persona("alice"), elsewhere.persona("bob")
    theirs = create_group(other, outsider)
    b = await bob.connect(sync=False)
    bad_fields = [
        {"before": "yesterday"},
        {"before": {"last_activity_ms": "1", "conversation_id": group}},
        {"before": {"last_activity_ms": -1, "conversation_id": group}},
        {"before": {"last_activity_ms": 1}},
        {"before": {"last_activity_ms": 1, "conversation_id": 5}},
        {"before": {"last_activity_ms": 1, "conversation_id": ""}},
        {"limit": 0},
        {"limit": "3"},
    ]
    for fields in bad_fields:
        with pytest.raises(QimError) as refused:
            await b.request("CONVERSATIONS", **fields)
        assert refused.value.code == "bad_frame", fields
    # A conversation of another tenant answers exactly as one that does not exist.
    messages = []
    for conversation_id in (theirs, "01NOSUCHCONVERSATION000000"):
        with pytest.raises(QimError) as refused:
            await b.request("CONVERSATIONS", before={"last_activity_ms": 0, "conversation_id": conversation_id})
        messages.append((refused.value.code, refused.value.message))
    assert messages[0] == messages[1] and messages[0][0] == "bad_frame"
    # The connection is still there and answers.
    listing = await b.request("CONVERSATIONS", before={"last_activity_ms": 2**62, "conversation_id": group})
    assert ([i["conversation_id"] for i in listing["items"]], listing["has_more"]) == ([group], False)
