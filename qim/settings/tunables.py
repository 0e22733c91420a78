"""The tunables of the design doc (protocol.md §1: AUTH_OK's `limits`) and TURN."""

from __future__ import annotations

from qim.settings.environment import env

TUNABLE_DEFAULTS: dict[str, float] = {
    "room_log_retention_minutes": 30,
    "room_ring_max_items": 1000,
    "room_msg_rate": 20,
    "room_outbound_frame_rate": 10,
    "max_rooms_per_connection": 20,
    "read_sync_merge_window_s": 3,
    "recall_self_window_s": 120,
    "edit_self_window_s": 900,
    "max_custom_payload_bytes": 32768,
    "per_user_msg_rate": 20,
    "per_user_reaction_rate": 5,
    "reaction_detail_max_members": 1000,
    "reaction_detail_max_per_message": 10000,
    "reaction_push_merge_window_s": 2,
    "rtc_ring_timeout_s": 60,
    "rtc_voip_push_daily_quota": 200,
    "turn_ttl_s": 86400,
    # Ours (documented in docs/protocol.md): how long a client has to send AUTH, and how long
    # a dead node's presence entries outlive its last heartbeat.
    "auth_timeout_s": 10,
    "presence_ttl_s": 30,
    # The largest server-to-client frame (UTF-8 bytes of its JSON): room batches and replays,
    # SYNC_BATCH and HISTORY_BATCH are cut below it (qim/node/fit.py). Daphne's
    # --websocket-max-message-size (autobahn's maxMessagePayloadSize, 1 MiB by default and in
    # the Makefile) bounds what it sends too; the cut is exact, so the 64 KiB under that is
    # only a margin. It must stay above one event or message (max_custom_payload_bytes and
    # its fields): a single one is never cut.
    "max_outbound_frame_bytes": 1024 * 1024 - 64 * 1024,
    # Ours too: how long a call's device may stay disconnected (a network switch, a
    # reconnect) before the server ends the call for it (rtc/departures.py).
    "rtc_disconnect_grace_s": 10,
    # Ours: how many distinct reaction keys one message may carry. REACTION_UPDATE, REACT's
    # ACK and the message's `reactions` carry the whole `counts` map, about 45 bytes a key;
    # unbounded, a message with some 20 000 keys would outgrow the frame cap.
    "reaction_max_keys_per_message": 50,
    # Ours: each authenticated connection's inbound frame budget, a token bucket of
    # `inbound_frame_burst` frames refilled at `inbound_frame_rate` per second (a frame over it
    # answers rate_limited, unhandled); more than `inbound_flood_max_refused` refused frames
    # within `inbound_flood_window_s` close the socket with 4430 (qim/gateway/inbound_budget.py).
    # Far above any real client and the benchmarks' paced senders.
    "inbound_frame_rate": 500,
    "inbound_frame_burst": 1000,
    "inbound_flood_max_refused": 200,
    "inbound_flood_window_s": 10,
    # Ours (issue #34): a group with more current members than this puts members who chose no
    # tier in `mention_only` (design §4.3); and how many users one SEND or EDIT may mention.
    "large_group_members": 1000,
    "max_mentions_per_message": 50,
}


def _number(value: float) -> int | float:
    """Whole numbers stay ints so counts and limits read naturally in AUTH_OK."""
    return int(value) if float(value).is_integer() else float(value)


QIM_LIMITS: dict[str, int | float] = {
    name: _number(env.float(f"QIM_{name.upper()}", default=default))
    for name, default in TUNABLE_DEFAULTS.items()
}
QIM_TURN_URLS = env.list("QIM_TURN_URLS", default=[])
QIM_TURN_SECRET = env.str("QIM_TURN_SECRET", default="")
