"""Django settings, read from the environment (protocol.md §1) through django-environ."""

from __future__ import annotations

import os
import re
import secrets
import socket
import warnings
from pathlib import Path

import environ
from django.core.exceptions import ImproperlyConfigured

from qim.outage import resilient_options
from qim.redis_topology import channel_layer_hosts, parse_sentinels, sentinel_url

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("QIM_VAR_DIR", BASE_DIR / "var"))

env = environ.Env()

# --- process ---------------------------------------------------------------
DEBUG = env.bool("QIM_DEBUG", default=False)


def _dev_secret_key() -> str:
    """Embedded default only: one key kept under var/ so admin sessions survive restarts."""
    path = VAR_DIR / "secret_key"
    if not path.exists():
        VAR_DIR.mkdir(parents=True, exist_ok=True)
        path.write_text(secrets.token_urlsafe(48))
    return path.read_text().strip()


SECRET_KEY = env.str("QIM_SECRET_KEY", default="") or _dev_secret_key()
ALLOWED_HOSTS = env.list("QIM_ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]"])
QIM_ALLOWED_ORIGINS = env.list(
    "QIM_ALLOWED_ORIGINS", default=["http://localhost:8000", "http://127.0.0.1:8000"]
)


def _default_node_id() -> str:
    """<host>-<pid>: unique across hosts and across processes of one host (a container's
    process is often pid 1 on every host, and its hostname is what tells them apart), in the
    characters a channel name allows."""
    host = re.sub(r"[^A-Za-z0-9_.-]", "-", socket.gethostname())[:48] or "node"
    return f"{host}-{os.getpid()}"


QIM_NODE_ID = env.str("QIM_NODE_ID", default="") or _default_node_id()
QIM_REDIS_URL = env.str("QIM_REDIS_URL", default="")
# A node's own Redis connections (presence, leases, calls; the channel layer has its own):
# past this many in use, callers wait up to the timeout for one (qim/redis_client.py).
QIM_REDIS_MAX_CONNECTIONS = env.int("QIM_REDIS_MAX_CONNECTIONS", default=100)
QIM_REDIS_POOL_TIMEOUT_S = env.float("QIM_REDIS_POOL_TIMEOUT_S", default=10.0)
# Redis under Sentinel (qim/redis_topology.py): the sentinels (host:port, ...) and the name
# of the master they watch, instead of QIM_REDIS_URL (derived from them). Several names shard
# the channel layer over several masters; the first also carries everything else.
QIM_REDIS_SENTINELS = parse_sentinels(env.list("QIM_REDIS_SENTINELS", default=[]))
QIM_REDIS_SENTINEL_MASTERS = env.list("QIM_REDIS_SENTINEL_MASTER", default=["qim"])
QIM_REDIS_DB = env.int("QIM_REDIS_DB", default=0)
QIM_REDIS_PASSWORD = env.str("QIM_REDIS_PASSWORD", default="") or None
QIM_REDIS_SENTINEL_PASSWORD = env.str("QIM_REDIS_SENTINEL_PASSWORD", default="") or None
if QIM_REDIS_SENTINELS:
    if QIM_REDIS_URL:
        raise ImproperlyConfigured("set QIM_REDIS_URL or QIM_REDIS_SENTINELS, not both")
    QIM_REDIS_URL = sentinel_url(QIM_REDIS_SENTINELS, QIM_REDIS_SENTINEL_MASTERS[0])
# More Redis servers for the channel layer alone (channels-redis hashes channels and groups
# over them); without Sentinel. Empty: the channel layer uses QIM_REDIS_URL.
QIM_CHANNEL_LAYER_REDIS_URLS = env.list("QIM_CHANNEL_LAYER_REDIS_URLS", default=[])
# How long one of those connections waits for a reply before the command fails (and is
# retried, qim/outage.py): redis-py's own default, 5 s; fault tests lengthen it.
QIM_REDIS_SOCKET_TIMEOUT_S = env.float("QIM_REDIS_SOCKET_TIMEOUT_S", default=5.0)
QIM_FAULT = env.str("QIM_FAULT", default="")

# --- tunables (design doc; protocol.md §1): name -> default, unit in the suffix ----------
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
    # SYNC_BATCH and HISTORY_BATCH are cut below it (qim/gateway/fit.py). Daphne's
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
# The offline push outbox (qim_push_worker): who sends, how often a task is tried, how long
# a worker's claim on a task lasts before another worker may take it over.
# The default dispatches by device platform to APNs, FCM or Web Push when that provider is
# configured (globally or for the task's tenant) and logs the push like LogSender when not.
QIM_PUSH_SENDER = env.str("QIM_PUSH_SENDER", default="push_providers.dispatch.ProviderSender")
QIM_PUSH_MAX_ATTEMPTS = env.int("QIM_PUSH_MAX_ATTEMPTS", default=8)
QIM_PUSH_LEASE_S = env.float("QIM_PUSH_LEASE_S", default=30.0)
QIM_PUSH_RETRY_BASE_S = env.float("QIM_PUSH_RETRY_BASE_S", default=2.0)
# One provider request's time limit; qim.push.senders.request_timeout_s caps it at 40 % of
# the lease so a send never outlives the half lease it started in.
QIM_PUSH_REQUEST_TIMEOUT_S = env.float("QIM_PUSH_REQUEST_TIMEOUT_S", default=10.0)
# Extra CA certificates (a PEM file) trusted for provider connections, beside the system's:
# a corporate TLS proxy, or the tests' local provider stand-ins.
QIM_PUSH_CA_FILE = env.str("QIM_PUSH_CA_FILE", default="")
# Global provider credentials (push_providers/credentials.py); a tenant's own, set in the
# admin or over REST, win over these. Unset means that provider is not configured.
QIM_APNS_KEY_FILE = env.str("QIM_APNS_KEY_FILE", default="")  # the .p8 key (PEM)
QIM_APNS_KEY_ID = env.str("QIM_APNS_KEY_ID", default="")
QIM_APNS_TEAM_ID = env.str("QIM_APNS_TEAM_ID", default="")
QIM_APNS_BUNDLE_ID = env.str("QIM_APNS_BUNDLE_ID", default="")
QIM_APNS_ENVIRONMENT = env.str("QIM_APNS_ENVIRONMENT", default="production")  # or "sandbox"
# Where APNs requests go; empty means Apple's host for the credential's environment.
QIM_APNS_ENDPOINT = env.str("QIM_APNS_ENDPOINT", default="")
QIM_FCM_SERVICE_ACCOUNT_FILE = env.str("QIM_FCM_SERVICE_ACCOUNT_FILE", default="")
QIM_FCM_ENDPOINT = env.str("QIM_FCM_ENDPOINT", default="https://fcm.googleapis.com")
# Web Push (RFC 8292 VAPID): the P-256 private key as PEM or base64url, and the contact.
QIM_VAPID_PRIVATE_KEY = env.str("QIM_VAPID_PRIVATE_KEY", default="")
QIM_VAPID_SUBJECT = env.str("QIM_VAPID_SUBJECT", default="")
# Web Push endpoints the server will fetch (an SSRF door otherwise): https only, and a host
# matching one of these (`*.` matches any subdomain). The browsers' push services by default.
QIM_WEB_PUSH_ENDPOINT_HOSTS = env.list(
    "QIM_WEB_PUSH_ENDPOINT_HOSTS",
    default=[
        "fcm.googleapis.com",
        "updates.push.services.mozilla.com",
        "*.notify.windows.com",
        "web.push.apple.com",
        "*.push.apple.com",
    ],
)
# Tests only: let Web Push endpoints be plain http (a local stand-in).
QIM_WEB_PUSH_ALLOW_HTTP = env.bool("QIM_WEB_PUSH_ALLOW_HTTP", default=False)
# Hosts a tenant's FCM service account may name as its token_uri (the server POSTs a signed
# assertion there: an SSRF door otherwise); https only. Global service accounts are the
# operator's own file and are not checked.
QIM_FCM_TOKEN_URI_HOSTS = env.list("QIM_FCM_TOKEN_URI_HOSTS", default=["oauth2.googleapis.com"])
# Tests only: let a tenant's provider URLs (the FCM token_uri) be plain http (a local stand-in).
QIM_PUSH_ALLOW_HTTP_PROVIDERS = env.bool("QIM_PUSH_ALLOW_HTTP_PROVIDERS", default=False)
# How long one process reuses a tenant's resolved credentials (push_providers/credentials.py);
# a change made over REST or in the admin reaches running workers within this. 0: no cache.
QIM_PUSH_CREDENTIALS_CACHE_S = env.float("QIM_PUSH_CREDENTIALS_CACHE_S", default=5.0)
# How often a worker in forever mode logs its per-provider counters (one INFO line of JSON).
QIM_PUSH_STATS_INTERVAL_S = env.float("QIM_PUSH_STATS_INTERVAL_S", default=60.0)
# How long a finished (sent or failed) task stays in the outbox for operators before a worker
# deletes it; 0 keeps every task forever.
QIM_PUSH_TASK_RETENTION_S = env.float("QIM_PUSH_TASK_RETENTION_S", default=7 * 24 * 3600.0)
# Retention (qim/retention.py): how many rows `qim_retention` deletes per transaction (short
# transactions, so SENDs never wait long on its locks). The retention itself is per tenant
# (Tenant.message_retention_s, 0 = keep forever), set in the admin or over REST.
QIM_RETENTION_BATCH = env.int("QIM_RETENTION_BATCH", default=1000)
# How old a node's copy of a tenant's registry may get before it re-checks the version in
# the database (the fallback when a change notice is missed; protocol.md §6 asks for 1 s).
QIM_REGISTRY_MAX_AGE_S = env.float("QIM_REGISTRY_MAX_AGE_S", default=1.0)
# How often each node finishes recalls and edits whose second step never ran (a node that
# died between the steps, a step that failed), among those of the last 10 minutes
# (qim/recovery.py); 0 leaves it to node starts and `qim_recover`.
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
# Prometheus metrics (qim/metrics/, docs/operations.md "Metrics"). With a token, /metrics (on
# every node, and on the push worker) answers only `Authorization: Bearer <token>`; empty, it
# answers only loopback clients that did not come through a proxy. The push worker serves its
# own /metrics on QIM_WORKER_METRICS_PORT (0: none), bound to QIM_WORKER_METRICS_BIND.
QIM_METRICS_TOKEN = env.str("QIM_METRICS_TOKEN", default="")
QIM_WORKER_METRICS_PORT = env.int("QIM_WORKER_METRICS_PORT", default=0)
QIM_WORKER_METRICS_BIND = env.str("QIM_WORKER_METRICS_BIND", default="127.0.0.1")
# POST auth/token attempts (qim/login_throttle.py), in the `limits` library's notation
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

# --- apps ---------------------------------------------------------------------
INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "channels",
    "qim",
    "rooms",
    "reactions",
    "registry",
    "rtc",
    "push_providers",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "qim.nul_guard.RefuseNulMiddleware",
    # Static files (the admin's, the API docs', the web client's) from STATIC_ROOT: hashed
    # names, gzip/brotli copies, far-future caching; placed before everything else that
    # would spend a session or a database query on them (whitenoise's documented place).
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "qim.urls"
ASGI_APPLICATION = "qim.asgi.application"
WSGI_APPLICATION = None
APPEND_SLASH = False

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        # The web client's page (clients/web/templates/web/index.html) links its hashed files.
        "DIRS": [BASE_DIR / "clients" / "web" / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

# --- database ---------------------------------------------------------------------
_default_sqlite = f"sqlite:///{VAR_DIR / 'qim.sqlite3'}"
DATABASES = {"default": env.db_url("QIM_DATABASE_URL", default=_default_sqlite)}
_db = DATABASES["default"]
if _db["ENGINE"] == "django.db.backends.sqlite3":
    # WAL lets readers run beside the writer; IMMEDIATE takes the write lock at BEGIN so
    # concurrent writers queue on the busy timeout instead of failing with "locked".
    _db.setdefault("OPTIONS", {}).update(
        {
            "transaction_mode": "IMMEDIATE",
            "timeout": 30,
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        }
    )
    if _db["NAME"] not in ("", ":memory:"):
        Path(_db["NAME"]).parent.mkdir(parents=True, exist_ok=True)
# A server process checkpoints SQLite's WAL from a thread this often instead of inside
# commits (qim/sqlite_checkpoints.py); 0 leaves it to SQLite's automatic checkpoints.
QIM_SQLITE_CHECKPOINT_INTERVAL_S = env.float("QIM_SQLITE_CHECKPOINT_INTERVAL_S", default=1.0)
# Frame handlers run ORM work in executor threads; keep their connections open.
_db["CONN_MAX_AGE"] = None
_db["CONN_HEALTH_CHECKS"] = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Test and benchmark runs may name a faster hasher; production keeps Django's default.
PASSWORD_HASHERS = env.list(
    "QIM_PASSWORD_HASHERS",
    default=[
        "django.contrib.auth.hashers.PBKDF2PasswordHasher",
        "django.contrib.auth.hashers.PBKDF2SHA1PasswordHasher",
        "django.contrib.auth.hashers.Argon2PasswordHasher",
        "django.contrib.auth.hashers.BCryptSHA256PasswordHasher",
        "django.contrib.auth.hashers.ScryptPasswordHasher",
    ],
)

# --- channel layer ------------------------------------------------------------------
# channels-redis drops silently when a channel is full (default capacity 100) and forgets
# messages after `expiry` (60 s): node channels carry whole batches for many sockets, so
# they get a large capacity. Persistent data never depends on a push arriving: SYNC heals.
QIM_NODE_CHANNEL_CAPACITY = env.int("QIM_NODE_CHANNEL_CAPACITY", default=10000)
# The channel layer's Redis connections per node at most (opened on demand, kept for reuse).
QIM_LAYER_MAX_CONNECTIONS = env.int("QIM_LAYER_MAX_CONNECTIONS", default=1000)
if QIM_REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {
                # Reads must outlive channels-redis' 5 s blocking pop on an idle node channel
                # (redis-py 8 would otherwise time out at the same 5 s and log an error).
                # Retries on a connection broken by a redis-server restart (qim/outage.py). Its
                # pool does not wait for a free connection: redis-py 8 caps a pool at 100 and
                # raises MaxConnectionsError past it, which a node met with 200 joins at once.
                "hosts": channel_layer_hosts(
                    url=QIM_REDIS_URL, shard_urls=QIM_CHANNEL_LAYER_REDIS_URLS,
                    sentinels=QIM_REDIS_SENTINELS, masters=QIM_REDIS_SENTINEL_MASTERS, db=QIM_REDIS_DB,
                    password=QIM_REDIS_PASSWORD, sentinel_password=QIM_REDIS_SENTINEL_PASSWORD,
                    options={"socket_timeout": 15, "max_connections": QIM_LAYER_MAX_CONNECTIONS,
                             **resilient_options()},
                ),
                "prefix": "qim:layer:",
                "capacity": 1000,
                "expiry": 30,
                "group_expiry": 86400 * 7,
                "channel_capacity": {"qim.node.*": QIM_NODE_CHANNEL_CAPACITY},
            },
        }
    }
else:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels.layers.InMemoryChannelLayer",
            "CONFIG": {"capacity": QIM_NODE_CHANNEL_CAPACITY, "expiry": 30},
        }
    }

# --- REST -----------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["qim.api_auth.DeviceTokenAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    # The API speaks JSON only (protocol.md §3): a form or multipart body answers 415, and no
    # multipart parser runs on what a stranger sends.
    "DEFAULT_PARSER_CLASSES": ["qim.api_parsers.JSONParser"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "qim.api_errors.exception_handler",
    "UNAUTHENTICATED_USER": None,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "QIM API",
    "DESCRIPTION": "Multi-tenant instant messaging: REST half of the contract (protocol.md §3).",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    # Swagger UI and Redoc from our own static files (drf-spectacular-sidecar): the docs page
    # makes no request beyond this server.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # No validator badge: Swagger UI would fetch it from validator.swagger.io.
    "SWAGGER_UI_SETTINGS": {"deepLinking": True, "validatorUrl": None},
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "qim.api_schema.add_error_responses",
    ],
}

# --- misc ---------------------------------------------------------------------
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"
# Where `manage.py collectstatic` writes and whitenoise serves from; every node needs its own
# collected copy (or a shared one) before it starts (docs/operations.md).
STATIC_ROOT = Path(env.str("QIM_STATIC_ROOT", default=str(VAR_DIR / "static")))
# The web client's built files (clients/web/build.py), once built.
WEB_CLIENT_DIST = BASE_DIR / "clients" / "web" / "dist"
STATICFILES_DIRS = [("web", WEB_CLIENT_DIST)] if WEB_CLIENT_DIST.is_dir() else []
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    # Hashed names (cached forever) and compressed copies, made by collectstatic.
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}
# Django's ASGI handler serves whitenoise's (sync) file responses through a thread and warns
# about it on every first file; the files are small and this is the documented set-up.
warnings.filterwarnings("ignore", message="StreamingHttpResponse must consume synchronous iterators")

# --- operations: readiness and log format (issue #21 items 2-3; docs/operations.md §7, §8) ---
# GET /api/v1/ready gives each check (database, Redis) this long before calling it failed.
QIM_READY_TIMEOUT_S = env.float("QIM_READY_TIMEOUT_S", default=2.0)
# `text` (the default, `make run`): one plain line per record, the connection and frame
# context appended in brackets; `json`: one JSON object per line (python-json-logger), the
# context as fields, a traceback in the one `exc_info` field.
QIM_LOG_FORMAT = env.str("QIM_LOG_FORMAT", default="text").strip().lower() or "text"
if QIM_LOG_FORMAT not in ("text", "json"):
    raise ImproperlyConfigured(f"QIM_LOG_FORMAT must be text or json, not {QIM_LOG_FORMAT!r}")
if QIM_LOG_FORMAT == "json":
    from qim.log_context import capture_stray_output

    capture_stray_output()
_LOG_FORMATTERS = {
    "text": {"()": "qim.log_context.TextFormatter", "format": "%(asctime)s %(levelname)s %(name)s: %(message)s"},
    "json": {
        "()": "pythonjsonlogger.json.JsonFormatter", "fmt": "%(levelname)s %(name)s %(message)s",
        "rename_fields": {"levelname": "level", "name": "logger"}, "timestamp": "time",
    },
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": _LOG_FORMATTERS[QIM_LOG_FORMAT]},
    # An outage (database away, Redis unreachable) is logged as one WARNING line per failure,
    # not as a crash (qim/db_outage.py, qim/outage.py). `log_context` adds node_id and the
    # connection and frame being handled (qim/log_context.py).
    "handlers": {"console": {
        "class": "logging.StreamHandler", "formatter": "plain",
        "filters": ["database_unavailable", "redis_outage", "log_context"],
    }},
    "filters": {
        "log_context": {"()": "qim.log_context.ContextFilter"},
        "without_traceback": {"()": "qim.log_filters.WithoutTraceback"},
        "database_unavailable": {"()": "qim.db_outage.DatabaseUnavailableFilter"},
        "redis_outage": {"()": "qim.outage.RedisOutageFilter"},
    },
    "root": {"handlers": ["console"], "level": env.str("QIM_LOG_LEVEL", default="INFO")},
    "loggers": {
        "django.channels.server": {"level": "WARNING"},
        # A disallowed Host header is answered 400 (qim/api_errors.py); one line, no traceback.
        "django.security.DisallowedHost": {"filters": ["without_traceback"]},
        # The HTTP clients of the push providers log request URLs (APNs device tokens, Web
        # Push endpoints) at INFO and headers (provider JWTs, OAuth tokens) at DEBUG: secrets.
        **{name: {"level": "WARNING"} for name in ("httpx", "httpcore", "hpack", "h2")},
    },
}
