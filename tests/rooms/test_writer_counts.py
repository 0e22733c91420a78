"""RoomWriter's member counts per node, in process: reports of one node that arrive out of
order (concurrent joins and leaves) never let an older count undo a newer one, since the
count decides which nodes get the room's batches."""

from __future__ import annotations

from rooms.ring import RoomRing
from rooms.writer import RoomWriter, TokenBucket


async def _nowhere(node_id: str, message: dict) -> None:
    raise AssertionError("nothing is published here")


def writer() -> RoomWriter:
    return RoomWriter(key="1:lobby", room_id="lobby", tenant_id=1, epoch=1, ring=RoomRing(1, 10, 60),
                      bucket=TokenBucket(rate=20, burst=20), publish=_nowhere)


def test_an_older_report_of_a_node_never_undoes_a_newer_one() -> None:
    room = writer()
    room.set_count("n2", 1, ("n2:01A", 2))     # C joined: the newer report arrives first...
    room.set_count("n2", 0, ("n2:01A", 1))     # ...then the older one, from A's leave
    assert room.counts == {"n2": 1} and room.online_count == 1
    room.set_count("n2", 0, ("n2:01A", 3))
    assert room.counts == {} and room.online_count == 0
    room.set_count("n2", 5, ("n2:01A", 3))     # the same report again changes nothing
    assert room.counts == {}


def test_a_restarted_node_is_heard_and_each_node_is_ordered_alone() -> None:
    room = writer()
    room.set_count("n2", 4, ("n2:01A", 90))
    room.set_count("n2", 2, ("n2:01B", 1))     # a later process of n2: its holder sorts after
    room.set_count("n3", 7, ("n3:01A", 1))     # n3's sequence is its own
    assert room.counts == {"n2": 2, "n3": 7}
    room.drop_nodes({"n3"})                    # n2 died: forgotten, order included
    room.set_count("n2", 1, ("n2:01A", 1))
    assert room.counts == {"n2": 1, "n3": 7}
