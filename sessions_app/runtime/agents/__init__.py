"""Pluggable agents: picks the class named by ``settings.AGENT_CLASS``
(docs/agents.md)."""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from sessions_app.runtime.base import Agent

_BUILTIN = {
    "scripted": "sessions_app.runtime.agents.scripted.ScriptedAgent",
    "openai": "sessions_app.runtime.agents.openai.OpenAIAgent",
    "anthropic": "sessions_app.runtime.agents.anthropic.AnthropicAgent",
}


def get_agent(name: str | None = None) -> Agent:
    """A new agent instance: ``scripted``, ``openai``, ``anthropic`` or a dotted class path."""
    name = name or settings.AGENT_CLASS
    path = _BUILTIN.get(name, name)
    try:
        cls = import_string(path)
    except ImportError as exc:
        raise ImproperlyConfigured(f"cannot load agent class {name!r}: {exc}") from exc
    return cls()
