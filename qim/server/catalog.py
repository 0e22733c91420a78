"""Every replacement of daphne's, autobahn's and Twisted's internals, declared once.

Each entry names the library versions it was verified on and the originals it expects; the
digests are what `python -m qim.server.verify` prints for the installed code. After upgrading
one of these libraries: read the changes to each original listed here, re-run the
differential tests (tests/server/), then update `verified_on` and the digests; until then the
node runs that piece stock and says so (qim/server/tuning.py). A new entry needs a measured
gain of >= 10 % on a bar of docs/performance.md and a differential test.
"""

from __future__ import annotations

from qim.server.declarations import Original, Replacement

DAPHNE = {"daphne": "4.2.3"}
AUTOBAHN = {"autobahn": "26.11.1"}
TWISTED = {"twisted": "26.10.0"}
DAPHNE_WS = "daphne.ws_protocol.WebSocketProtocol"
AUTOBAHN_WS = "autobahn.websocket.protocol.WebSocketProtocol"

REPLACEMENTS: tuple[Replacement, ...] = (
    Replacement(
        name="raw_bodies",
        why="Twisted no longer parses form and multipart bodies before Django: a malformed one gets "
            "Django's {code, message} answer instead of a bare 400 and a dropped connection",
        verified_on={**DAPHNE, **TWISTED},
        originals=(
            Original("daphne.http_protocol.HTTPFactory", "buildProtocol", "46e23f742b61766a"),
            Original("twisted.web.http.Request", "requestReceived", "eb1724c9c32b9b2c"),
        ),
        apply="qim.server.raw_bodies:install",
        kind="fix",
    ),
    Replacement(
        name="connect_errors",
        why="an exception while daphne builds a WebSocket's scope answers a bare 400 or 500, not "
            "autobahn's 500 with the exception's text",
        # A wrapper around whatever onConnect daphne has: only autobahn's ConnectionDeny answer
        # is relied on, so daphne's release is not pinned here.
        verified_on=AUTOBAHN,
        originals=(
            Original(DAPHNE_WS, "onConnect", "present"),
            Original(AUTOBAHN_WS, "processHandshake", "9a13984c6ce24449"),
        ),
        apply="qim.server.connect_errors:install",
        kind="fix",
    ),
    Replacement(
        name="protocol_errors",
        why="a frame that breaks RFC 6455 is answered with a close frame (1002, 1007, 1009) behind what "
            "was written, not a reset that throws both away",
        verified_on={**DAPHNE, **AUTOBAHN},
        originals=(
            Original("daphne.ws_protocol.WebSocketFactory", "__init__", "f7f37a9ba32ac91b"),
            Original(AUTOBAHN_WS, "_fail_connection", "6ae74d11d4badc1b"),
            Original(AUTOBAHN_WS, "_protocol_violation", "73824de531283025"),
        ),
        apply="qim.server.protocol_errors:install",
        kind="fix",
    ),
    Replacement(
        name="daphne_timers",
        why="daphne's per-second walks over every connection become a timing wheel over the due ones, "
            "with the kernel's TCP keepalive or an unsolicited Pong instead of a Ping per socket",
        verified_on={**DAPHNE, **AUTOBAHN},
        originals=(
            Original("daphne.server.Server", "protocol_connected", "8a894930c37132f9"),
            Original("daphne.server.Server", "protocol_disconnected", "ad1c4ac7c9871e23"),
            Original("daphne.server.Server", "create_application", "6d6da219bd73c133"),
            Original("daphne.server.Server", "application_checker", "93a55d9db2c2d2a3"),
            Original("daphne.server.Server", "timeout_checker", "521b4ba864f1adea"),
            Original(DAPHNE_WS, "check_timeouts", "d5ad2378af81c3dc"),
        ),
        apply="qim.server.daphne_checks:install",
    ),
    Replacement(
        name="quiet_handshake_logging",
        why="autobahn no longer pretty-prints its configuration and colours its method names for a "
            "debug line nobody writes, on every accepted socket",
        verified_on=AUTOBAHN,
        originals=(
            Original("autobahn.websocket.protocol", "pformat", "is:pprint.pformat"),
            Original("autobahn.websocket.protocol", "hltype", "is:autobahn.util.hltype"),
            Original("autobahn.websocket.protocol", "hlval", "is:autobahn.util.hlval"),
            Original("autobahn.twisted.websocket", "hltype", "is:autobahn.util.hltype"),
            Original("autobahn.twisted.websocket", "hlval", "is:autobahn.util.hlval"),
            Original("autobahn.websocket.protocol.Timings", "__str__", "54de61eaec3ebc7c"),
        ),
        apply="qim.server.handshake:install",
    ),
    Replacement(
        name="options_from_class",
        why="autobahn's 29 protocol options are read from a per-factory class instead of copied into "
            "every socket's dict (1.6 KiB per socket instead of 3.3)",
        verified_on={**DAPHNE, **AUTOBAHN},
        originals=(
            Original("daphne.ws_protocol.WebSocketFactory", "setProtocolOptions", "10692636f6f89b19"),
            Original("daphne.ws_protocol.WebSocketFactory", "resetProtocolOptions", "57350edd42da5958"),
            Original(AUTOBAHN_WS, "_connectionMade", "6f363f37d56d5dfb"),
        ),
        apply="qim.server.lean_protocol:install",
    ),
    Replacement(
        name="handshake_release",
        why="the handshake's request, headers and upgraded HTTP channel are let go after accept "
            "(about 3.5 KiB per idle socket)",
        verified_on={**DAPHNE, **AUTOBAHN, **TWISTED},
        originals=(
            Original(DAPHNE_WS, "onOpen", "a4f1cd25c6c573ce"),
            Original("daphne.access.AccessLogGenerator", "__call__", "39f1a5850fe8eeaa"),
            Original("twisted.web.http.HTTPChannel", "registerProducer", "8b602c44472a85b8"),
        ),
    ),
    Replacement(
        name="direct_handshake_write",
        why="autobahn's writes go out with one send() when Twisted holds nothing for the socket, after "
            "what a direct write holds (the order of the byte stream)",
        verified_on={**DAPHNE, **AUTOBAHN, **TWISTED},
        originals=(Original(DAPHNE_WS, "sendData", "88f768f8c9b62cf0"),),
        apply="qim.server.handshake_write:install",
    ),
    Replacement(
        name="direct_writes",
        why="a push is framed once and written to each socket with one send() past autobahn and "
            "Twisted's writer (room fan-out, replies of one read in one send)",
        verified_on={**AUTOBAHN, **TWISTED},
        originals=(
            Original("twisted.internet.abstract.FileDescriptor", "write", "b3410de7a82777bb"),
            Original("twisted.internet.abstract.FileDescriptor", "doWrite", "33b469b3af894e6a"),
            Original(AUTOBAHN_WS, "sendData", "88f768f8c9b62cf0"),
        ),
        requires=("direct_handshake_write",),
    ),
    Replacement(
        name="access_log_stamp",
        why="daphne's access log formats the date once a second, not once a line",
        verified_on=DAPHNE,
        originals=(Original("daphne.access.AccessLogGenerator", "__call__", "39f1a5850fe8eeaa"),),
        apply="qim.server.access_log:install",
    ),
    Replacement(
        name="lean_upgrade",
        why="a plain WebSocket upgrade request goes to autobahn as it arrived, without Twisted's "
            "Request and daphne's rewrite of it",
        verified_on={**DAPHNE, **TWISTED},
        originals=(
            Original("daphne.http_protocol.HTTPFactory", "protocol", "210f382c5b978135"),
            Original("twisted.web.http._GenericHTTPChannelProtocol", "dataReceived", "c64227dd85cb58a3"),
            Original("daphne.http_protocol.WebRequest", "process", "1da7a24671a5b42d"),
        ),
        apply="qim.server.lean_upgrade:install",
    ),
    Replacement(
        name="lean_connect",
        why="daphne's onConnect starts the application by a plain call, not three Deferreds; "
            "protocols hash by identity in C; an error there answers a bare 500",
        verified_on={**DAPHNE, **AUTOBAHN},
        originals=(
            Original(DAPHNE_WS, "onConnect", "904141de9493c3fc"),
            Original(DAPHNE_WS, "set_valid_events", "66cd32eef8319e3a"),
            Original(DAPHNE_WS, "__hash__", "83a0d28926ed3ce9"),
            Original(DAPHNE_WS, "__eq__", "b620d36035a7b573"),
            Original("daphne.http_protocol.WebRequest", "__hash__", "83a0d28926ed3ce9"),
            Original("daphne.http_protocol.WebRequest", "__eq__", "b620d36035a7b573"),
        ),
        apply="qim.server.lean_connect:install",
    ),
    Replacement(
        name="lean_frames",
        why="a whole, small, masked text frame is read without autobahn's ~25 per-frame calls; "
            "everything else stays on autobahn's path",
        verified_on={**DAPHNE, **AUTOBAHN},
        originals=(
            Original(DAPHNE_WS, "processData", "3ac2ab517b34f9a9"),
            Original(AUTOBAHN_WS, "onFrameData", "92c7c3d25752b0ac"),
        ),
        apply="qim.server.lean_frames:install",
    ),
    Replacement(
        name="small_frame_unmask",
        why="frames under 1 KiB are unmasked with big-integer XORs, not a CFFI masker each",
        verified_on=AUTOBAHN,
        originals=(Original("autobahn.websocket.protocol", "create_xor_masker", "240d02cb93d1dbef"),),
        apply="qim.server.unmask:install",
    ),
)

BY_NAME = {replacement.name: replacement for replacement in REPLACEMENTS}
