"""Tracing vocabulary: the product's tracer, span names and attributes, and the trace context
carried with a run (docs/observability.md).

This module only uses the OpenTelemetry *API*: with no SDK configured every span is a no-op, so
the layers that record spans (the executor, the ledgers, agents) pay nothing when tracing is
off. The SDK, the exporter and the library instrumentations are set up once per process by
:mod:`openrath_project.tracing_setup`.

It imports no Django (the pure providers and tools layers may use it).

Privacy: span attributes carry ids, names, counts and statuses. Prompt and completion text is
added only while :func:`content_recording` is true, which the executor turns on for the steps
of a project the operator listed in ``OPENRATH_TRACE_CONTENT_PROJECTS``; tool arguments and tool
results are never recorded (a tool reads what the model cannot be trusted with: files, pages,
command output).
"""

from __future__ import annotations

import contextvars
import json
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

TRACER_NAME = "openrath"

# Span names.
RUN_SPAN = "openrath.run"
STEP_SPAN = "openrath.step"
EFFECT_SPAN = "openrath.effect"
INTERRUPT_SPAN = "openrath.interrupt"
INTERRUPT_WAIT_SPAN = "openrath.interrupt.wait"

# The product's attributes (the GenAI ones follow the OpenTelemetry semantic conventions).
RUN_ID = "openrath.run.id"
RUN_WORKFLOW = "openrath.run.workflow"
RUN_PARENT = "openrath.run.parent_id"
RUN_BRANCH = "openrath.run.branch"
TENANT = "openrath.tenant.id"
PROJECT = "openrath.project.id"
STEP_NAME = "openrath.step.name"
STEP_ATTEMPT = "openrath.step.attempt"
STEP_OUTCOME = "openrath.step.outcome"
WORKER = "openrath.worker"
EFFECT_KEY = "openrath.effect.key"
EFFECT_CLASS = "openrath.effect.class"
EFFECT_OUTCOME = "openrath.effect.outcome"
EFFECT_STATUS = "openrath.effect.ledger_status"
INTERRUPT_ID = "openrath.interrupt.id"
INTERRUPT_KIND = "openrath.interrupt.kind"
INTERRUPT_OUTCOME = "openrath.interrupt.outcome"
INTERRUPT_DECISION = "openrath.interrupt.decision"
INTERRUPT_WAIT = "openrath.interrupt.wait_seconds"
FIRST_CHUNK_LATENCY = "openrath.gen_ai.time_to_first_token_seconds"
# Arize Phoenix (OpenInference) shows a span's kind from this attribute.
OPENINFERENCE_KIND = "openinference.span.kind"

_propagator = TraceContextTextMapPropagator()

_record_content: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "openrath_trace_content", default=False
)


def tracer() -> trace.Tracer:
    return trace.get_tracer(TRACER_NAME)


# --- Trace context carried with a run ----------------------------------------------------------


def carrier_of(span: Span | None = None) -> dict[str, str]:
    """The W3C trace context (``traceparent``, maybe ``tracestate``) of ``span`` (default: the
    current one); empty when there is no sampled span to continue (tracing off)."""
    target = span if span is not None else trace.get_current_span()
    if not target.get_span_context().is_valid:
        return {}
    carrier: dict[str, str] = {}
    _propagator.inject(carrier, context=trace.set_span_in_context(target))
    return carrier


def context_from(carrier: Mapping[str, Any] | None) -> otel_context.Context | None:
    """The context a stored carrier names, or ``None`` when it names none."""
    if not carrier or not isinstance(carrier.get("traceparent"), str):
        return None
    ctx = _propagator.extract(dict(carrier))
    return ctx if trace.get_current_span(ctx).get_span_context().is_valid else None


def link_to(carrier: Mapping[str, Any] | None, **attributes: Any) -> list[Link]:
    """A span link to the span a carrier names (none when it names none)."""
    ctx = context_from(carrier)
    if ctx is None:
        return []
    return [Link(trace.get_current_span(ctx).get_span_context(), attributes=attributes or None)]


def ambient_links() -> list[Link]:
    """A link to the current span (a Celery task's, a request's) for a span started under a
    stored context instead: the hand-off that brought the work here stays findable."""
    current = trace.get_current_span().get_span_context()
    return [Link(current)] if current.is_valid else []


# --- Content switch ------------------------------------------------------------------------------


def content_recording() -> bool:
    """Whether prompt and completion text may go into spans here (off unless opted in)."""
    return _record_content.get()


@contextmanager
def recording_content(allowed: bool) -> Iterator[None]:
    token = _record_content.set(allowed)
    try:
        yield
    finally:
        _record_content.reset(token)


# --- Errors --------------------------------------------------------------------------------------


def mark_error(span: Span, exc: BaseException, *, message: str | None = None) -> None:
    """Mark ``span`` failed with the exception's type and a (caller-redacted) message; the
    traceback is not recorded (it can hold local values)."""
    text = (message if message is not None else str(exc))[:500]
    span.set_attribute("error.type", type(exc).__name__)
    span.add_event(
        "exception",
        {"exception.type": type(exc).__name__, "exception.message": text},
    )
    span.set_status(Status(StatusCode.ERROR, text[:200]))


# --- Model calls (GenAI semantic conventions) -------------------------------------------------


@dataclass
class ModelCall:
    """The span of one model call; the agent reports the first token and the answer."""

    span: Span
    started: float = field(default_factory=time.monotonic)
    first_token_at: float | None = None

    def first_token(self) -> None:
        if self.first_token_at is None:
            self.first_token_at = time.monotonic()
            self.span.add_event("gen_ai.first_token")
            self.span.set_attribute(FIRST_CHUNK_LATENCY, self.first_token_at - self.started)

    def answered(
        self,
        *,
        response_model: str,
        input_tokens: int,
        output_tokens: int,
        finish_reason: str,
        output_text: str = "",
        tool_calls: Sequence[str] = (),
    ) -> None:
        span = self.span
        span.set_attribute("gen_ai.response.model", response_model)
        span.set_attribute("gen_ai.usage.input_tokens", input_tokens)
        span.set_attribute("gen_ai.usage.output_tokens", output_tokens)
        span.set_attribute("gen_ai.response.finish_reasons", [finish_reason or "unknown"])
        # Phoenix's own names for the same counts.
        span.set_attribute("llm.token_count.prompt", input_tokens)
        span.set_attribute("llm.token_count.completion", output_tokens)
        span.set_attribute("llm.token_count.total", input_tokens + output_tokens)
        if tool_calls:
            span.set_attribute("openrath.gen_ai.tool_calls", list(tool_calls))
        if content_recording():
            message = {"role": "assistant", "content": output_text}
            span.set_attribute("gen_ai.output.messages", json.dumps([message]))
            span.set_attribute("output.value", output_text)


@contextmanager
def model_call(
    *,
    provider: str,
    request_model: str,
    agent: str,
    messages: Sequence[Mapping[str, Any]],
    tools: int = 0,
    streaming: bool = False,
) -> Iterator[ModelCall]:
    """A ``chat {model}`` client span around one model call."""
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": provider,
        "gen_ai.system": provider,
        "gen_ai.request.model": request_model,
        "gen_ai.agent.name": agent,
        "openrath.gen_ai.streaming": streaming,
        "openrath.gen_ai.tools": tools,
        "llm.model_name": request_model,
        "llm.provider": provider,
        OPENINFERENCE_KIND: "LLM",
    }
    if content_recording():
        text = json.dumps([dict(m) for m in messages], default=str)
        attributes["gen_ai.input.messages"] = text
        attributes["input.value"] = text
    with tracer().start_as_current_span(
        f"chat {request_model}",
        kind=SpanKind.CLIENT,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        call = ModelCall(span)
        try:
            yield call
        except BaseException as exc:
            mark_error(span, exc)
            raise


@contextmanager
def tool_call(*, name: str, call_id: str, agent: str) -> Iterator[Span]:
    """An ``execute_tool {name}`` span around one tool call (never its arguments or output)."""
    with tracer().start_as_current_span(
        f"execute_tool {name}",
        attributes={
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.call.id": call_id,
            "gen_ai.tool.type": "function",
            "gen_ai.agent.name": agent,
            OPENINFERENCE_KIND: "TOOL",
            "tool.name": name,
        },
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            yield span
        except BaseException as exc:
            mark_error(span, exc)
            raise


def tool_outcome(span: Span, *, error_kind: str | None, truncated: bool) -> None:
    """What the dispatcher made of the call (a tool error is an answer, not an exception)."""
    if error_kind:
        span.set_attribute("error.type", error_kind)
        span.set_status(Status(StatusCode.ERROR, error_kind))
    if truncated:
        span.set_attribute("openrath.tool.truncated", True)
