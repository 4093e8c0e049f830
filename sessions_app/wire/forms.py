"""Forms: the JSON schema a question asks with, and the check of an answer.

A question (a gate of kind ``question``: ``runtime.questions``) may carry a
form, the subset of JSON Schema that MCP elicitation allows and every card
can render: an object of flat properties, each

- ``string``, with ``minLength``, ``maxLength``, ``format`` (``email``,
  ``uri``, ``date``, ``date-time``) or ``enum`` (with ``enumNames`` to show);
- ``number`` or ``integer``, with ``minimum`` and ``maximum``;
- ``boolean``;

each with an optional ``title``, ``description`` and ``default``, and the
object's ``required`` list. ``schema_problem`` says why a schema is outside
it (such a question is declined, never shown half); ``check`` is the one
server-side check of an answer (a card validates nothing on its own: what
it shows is what the server said). Pure: no I/O, no Django.
"""

from __future__ import annotations

import math
import re
from datetime import date, datetime
from typing import Any
from urllib.parse import urlsplit

from sessions_app.wire import protocol as p

TYPES = ("string", "number", "integer", "boolean")
FORMATS = ("email", "uri", "date", "date-time")
# What a property may say, beyond its type (anything else: not a form we render).
_KEYS = {
    "string": {"minLength", "maxLength", "format", "enum", "enumNames"},
    "number": {"minimum", "maximum"},
    "integer": {"minimum", "maximum"},
    "boolean": set(),
}
_COMMON = {"type", "title", "description", "default"}
MAX_FIELDS = 20
MAX_TEXT = 4_000  # the longest string answer, unless the schema says less
MAX_NUMBER = 2**53  # beyond it a browser's number is not the one given
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")


def schema_problem(schema: Any) -> str | None:
    """Why ``schema`` is not a form this project renders, or None."""
    if not isinstance(schema, dict) or schema.get("type", "object") != "object":
        return "a form is an object schema"
    props = schema.get("properties", {})
    if not isinstance(props, dict):
        return "a form's properties are an object"
    if len(props) > MAX_FIELDS:
        return f"a form has at most {MAX_FIELDS} fields"
    for name, prop in props.items():
        problem = _property_problem(prop)
        if problem:
            return f"field {name!r}: {problem}"
    required = schema.get("required", [])
    if not _strings(required) or any(name not in props for name in required):
        return "'required' lists fields the form has"
    return None


def _property_problem(prop: Any) -> str | None:
    if not isinstance(prop, dict) or prop.get("type") not in TYPES:
        return f"its type is one of {', '.join(TYPES)}"
    extra = set(prop) - _COMMON - _KEYS[prop["type"]]
    if extra:
        return f"{', '.join(sorted(extra))} is not supported"
    for key in ("title", "description"):
        if not isinstance(prop.get(key, ""), str):
            return f"its {key} is text"
    if "format" in prop and prop["format"] not in FORMATS:
        return f"its format is one of {', '.join(FORMATS)}"
    enum = prop.get("enum")
    if enum is not None and (not enum or not _strings(enum)):
        return "its enum lists strings"
    names = prop.get("enumNames")
    if names is not None and (enum is None or not _strings(names) or len(names) != len(enum)):
        return "its enumNames name each enum value"
    for key in ("minLength", "maxLength", "minimum", "maximum"):
        bound = prop.get(key)
        if bound is not None and (isinstance(bound, bool) or not isinstance(bound, int | float)):
            return f"its {key} is a number"
    if "default" in prop and _value_problem(prop, prop["default"]):
        return "its default is not one of its values"
    return None


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def defaults(schema: dict[str, Any]) -> dict[str, Any] | None:
    """The answer a form gives untouched (each field's default, ``true`` for
    a required yes/no without one); None when a required field has neither,
    or its defaults are no answer ``check`` takes (approving it alone cannot
    answer it)."""
    props = schema.get("properties") or {}
    required = set(schema.get("required") or ())
    answer: dict[str, Any] = {}
    for name, prop in props.items():
        if "default" in prop:
            answer[name] = prop["default"]
        elif prop.get("type") == "boolean" and name in required:
            answer[name] = True
        elif name in required:
            return None
    clean, errors = check(schema, answer)
    return None if errors else clean


def check(schema: dict[str, Any], answer: Any) -> tuple[dict[str, Any], dict[str, str]]:
    """The answer as the tool gets it, and what is wrong with each field
    (empty when nothing is). A field left out, or an empty string for a
    text field, is not answered: refused when the form requires it."""
    if not isinstance(answer, dict):
        return {}, {"": "the answer is an object of the form's fields"}
    props = schema.get("properties") or {}
    errors = {str(name): "this form has no such field" for name in answer if name not in props}
    clean: dict[str, Any] = {}
    for name, prop in props.items():
        value = answer.get(name)
        if value is None or value == "":
            if name in (schema.get("required") or ()):
                errors[name] = "required"
            continue
        problem = _value_problem(prop, value)
        if problem:
            errors[name] = problem
        else:
            clean[name] = value
    return clean, errors


def _value_problem(prop: dict[str, Any], value: Any) -> str | None:
    kind = prop["type"]
    if kind == "boolean":
        return None if isinstance(value, bool) else "must be true or false"
    if kind in ("number", "integer"):
        return _number_problem(prop, value)
    if not isinstance(value, str) or not p.is_unicode(value) or "\x00" in value:
        return "must be text"
    if "enum" in prop:
        return None if value in prop["enum"] else "must be one of the choices"
    if len(value) < prop.get("minLength", 0):
        return f"must be at least {prop['minLength']} characters"
    if len(value) > min(prop.get("maxLength", MAX_TEXT), MAX_TEXT):
        return f"must be at most {min(prop.get('maxLength', MAX_TEXT), MAX_TEXT)} characters"
    return _format_problem(prop.get("format"), value)


def _number_problem(prop: dict[str, Any], value: Any) -> str | None:
    integer = prop["type"] == "integer"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "must be a whole number" if integer else "must be a number"
    if isinstance(value, float) and not math.isfinite(value):
        return "must be a whole number" if integer else "must be a number"
    if abs(value) > MAX_NUMBER:  # an int this big is no float: asked first
        return f"must be at most {MAX_NUMBER} either way"
    if integer and value != int(value):
        return "must be a whole number"
    if "minimum" in prop and value < prop["minimum"]:
        return f"must be at least {prop['minimum']}"
    if "maximum" in prop and value > prop["maximum"]:
        return f"must be at most {prop['maximum']}"
    return None


def _format_problem(fmt: str | None, value: str) -> str | None:
    if fmt == "email" and not _EMAIL.match(value):
        return "must be an email address"
    if fmt == "uri":
        parts = urlsplit(value)
        if not (parts.scheme and (parts.netloc or parts.path)) or " " in value:
            return "must be a URI"
    if fmt == "date" and not _parses(date.fromisoformat, value, 10):
        return "must be a date (YYYY-MM-DD)"
    if fmt == "date-time" and not _zoned(value):
        return "must be a date and time with its offset (RFC 3339)"
    return None


def _zoned(value: str) -> bool:
    """An RFC 3339 date-time: a date, a time and an offset (``Z`` or ±hh:mm)."""
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return False
    return "T" in value.upper() and parsed.tzinfo is not None


def _parses(parse, value: str, least: int) -> bool:
    try:
        parse(value)
    except ValueError:
        return False
    return len(value) >= least


def errors_text(errors: dict[str, str]) -> str:
    """The refusal in one line: each field and what is wrong with it."""
    return "; ".join(f"{name}: {why}" if name else why for name, why in sorted(errors.items()))
