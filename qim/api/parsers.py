"""The REST API's one body parser: JSON, with every way a body can fail to parse answered as
400 `{code, message}` (issue #17: a deeply nested body was a 500)."""

from __future__ import annotations

from rest_framework import parsers
from rest_framework.exceptions import ParseError


class JSONParser(parsers.JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):  # type: ignore[no-untyped-def]
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError:
            # json recurses once per level; Python's stack ends near a thousand.
            raise ParseError("JSON parse error - nested too deeply") from None
