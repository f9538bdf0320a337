"""``flow.Compressor``: replace a long session by a model-written summary, or summarize a merge.

``compressor(session)`` makes one provider call with the session's transcript and stores the
answer through ``services.session_compress``: a new root session (lineage op ``compress``)
holding the kept system messages and one ``summary`` chunk. ``compressor.summarizer`` is a
``services.Summarizer`` for ``Session.merge(..., strategy="summary")``.

OpenRath's argument order works too: ``Compressor("Summarize ...", provider, on_event=cb)``
(the instruction first). As in OpenRath 2.0, the result holds the summary as one user-side row:
here a ``summary`` chunk (role ``user``), which agents send to the model as a user message.

Kept apart from :mod:`sessions_app.composition` because it needs the services (Django), and
composition must stay importable without Django (``runs_app.static_compile`` imports it).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from sessions_app import context
from sessions_app.agents import ChunkLike, chunks_to_messages, tool_message_content
from sessions_app.models import Chunk
from sessions_app.providers.base import EventCallback, ModelTurn, Provider, ProviderError
from sessions_app.selectors import chunk_all
from sessions_app.services import Branch, SummaryResult, session_compress
from sessions_app.value import Session
from sessions_app.workflow import AgentParam, Workflow

__all__ = [
    "DEFAULT_COMPRESS_INSTRUCTION",
    "DEFAULT_MERGE_INSTRUCTION",
    "Compressor",
    "EmptySummary",
    "estimate_context_tokens",
    "render_transcript",
]

DEFAULT_COMPRESS_INSTRUCTION = (
    "Summarize the conversation below so that it can replace it: keep the user's goals, the "
    "facts and decisions established, what the tools returned that still matters, and what "
    "remains open. Write plain prose; do not address the user."
)
DEFAULT_MERGE_INSTRUCTION = (
    "Several branches of one conversation explored the same question separately. Summarize "
    "what each branch found and where they agree or disagree, in one text that can replace "
    "them."
)


class EmptySummary(ProviderError):
    """The model answered without any summary text: nothing was stored."""


def render_transcript(chunks: Iterable[ChunkLike]) -> str:
    """The conversation as plain text lines for the summarizing model (events and artifacts
    are left out; untrusted messages are labelled so)."""
    lines: list[str] = []
    for chunk in chunks:
        content = chunk.content or {}
        if chunk.kind == "message":
            label = chunk.role if chunk.trust == "trusted" else f"{chunk.role} (untrusted)"
            lines.append(f"{label}: {content.get('text', '')}")
        elif chunk.kind == "tool_call":
            arguments = content.get("arguments", "")
            shown = arguments if isinstance(arguments, str) else json.dumps(arguments)
            lines.append(f"assistant called {content.get('name', '')}({shown})")
        elif chunk.kind == "tool_result":
            verb = "failed" if content.get("error") is not None else "returned"
            lines.append(f"tool {content.get('name', '')} {verb}: {tool_message_content(content)}")
        elif chunk.kind == "summary":
            lines.append(f"summary: {content.get('text', '')}")
    return "\n".join(lines)


def estimate_context_tokens(messages: Sequence[dict[str, Any]]) -> int:
    """Tokens of chat messages, estimated as characters // 4 (content and tool calls)."""
    characters = 0
    for message in messages:
        characters += len(message.get("content") or "")
        for call in message.get("tool_calls") or ():
            function = call.get("function", {})
            characters += len(function.get("name", "")) + len(function.get("arguments", ""))
    return characters // 4


class _SummaryChunk:
    """The summary as the message mapping sees it (to estimate the size after compression)."""

    role = "user"
    kind = "summary"
    trust = "trusted"

    def __init__(self, text: str) -> None:
        self.content = {"text": text}


class Compressor(Workflow):
    """Summarize a session into a new, shorter one; also a summarizer for summary merges."""

    def __init__(
        self,
        provider: Provider | str,
        second: Provider | None = None,
        *,
        instruction: str | None = None,
        merge_instruction: str | None = None,
        name: str = "compressor",
        keep_system: bool = True,
        description: str = "",
        on_event: EventCallback | None = None,
    ) -> None:
        super().__init__(description=description)
        if isinstance(provider, str):  # OpenRath's Compressor(compress_instruction, provider)
            if instruction is not None:
                raise TypeError("the instruction is given twice (positionally and instruction=)")
            if second is None:
                raise TypeError("Compressor(instruction, provider): the provider is missing")
            instruction, provider = provider, second
        elif second is not None:
            raise TypeError(
                "Compressor takes (provider) or OpenRath's (instruction, provider); "
                "pass the instruction first or as instruction="
            )
        if not isinstance(provider, Provider):
            raise TypeError(
                "a compressor needs a provider instance: flow.Provider(kind=...); "
                f"got {type(provider).__name__}"
            )
        if not isinstance(name, str) or not name.strip() or len(name) > 200:
            raise ValueError("a compressor's name is a non-empty string of at most 200 characters")
        self.provider = provider
        if instruction is not None and (
            not isinstance(instruction, str) or not instruction.strip()
        ):
            raise ValueError("a compressor's instruction is a non-empty string")
        self.instruction = (
            instruction.strip() if instruction is not None else DEFAULT_COMPRESS_INSTRUCTION
        )
        self.merge_instruction = (
            merge_instruction if merge_instruction is not None else DEFAULT_MERGE_INSTRUCTION
        )
        self.name = name  # type: ignore[misc]  # a compressor's name is per instance
        self._name: str = name
        self.keep_system = keep_system
        self.on_event = on_event
        self.agent = AgentParam(agent_session=None, provider=provider)

    def __repr__(self) -> str:
        return f"<Compressor {self._name!r} provider={self.provider!r}>"

    def __call__(self, session: Session) -> Session:
        return self.forward(session)

    def forward(self, session: Session) -> Session:
        """A new session (op ``compress``) holding the kept system messages and a summary.

        Its metadata has what it replaced and the usage (see ``session_compress``), plus
        ``context_tokens_before`` and ``usage_after.context_tokens``: the size of the
        conversation an agent would send before and after, estimated as characters // 4.
        """
        if not isinstance(session, Session):
            raise TypeError(
                f"compressor {self._name!r} takes a flow.Session; got {type(session).__name__}"
            )
        rows = chunk_all(session.id)
        kept: list[Chunk] = [c for c in rows if self._keeps(c)]
        summarized = [c for c in rows if not self._keeps(c)]
        turn = self._complete(self.instruction, render_transcript(summarized), session.id)
        text = turn.text or ""
        before = estimate_context_tokens(chunks_to_messages(rows))
        after = estimate_context_tokens(chunks_to_messages([*kept, _SummaryChunk(text)]))
        result = SummaryResult(
            text=text,
            usage=self._usage(turn),
            agent=self._name,
            metadata={
                "context_tokens_before": before,
                "usage_after": {"context_tokens": after},
            },
        )
        with context.writing(agent=self._name):
            compressed = session_compress(session=session.row, result=result, keep_system=kept)
        return Session(compressed)

    def summarizer(self, branches: list[Branch]) -> SummaryResult:
        """A ``services.Summarizer``: one summary of the merge's branches (after their common
        prefix), written by this compressor's model."""
        parts = [
            f"## Branch {position} (session {branch.session.id})\n"
            f"{render_transcript(branch.chunks)}"
            for position, branch in enumerate(branches, start=1)
        ]
        first = branches[0].session.id if branches else "?"
        turn = self._complete(self.merge_instruction, "\n\n".join(parts), first)
        return SummaryResult(text=turn.text or "", usage=self._usage(turn), agent=self._name)

    # --- internals ---------------------------------------------------------------------------

    def _keeps(self, chunk: Chunk) -> bool:
        return self.keep_system and chunk.role == "system" and chunk.kind == "message"

    def _complete(self, instruction: str, transcript: str, session_id: Any) -> ModelTurn:
        messages = [
            {"role": "system", "content": instruction},
            {"role": "user", "content": transcript or "(the conversation is empty)"},
        ]
        try:
            if self.on_event is not None:
                turn = self.provider.stream(messages, None, on_event=self.on_event)
            else:
                turn = self.provider.complete(messages)
        except ProviderError as exc:
            exc.add_note(f"in compressor {self._name!r} on session {session_id}")
            raise
        if not (turn.text or "").strip():
            raise EmptySummary(
                f"compressor {self._name!r}: the model ({turn.provider}/{turn.model}) returned "
                f"no summary text for session {session_id}; nothing was stored"
            )
        return turn

    @staticmethod
    def _usage(turn: ModelTurn) -> dict[str, Any]:
        return {**turn.usage.as_dict(), "model": turn.model, "provider": turn.provider}
