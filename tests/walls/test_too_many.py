"""Too many subscriptions on one socket: presence watches stop at 1000 with `too_large`, the
refused request changes nothing, and the socket keeps working."""

from __future__ import annotations

import pytest

from qimclient.errors import QimError
from tests.harness.personas import TenantHandle

MAX_PRESENCE_WATCH = 1000


async def test_presence_watches_stop_at_the_cap(acme: TenantHandle) -> None:
    alice, bob = acme.persona("alice"), acme.persona("bob")
    client = await alice.connect()
    with pytest.raises(QimError) as refused:
        await client.request("PRESENCE_SUB", user_ids=[f"nobody{n}" for n in range(MAX_PRESENCE_WATCH + 1)])
    assert refused.value.code == "too_large"
    # Refused whole: it watched nothing, or 999 more would not fit now.
    first = await client.request("PRESENCE_SUB", user_ids=[f"nobody{n}" for n in range(MAX_PRESENCE_WATCH - 1)])
    assert len(first["presence"]) == MAX_PRESENCE_WATCH - 1
    repeat = await client.request("PRESENCE_SUB", user_ids=["nobody0", "nobody0", bob.user_id])  # one new id
    assert repeat["presence"] == {"nobody0": False, bob.user_id: False}
    with pytest.raises(QimError) as over:
        await client.request("PRESENCE_SUB", user_ids=["one-too-many"])
    assert over.value.code == "too_large"
    await bob.connect()
    online = await client.next_push(timeout=30, type="PRESENCE")
    assert (online["user_id"], online["online"]) == (bob.user_id, True)
    await client.request("PRESENCE_UNSUB", user_ids=["nobody1"])
    assert (await client.request("PRESENCE_SUB", user_ids=["one-more"]))["presence"] == {"one-more": False}
