"""Record and replay: re-execute a finished run's steps against the current code, served from
its record, and report the first step whose output differs.

A replay is a regression check for a workflow after a prompt or code change. The workflow is
the one registered now (``runs_app.registration``); its steps run in-process, one after the
other, as the executor would run them, except that nothing reaches the world:

* every model call an agent makes is answered with the next assistant turn the original step
  appended to its session (the chunks between the checkpoint before and the checkpoint after
  the step); asking for more calls than were recorded, or from another agent, is a difference;
  so is asking another request than the original did (the digests of its system prompt,
  messages, tool schemas and provider parameters its answer's first chunk recorded, part by
  part: ``model_request`` in the report; a chunk written before requests were recorded has
  none, and its call is not checked);
* every tool call gets the recorded ``tool_result`` chunk of that call id; the tool is not
  executed;
* ``ctx.effect(key, ...)`` returns the original's ledger result for ``(step, key)``; a key the
  original never recorded, or the same key with another request, is a difference;
* Selector decisions come from the original's ledger (``decision@<checkpoint>:<key>``); an
  interrupt returns the decision the original got (``ctx.interrupt``).

The agent loop reaches the record through its explicit extension point: the replay's
:class:`Record` is a ``sessions_app.context.CallSource``, set as the write context's
``recorded`` for each replayed step, which ``flow.Agent`` consults before calling its provider
or a tool.

After each checkpoint's worth of steps, the replay's state (the stored form), chunks (role,
kind, content, agent) and next nodes are compared with the original's checkpoint. The first
difference stops the replay. Until then the replay's state equals the original's.

A replay is stored as a run of kind ``replay`` (``replay_of`` the original), written once, when
it is over, already in its final status (``succeeded``: no difference; ``failed``: a difference,
the report in ``output``): it is never ``queued``, so no worker claims it, and it is never
dispatched. Its chunks go to its own working session, a copy-on-write fork of the original's at
the length the original started from.

A fan-out is replayed branch by branch, in the router's order, each branch against the
original's branch run of that name (on a fork of the replay's session), then the join on the
merge of the branches' sessions, as the executor does. A branch run itself is refused (409
``replay_unsupported``: replay its parent).

Limits (docs/time-travel.md, "Replay"): model calls that do not go through ``flow.Agent``'s loop
(a memory commit, a compressor's summary) and calls made from threads the step starts are not
intercepted.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.utils import timezone

from effects_app.models import EffectRecord
from effects_app.services import request_of
from openrath_project.errors import Conflict
from openrath_project.ids import uuid7
from openrath_project.jsondiff import json_diff
from openrath_project.jsontext import digest
from runs_app import registration
from runs_app.control import InterruptRejected
from runs_app.executor import StepContext, _call
from runs_app.interrupts import Decision
from runs_app.models import Checkpoint, Interrupt, Run, RunEvent
from runs_app.plan import Plan, bind_handlers, check_state
from runs_app.registry import RegisteredWorkflow, UnknownWorkflow, WorkflowRegistry
from runs_app.services import plan_store
from runs_app.state_delta import apply
from runs_app.state_track import StateTrack
from sessions_app import context as session_context
from sessions_app import services as session_services
from sessions_app.agents import REQUEST_PARTS, model_request
from sessions_app.models import Chunk, Session
from sessions_app.providers.base import ModelTurn, ToolCallRequest, Usage
from sessions_app.selectors import chunk_page
from sessions_app.tools.dispatch import ToolOutcome
from sessions_app.value import Session as FlowSession

logger = logging.getLogger(__name__)

__all__ = ["REPLAYABLE_STATUSES", "ReplayDivergence", "replay_run"]

#: Only a finished run has a whole record to replay.
REPLAYABLE_STATUSES = ("succeeded", "failed")
#: The fencing token of a replay's writes to its own session (only the replay writes there).
_REPLAY_TOKEN = 1
_PAGE = 1000


class ReplayDivergence(Exception):
    """The current code asked the record for something it does not hold (another model call,
    tool result, effect or decision): a difference, raised where it happens."""


def _refuse(message: str, code: str, **details: Any) -> Conflict:
    return Conflict(message, code=code, details=details)


# --- The record of one checkpoint's worth of steps ---------------------------------------------


#: The event a Selector appends with each decision (``sessions_app.composition``).
_SELECTOR_EVENT = "selector.decision"


def _chunk_view(chunk: Chunk) -> dict[str, Any]:
    """What is compared of a chunk: role, kind, content (tool calls included), agent.

    A selector's decision event is compared without its ``source``: the original's says
    where the decision came from then (its model), the replay's says the ledger."""
    content = chunk.content
    if (
        chunk.kind == "event"
        and isinstance(content, dict)
        and content.get("type") == (_SELECTOR_EVENT)
    ):
        content = {k: v for k, v in content.items() if k != "source"}
    return {"role": chunk.role, "kind": chunk.kind, "content": content, "agent": chunk.agent}


def _from_model(chunk: Chunk | None) -> bool:
    """Whether the chunk is part of a model's answer: an assistant message or tool call whose
    usage names the provider (``Agent._assistant_chunks`` stamps every chunk of an answer so;
    an assistant message a step appends itself carries no provider)."""
    return (
        chunk is not None
        and chunk.role == "assistant"
        and chunk.kind in ("message", "tool_call")
        and isinstance(chunk.usage, dict)
        and "provider" in chunk.usage
    )


@dataclass(frozen=True)
class RecordedTurn:
    """One recorded model answer: the agent that asked, the answer, and the digests of what it
    asked (``None``: recorded before requests were)."""

    agent: str
    turn: ModelTurn
    request: dict[str, str] | None


def _turns_of(chunks: list[Chunk]) -> list[RecordedTurn]:
    """The model answers in ``chunks``, in order: an assistant ``message`` starts an answer,
    the ``tool_call`` chunks right after it (or after another tool call of the same agent)
    belong to it (what ``Agent._assistant_chunks`` writes); the first chunk's
    ``usage["request"]`` is what the model was asked."""
    turns: list[tuple[str, dict[str, Any]]] = []
    previous: Chunk | None = None
    for chunk in chunks:
        if not _from_model(chunk):
            previous = chunk
            continue
        continues = (
            chunk.kind == "tool_call"
            and _from_model(previous)
            and previous is not None
            and previous.agent == chunk.agent
            and bool(turns)
        )
        if not continues:
            usage = chunk.usage or {}
            turns.append(
                (
                    chunk.agent,
                    {
                        "text": None,
                        "calls": [],
                        "usage": Usage(
                            prompt_tokens=int(usage.get("prompt_tokens") or 0),
                            completion_tokens=int(usage.get("completion_tokens") or 0),
                            total_tokens=int(usage.get("total_tokens") or 0),
                        ),
                        "model": str(usage.get("model") or ""),
                        "provider": str(usage.get("provider") or ""),
                        "request": _request_of(usage.get("request")),
                    },
                )
            )
        answer = turns[-1][1]
        content = chunk.content or {}
        if chunk.kind == "message":
            answer["text"] = str(content.get("text", ""))
        else:
            arguments = content.get("arguments", "")
            answer["calls"].append(
                ToolCallRequest(
                    id=str(content.get("id", "")),
                    name=str(content.get("name", "")),
                    arguments=arguments
                    if isinstance(arguments, str)
                    else json.dumps(arguments, ensure_ascii=False),
                )
            )
        previous = chunk
    return [
        RecordedTurn(
            agent=agent,
            turn=ModelTurn(
                text=a["text"],
                tool_calls=tuple(a["calls"]),
                usage=a["usage"],
                model=a["model"],
                provider=a["provider"],
                finish_reason="tool_calls" if a["calls"] else "stop",
            ),
            request=a["request"],
        )
        for agent, a in turns
    ]


def _request_of(value: Any) -> dict[str, str] | None:
    if not isinstance(value, dict):
        return None
    return {part: str(value[part]) for part in REQUEST_PARTS if part in value}


#: How a report names each part of a model request that changed.
_PART_NAMES = {
    "system": "the system prompt",
    "messages": "the messages",
    "tools": "the tool schemas",
    "params": "the provider's model or parameters",
}


@dataclass
class Record:
    """What the original's steps appended between two checkpoints, served in order.

    A ``sessions_app.context.CallSource``: set as the write context's ``recorded`` while the
    replay runs a step, it answers the step's agents' model and tool calls."""

    chunks: list[Chunk]
    turns: list[RecordedTurn] = field(init=False)
    results: list[Chunk] = field(init=False)
    served_turns: int = 0
    problems: list[str] = field(default_factory=list)
    #: Model calls whose request differs from the recorded one: which parts, both digests.
    request_changes: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.turns = _turns_of(self.chunks)
        self.results = [c for c in self.chunks if c.kind == "tool_result"]

    def fail(self, problem: str) -> ReplayDivergence:
        """Note ``problem`` for the report and return the exception to raise where it was
        found (noted too, in case the step catches it)."""
        self.problems.append(problem)
        return ReplayDivergence(problem)

    def model_turn(
        self,
        agent: Any,
        session: Any,  # noqa: ARG002 - the record is the step's, whichever session asks
        messages: list[dict[str, Any]],
        schemas: list[dict[str, Any]] | None,
        turn_number: int,
    ) -> ModelTurn:
        """The next recorded answer, if the same agent asks for it; a request that differs
        from the recorded one is noted (the answer is still served, so the replay goes on to
        compare what the step then does)."""
        name = str(agent.name)
        if self.served_turns >= len(self.turns):
            raise self.fail(
                f"agent {name!r} made model call {turn_number}, beyond the "
                f"{len(self.turns)} model call(s) recorded for this step"
            )
        recorded = self.turns[self.served_turns]
        if recorded.agent != name:
            raise self.fail(
                f"model call {self.served_turns + 1} of this step was recorded for agent "
                f"{recorded.agent!r}; the current code made it from agent {name!r}"
            )
        self.served_turns += 1
        if recorded.request is not None:
            self._check_request(
                name, recorded.request, model_request(agent.provider, messages, schemas)
            )
        return recorded.turn

    def _check_request(self, agent: str, original: dict[str, str], now: dict[str, str]) -> None:
        parts = [part for part in REQUEST_PARTS if part in original and original[part] != now[part]]
        if not parts:
            return
        self.request_changes.append(
            {
                "call": self.served_turns,
                "agent": agent,
                "parts": parts,
                "original": {part: original[part] for part in parts},
                "replay": {part: now[part] for part in parts},
            }
        )
        self.problems.append(
            f"model call {self.served_turns} (agent {agent!r}) was asked otherwise than in the "
            f"original: {', '.join(_PART_NAMES[part] for part in parts)} changed"
        )

    def tool_result(self, agent: Any, session: Any, call: ToolCallRequest) -> ToolOutcome:  # noqa: ARG002
        """The recorded outcome of this call id (by this agent); none recorded is a
        difference. Never ``None``: a replay runs no tool."""
        name = str(agent.name)
        for position, chunk in enumerate(self.results):
            content = chunk.content or {}
            if str(content.get("tool_call_id", "")) == call.id and chunk.agent == name:
                del self.results[position]
                return ToolOutcome(
                    output=content.get("output"),
                    error=content.get("error"),
                    error_kind=content.get("error_kind"),
                    truncated=bool(content.get("truncated")),
                    artifact=content.get("artifact"),
                )
        raise self.fail(f"no tool result was recorded for call {call.id!r} ({call.name})")

    def leftovers(self) -> list[str]:
        unserved = len(self.turns) - self.served_turns
        if unserved > 0:
            return [f"{unserved} recorded model call(s) were not made by the current code"]
        return []


# --- The step context and decision store of a replay ------------------------------------------


class ReplayDecisions:
    """Selector decisions from the original's ledger; a decision it never recorded is a
    difference (the selector would otherwise ask its model)."""

    def __init__(self, original: Run, step: str, checkpoint_seq: int, record: Record) -> None:
        self.original, self.step, self.checkpoint_seq = original, step, checkpoint_seq
        self._record = record

    def recall(self, key: str) -> Any | None:
        stored_key = f"decision@{self.checkpoint_seq}:{key}"[:200]
        found = EffectRecord.objects.filter(
            run_id=self.original.id, step=self.step, key=stored_key, status="succeeded"
        ).first()
        if found is None:
            raise self._record.fail(f"decision {key!r} was never recorded by the original")
        return found.result

    def record(self, key: str, value: Any) -> None:  # noqa: ARG002 - recall never misses
        return None


@dataclass
class ReplayStepContext(StepContext):
    """``ctx`` in a replayed step: effects and interrupts answered from the original's record.

    ``run_id`` is the original's (code that reads it sees what the original saw)."""

    original: Run | None = None
    record: Record | None = None
    effects_served: list[str] = field(default_factory=list)

    def _problem(self, message: str) -> ReplayDivergence:
        assert self.record is not None
        return self.record.fail(message)

    def effect(
        self, key: str, fn: Callable[..., Any], *args: Any, idempotent: bool = False, **kwargs: Any
    ) -> Any:
        """The original's recorded result for ``(step, key)``; ``fn`` is never called."""
        assert self.original is not None
        found = (
            EffectRecord.objects.filter(run_id=self.original.id, step=self.step, key=key)
            .exclude(effect_class="decision")
            .first()
        )
        if found is None:
            raise self._problem(f"effect {key!r} was never recorded by the original step")
        if found.request_digest != digest(request_of(fn, args, kwargs)):
            raise self._problem(
                f"effect {key!r} was recorded with a different request: "
                f"{json.dumps(found.request, sort_keys=True)[:500]}"
            )
        self.effects_served.append(key)
        if found.status == "succeeded":
            return found.result
        if found.status == "resolved" and found.resolution in ("applied", "reuse_ancestor"):
            return found.resolution_result
        raise self._problem(f"effect {key!r} has no recorded result (it is {found.status})")

    def interrupt(
        self,
        kind: Any,
        request: Any,
        timeout_seconds: float | None = None,
        schema: dict[str, Any] | None = None,
        *,
        title: str = "",
        default: dict[str, Any] | None = None,
        raise_on_reject: bool = True,
    ) -> Any:
        """The decision the original got for this call of ``ctx.interrupt``."""
        assert self.original is not None
        self._interrupt_calls += 1
        found = Interrupt.objects.filter(
            run_id=self.original.id,
            checkpoint_seq=self.checkpoint_seq,
            step=self.step,
            sequence=self._interrupt_calls,
        ).first()
        if found is None or found.status == "pending":
            raise self._problem(f"interrupt {self._interrupt_calls} was never decided")
        if found.request_digest != digest(json.loads(json.dumps(request))):
            raise self._problem(f"interrupt {self._interrupt_calls} asked another request")
        decision = Decision(
            decision=found.decision,
            response=found.response,
            reason=found.reason,
            resolved_by=found.resolved_by,
            interrupt_id=str(found.id),
            expired=found.status == "expired",
        )
        if decision.decision == "reject" and raise_on_reject:
            raise InterruptRejected(decision)
        return decision


# --- Replaying ---------------------------------------------------------------------------------


@dataclass
class _Segment:
    """One checkpoint of the original (or, for a failed run, the failed step after the last
    one): what its steps appended, the state and next nodes they led to."""

    checkpoint: int | None
    step: str
    next_nodes: list[str] | None
    chunks: list[Chunk]
    #: The original's state after the checkpoint (stored form); ``None`` for a failed step.
    state: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    #: The attempt of the original's step that produced this (``ctx.attempt`` in the replay).
    attempt: int = 1


class _ChunkReader:
    """Reads a session's logical chunks forward, a page at a time, across consecutive
    checkpoints that reference the same session (one query per page, not per checkpoint)."""

    def __init__(self) -> None:
        self.session_id: uuid.UUID | None = None
        self.start = 0
        self.rows: list[Chunk] = []

    def read(self, session_id: uuid.UUID, start: int, end: int) -> list[Chunk]:
        """Chunks ``start <= seq < end`` of the session's view."""
        if session_id != self.session_id or not self.start <= start <= self.start + len(self.rows):
            self.session_id, self.start, self.rows = session_id, start, []
        del self.rows[: start - self.start]
        self.start = start
        while self.start + len(self.rows) < end:
            after = self.start + len(self.rows) - 1
            page = chunk_page(session_id, after=after, limit=max(_PAGE, end - after), upto=None)
            if not page:
                break
            self.rows.extend(page)
        return self.rows[: end - start]


def _start_of(run: Run) -> tuple[Session, int]:
    """The original's first working session and its length when the run started (the chunks
    written with the session, before any step: no step tag)."""
    created = RunEvent.objects.filter(run=run, type="run.created").values_list("data", flat=True)
    data: dict[str, Any] = dict(created.first() or {})
    session_id = data.get("session") or run.session_id
    assert session_id is not None, "every run is created with a working session"
    session = Session.objects.get(id=session_id)
    written_before = Chunk.objects.filter(session_id=session.id, step="").count()
    return session, session.base_len + written_before


def _segments(run: Run, start_len: int) -> Iterator[_Segment]:
    """The original's record, checkpoint by checkpoint, read as the replay goes (it stops at
    the first difference): the checkpoints in one streamed query, their states rebuilt delta
    by delta and verified against each stored digest, the chunks page by page."""
    reader = _ChunkReader()
    state: dict[str, Any] = dict(run.input)
    before = start_len
    # A join works on the merge of its branches' sessions: its chunks start at the merge's
    # length, which the run's ``session.switched`` event recorded (as for a retry's fork).
    switched = {
        str(data.get("to")): int(data.get("length") or 0)
        for data in RunEvent.objects.filter(run=run, type="session.switched").values_list(
            "data", flat=True
        )
    }
    previous_session: uuid.UUID | None = None
    rows = (
        Checkpoint.objects.filter(run=run)
        .order_by("seq")
        .values(
            "seq",
            "step",
            "next_nodes",
            "session_id",
            "session_len",
            "attempt",
            "full",
            "state",
            "state_digest",
        )
    )
    for row in rows.iterator(chunk_size=200):
        state = dict(row["state"]) if row["full"] else apply(state, row["state"])
        if digest(state) != row["state_digest"]:
            raise Conflict(f"checkpoint {row['seq']} of run {run.id} does not match its digest")
        session_id = row["session_id"] or run.session_id
        assert session_id is not None, "every run is created with a working session"
        if previous_session is not None and session_id != previous_session:
            before = switched.get(str(session_id), before)
        previous_session = session_id
        yield _Segment(
            checkpoint=row["seq"],
            step=row["step"],
            next_nodes=list(row["next_nodes"]),
            chunks=reader.read(session_id, before, row["session_len"]),
            state=state,
            attempt=int(row["attempt"] or 1),
        )
        before = row["session_len"]
    if run.status == "failed":
        assert run.session_id is not None
        length = Session.objects.get(id=run.session_id).length
        error = dict(run.error or {})
        yield _Segment(
            checkpoint=None,
            step=str(error.get("step", "")),
            next_nodes=None,
            chunks=reader.read(run.session_id, run.session_len, length),
            error=error,
            attempt=int(error.get("attempt") or 1),
        )


def _error_of(exc: BaseException, step: str) -> dict[str, Any]:
    message = str(exc) if str(exc) else type(exc).__name__
    return {"type": type(exc).__name__, "message": message[:2000], "step": step}


@dataclass
class _Replayer:
    """Replays one run's record (a fan-out's branches with their own) on the replay's
    working session, counting what it executed and served."""

    original: Run
    registered: RegisteredWorkflow
    replay_id: uuid.UUID
    session: Session
    steps: int = 0
    checkpoints: int = 0
    model_calls: int = 0
    effects: int = 0
    state: dict[str, Any] = field(default_factory=dict)
    #: Working sessions the replay switched to (a join's merge), released at the end.
    extra_sessions: list[uuid.UUID] = field(default_factory=list)
    _reader: _ChunkReader = field(default_factory=_ChunkReader)

    def run(
        self,
        segments: Iterator[_Segment],
        *,
        entry: str | None = None,
        initial: dict[str, Any] | None = None,
    ) -> dict[str, Any] | None:
        """Replay segment after segment; the first difference (``None``: none). A branch of a
        fan-out starts at ``entry`` with the router's state ``initial``."""
        plan: Plan = self.registered.plan
        try:
            handlers = bind_handlers(plan, self.registered.build())
        except Exception as exc:
            first = next(segments, None) or _Segment(None, plan.entry, None, [])
            return self._difference(first, error=_error_of(exc, first.step), chunks=[])
        start = dict(self.original.input) if initial is None else initial
        track = StateTrack(self.original.tenant_id, start)
        self.state = track.stored
        node_id = entry or plan.entry
        checkpoint_seq = 0
        buffer = session_context.StepBuffer(
            self.session.id, self.original.tenant_id, self.session.length
        )
        fence = session_context.Fence(self.replay_id, _REPLAY_TOKEN)
        flow_session = FlowSession(self.session)
        difference: dict[str, Any] | None = None
        joining = False
        fanouts = iter(
            RunEvent.objects.filter(run=self.original, type="branches.started")
            .order_by("seq")
            .values_list("data", flat=True)
        )
        for segment in segments:
            self.checkpoints += segment.checkpoint is not None
            record = Record(list(segment.chunks))
            segment_start = buffer.next_seq
            error: dict[str, Any] | None = None
            next_nodes: list[str] = []
            fanout: Any = None
            step = node_id
            while True:
                step = node_id
                try:
                    node = plan.node(node_id)
                    ctx = ReplayStepContext(
                        run_id=self.original.id,
                        step=node_id,
                        attempt=segment.attempt,
                        project=self.original.project,
                        session=flow_session,
                        worker=f"replay:{self.replay_id}",
                        fencing_token=_REPLAY_TOKEN,
                        deadline=None,
                        tenant_id=self.original.tenant_id,
                        checkpoint_seq=checkpoint_seq,
                        original=self.original,
                        record=record,
                    )
                    working = track.working_copy()
                    self.steps += 1
                    with (
                        session_context.writing(
                            actor=f"replay:{self.replay_id}",
                            run_id=self.replay_id,
                            step=node_id,
                            agent="",
                            fence=fence,
                            project=self.original.project,
                            decisions=ReplayDecisions(
                                self.original, node_id, checkpoint_seq, record
                            ),
                            buffer=buffer,
                            effects=ctx.effect,
                            budget=None,
                            recorded=record,
                        ),
                    ):
                        result = _call(node, handlers[node_id], working, ctx)
                    self.effects += len(ctx.effects_served)
                    if node.kind == "router":
                        route = plan.resolve_route(node_id, result)
                        if route.fans_out:
                            assert route.join is not None
                            fanout, next_nodes = route, [route.join]
                        else:
                            next_nodes = [route.targets[0]]
                        change = None
                    else:
                        change = track.change(
                            working if result is None else result,
                            where=f"the state step {node_id!r} returned",
                        )
                        check_state(plan, change.snapshot, step=node_id)
                        next_nodes = list(node.successors)
                except Exception as exc:
                    error = _error_of(exc, node_id)
                    break
                commits = not next_nodes or node.checkpoint or node.kind == "router" or joining
                joining = False
                if change is not None:
                    track.advance(change, committed=commits)
                if commits or not next_nodes:
                    break
                node_id = next_nodes[0]
            self.model_calls += record.served_turns
            written = self._written(buffer, segment_start)
            if len(buffer.drafts) >= _PAGE:  # held across checkpoints: one write per page
                session_services.append_now(self.session, buffer.take(), fence)
            self.state = track.stored
            difference = self._compare(segment, record, step, error, next_nodes, written)
            if difference is not None or error is not None or not next_nodes:
                # (an error without a difference: the original failed here too, the same way)
                break
            checkpoint_seq = segment.checkpoint or checkpoint_seq
            node_id = next_nodes[0]
            if fanout is not None:
                held = buffer.take()
                if held:
                    session_services.append_now(self.session, held, fence)
                outcome = self._branches(fanout, next(fanouts, None), track.stored, segment)
                if isinstance(outcome, dict):
                    return outcome
                joined, sessions = outcome
                track = StateTrack(self.original.tenant_id, joined, committed=track.stored)
                joining = True
                if len(sessions) >= 2:
                    self.session = self._merge(sessions, node_id)
                    buffer = session_context.StepBuffer(
                        self.session.id, self.original.tenant_id, self.session.length
                    )
                    flow_session = FlowSession(self.session)
        held = buffer.take()
        if held:
            session_services.append_now(self.session, held, fence)
        return difference

    def _branches(
        self,
        route: Any,
        started: dict[str, Any] | None,
        state: dict[str, Any],
        segment: _Segment,
    ) -> dict[str, Any] | tuple[dict[str, Any], list[Session]]:
        """Replay a fan-out's branches, each against the original's branch run of that name
        (on a fork of the replay's session, as the original's branches were forked from its
        session); the join's input state and the branches' sessions, or the first difference
        (naming the branch)."""
        child_ids = list((started or {}).get("children", []))
        originals = {
            child.branch: child
            for child in Run.objects.filter(id__in=child_ids).select_related("project")
        }
        branches: list[dict[str, Any]] = []
        sessions: list[Session] = []
        for target in route.targets:
            child = originals.get(target)
            if child is None:
                return self._difference(
                    segment,
                    error={
                        "type": "ReplayDivergence",
                        "message": f"the original ran no branch {target!r}",
                        "step": segment.step,
                    },
                    chunks=[],
                    problems=[f"branches recorded: {sorted(originals)}"],
                )
            with session_context.writing(actor=f"replay:{self.replay_id}", run_id=self.replay_id):
                fork = session_services.session_fork(
                    session=self.session,
                    title=f"replay of branch {target}"[:80],
                    metadata={"run": str(self.replay_id), "branch": target},
                )
            session_services.session_claim_writer(
                session=fork, run_id=self.replay_id, token=_REPLAY_TOKEN
            )
            branch = _Replayer(child, self.registered, self.replay_id, fork)
            _, start_len = _start_of(child)
            difference = branch.run(_segments(child, start_len), entry=target, initial=state)
            self.steps += branch.steps
            self.checkpoints += branch.checkpoints
            self.model_calls += branch.model_calls
            self.effects += branch.effects
            session_services.session_release_writer(session_id=fork.id, run_id=self.replay_id)
            if difference is not None:
                return {**difference, "branch": target, "branch_run": str(child.id)}
            fork.refresh_from_db(fields=["base_len", "own_len"])
            sessions.append(fork)
            branches.append(
                {
                    "branch": target,
                    "run": str(child.id),
                    "state": branch.state,
                    "session": str(child.session_id) if child.session_id else None,
                }
            )
        return {**state, "branches": branches}, sessions

    def _merge(self, sessions: list[Session], join: str) -> Session:
        """The join's working session: the branches' sessions concatenated, as the original's
        join got them (``executor._join_inputs``)."""
        with session_context.writing(
            actor=f"replay:{self.replay_id}", run_id=self.replay_id, step=join
        ):
            merged = session_services.session_merge(
                sessions=sessions,
                strategy="concat",
                title=f"replay join of {self.original.workflow}"[:80],
                metadata={"run": str(self.replay_id), "join": join},
            )
        session_services.session_claim_writer(
            session=merged, run_id=self.replay_id, token=_REPLAY_TOKEN
        )
        self.extra_sessions.append(merged.id)
        return merged

    def _written(self, buffer: session_context.StepBuffer, start: int) -> list[Any]:
        """What the steps wrote from position ``start``: the stored part (a step that reads
        its session sees its own writes, so held chunks are written then), read back, and the
        part still held (drafts: role, kind, content and agent as they will be stored)."""
        stored: list[Any] = []
        if start < buffer.stored_length:
            stored = list(self._reader.read(self.session.id, start, buffer.stored_length))
        held_from = max(0, start - buffer.stored_length)
        return stored + buffer.drafts[held_from:]

    def _compare(
        self,
        segment: _Segment,
        record: Record,
        step: str,
        error: dict[str, Any] | None,
        next_nodes: list[str],
        written: list[Any],
    ) -> dict[str, Any] | None:
        chunk_diff = json_diff(
            [_chunk_view(c) for c in segment.chunks], [_chunk_view(c) for c in written]
        )
        problems = [*record.problems, *([] if error else record.leftovers())]
        if segment.error is not None:  # the original failed in this step
            same_error = error is not None and (error["type"], error["message"], error["step"]) == (
                segment.error.get("type"),
                segment.error.get("message"),
                segment.error.get("step"),
            )
            if same_error and not chunk_diff and not problems:
                return None
            return self._difference(
                segment,
                error=error,
                chunks=chunk_diff,
                problems=problems,
                step=step,
                model_request=record.request_changes,
            )
        assert segment.state is not None
        state_diff = [] if error is not None else json_diff(segment.state, self.state)
        same_nodes = next_nodes == segment.next_nodes and step == segment.step
        if error is None and not state_diff and not chunk_diff and same_nodes and not problems:
            return None
        return self._difference(
            segment,
            error=error,
            chunks=chunk_diff,
            state=state_diff,
            next_nodes=next_nodes if error is None else None,
            problems=problems,
            step=step,
            model_request=record.request_changes,
        )

    def _difference(
        self,
        segment: _Segment,
        *,
        error: dict[str, Any] | None,
        chunks: list[dict[str, Any]],
        state: list[dict[str, Any]] | None = None,
        next_nodes: list[str] | None = None,
        problems: list[str] | None = None,
        step: str | None = None,
        model_request: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        return {
            "step": step or segment.step,
            "original_step": segment.step,
            "checkpoint": segment.checkpoint,
            "state_diff": state or [],
            "chunk_diff": chunks,
            "next_nodes": {"original": segment.next_nodes, "replay": next_nodes},
            "error": error,
            "original_error": segment.error,
            "problems": problems or [],
            "model_request": model_request or [],
        }


def _check_replayable(run: Run) -> None:
    if run.kind != "run":
        raise _refuse("a replay cannot be replayed", "replay_unsupported", kind=run.kind)
    if run.status not in REPLAYABLE_STATUSES:
        raise _refuse(
            f"only a finished run (succeeded or failed) can be replayed; this one is {run.status}",
            "run_not_finished",
            status=run.status,
        )
    if run.parent_id is not None:
        raise _refuse(
            "a branch of a fan-out is replayed with its parent run: replay that one",
            "replay_unsupported",
            reason="branch",
            parent=str(run.parent_id),
        )


def replay_run(*, run: Run, actor: str = "", registry: WorkflowRegistry | None = None) -> Run:
    """Replay the finished ``run`` against the current code; return the stored replay run.

    Its ``output`` is the report: ``{"identical", "steps_replayed", "first_difference"}`` (and
    what was served: ``model_calls_served``, ``effects_served``). 409 ``run_not_finished`` for
    a run that is not succeeded or failed, ``replay_unsupported`` for a replay or a branch run
    of a fan-out. Takes no lock and holds no transaction while steps run (they may take long);
    the replay run and its events are inserted in one transaction at the end.
    """
    _check_replayable(run)
    workflows = registry if registry is not None else registration.workflows()
    replay_id = uuid7()  # time-ordered, as every run id: lists are newest first by id
    started = timezone.now()
    start_session, start_len = _start_of(run)
    with session_context.writing(actor=actor or "replay", run_id=replay_id):
        session = session_services.session_fork(
            session=start_session,
            at=start_len,
            title=f"replay of {run.workflow}"[:80],
            metadata={"run": str(replay_id), "replay_of": str(run.id)},
            created_by=actor,
        )
    session_services.session_claim_writer(session=session, run_id=replay_id, token=_REPLAY_TOKEN)
    segments = _segments(run, start_len)
    registered: RegisteredWorkflow | None
    try:
        registered = workflows.get(run.workflow)
    except UnknownWorkflow:
        registered = None
    replayer: _Replayer | None = None
    first_session = session
    if registered is None:
        difference: dict[str, Any] | None = {
            "step": "",
            "original_step": "",
            "checkpoint": None,
            "state_diff": [],
            "chunk_diff": [],
            "next_nodes": {"original": None, "replay": None},
            "error": {"type": "UnknownWorkflow", "message": f"{run.workflow!r} is not registered"},
            "original_error": None,
            "problems": [],
            "model_request": [],
        }
        state = dict(run.state)
    else:
        replayer = _Replayer(run, registered, replay_id, session)
        difference = replayer.run(segments)
        state = replayer.state
        session = replayer.session
    for held in {first_session.id, session.id, *(replayer.extra_sessions if replayer else [])}:
        session_services.session_release_writer(session_id=held, run_id=replay_id)
    session.refresh_from_db(fields=["base_len", "own_len"])
    report = {
        "identical": difference is None,
        "steps_replayed": replayer.steps if replayer else 0,
        "checkpoints_compared": replayer.checkpoints if replayer else 0,
        "model_calls_served": replayer.model_calls if replayer else 0,
        "effects_served": replayer.effects if replayer else 0,
        "plan": {"original": run.plan_id, "current": registered.plan.hash if registered else None},
        "first_difference": difference,
    }
    return _store(run, replay_id, registered, session, state, report, actor, started)


def _store(
    run: Run,
    replay_id: uuid.UUID,
    registered: RegisteredWorkflow | None,
    session: Session,
    state: dict[str, Any],
    report: dict[str, Any],
    actor: str,
    started: Any,
) -> Run:
    """Insert the replay run (born finished: never queued, never claimed) and its events."""
    identical = bool(report["identical"])
    difference = report["first_difference"] or {}
    with transaction.atomic():
        plan_row = plan_store(registered.plan) if registered is not None else run.plan
        replay = Run.objects.create(
            id=replay_id,
            tenant_id=run.tenant_id,
            project_id=run.project_id,
            workflow=run.workflow,
            plan=plan_row,
            kind="replay",
            replay_of=run,
            status="succeeded" if identical else "failed",
            input=run.input,
            state=state,
            output=report,
            error=None
            if identical
            else {
                "type": "ReplayDifference",
                "message": f"the replay differs from the original at step {difference['step']!r}",
                "step": difference.get("step", ""),
            },
            session=session,
            session_len=session.length,
            next_nodes=[],
            created_by=actor,
            started_at=started,
            finished_at=timezone.now(),
            event_seq=2,
        )
        RunEvent.objects.create(
            run=replay,
            seq=1,
            type="run.created",
            data={
                "workflow": run.workflow,
                "plan": plan_row.hash,
                "session": str(session.id),
                "replay_of": str(run.id),
            },
        )
        RunEvent.objects.create(
            run=replay,
            seq=2,
            type="replay.finished",
            data={"identical": identical, "steps_replayed": report["steps_replayed"]},
        )
    return replay
