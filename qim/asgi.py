"""The ASGI application `qim.asgi:application`: HTTP through Django, /ws/v1 to the gateway."""

import gc
import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "qim.settings")
django_http = get_asgi_application()

from django.conf import settings  # noqa: E402

from qim.server.access_log import install as stamp_access_log_once_a_second  # noqa: E402
from qim.gateway.consumer import GatewayConsumer  # noqa: E402
from qim.server.daphne_checks import install as install_daphne_timers  # noqa: E402
from qim.server.handshake import install as cheapen_autobahn_handshake  # noqa: E402
from qim.server.handshake_write import install as send_handshake_response_directly  # noqa: E402
from qim.server.lean_connect import install as start_applications_without_deferreds  # noqa: E402
from qim.server.lean_frames import install as read_plain_text_frames_directly  # noqa: E402
from qim.server.lean_protocol import install as serve_autobahn_options_from_class  # noqa: E402
from qim.server.lean_upgrade import install as upgrade_plain_requests_directly  # noqa: E402
from qim.gateway.routing import WebSocketRoute  # noqa: E402
from qim.server.unmask import install as unmask_small_frames_in_python  # noqa: E402
from qim.ops.gc_freeze import install as install_collector_freezer  # noqa: E402
from qim.ops.gc_pauses import install as time_collector_passes  # noqa: E402
from qim.server.raw_bodies import install as hand_django_raw_bodies  # noqa: E402
from qim.ops.recovery import RecoverOnStart  # noqa: E402
from qim.ops.sqlite_checkpoints import take_over as take_over_sqlite_checkpoints  # noqa: E402

# On the embedded default the WAL is checkpointed by a thread of this process, not inside the
# commit that happens to fill it (qim/ops/sqlite_checkpoints.py).
take_over_sqlite_checkpoints(settings.DATABASES["default"], settings.QIM_SQLITE_CHECKPOINT_INTERVAL_S)

# Daphne's per-second walks over every connection, replaced by walks over the due ones
# (qim/server/daphne_timers.py): an idle node's CPU no longer grows with its sockets.
install_daphne_timers()

# Twisted must not answer a malformed multipart body before Django sees it (qim/server/raw_bodies.py).
hand_django_raw_bodies()

# autobahn must not pretty-print its configuration for every socket it accepts (qim/server/handshake.py).
cheapen_autobahn_handshake()

# The handshake's response in one send(), not through Twisted's buffer (qim/server/handshake_write.py).
send_handshake_response_directly()

# daphne's access log lines, the date formatted once a second (qim/server/access_log.py).
stamp_access_log_once_a_second()

# A plain WebSocket upgrade request goes to autobahn as it arrived, not through Twisted's HTTP
# request and daphne's rewrite of it (qim/server/lean_upgrade.py).
upgrade_plain_requests_directly()

# daphne's onConnect starts the application by a plain call, not through three Deferreds
# (qim/server/lean_connect.py).
start_applications_without_deferreds()

# A client's whole, small text frame read without autobahn's per-frame calls (qim/server/lean_frames.py).
read_plain_text_frames_directly()

# Inbound frames under 1 KiB unmasked without a CFFI masker each (qim/server/unmask.py).
unmask_small_frames_in_python()

# Each socket's protocol reads autobahn's options from its class (qim/server/lean_protocol.py).
serve_autobahn_options_from_class()

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
# (docs/performance.md, DM isolation). With QIM_GC_FREEZE, so is what every later middle or
# full pass leaves alive, until a slow thaw (qim/ops/gc_freeze.py).
if settings.QIM_GC_FREEZE:
    install_collector_freezer(settings.QIM_GC_UNFREEZE_PERIOD_S, settings.QIM_GC_UNFREEZE_GROWTH)
else:
    gc.freeze()
# Fewer, larger young collections: a reconnect storm's garbage is short-lived (QIM_GC_YOUNG_THRESHOLD);
# the older two are settings too (Python's 10 and 10, middle 1 with QIM_GC_FREEZE; qim/settings/timers_and_caps.py).
time_collector_passes()  # their milliseconds in GET /api/v1/node (qim/ops/gc_pauses.py)
gc.set_threshold(settings.QIM_GC_YOUNG_THRESHOLD, settings.QIM_GC_MIDDLE_THRESHOLD, settings.QIM_GC_OLD_THRESHOLD)
