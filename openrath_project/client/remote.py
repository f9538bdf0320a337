"""``RemoteClient`` / ``AsyncRemoteClient``: OpenRath 2.0's client method names, speaking this
product's ``/api/v1`` (docs/api.md; docs/migrating-from-openrath.md, "Remote client").

* **Auth**: ``Authorization: Bearer <token>`` (a token from ``manage.py create_token``).
* **Pages are followed**: the list methods that return a tuple (``list_interrupts``,
  ``events``, ``list_assistants``) read every page they need; ``list_runs`` returns one page
  and its cursor, as OpenRath's does.
* **Errors are exceptions**: the documented body ``{"error": {"code", "message", "details"}}``
  becomes the product's own exception for the status (``ValidationFailed`` 400,
  ``NotAuthenticated`` 401, ``PermissionDenied`` 403, ``NotFound`` 404, ``ConflictError`` 409
  — ``InvalidRunTransition`` / ``PlanMismatchError`` by their codes —, ``PayloadTooLarge`` 413,
  ``RateLimited`` 429), else :class:`RemoteError`; each carries ``code``, ``message``,
  ``details``, ``status`` and the server's ``request_id``.
* **Streams** (``stream_events``, ``stream_session``, ``wait_for_run``) read the Server-Sent
  Events endpoints and, when the connection drops, reconnect with ``Last-Event-ID``: every
  committed item arrives exactly once, in order.

Every operation is written once, as a generator of requests (:class:`_Call`) that receives
their decoded answers; the sync and the async client only drive it. No Django import: the
client runs anywhere ``httpx2`` does.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Generator, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self, TypeVar
from urllib.parse import parse_qs, urlsplit

import httpx2

from openrath_project.client.sse import EventStreamDecoder, ServerSentEvent
from openrath_project.errors import (
    DomainError,
    NotAuthenticated,
    NotFound,
    PayloadTooLarge,
    PermissionDenied,
    RateLimited,
    ValidationFailed,
)
from openrath_project.runtime.models import (
    DECISION_OF_KIND,
    ApprovalDecisionKind,
    ConflictError,
    InvalidRunTransition,
    PlanMismatchError,
    UnsupportedOperation,
)

__all__ = ["TERMINAL_STATUSES", "AsyncRemoteClient", "RemoteClient", "RemoteError"]

#: The statuses a run ends in (the run stream ends after the event that reached one).
TERMINAL_STATUSES = frozenset({"succeeded", "failed", "cancelled", "timed_out"})
#: Where the API lives under the server's address.
API_PREFIX = "/api/v1/"
#: Items per page the client asks for.
PAGE_LIMIT = 200
#: Consecutive reconnections without receiving anything before a stream gives up.
MAX_RECONNECTS = 20

T = TypeVar("T")


class RemoteError(DomainError):
    """An error answer without a more specific exception (a 5xx, a 405, ...)."""

    def __init__(self, message: str, *, status: int, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.status_code = status


_BY_STATUS: dict[int, type[DomainError]] = {
    400: ValidationFailed,
    401: NotAuthenticated,
    403: PermissionDenied,
    404: NotFound,
    409: ConflictError,
    413: PayloadTooLarge,
    429: RateLimited,
}
_BY_CODE: dict[str, type[DomainError]] = {
    "illegal_transition": InvalidRunTransition,
    "plan_mismatch": PlanMismatchError,
}


def error_for(status: int, body: Any, headers: Mapping[str, str]) -> DomainError:
    """The exception for an error answer (its documented body, or whatever came instead)."""
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        error = {"code": f"http_{status}", "message": f"HTTP {status}", "details": {}}
    code = str(error.get("code") or f"http_{status}")
    message = str(error.get("message") or f"HTTP {status}")
    details = error.get("details") if isinstance(error.get("details"), dict) else {}
    kind = _BY_CODE.get(code) or _BY_STATUS.get(status)
    exc: DomainError
    if kind is RateLimited:
        retry = headers.get("retry-after", "1")
        exc = RateLimited(
            message, retry_after=int(retry) if retry.isdigit() else 1, details=details, code=code
        )
    elif kind is not None:
        exc = kind(message, details=details, code=code)
    else:
        exc = RemoteError(message, status=status, details=details, code=code)
    exc.status = status  # type: ignore[attr-defined]
    exc.request_id = headers.get("x-request-id", "")  # type: ignore[attr-defined]
    return exc


@dataclass(frozen=True)
class _Call:
    """One request of an operation."""

    method: str
    path: str
    json: Any = None
    params: Mapping[str, Any] | None = None
    headers: Mapping[str, str] = field(default_factory=dict)


#: An operation: yields requests, receives their decoded JSON answers, returns its result.
_Op = Generator[_Call, Any, T]


def _path_of(url: str) -> str:
    """A ``next`` link as a path relative to the API (the server builds absolute links, whose
    scheme and host may be a proxy's view)."""
    parts = urlsplit(url)
    _, marker, relative = parts.path.partition(API_PREFIX)
    path = relative if marker else parts.path.lstrip("/")
    return f"{path}?{parts.query}" if parts.query else path


def _cursor_of(url: str | None) -> str | None:
    if not url:
        return None
    values = parse_qs(urlsplit(url).query).get("cursor")
    return values[-1] if values else None


class _Operations:
    """The operations, each written once (see the module docstring)."""

    def __init__(self, project: str | None) -> None:
        self.project = project

    def _project(self, project: str | None) -> _Op[str]:
        """The project to act in: the call's, the client's, or the only one the token sees."""
        chosen = project or self.project
        if chosen:
            return chosen
        page = yield _Call("GET", "projects/", params={"limit": 2})
        found = page["results"]
        if len(found) != 1:
            raise ValueError(
                "pass project= (to the call or to the client): the token sees "
                f"{'no project' if not found else 'several projects'}"
            )
        self.project = str(found[0]["slug"])
        return self.project

    def _all(
        self, path: str, params: Mapping[str, Any], limit: int | None = None
    ) -> _Op[list[Any]]:
        """Every item of a paged list (``{"results", "next"}``), up to ``limit``."""
        items: list[Any] = []
        page = yield _Call("GET", path, params=dict(params))
        while True:
            items.extend(page["results"])
            if limit is not None and len(items) >= limit:
                return items[:limit]
            if not page.get("next"):
                return items
            page = yield _Call("GET", _path_of(page["next"]))

    # --- runs ---------------------------------------------------------------------------------

    def create_run(
        self,
        *,
        assistant_id: str,
        session_id: str | None = None,
        state: Mapping[str, object] | None = None,
        idempotency_key: str | None = None,
        project: str | None = None,
        user_message: str | None = None,
        priority: int | None = None,
        input_policy: str | None = None,
    ) -> _Op[dict[str, Any]]:
        body: dict[str, Any] = {
            "workflow": assistant_id,
            "project": (yield from self._project(project)),
            "state": dict(state or {}),
        }
        if session_id is not None:
            body["session"] = str(session_id)
        if user_message is not None:
            body["user_message"] = user_message
        if priority is not None:
            body["priority"] = priority
        if input_policy is not None:
            body["input_policy"] = input_policy
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        return (yield _Call("POST", "runs/", json=body, headers=headers))

    def get_run(self, run_id: str) -> _Op[dict[str, Any]]:
        return (yield _Call("GET", f"runs/{run_id}/"))

    def list_runs(self, *, limit: int = 50, after: str | None = None) -> _Op[dict[str, Any]]:
        params: dict[str, Any] = {"limit": limit}
        if after:
            params["cursor"] = after
        page = yield _Call("GET", "runs/", params=params)
        return {"items": page["results"], "next": _cursor_of(page.get("next"))}

    def cancel_run(self, run_id: str, *, reason: str = "") -> _Op[dict[str, Any]]:
        return (yield _Call("POST", f"runs/{run_id}/cancel/", json={"reason": reason}))

    def resume_run(
        self,
        run_id: str,
        *,
        reason: str = "resumed through the remote client",
        accept_plan: str | None = None,
    ) -> _Op[dict[str, Any]]:
        body: dict[str, Any] = {"reason": reason}
        if accept_plan:
            body["accept_plan"] = accept_plan
        return (yield _Call("POST", f"runs/{run_id}/resume/", json=body))

    def replay_run(self, run_id: str) -> _Op[dict[str, Any]]:
        return (yield _Call("POST", f"runs/{run_id}/replay/", json={}))

    def fork_run(
        self,
        run_id: str,
        *,
        checkpoint: int,
        state_patch: Mapping[str, object] | None = None,
        plan: str = "pinned",
        title: str = "",
        reason: str = "",
    ) -> _Op[dict[str, Any]]:
        body: dict[str, Any] = {"checkpoint": checkpoint, "plan": plan}
        if state_patch is not None:
            body["state_patch"] = dict(state_patch)
        if title:
            body["title"] = title
        if reason:
            body["reason"] = reason
        return (yield _Call("POST", f"runs/{run_id}/fork/", json=body))

    def list_forks(self, run_id: str) -> _Op[tuple[dict[str, Any], ...]]:
        return tuple((yield from self._all(f"runs/{run_id}/forks/", {"limit": 200})))

    def events(self, run_id: str, *, after: int = 0) -> _Op[tuple[dict[str, Any], ...]]:
        items = yield from self._all(
            f"runs/{run_id}/events/", {"after": after, "limit": PAGE_LIMIT}
        )
        return tuple(items)

    # --- sessions and workflows ---------------------------------------------------------------

    def create_session(
        self, *, project: str | None = None, title: str = "", user_message: str | None = None
    ) -> _Op[dict[str, Any]]:
        body: dict[str, Any] = {"project": (yield from self._project(project)), "title": title}
        if user_message is not None:
            body["user_message"] = user_message
        return (yield _Call("POST", "sessions/", json=body))

    def get_session(self, session_id: str) -> _Op[dict[str, Any]]:
        return (yield _Call("GET", f"sessions/{session_id}/"))

    def list_assistants(self) -> _Op[tuple[dict[str, Any], ...]]:
        return tuple((yield from self._all("workflows/", {})))

    # --- interrupts ---------------------------------------------------------------------------

    def list_interrupts(
        self, *, pending_only: bool = True, limit: int = 50, run_id: str | None = None
    ) -> _Op[tuple[dict[str, Any], ...]]:
        params: dict[str, Any] = {"limit": min(limit, PAGE_LIMIT)}
        if pending_only:
            params["status"] = "pending"
        if run_id is not None:
            params["run"] = str(run_id)
        return tuple((yield from self._all("interrupts/", params, limit)))

    def get_interrupt(self, interrupt_id: str) -> _Op[dict[str, Any]]:
        return (yield _Call("GET", f"interrupts/{interrupt_id}/"))

    def decide_interrupt(
        self,
        interrupt_id: str,
        *,
        kind: ApprovalDecisionKind | str,
        request_digest: str,
        reason: str = "",
        payload: Mapping[str, object] | None = None,
    ) -> _Op[dict[str, Any]]:
        body: dict[str, Any] = {
            "decision": DECISION_OF_KIND[ApprovalDecisionKind(kind)],
            "reason": reason,
            "request_digest": request_digest,
        }
        if payload is not None:
            body["response"] = dict(payload)
        return (yield _Call("POST", f"interrupts/{interrupt_id}/resolve/", json=body))

    # --- memory (OpenRath's store) --------------------------------------------------------------

    def store(
        self,
        operation: str,
        payload: Mapping[str, object],
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
        project: str | None = None,
    ) -> _Op[dict[str, Any]]:
        """``put`` remembers ``payload["text"]``; ``search`` recalls ``payload["query"]``
        (``payload["k"]`` results); in the agent's memory with ``agent_id``, the session's with
        ``session_id``, else the project's. ``delete`` has no API (memory is append-only)."""
        if operation not in {"put", "search", "delete"}:
            raise ValueError("store operation must be put, search, or delete")
        if operation == "delete":
            raise UnsupportedOperation(
                "store('delete')",
                "project memory is append-only over the API",
                "an operator removes entries in the admin (/admin/memory_app/memoryentry/)",
            )
        scope = "session" if session_id else "agent" if agent_id else "project"
        body: dict[str, Any] = {"project": (yield from self._project(project)), "scope": scope}
        if agent_id:
            body["agent"] = agent_id
        if session_id:
            body["session"] = str(session_id)
        if operation == "put":
            body["text"] = str(payload["text"])
            metadata = payload.get("metadata")
            if isinstance(metadata, Mapping):
                body["metadata"] = dict(metadata)
            return (yield _Call("POST", "memory/", json=body))
        body["query"] = str(payload["query"])
        if "k" in payload:
            body["k"] = payload["k"]
        return (yield _Call("POST", "memory/recall/", json=body))

    # --- OpenRath operations without an equivalent --------------------------------------------

    @staticmethod
    def create_assistant(*, assistant_id: str, template_id: str) -> None:
        raise UnsupportedOperation(
            "create_assistant",
            "workflows are registered from code, not created over the API",
            "list the workflow's module in OPENRATH_WORKFLOW_MODULES and pass its name as "
            "assistant_id to create_run",
        )

    @staticmethod
    def create_feedback(
        run_id: str, *, key: str, score: float | None = None, value: str | None = None
    ) -> None:
        raise UnsupportedOperation(
            "create_feedback",
            "the product keeps no run feedback",
            "record it in your own store, keyed by the run id",
        )


# --- streaming ------------------------------------------------------------------------------


@dataclass
class _Cursor:
    """Where a stream is: the last id received, whether it has said all it will say."""

    path: str
    after: int
    follow: bool
    ends_with_run: bool
    last_id: str | None = None
    done: bool = False
    retry_ms: int = 1000
    failures: int = 0

    def request_headers(self) -> dict[str, str]:
        headers = {"Accept": "text/event-stream"}
        if self.last_id is not None:
            headers["Last-Event-ID"] = self.last_id
        return headers

    def params(self) -> dict[str, str]:
        return {"after": str(self.after), "follow": "true" if self.follow else "false"}

    def take(self, event: ServerSentEvent) -> dict[str, Any] | None:
        """The message of an event (``None`` for ``ready``); an ``error`` event raises."""
        if event.retry is not None:
            self.retry_ms = event.retry
        message: dict[str, Any] = json.loads(event.data)
        self.last_id = event.id
        self.failures = 0
        if event.event == "error":
            self.done = True
            raise error_for(int(message.get("status", 500)), message, {})
        if event.event == "ready":
            return None
        if (
            self.ends_with_run
            and event.event == "run"
            and message["run"]["status"] in TERMINAL_STATUSES
        ):
            self.done = True
        return message

    def ended(self) -> None:
        """The server ended the body: final unless a followed stream had more to say."""
        if not self.follow or (self.ends_with_run and self.done):
            self.done = True

    def delay(self) -> float:
        """Seconds before the next reconnection (the server's ``retry``, doubled per failure)."""
        self.failures += 1
        if self.failures > MAX_RECONNECTS:
            raise ConnectionError(f"{self.path}: gave up after {MAX_RECONNECTS} reconnections")
        return float(min(10.0, self.retry_ms / 1000 * 2 ** (self.failures - 1)))


_RETRYABLE = (httpx2.TransportError, httpx2.RemoteProtocolError)


def _stream_timeout(timeout: float) -> httpx2.Timeout:
    # Reads wait for the next event; keep-alive comments come every 15 s by default.
    return httpx2.Timeout(timeout, read=max(timeout, 60.0))


class RemoteClient:
    """The blocking client (``httpx2.Client``). Use it as a context manager or ``close()`` it."""

    def __init__(
        self,
        base_url: str,
        *,
        token: str,
        timeout: float = 30.0,
        project: str | None = None,
        transport: httpx2.BaseTransport | None = None,
    ) -> None:
        self.timeout = timeout
        self._ops = _Operations(project)
        self._client = httpx2.Client(
            base_url=base_url.rstrip("/") + API_PREFIX,
            headers={"Authorization": f"Bearer {token}"},
            timeout=timeout,
            transport=transport,
        )

    # --- plumbing -----------------------------------------------------------------------------

    def _send(self, call: _Call) -> Any:
        response = self._client.request(
            call.method,
            call.path,
            json=call.json,
            params=dict(call.params) if call.params else None,
            headers=dict(call.headers),
        )
        return _decoded(response)

    def _drive(self, operation: _Op[T]) -> T:
        try:
            call = next(operation)
            while True:
                call = operation.send(self._send(call))
        except StopIteration as finished:
            return finished.value

    # --- OpenRath's methods -------------------------------------------------------------------

    def create_run(
        self,
        *,
        assistant_id: str,
        session_id: str | None = None,
        state: Mapping[str, object] | None = None,
        idempotency_key: str | None = None,
        project: str | None = None,
        user_message: str | None = None,
        priority: int | None = None,
        input_policy: str | None = None,
    ) -> dict[str, Any]:
        """Start a run of the workflow named ``assistant_id`` (OpenRath's assistant), on a fork
        of ``session_id`` when given. The same ``idempotency_key`` and body return the same
        run; the same key with another body is a ``ConflictError``. ``input_policy``
        (``reject`` | ``enqueue`` | ``interrupt`` | ``rollback``; the workflow's default when
        omitted) says what happens when a run is already active on that session
        (docs/concurrent-input.md)."""
        return self._drive(
            self._ops.create_run(
                assistant_id=assistant_id,
                session_id=session_id,
                state=state,
                idempotency_key=idempotency_key,
                project=project,
                user_message=user_message,
                priority=priority,
                input_policy=input_policy,
            )
        )

    def get_run(self, run_id: str) -> dict[str, Any]:
        return self._drive(self._ops.get_run(run_id))

    def list_runs(self, *, limit: int = 50, after: str | None = None) -> dict[str, Any]:
        """One page, newest first: ``{"items": [...], "next": <cursor for after=, or None>}``."""
        return self._drive(self._ops.list_runs(limit=limit, after=after))

    def cancel_run(self, run_id: str, *, reason: str = "") -> dict[str, Any]:
        return self._drive(self._ops.cancel_run(run_id, reason=reason))

    def resume_run(
        self,
        run_id: str,
        *,
        reason: str = "resumed through the remote client",
        accept_plan: str | None = None,
    ) -> dict[str, Any]:
        """Requeue a run that needs review (``accept_plan``: re-pin it after plan drift)."""
        return self._drive(self._ops.resume_run(run_id, reason=reason, accept_plan=accept_plan))

    def replay_run(self, run_id: str) -> dict[str, Any]:
        """Replay a finished run against the server's current code: the replay run (kind
        ``replay``), its report in ``output``; 409 unless the run succeeded or failed."""
        return self._drive(self._ops.replay_run(run_id))

    def fork_run(
        self,
        run_id: str,
        *,
        checkpoint: int,
        state_patch: Mapping[str, object] | None = None,
        plan: str = "pinned",
        title: str = "",
        reason: str = "",
    ) -> dict[str, Any]:
        """A new run from checkpoint ``checkpoint`` of ``run_id`` (0: its start), with an RFC
        7386 merge patch on its state; ``plan``: ``pinned`` or ``current``. The new run, with
        its ``forked_from`` block (docs/time-travel.md)."""
        return self._drive(
            self._ops.fork_run(
                run_id,
                checkpoint=checkpoint,
                state_patch=state_patch,
                plan=plan,
                title=title,
                reason=reason,
            )
        )

    def list_forks(self, run_id: str) -> tuple[dict[str, Any], ...]:
        """The runs forked from ``run_id`` (their fork edges, oldest first; all pages)."""
        return self._drive(self._ops.list_forks(run_id))

    def events(self, run_id: str, *, after: int = 0) -> tuple[dict[str, Any], ...]:
        """Every event committed after ``after`` (all pages)."""
        return self._drive(self._ops.events(run_id, after=after))

    def create_session(
        self, *, project: str | None = None, title: str = "", user_message: str | None = None
    ) -> dict[str, Any]:
        return self._drive(
            self._ops.create_session(project=project, title=title, user_message=user_message)
        )

    def get_session(self, session_id: str) -> dict[str, Any]:
        return self._drive(self._ops.get_session(session_id))

    def list_assistants(self) -> tuple[dict[str, Any], ...]:
        """The registered workflows (OpenRath's assistants)."""
        return self._drive(self._ops.list_assistants())

    def create_assistant(self, *, assistant_id: str, template_id: str) -> dict[str, Any]:
        self._ops.create_assistant(assistant_id=assistant_id, template_id=template_id)
        raise AssertionError("unreachable")

    def list_interrupts(
        self, *, pending_only: bool = True, limit: int = 50, run_id: str | None = None
    ) -> tuple[dict[str, Any], ...]:
        """Newest first, up to ``limit`` (pages followed); each has its ``request_digest``."""
        return self._drive(
            self._ops.list_interrupts(pending_only=pending_only, limit=limit, run_id=run_id)
        )

    def get_interrupt(self, interrupt_id: str) -> dict[str, Any]:
        return self._drive(self._ops.get_interrupt(interrupt_id))

    def decide_interrupt(
        self,
        interrupt_id: str,
        *,
        kind: ApprovalDecisionKind | str,
        request_digest: str,
        reason: str = "",
        payload: Mapping[str, object] | None = None,
    ) -> dict[str, Any]:
        """Decide with the ``request_digest`` of the request you were shown (a
        ``ConflictError`` ``digest_mismatch`` when the request is not that one; a second
        decision is a ``ConflictError`` too). ``payload``: the response (``respond``) or the
        edited request (``edit``)."""
        return self._drive(
            self._ops.decide_interrupt(
                interrupt_id,
                kind=kind,
                request_digest=request_digest,
                reason=reason,
                payload=payload,
            )
        )

    def store(
        self,
        operation: str,
        payload: Mapping[str, object],
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
        project: str | None = None,
    ) -> dict[str, Any]:
        """OpenRath's memory store over ``/api/v1/memory/`` (see :meth:`_Operations.store`)."""
        return self._drive(
            self._ops.store(
                operation,
                payload,
                user_id=user_id,
                agent_id=agent_id,
                session_id=session_id,
                project=project,
            )
        )

    def create_feedback(
        self, run_id: str, *, key: str, score: float | None = None, value: str | None = None
    ) -> dict[str, Any]:
        self._ops.create_feedback(run_id, key=key, score=score, value=value)
        raise AssertionError("unreachable")

    # --- streams ------------------------------------------------------------------------------

    def stream_events(
        self, run_id: str, *, after: int = 0, follow: bool = True
    ) -> Iterator[dict[str, Any]]:
        """The run's ``event`` and ``run`` messages (docs/streaming.md), each event once, in
        order, across dropped connections; ends when the run has ended (or, with
        ``follow=False``, once what is committed was sent)."""
        return self._stream(_Cursor(f"runs/{run_id}/stream/", after, follow, True))

    def stream_session(
        self, session_id: str, *, after: int = -1, follow: bool = True
    ) -> Iterator[dict[str, Any]]:
        """The session's ``chunk`` and ``delta`` messages, each chunk once, in order, across
        dropped connections; a followed session stream ends only when you stop reading."""
        return self._stream(_Cursor(f"sessions/{session_id}/stream/", after, follow, False))

    def wait_for_run(
        self, run_id: str, *, until: Iterable[str] = TERMINAL_STATUSES
    ) -> dict[str, Any]:
        """Follow the run's stream until its status is one of ``until``; then the run."""
        wanted = frozenset(until)
        for message in self.stream_events(run_id):
            if message["type"] == "run" and message["run"]["status"] in wanted:
                break
        return self.get_run(run_id)

    def _stream(self, cursor: _Cursor) -> Iterator[dict[str, Any]]:
        while not cursor.done:
            try:
                with self._client.stream(
                    "GET",
                    cursor.path,
                    params=cursor.params(),
                    headers=cursor.request_headers(),
                    timeout=_stream_timeout(self.timeout),
                ) as response:
                    if response.status_code != 200:
                        response.read()
                        _decoded(response)
                    decoder = EventStreamDecoder(cursor.last_id)
                    for line in response.iter_lines():
                        event = decoder.feed(line)
                        if event is not None:
                            message = cursor.take(event)
                            if message is not None:
                                yield message
                            if cursor.done:
                                return
                cursor.ended()
                if cursor.done:
                    return
            except _RETRYABLE:
                pass
            except RemoteError as exc:
                if exc.status_code < 500:
                    raise
            time.sleep(cursor.delay())

    # --- lifetime -----------------------------------------------------------------------------

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


class AsyncRemoteClient:
    """The asyncio client (``httpx2.AsyncClient``), with the same methods as coroutines; the
    streams are async iterators. Use it as an async context manager or ``await aclose()``."""

    def __init__(
        self,
        base_url: str,
        *,
        token: str,
        timeout: float = 30.0,
        project: str | None = None,
        transport: httpx2.AsyncBaseTransport | None = None,
    ) -> None:
        self.timeout = timeout
        self._ops = _Operations(project)
        self._client = httpx2.AsyncClient(
            base_url=base_url.rstrip("/") + API_PREFIX,
            headers={"Authorization": f"Bearer {token}"},
            timeout=timeout,
            transport=transport,
        )

    async def _send(self, call: _Call) -> Any:
        response = await self._client.request(
            call.method,
            call.path,
            json=call.json,
            params=dict(call.params) if call.params else None,
            headers=dict(call.headers),
        )
        return _decoded(response)

    async def _drive(self, operation: _Op[T]) -> T:
        try:
            call = next(operation)
            while True:
                call = operation.send(await self._send(call))
        except StopIteration as finished:
            return finished.value

    async def create_run(
        self,
        *,
        assistant_id: str,
        session_id: str | None = None,
        state: Mapping[str, object] | None = None,
        idempotency_key: str | None = None,
        project: str | None = None,
        user_message: str | None = None,
        priority: int | None = None,
        input_policy: str | None = None,
    ) -> dict[str, Any]:
        return await self._drive(
            self._ops.create_run(
                assistant_id=assistant_id,
                session_id=session_id,
                state=state,
                idempotency_key=idempotency_key,
                project=project,
                user_message=user_message,
                priority=priority,
                input_policy=input_policy,
            )
        )

    async def get_run(self, run_id: str) -> dict[str, Any]:
        return await self._drive(self._ops.get_run(run_id))

    async def list_runs(self, *, limit: int = 50, after: str | None = None) -> dict[str, Any]:
        return await self._drive(self._ops.list_runs(limit=limit, after=after))

    async def cancel_run(self, run_id: str, *, reason: str = "") -> dict[str, Any]:
        return await self._drive(self._ops.cancel_run(run_id, reason=reason))

    async def resume_run(
        self,
        run_id: str,
        *,
        reason: str = "resumed through the remote client",
        accept_plan: str | None = None,
    ) -> dict[str, Any]:
        return await self._drive(
            self._ops.resume_run(run_id, reason=reason, accept_plan=accept_plan)
        )

    async def replay_run(self, run_id: str) -> dict[str, Any]:
        return await self._drive(self._ops.replay_run(run_id))

    async def fork_run(
        self,
        run_id: str,
        *,
        checkpoint: int,
        state_patch: Mapping[str, object] | None = None,
        plan: str = "pinned",
        title: str = "",
        reason: str = "",
    ) -> dict[str, Any]:
        return await self._drive(
            self._ops.fork_run(
                run_id,
                checkpoint=checkpoint,
                state_patch=state_patch,
                plan=plan,
                title=title,
                reason=reason,
            )
        )

    async def list_forks(self, run_id: str) -> tuple[dict[str, Any], ...]:
        return await self._drive(self._ops.list_forks(run_id))

    async def events(self, run_id: str, *, after: int = 0) -> tuple[dict[str, Any], ...]:
        return await self._drive(self._ops.events(run_id, after=after))

    async def create_session(
        self, *, project: str | None = None, title: str = "", user_message: str | None = None
    ) -> dict[str, Any]:
        return await self._drive(
            self._ops.create_session(project=project, title=title, user_message=user_message)
        )

    async def get_session(self, session_id: str) -> dict[str, Any]:
        return await self._drive(self._ops.get_session(session_id))

    async def list_assistants(self) -> tuple[dict[str, Any], ...]:
        return await self._drive(self._ops.list_assistants())

    async def create_assistant(self, *, assistant_id: str, template_id: str) -> dict[str, Any]:
        self._ops.create_assistant(assistant_id=assistant_id, template_id=template_id)
        raise AssertionError("unreachable")

    async def list_interrupts(
        self, *, pending_only: bool = True, limit: int = 50, run_id: str | None = None
    ) -> tuple[dict[str, Any], ...]:
        return await self._drive(
            self._ops.list_interrupts(pending_only=pending_only, limit=limit, run_id=run_id)
        )

    async def get_interrupt(self, interrupt_id: str) -> dict[str, Any]:
        return await self._drive(self._ops.get_interrupt(interrupt_id))

    async def decide_interrupt(
        self,
        interrupt_id: str,
        *,
        kind: ApprovalDecisionKind | str,
        request_digest: str,
        reason: str = "",
        payload: Mapping[str, object] | None = None,
    ) -> dict[str, Any]:
        return await self._drive(
            self._ops.decide_interrupt(
                interrupt_id,
                kind=kind,
                request_digest=request_digest,
                reason=reason,
                payload=payload,
            )
        )

    async def store(
        self,
        operation: str,
        payload: Mapping[str, object],
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
        project: str | None = None,
    ) -> dict[str, Any]:
        return await self._drive(
            self._ops.store(
                operation,
                payload,
                user_id=user_id,
                agent_id=agent_id,
                session_id=session_id,
                project=project,
            )
        )

    async def create_feedback(
        self, run_id: str, *, key: str, score: float | None = None, value: str | None = None
    ) -> dict[str, Any]:
        self._ops.create_feedback(run_id, key=key, score=score, value=value)
        raise AssertionError("unreachable")

    def stream_events(
        self, run_id: str, *, after: int = 0, follow: bool = True
    ) -> AsyncIterator[dict[str, Any]]:
        return self._stream(_Cursor(f"runs/{run_id}/stream/", after, follow, True))

    def stream_session(
        self, session_id: str, *, after: int = -1, follow: bool = True
    ) -> AsyncIterator[dict[str, Any]]:
        return self._stream(_Cursor(f"sessions/{session_id}/stream/", after, follow, False))

    async def wait_for_run(
        self, run_id: str, *, until: Iterable[str] = TERMINAL_STATUSES
    ) -> dict[str, Any]:
        wanted = frozenset(until)
        async for message in self.stream_events(run_id):
            if message["type"] == "run" and message["run"]["status"] in wanted:
                break
        return await self.get_run(run_id)

    async def _stream(self, cursor: _Cursor) -> AsyncIterator[dict[str, Any]]:
        while not cursor.done:
            try:
                async with self._client.stream(
                    "GET",
                    cursor.path,
                    params=cursor.params(),
                    headers=cursor.request_headers(),
                    timeout=_stream_timeout(self.timeout),
                ) as response:
                    if response.status_code != 200:
                        await response.aread()
                        _decoded(response)
                    decoder = EventStreamDecoder(cursor.last_id)
                    async for line in response.aiter_lines():
                        event = decoder.feed(line)
                        if event is not None:
                            message = cursor.take(event)
                            if message is not None:
                                yield message
                            if cursor.done:
                                return
                cursor.ended()
                if cursor.done:
                    return
            except _RETRYABLE:
                pass
            except RemoteError as exc:
                if exc.status_code < 500:
                    raise
            await asyncio.sleep(cursor.delay())

    async def aclose(self) -> None:
        await self._client.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()


def _decoded(response: httpx2.Response) -> Any:
    """The JSON of a 2xx answer; the mapped exception otherwise."""
    try:
        body = response.json() if response.content else None
    except ValueError:
        body = None
    if response.status_code >= 400:
        raise error_for(response.status_code, body, response.headers)
    return body
