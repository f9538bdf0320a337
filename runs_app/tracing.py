"""A run's spans: its root, one span per step attempt, its interrupts and their waits.

A run's trace context is stored with the run (``Run.trace_context``, W3C ``traceparent``):
``run_create`` records a short ``openrath.run`` span under the request that created the run and
stores that span's context; every step attempt, by whichever worker claims the run (a Celery
task, ``run_worker``, an embedded thread, a library script, after a Redis outage or an approval
days later), is a child of it, so retries and re-executions after a crash are siblings. A
branch of a fan-out stores the router step's context: parallel branches are concurrent children
of that step. The span that brought the work to the worker (a Celery task's) is linked.

Nothing here writes to the database; with tracing off (no SDK) every call is a no-op.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import datetime
from types import TracebackType
from typing import Any, TypeVar

from django.conf import settings
from django.utils import timezone
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span

from openrath_project import tracing
from openrath_project.tracing_setup import configure_tracing
from runs_app.control import StepSuspended
from runs_app.models import Interrupt, Run

F = TypeVar("F", bound=Callable[..., Any])


def trace_view(run: Run) -> dict[str, str] | None:
    """The run's trace for the console: its id and, with ``OPENRATH_TRACE_URL_TEMPLATE`` set
    (``{trace_id}`` is replaced), a link to it in the operator's backend."""
    parent = tracing.context_from(run.trace_context)
    if parent is None:
        return None
    trace_id = format(trace.get_current_span(parent).get_span_context().trace_id, "032x")
    template = getattr(settings, "OPENRATH_TRACE_URL_TEMPLATE", "")
    url = template.replace("{trace_id}", trace_id) if template else ""
    return {"trace_id": trace_id, "url": url}


def content_allowed(tenant_slug: str, project_slug: str) -> bool:
    """Whether the operator opted this project in to prompt and completion text in spans
    (``OPENRATH_TRACE_CONTENT_PROJECTS``: ``tenant/project`` entries, ``*`` for all)."""
    listed = getattr(settings, "OPENRATH_TRACE_CONTENT_PROJECTS", ())
    return "*" in listed or f"{tenant_slug}/{project_slug}" in listed


def run_root(
    *,
    run_id: uuid.UUID,
    workflow: str,
    tenant_id: uuid.UUID,
    project_id: uuid.UUID,
    parent_carrier: dict[str, Any] | None = None,
    origin_carrier: dict[str, Any] | None = None,
) -> dict[str, str]:
    """Record the run's root span (under the current span, or ``parent_carrier``'s) and return
    the trace context to store with the run; ``{}`` when tracing is off. ``origin_carrier``
    (the run this one was forked from) becomes a link."""
    if not configure_tracing():
        return {}
    parent = tracing.context_from(parent_carrier)
    span = tracing.tracer().start_span(
        tracing.RUN_SPAN,
        context=parent,
        links=tracing.link_to(origin_carrier, **{"openrath.link": "forked_from"}),
        attributes={
            tracing.RUN_ID: str(run_id),
            tracing.RUN_WORKFLOW: workflow,
            tracing.TENANT: str(tenant_id),
            tracing.PROJECT: str(project_id),
            tracing.OPENINFERENCE_KIND: "CHAIN",
        },
    )
    span.end()
    return tracing.carrier_of(span)


def origin_of(session: Any) -> dict[str, Any]:
    """The trace context of the run whose session a new run starts from (a fork links to
    its origin); ``{}`` when there is none or tracing is off."""
    if session is None or not configure_tracing():
        return {}
    origin = (getattr(session, "metadata", None) or {}).get("run")
    if not origin:
        return {}
    try:
        origin_id = uuid.UUID(str(origin))
    except ValueError:
        return {}
    stored = Run.objects.filter(id=origin_id).values_list("trace_context", flat=True)
    return next(iter(stored), None) or {}


class StepSpans(AbstractContextManager["StepSpans"]):
    """The spans of the steps one claim executes: ``begin`` ends the previous attempt's span
    (``completed``) and starts the next one, current in this thread; leaving the block ends
    the last one with the claim's outcome."""

    def __init__(self, run: Run, *, worker: str) -> None:
        self.run = run
        self.worker = worker
        self.enabled = configure_tracing()
        self._span: Span | None = None
        self._token: object | None = None
        self._content_token: Any = None
        self._parent: otel_context.Context | None = None
        self._links = tracing.ambient_links()

    def __enter__(self) -> StepSpans:
        if not self.enabled:
            return self
        self._parent = tracing.context_from(self.run.trace_context)
        if self._parent is None:  # created while tracing was off: a root for this claim
            carrier = run_root(
                run_id=self.run.id,
                workflow=self.run.workflow,
                tenant_id=self.run.tenant_id,
                project_id=self.run.project_id,
            )
            self._parent = tracing.context_from(carrier)
        allowed = bool(getattr(settings, "OPENRATH_TRACE_CONTENT_PROJECTS", ())) and (
            content_allowed(self.run.project.tenant.slug, self.run.project.slug)
        )
        self._content_token = tracing._record_content.set(allowed)
        return self

    def begin(self, step: str, attempt: int) -> None:
        if not self.enabled:
            return
        self._close("completed")
        attributes: dict[str, Any] = {
            tracing.RUN_ID: str(self.run.id),
            tracing.RUN_WORKFLOW: self.run.workflow,
            tracing.STEP_NAME: step,
            tracing.STEP_ATTEMPT: attempt,
            tracing.WORKER: self.worker,
            tracing.TENANT: str(self.run.tenant_id),
            tracing.PROJECT: str(self.run.project_id),
            tracing.OPENINFERENCE_KIND: "CHAIN",
        }
        if self.run.branch:
            attributes[tracing.RUN_BRANCH] = self.run.branch
            attributes[tracing.RUN_PARENT] = str(self.run.parent_id)
        self._span = tracing.tracer().start_span(
            f"{tracing.STEP_SPAN} {step}",
            context=self._parent,
            links=self._links,
            attributes=attributes,
        )
        self._token = otel_context.attach(trace.set_span_in_context(self._span))

    def finish(self, status: str) -> None:
        """The claim ended with ``status`` (the executor's outcome)."""
        self._close(status)

    def _close(self, outcome: str) -> None:
        span, token = self._span, self._token
        self._span = self._token = None
        if token is not None:
            otel_context.detach(token)  # type: ignore[arg-type]
        if span is not None:
            span.set_attribute(tracing.STEP_OUTCOME, outcome)
            span.end()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is not None and self._span is not None:
            tracing.mark_error(self._span, exc, message=type(exc).__name__)
        self._close("error" if exc is not None else "ended")
        if self._content_token is not None:
            tracing._record_content.reset(self._content_token)
            self._content_token = None


def step_failed(message: str, exc: BaseException, *, retry_delay: float | None) -> None:
    """The current step attempt failed (``message`` already redacted); a retry is a durable
    timer: its delay is an event on the failed attempt."""
    span = trace.get_current_span()
    if not span.is_recording():
        return
    tracing.mark_error(span, exc, message=message)
    if retry_delay is not None:
        span.add_event("retry.scheduled", {"openrath.retry.delay_seconds": float(retry_delay)})


def _kind_text(kind: Any) -> str:
    return str(getattr(kind, "value", kind))


def traced_interrupt_request(fn: F) -> F:
    """An ``openrath.interrupt {kind}`` span around asking for a decision: ``waiting`` (the
    step stops, the run waits) or ``decided`` (the decision is returned or raised)."""

    @functools.wraps(fn)
    def wrapper(ref: Any, *args: Any, **kwargs: Any) -> Any:
        kind = _kind_text(kwargs.get("kind"))
        with tracing.tracer().start_as_current_span(
            f"{tracing.INTERRUPT_SPAN} {kind}",
            attributes={
                tracing.INTERRUPT_KIND: kind,
                "openrath.interrupt.sequence": int(kwargs.get("sequence") or 0),
                tracing.RUN_ID: str(ref.run_id),
                tracing.STEP_NAME: str(kwargs.get("step") or ref.step),
            },
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                decision = fn(ref, *args, **kwargs)
            except StepSuspended:
                span.set_attribute(tracing.INTERRUPT_OUTCOME, "waiting")
                raise
            except Exception as exc:
                decided = getattr(exc, "decision", None)
                if decided is not None:  # InterruptRejected
                    span.set_attribute(tracing.INTERRUPT_OUTCOME, "decided")
                    span.set_attribute(tracing.INTERRUPT_DECISION, str(decided.decision))
                else:
                    tracing.mark_error(span, exc, message=type(exc).__name__)
                raise
            span.set_attribute(tracing.INTERRUPT_OUTCOME, "decided")
            span.set_attribute(tracing.INTERRUPT_DECISION, str(decision.decision))
            return decision

    return wrapper  # type: ignore[return-value]


def _ns(moment: datetime) -> int:
    return int(moment.timestamp() * 1_000_000_000)


def interrupt_waited(interrupt: Interrupt, *, outcome: str) -> None:
    """Record the wait for a person's decision as a span in the run's trace, from the request to
    now (the resolving request's span, in its own trace, is linked)."""
    if not configure_tracing():
        return
    carrier = Run.objects.filter(id=interrupt.run_id).values_list("trace_context", flat=True)
    parent = tracing.context_from(next(iter(carrier), None))
    if parent is None:
        return
    now = timezone.now()
    waited = max(0.0, (now - interrupt.created_at).total_seconds())
    span = tracing.tracer().start_span(
        f"{tracing.INTERRUPT_WAIT_SPAN} {interrupt.kind}",
        context=parent,
        links=tracing.ambient_links(),
        start_time=_ns(interrupt.created_at),
        attributes={
            tracing.INTERRUPT_ID: str(interrupt.id),
            tracing.INTERRUPT_KIND: interrupt.kind,
            tracing.INTERRUPT_OUTCOME: outcome,
            tracing.INTERRUPT_DECISION: interrupt.decision,
            tracing.INTERRUPT_WAIT: waited,
            tracing.RUN_ID: str(interrupt.run_id),
            tracing.STEP_NAME: interrupt.step,
        },
    )
    span.end(end_time=_ns(now))


def traced_interrupt_resolve(fn: F) -> F:
    """After a decision is stored, its wait becomes a span of the run's trace."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        resolved = fn(*args, **kwargs)
        interrupt_waited(resolved, outcome="resolved")
        return resolved

    return wrapper  # type: ignore[return-value]
