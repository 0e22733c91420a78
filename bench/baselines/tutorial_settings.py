"""Django settings of the tutorial-room baseline: the least Channels needs, nothing of QIM.

The channel layer is the tutorial's: in-memory for one process, channels_redis when
BENCH_REDIS_URL is set (two nodes). Both keep the default capacity (100) unless
BENCH_LAYER_CAPACITY says otherwise, because losses at that default are one thing we measure.
"""

import os

SECRET_KEY = "bench-tutorial-room-not-secret"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
INSTALLED_APPS = ["channels"]
DATABASES: dict = {}
USE_TZ = True
ASGI_APPLICATION = "bench.baselines.tutorial_asgi.application"
LOGGING_CONFIG = None

_capacity = int(os.environ.get("BENCH_LAYER_CAPACITY", "100"))
if os.environ.get("BENCH_REDIS_URL"):
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [os.environ["BENCH_REDIS_URL"]], "capacity": _capacity},
        }
    }
else:
    CHANNEL_LAYERS = {
        "default": {"BACKEND": "channels.layers.InMemoryChannelLayer", "CONFIG": {"capacity": _capacity}}
    }
