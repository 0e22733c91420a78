"""Daphne hands Django every request body unparsed, form and multipart ones included.

Twisted's HTTP layer (under daphne) parses a POST's form or multipart body into
`request.args` before daphne sees the request, and answers a multipart body it cannot parse
with a bare 400 without a body and a dropped connection (issue #17). Daphne never reads
`args`: it passes the raw body on. So that parse is turned off, and Django and DRF answer
every body, in `{code, message}` (a form or multipart body: 415, the API is JSON).
"""

from __future__ import annotations

from daphne import http_protocol


class RawBodyWebRequest(http_protocol.WebRequest):
    def __init__(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        kwargs["parsePOSTFormSubmission"] = False
        super().__init__(*args, **kwargs)


def install() -> None:
    """Make daphne's HTTP factory build RawBodyWebRequest; daphne imports the application
    (and so calls this) before it accepts any connection. daphne's own buildProtocol is
    replaced, not wrapped: it reads Twisted's factory through `twisted.web.http`, a module
    behind Twisted's deprecation proxy (two Python `__getattribute__` calls a read), once per
    accepted socket."""
    factory = http_protocol.HTTPFactory
    if getattr(factory, "qim_raw_bodies", False):
        return
    from twisted.web.http import HTTPFactory

    build_protocol = HTTPFactory.buildProtocol

    def buildProtocol(self, addr):  # type: ignore[no-untyped-def]
        protocol = build_protocol(self, addr)
        protocol.requestFactory = RawBodyWebRequest
        return protocol

    factory.buildProtocol = buildProtocol
    factory.qim_raw_bodies = True
