"""Who is online, asked before a log append takes the conversation's lock (issue #20).

The presence directory is Redis on several nodes and the daphne loop when embedded: asking it
under the row lock (SQLite: the database's one write lock) makes every other writer of the
conversation wait for Redis or for a busy loop. So the caller asks first and the append
decides who gets a PushTask from the answer. A member who joins or connects in between counts
as offline and gets a push too many (harmless: the client shows the message once); a device
that disconnects in between is missed exactly as one that disconnects just after the lookup
always was, and finds the message in its mailbox when it reconnects.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Iterable, Mapping, Set

from asgiref.sync import async_to_sync
from django.db import connection
from django.db.models import QuerySet

from qim.conf import limit
from qim.node.connection_node import get_node
from qim.models import Conversation, Device, MembershipInterval, User

# user id -> ids of that user's devices connected to some node; absent users are offline.
OnlineDevices = Mapping[str, Set[str]]

# What an append is given when none of its rows can count (recall, edit): nobody was asked.
NOT_ASKED: OnlineDevices = {}


def online_before_lock(tenant_id: int, conversation_id: str, *, also: Iterable[str] = ()) -> OnlineDevices:
    """The connected devices of the conversation's current members that have push credentials,
    and of `also` (users of the tenant about to join). Call it outside any transaction; another
    tenant's conversation has no members here, so it answers nobody."""
    user_ids = set(capable_members(tenant_id, conversation_id))
    also = list(also)
    if also:
        user_ids |= set(
            User.objects.filter(tenant_id=tenant_id, username__in=also, id__in=_capable())
            .values_list("username", flat=True)
        )
    return online_devices_of(tenant_id, user_ids)


def capable_members(tenant_id: int, conversation_id: str) -> QuerySet:
    """The user ids of the conversation's current members with a push-capable device, as a
    query not yet run (a SEND batch sends it with its idempotency read, qim/actions/messages.py)."""
    return MembershipInterval.objects.filter(
        conversation_id=conversation_id, conversation__tenant_id=tenant_id, left_at__isnull=True,
        user_id__in=_capable(),
    ).values_list("user__username", flat=True)


def capable_members_statement(
    tenant_id: int, conversation_id: str, *, senders: Collection[int] = (), mentioned: Collection[str] = (),
) -> tuple[str, list]:
    """capable_members as SQL and params, the SQL written out once: compiling the QuerySet
    for every SEND batch was a sixth of the node's busy samples (docs/performance.md,
    "Batched, set-based SEND on PostgreSQL"). The same tenant wall (the conversation's
    tenant). In a group whose default tier is mention_only only the members a SEND writes
    to are asked about (those who chose `full`, the senders, the mentioned: see
    wanted_members_sql), never all 100 000. SQLite (embedded, one node) asks about every member."""
    if connection.vendor != "postgresql":
        return _all_capable_members_sql(), [tenant_id, conversation_id]
    return _capable_members_sql(), [*wanted_members_params(conversation_id, senders, mentioned), tenant_id]


@functools.cache
def _all_capable_members_sql() -> str:
    return (
        f"SELECT u.username FROM {MembershipInterval._meta.db_table} i "
        f"JOIN {Conversation._meta.db_table} c ON c.id = i.conversation_id JOIN {User._meta.db_table} u ON u.id = i.user_id "
        "WHERE c.tenant_id = %s AND i.conversation_id = %s AND i.left_at IS NULL "
        f"AND i.user_id IN (SELECT d.user_id FROM {Device._meta.db_table} d WHERE NOT (d.push_token = '' AND d.voip_token = ''))"
    )


@functools.cache
def _capable_members_sql() -> str:
    """_CAPABLE_MEMBERS_SQL with the models' table names, formatted once per process."""
    return _CAPABLE_MEMBERS_SQL.format(
        conversation=Conversation._meta.db_table, user=User._meta.db_table, device=Device._meta.db_table,
        wanted=wanted_members_sql(),
    )


_CAPABLE_MEMBERS_SQL = (
    "SELECT w.username FROM ({wanted}) w "
    "WHERE w.tenant_id = %s AND (SELECT true FROM {device} d WHERE d.user_id = w.user_id "
    "AND NOT (d.push_token = '' AND d.voip_token = '') LIMIT 1)"
)
# The device test is a scalar subquery, probed per member by the device's user index: as
# EXISTS (a semi-join) PostgreSQL hashed the whole device table, every tenant's, per SEND.


def wanted_members_sql() -> str:
    """PostgreSQL: (user_id, username, tenant_id, role, tier) of the current members a SEND
    needs: all of them, unless the group's default tier is mention_only (the operator's
    choice, else more than QIM_LARGE_GROUP_MEMBERS members); then only those who chose
    `full`, the senders and the mentioned, each branch an index lookup. Whether the group is
    that large is a scalar subquery of the one conversation row, so PostgreSQL decides it once
    and never runs the branch not taken (a join to the row, with or without statistics,
    scanned all 100 000 intervals). Each branch joins the users itself: joined outside, the
    union's estimate (the all-members branch's) had PostgreSQL hash the whole user table for
    the three rows a large group's SEND reads. Parameters: wanted_members_params."""
    interval, user, conversation = MembershipInterval._meta.db_table, User._meta.db_table, Conversation._meta.db_table
    big = (
        "(SELECT (c.default_tier = 'mention_only' OR (c.default_tier = '' AND c.member_count > %s)) "
        f"FROM {conversation} c WHERE c.id = %s)"
    )
    current = "i.conversation_id = %s AND i.left_at IS NULL"
    columns = "i.user_id, u.username, u.tenant_id, i.role, i.tier"
    return (
        f"SELECT {columns} FROM {interval} i JOIN {user} u ON u.id = i.user_id WHERE NOT {big} AND {current} "
        f"UNION SELECT {columns} FROM {interval} i JOIN {user} u ON u.id = i.user_id "
        f"WHERE {big} AND {current} AND i.tier = 'full' "
        f"UNION SELECT {columns} FROM unnest(%s::bigint[]) s (user_id) JOIN {interval} i ON i.user_id = s.user_id "
        f"JOIN {user} u ON u.id = i.user_id WHERE {big} AND {current} "
        f"UNION SELECT {columns} FROM unnest(%s::text[]) n (username) "
        f"JOIN {user} u ON u.username = n.username JOIN {interval} i ON i.user_id = u.id "
        f"WHERE {big} AND u.tenant_id = (SELECT tenant_id FROM {conversation} WHERE id = %s) AND {current}"
    )


def wanted_members_params(conversation_id: str, senders: Collection[int], mentioned: Collection[str]) -> list:
    """The parameters of wanted_members_sql, in order."""
    large, cid = int(limit("large_group_members")), conversation_id
    ids = "{" + ",".join(str(int(pk)) for pk in sorted(senders)) + "}"
    return [large, cid, cid, large, cid, cid, ids, large, cid, cid, sorted(mentioned), large, cid, cid, cid]


def online_devices_of(tenant_id: int, user_ids: Collection[str]) -> OnlineDevices:
    """Which devices of `user_ids` (of one tenant) are connected: asks the presence directory."""
    if not user_ids:
        return NOT_ASKED
    return async_to_sync(get_node().directory.online_devices)(tenant_id, sorted(user_ids))


def _capable() -> QuerySet:
    return Device.objects.exclude(push_token="", voip_token="").values("user_id")
