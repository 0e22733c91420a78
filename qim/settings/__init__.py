"""Django settings, read from the environment (protocol.md §1) through django-environ.

This module holds Django's own settings and the process's identity; the QIM_* settings of
each topic live beside it (redis_servers, tunables, push, timers_and_caps) and are imported
here, so `django.conf.settings` sees them all under their usual names."""

from __future__ import annotations

import os
import re
import secrets
import socket
import warnings
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from qim.infra.outage import resilient_options
from qim.infra.redis_topology import channel_layer_hosts
from qim.settings.environment import BASE_DIR, VAR_DIR, env
from qim.settings.push import *  # noqa: F401,F403
from qim.settings.redis_servers import *  # noqa: F401,F403
from qim.settings.redis_servers import (
    QIM_CHANNEL_LAYER_REDIS_URLS,
    QIM_REDIS_DB,
    QIM_REDIS_PASSWORD,
    QIM_REDIS_SENTINEL_MASTERS,
    QIM_REDIS_SENTINEL_PASSWORD,
    QIM_REDIS_SENTINELS,
    QIM_REDIS_URL,
)
from qim.settings.timers_and_caps import *  # noqa: F401,F403
from qim.settings.tunables import *  # noqa: F401,F403

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
# Tests only: crash at a named point (qim/infra/faults.py).
QIM_FAULT = env.str("QIM_FAULT", default="")

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
    "qim.api.nul_guard.RefuseNulMiddleware",
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
elif _db["ENGINE"] == "django.db.backends.postgresql":
    # QIM's statements are short index lookups. PostgreSQL's JIT compiles any plan whose
    # estimate passes jit_above_cost, and a SEND to a 100 000-member group has a branch
    # (every member) that is estimated whole though never run: half a second of compiling for
    # a millisecond of work (issue #34). Off for QIM's sessions only; the server's setting
    # stays for anyone else.
    _db.setdefault("OPTIONS", {}).setdefault("options", "-c jit=off")
# A server process checkpoints SQLite's WAL from a thread this often instead of inside
# commits (qim/infra/sqlite_checkpoints.py); 0 leaves it to SQLite's automatic checkpoints.
QIM_SQLITE_CHECKPOINT_INTERVAL_S = env.float("QIM_SQLITE_CHECKPOINT_INTERVAL_S", default=1.0)
# Frame handlers run ORM work in executor threads; keep their connections open.
_db["CONN_MAX_AGE"] = None
_db["CONN_HEALTH_CHECKS"] = True
# ... but a DB-thread call (qim/gateway/db.py) skips Django's `SELECT 1` health check when its
# connection answered a query less than this long ago without an error: a round trip less on
# every frame under load (issue #22). A failed call's connection is checked at its end as
# before; 0 checks on every call, as Django does.
QIM_DB_HEALTH_CHECK_IDLE_S = env.float("QIM_DB_HEALTH_CHECK_IDLE_S", default=1.0)
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
# Node-call ops this node answers `unknown_op`, as a node of an older release that lacks them
# does (qim/node/node_calls.py): a switch to take a batched op out of service without a
# redeploy; callers fall back to its single form (room.join_many -> room.join).
QIM_NODE_CALL_OPS_OFF = frozenset(env.list("QIM_NODE_CALL_OPS_OFF", default=[]))
if QIM_REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {
                # Reads must outlive channels-redis' 5 s blocking pop on an idle node channel
                # (redis-py 8 would otherwise time out at the same 5 s and log an error).
                # Retries on a connection broken by a redis-server restart (qim/infra/outage.py). Its
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
    "DEFAULT_AUTHENTICATION_CLASSES": ["qim.api.auth.DeviceTokenAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    # The API speaks JSON only (protocol.md §3): a form or multipart body answers 415, and no
    # multipart parser runs on what a stranger sends.
    "DEFAULT_PARSER_CLASSES": ["qim.api.parsers.JSONParser"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "qim.api.errors.exception_handler",
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
        "qim.api.schema.add_plain_views",
        "qim.api.schema.add_error_responses",
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

# --- operations: readiness and log format (issue #21 items 2-3; docs/operations.md §4.1, §4.4) ---
# GET /api/v1/ready gives each check (database, Redis) this long before calling it failed.
QIM_READY_TIMEOUT_S = env.float("QIM_READY_TIMEOUT_S", default=2.0)
# `text` (the default, `make run`): one plain line per record, the connection and frame
# context appended in brackets; `json`: one JSON object per line (python-json-logger), the
# context as fields, a traceback in the one `exc_info` field.
QIM_LOG_FORMAT = env.str("QIM_LOG_FORMAT", default="text").strip().lower() or "text"
if QIM_LOG_FORMAT not in ("text", "json"):
    raise ImproperlyConfigured(f"QIM_LOG_FORMAT must be text or json, not {QIM_LOG_FORMAT!r}")
if QIM_LOG_FORMAT == "json":
    from qim.infra.log_context import capture_stray_output

    capture_stray_output()
_LOG_FORMATTERS = {
    "text": {"()": "qim.infra.log_context.TextFormatter", "format": "%(asctime)s %(levelname)s %(name)s: %(message)s"},
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
    # not as a crash (qim/infra/db_outage.py, qim/infra/outage.py). `log_context` adds node_id and the
    # connection and frame being handled (qim/infra/log_context.py).
    "handlers": {"console": {
        "class": "logging.StreamHandler", "formatter": "plain",
        "filters": ["database_unavailable", "redis_outage", "log_context"],
    }},
    "filters": {
        "log_context": {"()": "qim.infra.log_context.ContextFilter"},
        "without_traceback": {"()": "qim.infra.log_filters.WithoutTraceback"},
        "database_unavailable": {"()": "qim.infra.db_outage.DatabaseUnavailableFilter"},
        "redis_outage": {"()": "qim.infra.outage.RedisOutageFilter"},
    },
    "root": {"handlers": ["console"], "level": env.str("QIM_LOG_LEVEL", default="INFO")},
    "loggers": {
        "django.channels.server": {"level": "WARNING"},
        # A disallowed Host header is answered 400 (qim/api/errors.py); one line, no traceback.
        "django.security.DisallowedHost": {"filters": ["without_traceback"]},
        # The HTTP clients of the push providers log request URLs (APNs device tokens, Web
        # Push endpoints) at INFO and headers (provider JWTs, OAuth tokens) at DEBUG: secrets.
        **{name: {"level": "WARNING"} for name in ("httpx", "httpcore", "hpack", "h2")},
    },
}
