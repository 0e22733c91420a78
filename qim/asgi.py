"""The ASGI application `qim.asgi:application`: HTTP through Django, /ws/v1 to the gateway."""

import gc
import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "qim.settings")
django_http = get_asgi_application()

from django.conf import settings  # noqa: E402

from qim.gateway.consumer import GatewayConsumer  # noqa: E402
from qim.gateway.routing import WebSocketRoute  # noqa: E402
from qim.infra.gc_freeze import install as install_collector_freezer  # noqa: E402
from qim.infra.gc_pauses import install as time_collector_passes  # noqa: E402
from qim.ops.recovery import RecoverOnStart  # noqa: E402
from qim.infra.sqlite_checkpoints import take_over as take_over_sqlite_checkpoints  # noqa: E402
from qim.server.tuning import install as install_server_tuning  # noqa: E402

# On the embedded default the WAL is checkpointed by a thread of this process, not inside the
# commit that happens to fill it (qim/infra/sqlite_checkpoints.py).
take_over_sqlite_checkpoints(settings.DATABASES["default"], settings.QIM_SQLITE_CHECKPOINT_INTERVAL_S)

# daphne's, autobahn's and Twisted's internals replaced where QIM_SERVER_TUNING and the
# installed versions allow (qim/server/catalog.py declares each; tuning.py installs them).
install_server_tuning()

# RecoverOnStart: a node finishes what a dead node left half done before it serves anything.
# The WebSocket route checks the origin and the path like channels' OriginValidator and
# URLRouter, without their frames and scope copy per socket (qim/gateway/routing.py).
application = RecoverOnStart(
    {
        "http": django_http,
        "websocket": WebSocketRoute("ws/v1", GatewayConsumer, settings.QIM_ALLOWED_ORIGINS),
    }
)

# What start-up built (Django, DRF, Twisted, the registry, the URL maps) lives as long as the
# process: keep it out of the collector's full passes, which stop the event loop for every
# socket. With 500 sockets a full pass took 60-100 ms before, 12-60 ms after
# (docs/performance.md, "The collector: freeze and thresholds"). With QIM_GC_FREEZE, so is what
# every later middle or full pass leaves alive, until a slow thaw (qim/infra/gc_freeze.py).
if settings.QIM_GC_FREEZE:
    install_collector_freezer(settings.QIM_GC_UNFREEZE_PERIOD_S, settings.QIM_GC_UNFREEZE_GROWTH)
else:
    gc.freeze()
# Fewer, larger young collections: a reconnect storm's garbage is short-lived (QIM_GC_YOUNG_THRESHOLD);
# the older two are settings too (Python's 10 and 10, middle 1 with QIM_GC_FREEZE; qim/settings/timers_and_caps.py).
time_collector_passes()  # their milliseconds in GET /api/v1/node (qim/infra/gc_pauses.py)
gc.set_threshold(settings.QIM_GC_YOUNG_THRESHOLD, settings.QIM_GC_MIDDLE_THRESHOLD, settings.QIM_GC_OLD_THRESHOLD)
