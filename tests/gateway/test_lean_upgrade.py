"""Which first reads qim/server/lean_upgrade.py hands straight to autobahn: exactly one boring
WebSocket upgrade request; everything else keeps Twisted's and daphne's path. (On a real node:
tests/gateway/test_handshake_path.py.)"""

from __future__ import annotations

import pytest

from qim.server.lean_upgrade import MAX_HEADERS, is_plain_upgrade

HEAD = b"GET /ws/v1 HTTP/1.1\r\nHost: 127.0.0.1:8000\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
KEY = b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"


def request(*extra: bytes, head: bytes = HEAD) -> bytes:
    return head + KEY + b"".join(extra) + b"\r\n"


def test_what_browsers_and_the_sdks_send_is_plain() -> None:
    assert is_plain_upgrade(request()) == b""
    assert is_plain_upgrade(request(b"Origin: https://app.example\r\nUser-Agent: Mozilla/5.0 (X11; Linux)\r\n"
                                    b"Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n"
                                    b"Cookie: a=1;\tb=2\r\n")) == b""
    # Names in any case, the value's spaces and tabs around it, the query string answered.
    assert is_plain_upgrade(request(head=b"GET /ws/v1?device=a&x=%20 HTTP/1.1\r\nhost: h\r\n"
                                         b"UPGRADE: \t WebSocket \r\nconnection: upgrade\r\n")) == b"device=a&x=%20"


@pytest.mark.parametrize("data", [
    pytest.param(request()[:-2], id="no blank line yet (a read cut short)"),
    pytest.param(request() + b"\x81\x80abcd", id="bytes after the blank line"),
    pytest.param(request(b"Content-Length: 0\r\n"), id="a body length"),
    pytest.param(request(b"Transfer-Encoding: chunked\r\n"), id="a chunked body"),
    pytest.param(request(b"Expect: 100-continue\r\n"), id="Expect"),
    pytest.param(request(b"X-A: 1\r\nx-a: 2\r\n"), id="a header twice"),
    pytest.param(request(b"X-A: 1\r\n folded\r\n"), id="a folded line"),
    pytest.param(request(b"X-A: caf\xc3\xa9\r\n"), id="a byte past ASCII"),
    pytest.param(request(b"X-A: a\x0bb\r\n"), id="a control byte in a value"),
    pytest.param(request(b"X-A: a\nb\r\n"), id="a bare LF"),
    pytest.param(request(b"X A: 1\r\n"), id="a space in a name"),
    pytest.param(request(b"X-A 1\r\n"), id="no colon"),
    pytest.param(request(b"X-Pad: " + b"p" * 8200 + b"\r\n"), id="over 8 KiB"),
    pytest.param(request(*[b"X-%d: 1\r\n" % i for i in range(MAX_HEADERS)]), id="too many headers"),
    pytest.param(request(head=HEAD.replace(b"Upgrade: websocket\r\n", b"")), id="no Upgrade"),
    pytest.param(request(head=HEAD.replace(b"websocket", b"h2c")), id="another Upgrade"),
    pytest.param(request(head=HEAD.replace(b"GET", b"POST")), id="not GET"),
    pytest.param(request(head=HEAD.replace(b"HTTP/1.1", b"HTTP/1.0")), id="HTTP/1.0"),
    pytest.param(request(head=HEAD.replace(b"/ws/v1", b"/ws/v1 x")), id="a space in the target"),
    pytest.param(b"\r\n" + request(), id="a blank line first"),
])
def test_anything_else_takes_twisteds_path(data: bytes) -> None:
    assert is_plain_upgrade(data) is None
