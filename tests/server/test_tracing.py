"""Tracing (sessions_app/server/tracing.py), with the OpenTelemetry SDK's
in-memory exporter: a /write round trip is one connected trace, from the send
through the run on the worker to the tool and the wait at its gate."""

from __future__ import annotations

import pytest

pytest.importorskip(
    "opentelemetry.sdk", reason="OPENTELEMETRY IS NOT INSTALLED: tracing is not tested"
)

from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)

from sessions_app.log.sessions import create_session  # noqa: E402
from sessions_app.models import ApprovalRequest, Run  # noqa: E402
from sessions_app.runtime import deciding, turns  # noqa: E402
from sessions_app.runtime.executor import execute_run  # noqa: E402
from sessions_app.runtime.gates import Decision
from sessions_app.runtime.tools import workspace_for  # noqa: E402
from sessions_app.server import tracing  # noqa: E402

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def spans():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.use_provider(provider)
    yield exporter
    tracing.use_provider(None)


def test_a_write_round_trip_is_one_connected_trace(user, no_enqueue, spans, settings):
    """The server's send (its span, its appends) stores its trace with the
    run; the worker's drive continues it, to the gate; the decision records
    the wait; the continuation runs the tool, in the same trace. Every span
    but the send has its parent in the trace, and no attribute carries a
    message's text or a tool's arguments."""
    settings.AGENT_GROUP_COMMIT = False
    s = create_session(user)
    spans.clear()  # the session's creation is not part of the round trip
    with tracing.span("session.send", **{"session.id": s.id, "via": "socket"}):
        trace = tracing.carrier()
        sent = turns.submit_message(
            s.id, "m1", "/write traced.txt secret words", sender=turns.Sender(trace=trace)
        )
    assert Run.objects.get(id=sent.run_id).trace == trace != ""
    execute_run(sent.run_id)  # the worker: the run parks at its gate
    approval = ApprovalRequest.objects.get(run_id=sent.run_id)
    deciding.decide(approval.id, Decision("approve", "alice", "tab"))
    execute_run(sent.run_id)  # the continuation: the tool runs once
    assert (workspace_for(s.id) / "traced.txt").read_text() == "secret words\n"

    finished = spans.get_finished_spans()
    names = [span.name for span in finished]
    for name in ("session.send", "log.append", "fanout.publish", "run", "approval.wait"):
        assert name in names, names
    assert names.count("run") == 2 and names.count("tool.execute") == 1
    assert len({span.context.trace_id for span in finished}) == 1, [
        (sp.name, sp.context.trace_id % 1000, sp.parent and sp.parent.span_id % 1000)
        for sp in finished
        if sp.context.trace_id != finished[-1].context.trace_id
    ]
    ids = {span.context.span_id for span in finished}
    roots = [span for span in finished if span.parent is None]
    assert [span.name for span in roots] == ["session.send"]
    assert all(span.parent.span_id in ids for span in finished if span.parent is not None)
    tool = next(span for span in finished if span.name == "tool.execute")
    assert tool.attributes["tool"] == "write_file" and tool.attributes["ok"] is True
    assert tool.parent.span_id in {sp.context.span_id for sp in finished if sp.name == "run"}
    for span in finished:
        for value in span.attributes.values():
            assert "secret" not in str(value) and "traced.txt" not in str(value)


def test_off_unless_configured(monkeypatch):
    """Without an OTEL_* exporter setting nothing is set up, and every call
    is a no-op: no span, no carrier."""
    for name in (
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_TRACES_EXPORTER",
    ):
        monkeypatch.delenv(name, raising=False)
    tracing.use_provider(None)
    assert tracing.configure() is False and not tracing.enabled()
    with tracing.span("nothing") as span, tracing.continued("00-abc-def-01"):
        assert span is None and tracing.carrier() == ""


def test_an_exception_leaves_its_type_never_its_message(spans):
    """A failing block's span says the exception's type; its message (user
    text: a /tool command's arguments, a model's error body) is in no
    attribute, event or status."""
    secret = "the user's private text"
    with pytest.raises(ValueError), tracing.span("fails"):
        raise ValueError(secret)
    (done,) = spans.get_finished_spans()
    assert done.attributes["exception.type"] == "builtins.ValueError"
    assert done.status.status_code.name == "ERROR"
    exported = repr(
        (done.attributes, [(e.name, e.attributes) for e in done.events], done.status.description)
    )
    assert secret not in exported
