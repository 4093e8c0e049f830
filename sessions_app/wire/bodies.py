"""JSON bodies of HTTP requests, bounded: every body this app parses (the
REST API's, the dialects') goes through ``loads``, which refuses a body
nested deeper than ``MAX_DEPTH`` with a ``FrameError`` (a 400 with a JSON
reason), never a ``RecursionError`` (a 500). The size is bounded before:
Django's ``DATA_UPLOAD_MAX_MEMORY_SIZE`` (a 413)."""

from __future__ import annotations

from typing import Any

from sessions_app.wire import protocol as p
from sessions_app.wire import strict_json

# Deeper than any body of the protocol, the AI SDK's or AG-UI's needs (a
# tool's arguments included).
MAX_DEPTH = 64


def loads(raw: bytes | str) -> Any:
    """The JSON value of ``raw``; ``FrameError`` if it is not JSON, or is
    nested deeper than ``MAX_DEPTH``."""
    try:
        value = strict_json.loads(raw or b"null")
    except RecursionError:
        raise _too_deep() from None
    except (ValueError, UnicodeDecodeError):
        raise p.FrameError(p.E_BAD_JSON, "the body is not JSON") from None
    if depth_over(value, MAX_DEPTH):
        raise _too_deep()
    return value


def _too_deep() -> p.FrameError:
    return p.FrameError(p.E_BAD_JSON, f"the body is nested deeper than {MAX_DEPTH} levels")


def depth_over(value: Any, limit: int) -> bool:
    """Is ``value`` nested deeper than ``limit`` arrays and objects? (No
    recursion: a walk with a stack of its own.)"""
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False
