"""Tracing with OpenTelemetry: optional, and off unless configured.

Installed with the ``otel`` extra (``pip install -e '.[otel]'``) and switched
on by the standard variables: an exporter endpoint
(``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) or
``OTEL_TRACES_EXPORTER`` (``otlp``, ``console``); ``OTEL_SERVICE_NAME`` names
the process (default ``agent-sessions``). Without them, or without the
package, every call here costs one ``if`` and records nothing.

One user action is one trace: a ``send`` on a socket or over REST opens it,
its W3C ``traceparent`` is stored with the run it starts (``Run.trace``), and
the run, on whichever worker executes it, continues that trace: its model
calls, its tool calls, the wait at each approval gate, and its appends and
their group commits. Attributes carry ids and counts (session, run, seq,
tool, approval), never a message's text or a tool's arguments.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from typing import Any

log = logging.getLogger(__name__)

_tracer: Any = None
_propagator: Any = None

_CONFIGURING = (
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_TRACES_EXPORTER",
)


def enabled() -> bool:
    return _tracer is not None


def configure() -> bool:
    """Switch tracing on if the environment asks for it (at start-up)."""
    if not any(os.environ.get(name) for name in _CONFIGURING):
        return False
    if os.environ.get("OTEL_TRACES_EXPORTER", "otlp") == "none" or os.environ.get(
        "OTEL_SDK_DISABLED", ""
    ).lower() in ("1", "true"):
        return False
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
    except ImportError:
        log.error("OTEL_* is set but opentelemetry is not installed: pip install '.[otel]'")
        return False
    name = os.environ.get("OTEL_SERVICE_NAME", "agent-sessions")
    provider = TracerProvider(resource=Resource.create({"service.name": name}))
    if os.environ.get("OTEL_TRACES_EXPORTER", "otlp") == "console":
        exporter = ConsoleSpanExporter()
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter()
    provider.add_span_processor(BatchSpanProcessor(exporter))
    use_provider(provider)
    log.info("tracing on: service %s, exporter %s", name, type(exporter).__name__)
    return True


def use_provider(provider: Any) -> None:
    """Trace through ``provider`` (an SDK ``TracerProvider``; tests give one
    with an in-memory exporter); ``None`` switches tracing off."""
    global _tracer, _propagator
    if provider is None:
        _tracer = _propagator = None
        return
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    _tracer = provider.get_tracer("sessions_app")
    _propagator = TraceContextTextMapPropagator()


def _clean(attributes: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in attributes.items() if isinstance(v, str | int | float | bool)}


@contextlib.contextmanager
def span(name: str, **attributes: Any) -> Iterator[Any]:
    """A span around the block, a child of the current one (nothing when off).

    An exception that leaves the block marks the span failed with its type
    alone: OpenTelemetry's own recording would export its message and
    traceback, and those carry user text (a command's arguments, a model's
    error body)."""
    if _tracer is None:
        yield None
        return
    with _tracer.start_as_current_span(
        name,
        attributes=_clean(attributes),
        record_exception=False,
        set_status_on_exception=False,
    ) as current:
        try:
            yield current
        except Exception as exc:  # a cancellation or a close is no failure
            from opentelemetry.trace import Status, StatusCode

            kind = f"{type(exc).__module__}.{type(exc).__qualname__}"
            current.set_attribute("exception.type", kind)
            current.set_status(Status(StatusCode.ERROR, type(exc).__qualname__))
            raise


def current_ids() -> tuple[str, str] | None:
    """The current span's trace and span ids (hex), for a log line; None
    when tracing is off or no span is current."""
    if _tracer is None:
        return None
    from opentelemetry import trace

    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return format(context.trace_id, "032x"), format(context.span_id, "016x")


def carrier() -> str:
    """The current span's ``traceparent`` ("" when off or outside a span):
    what a run stores to continue its send's trace."""
    if _tracer is None:
        return ""
    headers: dict[str, str] = {}
    _propagator.inject(headers)
    return headers.get("traceparent", "")


@contextlib.contextmanager
def continued(traceparent: str) -> Iterator[None]:
    """Make ``traceparent`` (from ``carrier``, maybe in another process) the
    current context for the block: its spans join that trace."""
    if _tracer is None or not traceparent:
        yield
        return
    from opentelemetry import context

    token = context.attach(_propagator.extract({"traceparent": traceparent}))
    try:
        yield
    finally:
        context.detach(token)


def record(name: str, start_ns: int, end_ns: int, **attributes: Any) -> None:
    """A span that already happened (a wait measured from rows: an approval
    gate's, from its request to its decision), under the current context."""
    if _tracer is None:
        return
    done = _tracer.start_span(name, start_time=start_ns, attributes=_clean(attributes))
    done.end(end_time=end_ns)
