"""The Web Push allow-list against adversarial endpoints: every endpoint is refused with
bad_request or accepted, never a crash; and an accepted one names an allowed host for
urllib3 too (the parser requests posts with), so no parser difference opens the SSRF door."""

from __future__ import annotations

import base64

from django.test import override_settings
from hypothesis import event, example, given, settings as hypothesis_settings, strategies as st
from urllib3.util import parse_url

from qim.errors import Refused
from qim.push.web_subscription import canonical_subscription, host_matches

ALLOWED = ["fcm.googleapis.com", "*.push.apple.com"]
KEYS = {"p256dh": base64.urlsafe_b64encode(b"\x04" + bytes(64)).rstrip(b"=").decode(), "auth": "A" * 22}
PIECES = st.sampled_from([
    "https://", "http://", "HTTPS://", "https:/", "//", "fcm.googleapis.com", "web.push.apple.com", "push.apple.com",
    "evil.com", "127.0.0.1", "[::1]", "@", ":", ":443", ":99999", "\\", "/", "?", "#", "%2e", "%40", ".", "..",
    "\t", " ", "\n", "\u3002", "ＦＣＭ", "xn--", "user:pw", "*", ";", ",", "=",
])


@hypothesis_settings(max_examples=3000, deadline=None)
@given(st.one_of(
    st.lists(PIECES, min_size=1, max_size=8).map("".join),
    # Shaped like a URL, so that many pass: a scheme, odd bits, an allowed host, odd bits.
    st.tuples(
        st.sampled_from(["https://", "HTTPS://", "https:"]), st.lists(PIECES, max_size=3).map("".join),
        st.sampled_from(["fcm.googleapis.com", "a.push.apple.com", "FCM.googleapis.com"]),
        st.lists(PIECES, max_size=4).map("".join),
    ).map("".join),
))
@example("https://fcm.googleapis.com\t/x")  # urlsplit drops the tab, urllib3 refuses it: found by this test
@example("https://evil.com\\@fcm.googleapis.com/")
@example("https://10.0.0.7\\.push.apple.com/x")  # 10.0.0.7 to urllib3, allowed to urlsplit: found by this test
@example("https://a.push.apple.com/ok")
def test_an_endpoint_is_refused_or_names_an_allowed_host_for_urllib3_too(endpoint: str) -> None:
    with override_settings(QIM_WEB_PUSH_ENDPOINT_HOSTS=ALLOWED, QIM_WEB_PUSH_ALLOW_HTTP=False):
        try:
            canonical_subscription({"endpoint": endpoint, "keys": KEYS})
        except Refused as refused:
            assert refused.code == "bad_request"
            event("refused")
            return
    event("accepted")
    parsed = parse_url(endpoint)
    assert parsed.scheme == "https", endpoint
    assert any(host_matches((parsed.host or "").lower(), pattern) for pattern in ALLOWED), endpoint
