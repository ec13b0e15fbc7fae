"""The API's JSON parser: a body nested too deeply for Python's decoder is the client's error.

The standard decoder recurses once per level and raises RecursionError past ~1,000 levels,
which DRF does not catch: `[[[[...` (100,000 levels, 200 kB) to `POST /api/auth/token/`, no
login needed, answered 500 and logged a 90-line traceback each time. Now it is a 400 that says
why, as every other malformed body is.
"""
from __future__ import annotations

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser


class BoundedJSONParser(JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError("JSON parse error - nested too deeply") from None
