"""The tools agents may ask for: a registry built from ``AGENT_TOOLS``.

A tool is a class (``Tool``) named by its dotted path in the setting. It
declares everything the project needs to know of it, in one place:

- ``name`` and ``description``: what a model is told;
- ``parameters``: the JSON Schema of its arguments, which every model backend
  sends (the OpenAI and Anthropic agents build their tool lists from it);
- ``validate(args)``: why arguments are not acceptable, or None (the default
  checks them against ``parameters``: an object of the declared string,
  integer, number or boolean properties, the required ones present, no other);
- ``execute(args, workspace)``: run an approved call, ``(ok, output)``; the
  runtime calls it once, after a person approved, in the session's workspace;
- ``display``: how the approval card shows the arguments, a list of
  ``{"arg": NAME, "label": TEXT, "as": "code" | "block" | "command"}`` (sent
  with ``approval.requested``; a tool without it is shown as JSON).

The two built-in tools, ``write_file`` and ``terminal``, are entries like any
other (``runtime.tools``); a project adds its own without editing the app
(docs/agents.md, "Adding a tool").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import cache
from pathlib import Path
from typing import Any, ClassVar

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.utils.module_loading import import_string

_JSON_TYPES = {"string": str, "integer": int, "number": (int, float), "boolean": bool}
DISPLAY_AS = ("code", "block", "command")
MAX_ARG_CHARS = 1_000_000


class Tool:
    """One tool (see the module's comment); subclass it and set the fields."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    parameters: ClassVar[dict[str, Any]] = {"type": "object", "properties": {}}
    display: ClassVar[list[dict[str, str]]] = []
    # Safe to run again when a worker stopped while it ran, its outcome unknown
    # (docs/agents.md, "Tool calls and crashes"); otherwise the run asks first.
    idempotent: ClassVar[bool] = False
    # Run without asking: its tool.call has no gate (an MCP server's
    # auto_approve list, runtime.mcp). Its result is still logged once.
    auto_approve: ClassVar[bool] = False

    def validate(self, args: Any) -> str | None:
        """Why ``args`` are not acceptable, or None: checked against ``parameters``."""
        if not isinstance(args, dict):
            return "arguments must be an object"
        properties = self.parameters.get("properties", {})
        for key in self.parameters.get("required", ()):
            if key not in args:
                return f"{self.name} needs the argument {key!r}"
        extra = sorted(str(k) for k in set(args) - set(properties))
        if extra:
            return f"unexpected arguments for {self.name}: {', '.join(extra)}"
        for key, value in args.items():
            kind = _JSON_TYPES.get(properties[key].get("type", "string"), str)
            if isinstance(value, bool) and kind is not bool:
                return f"{self.name}: {key!r} must be a {properties[key].get('type', 'string')}"
            if not isinstance(value, kind):
                return f"{self.name}: {key!r} must be a {properties[key].get('type', 'string')}"
            if isinstance(value, str) and ("\x00" in value or len(value) > MAX_ARG_CHARS):
                return f"{self.name}: {key!r} holds a NUL or is too long"
        return None

    def execute(self, args: dict[str, Any], workspace: Path) -> tuple[bool, str]:
        raise NotImplementedError(f"tool {self.name!r} has no execute()")

    def execute_call(self, args: dict[str, Any], workspace: Path, call_id: str) -> tuple[bool, str]:
        """``execute`` for the call ``call_id``: a tool that makes itself
        idempotent by call id overrides this one."""
        return self.execute(args, workspace)

    def schema(self) -> dict[str, Any]:
        """The tool as a model is told of it (name, description, parameters)."""
        return {"name": self.name, "description": self.description, "parameters": self.parameters}


# More tools than AGENT_TOOLS: each source lists the tools it has, without
# I/O, and is refreshed (``runtime.mcp``: ``tools`` and ``refresh``, added
# when the app is ready) when a run asks for a tool none has.
_sources: list[tuple[Callable[[], Iterable[Tool]], Callable[[], None]]] = []


def add_source(tools: Callable[[], Iterable[Tool]], refresh: Callable[[], None]) -> None:
    if (tools, refresh) not in _sources:
        _sources.append((tools, refresh))


def refresh() -> None:
    for _tools, again in _sources:
        again()


def tools() -> dict[str, Tool]:
    """Every tool, by name: ``AGENT_TOOLS`` in the setting's order, then the
    tools of the other sources (``AGENT_MCP_SERVERS``, ``runtime.mcp``) this
    process could list."""
    found = configured()
    if not _sources:
        return found
    merged = dict(found)
    for listed, _again in _sources:
        for tool in listed():
            merged.setdefault(tool.name, tool)
    return merged


@cache
def configured() -> dict[str, Tool]:
    """Every tool of ``AGENT_TOOLS``, by name, in the setting's order."""
    found: dict[str, Tool] = {}
    for path in settings.AGENT_TOOLS:
        try:
            cls = import_string(path)
        except ImportError as exc:
            raise ImproperlyConfigured(f"AGENT_TOOLS: cannot load {path!r}: {exc}") from exc
        if not (isinstance(cls, type) and issubclass(cls, Tool)) or not cls.name:
            raise ImproperlyConfigured(f"AGENT_TOOLS: {path!r} is not a named Tool subclass")
        if cls.name in found:
            raise ImproperlyConfigured(f"AGENT_TOOLS: two tools are named {cls.name!r}")
        for field in cls.display:
            if field.get("as", "code") not in DISPLAY_AS or "arg" not in field:
                raise ImproperlyConfigured(f"AGENT_TOOLS: {path!r} has a bad display {field!r}")
        found[cls.name] = cls()
    return found


def _reset(setting: str, **_: Any) -> None:
    if setting == "AGENT_TOOLS":
        configured.cache_clear()


setting_changed.connect(_reset)


def names() -> tuple[str, ...]:
    return tuple(tools())


def validate_args(tool: str, args: Any) -> str | None:
    """Why ``args`` are not acceptable for ``tool`` (unknown tools included), or
    None. A tool no source has yet has the sources refreshed first (an MCP
    server listed now)."""
    found = tools().get(tool)
    if found is None and _sources:
        refresh()
        found = tools().get(tool)
    if found is None:
        return f"unknown tool: {tool!r}"
    return found.validate(args)


def display_of(tool: str) -> list[dict[str, str]]:
    """How the approval card shows ``tool``'s arguments ([]: as JSON)."""
    found = tools().get(tool)
    return [dict(field) for field in found.display] if found is not None else []


def is_auto_approved(tool: str) -> bool:
    """Does a call of ``tool`` run without a person's approval?"""
    found = tools().get(tool)
    return bool(found and found.auto_approve)


def is_idempotent(tool: str) -> bool:
    """May a call of ``tool`` whose outcome is unknown be run again?"""
    found = tools().get(tool)
    return bool(found and found.idempotent)


def execute(
    tool: str, args: dict[str, Any], workspace: Path, call_id: str = ""
) -> tuple[bool, str]:
    """Run an approved call in ``workspace``: ``(ok, output)``; bad input and a
    tool's own failure are reported, never raised."""
    problem = validate_args(tool, args)
    if problem:
        return False, problem
    try:
        root = Path(workspace).resolve(strict=True)
    except OSError:
        return False, "the session workspace is missing"
    if not root.is_dir():
        return False, "the session workspace is missing"
    try:
        return tools()[tool].execute_call(args, root, call_id)
    except OSError as exc:
        return False, f"{tool} failed: {exc.strerror or exc.__class__.__name__}"
