"""JSON as the standard has it, for everything that comes in: Python's
``json`` also reads ``NaN``, ``Infinity`` and ``-Infinity``, which no JSON
parser in a browser reads back. Let in, one would reach the log and every
tab's ``JSON.parse`` would fail on the frames that carry it. Frames, bodies
and a model's tool arguments are read here, and the log refuses to write
such a number (``log.events``)."""

from __future__ import annotations

import json
from typing import Any


class _NotJson(ValueError):
    pass


def _refuse(name: str) -> Any:
    raise _NotJson(name)


# One decoder for every call (json.loads with an option makes one each time).
_DECODER = json.JSONDecoder(parse_constant=_refuse)


def loads(text: str | bytes) -> Any:
    """``json.loads`` without ``NaN`` and the infinities: those raise
    ``json.JSONDecodeError`` like any other text that is not JSON (bytes
    are decoded as ``json.loads`` decodes them)."""
    if isinstance(text, (bytes, bytearray)):
        text = text.decode(json.detect_encoding(text), "surrogatepass")
    try:
        return _DECODER.decode(text)
    except _NotJson as exc:
        word = str(exc)
        raise json.JSONDecodeError(f"{word} is not a JSON number", text, text.find(word)) from None
