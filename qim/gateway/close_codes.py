"""The WebSocket close codes the gateway uses (protocol.md): 4xxx, as RFC 6455 leaves
3000-4999 to applications and autobahn lets them close with 1000 or those only."""

CLOSE_UNAUTHENTICATED = 4401
CLOSE_AUTH_TIMEOUT = 4408
# A socket that does not read its pushes: closed so it cannot make its node hold megabytes
# for it; the client reconnects and heals by SYNC and room replay.
CLOSE_TOO_SLOW = 4429
# The socket's token was revoked or expired, or its user deactivated (qim/gateway/revocation.py).
CLOSE_CREDENTIALS_REVOKED = 4403
# AUTH could not be checked (the database is unavailable) or announced (Redis is
# unreachable): reconnect after a pause. As HTTP's
# 503; RFC 6455's 1013 would say the same, but autobahn lets applications close with 1000 or
# 3000-4999 only.
CLOSE_TRY_AGAIN_LATER = 4503
