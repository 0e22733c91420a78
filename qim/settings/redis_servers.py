"""Where Redis is (one server, Sentinel, channel-layer shards) and how its clients behave;
qim/infra/redis_client.py and the channel layer read these (qim/infra/redis_topology.py)."""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured

from qim.infra.redis_topology import parse_sentinels, sentinel_url
from qim.settings.environment import env

QIM_REDIS_URL = env.str("QIM_REDIS_URL", default="")
# A node's own Redis connections (presence, leases, calls; the channel layer has its own):
# past this many in use, callers wait up to the timeout for one (qim/infra/redis_client.py).
QIM_REDIS_MAX_CONNECTIONS = env.int("QIM_REDIS_MAX_CONNECTIONS", default=100)
QIM_REDIS_POOL_TIMEOUT_S = env.float("QIM_REDIS_POOL_TIMEOUT_S", default=10.0)
# Redis under Sentinel (qim/infra/redis_topology.py): the sentinels (host:port, ...) and the name
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
# retried, qim/infra/outage.py): redis-py's own default, 5 s; fault tests lengthen it.
QIM_REDIS_SOCKET_TIMEOUT_S = env.float("QIM_REDIS_SOCKET_TIMEOUT_S", default=5.0)
