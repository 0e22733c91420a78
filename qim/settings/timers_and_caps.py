"""The server's own timers and caps: retention batches, registry and recovery intervals, room
leases, token lifetimes, metrics access, login throttles, frame and buffer sizes."""

from __future__ import annotations

from qim.settings.environment import env

# Retention (qim/ops/retention.py): how many rows `qim_retention` deletes per transaction (short
# transactions, so SENDs never wait long on its locks). The retention itself is per tenant
# (Tenant.message_retention_s, 0 = keep forever), set in the admin or over REST.
QIM_RETENTION_BATCH = env.int("QIM_RETENTION_BATCH", default=1000)
# How old a node's copy of a tenant's registry may get before it re-checks the version in
# the database (the fallback when a change notice is missed; protocol.md §6 asks for 1 s).
QIM_REGISTRY_MAX_AGE_S = env.float("QIM_REGISTRY_MAX_AGE_S", default=1.0)
# How often each node finishes recalls and edits whose second step never ran (a node that
# died between the steps, a step that failed), among those of the last 10 minutes
# (qim/ops/recovery.py); 0 leaves it to node starts and `qim_recover`.
QIM_RECOVERY_INTERVAL_S = env.float("QIM_RECOVERY_INTERVAL_S", default=60.0)
# How many types (built-in and disabled ones included) one tenant's registry may hold: the
# REGISTRY reply carries them all in one frame, 300 bytes to 1 KiB each (long names and
# templates), so 500 stay under the default frame cap whatever they hold.
QIM_MAX_CUSTOM_TYPES_PER_TENANT = env.int("QIM_MAX_CUSTOM_TYPES_PER_TENANT", default=500)
# How long a RoomWriter's lease lasts without renewal (renewed every third of it): after a
# writer dies, another node takes the room over within about this long.
QIM_ROOM_LEASE_TTL_S = env.float("QIM_ROOM_LEASE_TTL_S", default=5.0)
# A writer whose room has had no members on any node and no message for this long, and whose
# ring is empty, gives its lease up: an idle room costs no renewals (the next node that needs
# it becomes its writer, epoch + 1). 0 keeps every writer until its node stops.
QIM_ROOM_WRITER_IDLE_S = env.float("QIM_ROOM_WRITER_IDLE_S", default=3600.0)
# Credentials (qim/frames/credentials.py): a token older than QIM_TOKEN_TTL_S is refused (0:
# tokens never expire); every node re-checks its sockets' tokens this often, so a socket whose
# token was revoked, expired or whose user was deactivated is closed (4403) even when the
# revocation notice never reached the node.
QIM_TOKEN_TTL_S = env.float("QIM_TOKEN_TTL_S", default=0.0)
QIM_TOKEN_RECHECK_S = env.float("QIM_TOKEN_RECHECK_S", default=30.0)
# Prometheus metrics (qim/ops/metrics/, docs/operations.md "Metrics"). With a token, /metrics (on
# every node, and on the push worker) answers only `Authorization: Bearer <token>`; empty, it
# answers only loopback clients that did not come through a proxy. The push worker serves its
# own /metrics on QIM_WORKER_METRICS_PORT (0: none), bound to QIM_WORKER_METRICS_BIND.
QIM_METRICS_TOKEN = env.str("QIM_METRICS_TOKEN", default="")
QIM_WORKER_METRICS_PORT = env.int("QIM_WORKER_METRICS_PORT", default=0)
QIM_WORKER_METRICS_BIND = env.str("QIM_WORKER_METRICS_BIND", default="127.0.0.1")
# POST auth/token attempts (qim/api/login_throttle.py), in the `limits` library's notation
# ("10/minute", "100 per hour"), counted per tenant+username and per client address.
QIM_AUTH_TOKEN_RATE_PER_ACCOUNT = env.str("QIM_AUTH_TOKEN_RATE_PER_ACCOUNT", default="10/minute")
QIM_AUTH_TOKEN_RATE_PER_ADDRESS = env.str("QIM_AUTH_TOKEN_RATE_PER_ADDRESS", default="60/minute")
# Unread bytes a socket may have queued on its node before it is closed (4429) as too slow.
QIM_MAX_OUTBOUND_BUFFER_BYTES = env.int("QIM_MAX_OUTBOUND_BUFFER_BYTES", default=4 * 1024 * 1024)
# Frames larger than this get ERROR too_large (protocol.md §4); daphne's own limit is set higher.
QIM_MAX_INBOUND_FRAME_BYTES = 64 * 1024
# Frames nested deeper than this (arrays and objects, payload included) get ERROR bad_frame:
# decoding and encoding recurse once per level (qim/gateway/inbound.py).
QIM_MAX_INBOUND_FRAME_DEPTH = 32
# The collector's young-generation threshold (gc.set_threshold's first value; Python's default
# is 700), set once the node has started (qim/asgi.py). A reconnect storm allocates tens of
# thousands of short-lived objects per second; at 700 the young collections and the promotions
# they cause cost ~15 % of the node's CPU per reconnect, at 20 000 about none (docs/performance.md,
# "The collector: freeze and thresholds"). At most a few MB of garbage waits for a collection meanwhile.
QIM_GC_YOUNG_THRESHOLD = env.int("QIM_GC_YOUNG_THRESHOLD", default=20_000)
# Freeze what each middle or full collector pass leaves alive (qim/infra/gc_freeze.py), so that the
# old generation stays empty and no pass rescans every socket's objects; with it the middle
# threshold defaults to 1 (below). Off by default: it moved the collector's big passes out of a
# 10 000-member room's traffic (p99 lower in four of four pairs), but cost about 1.5 KiB per idle
# connection (cycles that outlive a middle pass wait for a thaw) and 15-75 % more collector CPU
# in a reconnect storm (docs/performance.md, "The collector: freeze and thresholds"). Frozen cyclic
# garbage (a closed connection's) waits for a thaw: one full pass every QIM_GC_UNFREEZE_PERIOD_S, or
# sooner once the frozen count has grown by QIM_GC_UNFREEZE_GROWTH times what the last thaw left
# (1.0: doubled), so garbage stays within that share of the heap.
QIM_GC_FREEZE = env.bool("QIM_GC_FREEZE", default=False)
# The collector's two older thresholds (gc.set_threshold's second and third), set with the
# young one. Python's 10 and 10, or middle 1 with QIM_GC_FREEZE: a middle pass after every
# second young pass scans only what those kept, and freezing keeps its survivors out of every
# later pass. At 10, the first middle pass after a join storm scans what eleven young passes
# kept: 140-220 ms of a 5 000-socket node's CPU in one step. Without freezing, (1, 100)
# measured worse on the quiet machine (two-node room p99 436 and 757 ms against 380 and 399 at
# (10, 10)): the survivors went on to the old generation and its full passes
# (docs/performance.md, "The collector: freeze and thresholds").
QIM_GC_MIDDLE_THRESHOLD = env.int("QIM_GC_MIDDLE_THRESHOLD", default=1 if QIM_GC_FREEZE else 10)
# A full pass walks every object of every socket (over a second of CPU at 20 000 sockets). At
# Python's 10 one fell inside every 10 000-client reconnect storm, a sixth of its node CPU; at
# 100 (with the middle at 10) none did. What waits longer is the cyclic garbage of closed
# connections that had reached the old generation, about 1.1 KiB each: +10-12 MiB of RSS after
# a storm of 10 000 (docs/performance.md, "The collector: freeze and thresholds"). Python
# also still waits until a quarter more objects were promoted since the last full pass.
QIM_GC_OLD_THRESHOLD = env.int("QIM_GC_OLD_THRESHOLD", default=100)
QIM_GC_UNFREEZE_PERIOD_S = env.float("QIM_GC_UNFREEZE_PERIOD_S", default=600.0)
QIM_GC_UNFREEZE_GROWTH = env.float("QIM_GC_UNFREEZE_GROWTH", default=1.0)
# Room pushes (rooms/local.py; docs/performance.md, "Merged per-node batches"):
# the most events one pushed ROOM_BATCH carries; 0 (the default) merges everything a room's
# tick holds into one frame. 1 pushes every event in a frame of its own (clients that want
# one event per frame; the per-frame benchmark), still at most room_outbound_frame_rate
# frames per connection: what the budget refuses waits, one event per frame still.
QIM_ROOM_BATCH_MAX_EVENTS = env.int("QIM_ROOM_BATCH_MAX_EVENTS", default=0)
# WebSocket keepalive (qim/server/heartbeat.py, daphne_timers.py; docs/performance.md,
# "Idle cost: the timing wheel and the kernel's TCP keepalive"): an idle socket gets a keepalive
# frame after this many seconds without a frame from its client. 25 s by default because what a user
# sees depends on it: a client that vanished without closing (a phone losing its network) is seen
# offline, and its messages pushed, within about this + the timeout below (about 55 s); and the
# proxies and load balancers in front of nodes close sockets idle for 60 s by default (nginx's
# proxy_read_timeout, cloud balancers), as do many mobile NATs. Raise it where none of that applies.
# 0: daphne's own --ping-interval.
QIM_WS_PING_INTERVAL_S = env.float("QIM_WS_PING_INTERVAL_S", default=25.0)
# Which keepalive (qim/server/heartbeat.py). "auto" (the default) chooses per socket: one whose
# upgrade came through an HTTP proxy (a Forwarded, X-Forwarded-*, X-Real-IP or Via header) gets
# "pong", any other "tcp". "pong": an unsolicited Pong (RFC 6455 §5.5.3, a unidirectional
# heartbeat every client library ignores), pre-framed and written straight to the socket, no
# reply expected: WebSocket data, which is what an HTTP proxy's idle timer counts. "tcp": the
# kernel's TCP keepalive (first probe after 80-100 % of the interval of silence, 6 probes in all
# within QIM_WS_USER_TIMEOUT_S of it, heartbeat.kernel_schedule), which keeps NATs and L4
# balancers open and finds dead peers without waking the node or the client's process: about
# a third of the node's idle CPU of "pong" at 18 000 sockets on loopback. In both, a dead peer
# is found by the kernel (TCP_USER_TIMEOUT below). "ping": daphne's ping, the socket closed
# when the pong does not come within daphne's --ping-timeout; for proxies that only count
# client-to-server traffic as activity; about 0.1 ms of node CPU per socket per interval.
QIM_WS_KEEPALIVE = env.str("QIM_WS_KEEPALIVE", default="auto")
# Every keepalive but ping: TCP_USER_TIMEOUT set on each accepted WebSocket, in seconds. Data the
# node sent (the heartbeat included) that stays unacknowledged this long, or a receive window
# the peer keeps at zero this long (Linux 5.9+), makes the kernel abort the connection, and the
# user goes offline as after an unanswered ping. Under the kernel's keepalive it counts from the
# first probe, so one lost probe never aborts a live socket. 30: daphne's --ping-timeout. 0: not set.
QIM_WS_USER_TIMEOUT_S = env.float("QIM_WS_USER_TIMEOUT_S", default=30.0)

# QIM's replacements of daphne's, autobahn's and Twisted's internals (qim/server/): `on` installs
# each one whose library versions and originals verify; `off` runs the libraries stock (QIM's own
# protocol unchanged; the keepalive is then daphne's Ping every --ping-interval).
QIM_SERVER_TUNING = env.str("QIM_SERVER_TUNING", default="on")
