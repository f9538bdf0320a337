"""An effect's span: ``openrath.effect`` with its key, class, outcome and ledger status.

The outcome says what the ledger did: ``applied`` (the function ran now), ``replayed`` (a
recorded result was returned without calling it), ``failed`` or ``stopped`` (needs review, a
lost lease). The request and the result are never recorded.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from opentelemetry.trace import Span

from effects_app.models import EffectRecord
from openrath_project import tracing

F = TypeVar("F", bound=Callable[..., Any])


def _status(ref: Any, key: str) -> str:
    found = EffectRecord.objects.filter(run_id=ref.run_id, step=ref.step, key=key)
    return next(iter(found.values_list("status", flat=True)), "")


def _outcome(span: Span, ref: Any, key: str, before: str, outcome: str) -> None:
    after = _status(ref, key)
    span.set_attribute(tracing.EFFECT_STATUS, after)
    if outcome == "done":
        outcome = "replayed" if before in ("succeeded", "resolved") else "applied"
    span.set_attribute(tracing.EFFECT_OUTCOME, outcome)


def traced_effect(fn: F) -> F:
    """Wrap ``effect_call`` in its span (the ledger's two reads only while it records)."""

    @functools.wraps(fn)
    def wrapper(ref: Any, *args: Any, **kwargs: Any) -> Any:
        key = str(kwargs.get("key", ""))
        with tracing.tracer().start_as_current_span(
            f"{tracing.EFFECT_SPAN} {key}",
            attributes={
                tracing.EFFECT_KEY: key,
                tracing.EFFECT_CLASS: "idempotent"
                if kwargs.get("idempotent")
                else "non_idempotent",
                tracing.RUN_ID: str(ref.run_id),
                tracing.STEP_NAME: ref.step,
            },
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            recording = span.is_recording()
            before = _status(ref, key) if recording else ""
            try:
                result = fn(ref, *args, **kwargs)
            except BaseException as exc:
                if recording:
                    stopped = type(exc).__name__ in ("NeedsReview", "LeaseLost")
                    _outcome(span, ref, key, before, "stopped" if stopped else "failed")
                    if not stopped:
                        tracing.mark_error(span, exc, message=type(exc).__name__)
                raise
            if recording:
                _outcome(span, ref, key, before, "done")
            return result

    return wrapper  # type: ignore[return-value]
