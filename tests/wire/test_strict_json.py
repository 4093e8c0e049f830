"""wire/strict_json.py: what comes in is JSON as the standard has it."""

from __future__ import annotations

import json

import pytest

from sessions_app.wire import bodies, strict_json
from sessions_app.wire import protocol as p

NOT_NUMBERS = ["NaN", "Infinity", "-Infinity"]


@pytest.mark.parametrize("word", NOT_NUMBERS)
def test_nan_and_the_infinities_are_not_json(word):
    """Python's json reads NaN, Infinity and -Infinity; a browser's JSON.parse
    does not. Read here they are JSONDecodeError, like any other text that
    is not JSON, and say which word it was."""
    with pytest.raises(json.JSONDecodeError, match=word):
        strict_json.loads(f'{{"a": [1, {word}]}}')
    with pytest.raises(json.JSONDecodeError):
        strict_json.loads(f'{{"a": {word}}}'.encode())


def test_json_reads_as_json():
    """Everything else reads as json.loads reads it, strings saying NaN too."""
    text = '{"a": [1, 2.5e3, -0.0, "NaN", null, true], "b": {"c": "Infinity"}}'
    assert strict_json.loads(text) == json.loads(text)


@pytest.mark.parametrize("word", NOT_NUMBERS)
def test_a_frame_or_a_body_with_them_is_bad_json(word):
    """A socket frame or an HTTP body carrying one is refused as bad_json
    (the socket answers with an error and lives on; the API says 400)."""
    with pytest.raises(p.FrameError) as frame:
        p.decode(f'{{"type": "ack", "seq": {word}}}', None)
    assert frame.value.code == p.E_BAD_JSON
    with pytest.raises(p.FrameError) as body:
        bodies.loads(f'{{"text": {word}}}'.encode())
    assert body.value.code == p.E_BAD_JSON
