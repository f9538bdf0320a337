"""``flow.Session``: the value that flows between agents, branches and runs.

A thin handle on a persisted session: every operation goes through the services, so every
session an agent touches is stored and traceable. Chunks are read lazily, a page at a time.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, overload

from openrath_project.errors import NotFound, ValidationFailed
from openrath_project.tenancy.models import Project
from sessions_app import context, selectors, services
from sessions_app.chunk_rules import ChunkDraft, make_draft
from sessions_app.models import Chunk, LineageEdge
from sessions_app.models import Session as SessionRow

PAGE = 200


def resolve_project(project: Any = None) -> Project:
    """A Project from an instance, an id, ``"tenant/project"``, a slug unique across tenants,
    the write context's project, ``OPENRATH_DEFAULT_PROJECT``, or the only project there is."""
    if isinstance(project, Project):
        return project
    if project is None:
        ctx_project = context.current().project
        if ctx_project is not None:
            return resolve_project(ctx_project)
        default = os.environ.get("OPENRATH_DEFAULT_PROJECT")
        if default:
            return resolve_project(default)
        only = list(Project.objects.all()[:2])
        if len(only) == 1:
            return only[0]
        raise ValidationFailed(
            "say which project: project='tenant/project' (or set OPENRATH_DEFAULT_PROJECT)"
        )
    ref = str(project)
    try:
        return Project.objects.get(id=uuid.UUID(ref))
    except (ValueError, Project.DoesNotExist):
        pass
    if "/" in ref:
        tenant_slug, _, slug = ref.partition("/")
        found = Project.objects.filter(tenant__slug=tenant_slug, slug=slug).first()
        if found is None:
            raise NotFound(f"no project {ref!r}")
        return found
    matches = list(Project.objects.filter(slug=ref)[:2])
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise NotFound(f"no project {ref!r}")
    raise ValidationFailed(f"project slug {ref!r} exists in several tenants: say 'tenant/{ref}'")


@dataclass(frozen=True)
class ChunkView:
    """A stored chunk as users see it (read-only)."""

    seq: int
    role: str
    kind: str
    content: dict[str, Any]
    agent: str
    run: str | None
    step: str
    tool_call_id: str
    trust: str
    usage: dict[str, Any] | None
    branch: str
    session: str
    created_at: Any

    @classmethod
    def of(cls, chunk: Chunk) -> ChunkView:
        return cls(
            seq=chunk.seq,
            role=chunk.role,
            kind=chunk.kind,
            content=chunk.content,
            agent=chunk.agent,
            run=str(chunk.run_id) if chunk.run_id else None,
            step=chunk.step,
            tool_call_id=chunk.tool_call_id,
            trust=chunk.trust,
            usage=chunk.usage,
            branch=chunk.branch,
            session=str(chunk.session_id),
            created_at=chunk.created_at,
        )

    @property
    def text(self) -> str | None:
        value = self.content.get("text")
        return value if isinstance(value, str) else None


class ChunkList(Sequence[ChunkView]):
    """The logical chunk list, read lazily a page at a time (a snapshot of its length)."""

    def __init__(self, session_id: uuid.UUID, length: int) -> None:
        self._session_id = session_id
        self._length = length

    def __len__(self) -> int:
        return self._length

    def __iter__(self) -> Iterator[ChunkView]:
        after = -1
        while after + 1 < self._length:
            page = selectors.chunk_page(
                self._session_id, after=after, limit=PAGE, upto=self._length
            )
            if not page:
                return
            for chunk in page:
                yield ChunkView.of(chunk)
            after = page[-1].seq

    @overload
    def __getitem__(self, index: int) -> ChunkView: ...

    @overload
    def __getitem__(self, index: slice) -> list[ChunkView]: ...

    def __getitem__(self, index: int | slice) -> ChunkView | list[ChunkView]:
        if isinstance(index, slice):
            start, stop, step = index.indices(self._length)
            if step != 1:
                return [self[i] for i in range(start, stop, step)]
            if stop <= start:
                return []
            page = selectors.chunk_page(
                self._session_id, after=start - 1, limit=stop - start, upto=stop
            )
            return [ChunkView.of(c) for c in page]
        position = index + self._length if index < 0 else index
        if not 0 <= position < self._length:
            raise IndexError("chunk index out of range")
        page = selectors.chunk_page(
            self._session_id, after=position - 1, limit=1, upto=self._length
        )
        return ChunkView.of(page[0])


@dataclass(frozen=True)
class LineageView:
    nodes: list[SessionRow]
    edges: list[LineageEdge]

    def edge_tuples(self) -> list[tuple[str, str, str]]:
        return [(str(e.parent_id), str(e.child_id), e.op) for e in self.edges]


def _draft_from(item: Any) -> ChunkDraft:
    if isinstance(item, ChunkDraft):
        return item
    if not isinstance(item, dict):
        raise ValidationFailed("a chunk is a dict with role, kind and content")
    content = item.get("content")
    kind = item.get("kind", "message")
    if isinstance(content, str) and kind in ("message", "summary"):
        content = {"text": content}
    return make_draft(
        role=item.get("role", "user"),
        kind=kind,
        content=content,
        agent=item.get("agent", ""),
        tool_call_id=item.get("tool_call_id"),
        trust=item.get("trust"),
        usage=item.get("usage"),
    )


class Session:
    """A persisted session. Cheap to pass around; reading ``chunks`` queries lazily."""

    def __init__(self, row: SessionRow) -> None:
        self._row = row

    # --- construction ----------------------------------------------------------------------

    @classmethod
    def load(cls, session_id: uuid.UUID | str) -> Session:
        row = SessionRow.objects.filter(id=uuid.UUID(str(session_id))).first()
        if row is None:
            raise NotFound(f"no session {session_id}")
        return cls(row)

    @classmethod
    def from_user_message(
        cls,
        text: str,
        *,
        project: Any = None,
        title: str = "",
        metadata: dict[str, Any] | None = None,
    ) -> Session:
        row = services.session_from_user_message(
            project=resolve_project(project), text=text, title=title, metadata=metadata
        )
        return cls(row)

    @classmethod
    def create(
        cls,
        chunks: Iterable[Any] = (),
        *,
        project: Any = None,
        title: str = "",
        metadata: dict[str, Any] | None = None,
    ) -> Session:
        drafts = [_draft_from(c) for c in chunks]
        return cls(
            services.session_create(
                project=resolve_project(project), title=title, chunks=drafts, metadata=metadata
            )
        )

    # --- identity and state ----------------------------------------------------------------

    @property
    def id(self) -> uuid.UUID:
        return self._row.id

    @property
    def row(self) -> SessionRow:
        return self._row

    @property
    def project(self) -> Project:
        return self._row.project

    @property
    def title(self) -> str:
        return self._row.title

    @property
    def op(self) -> str:
        return self._row.op

    @property
    def placement(self) -> dict[str, Any]:
        return dict(self._row.placement or {})

    @property
    def metadata(self) -> dict[str, Any]:
        return dict(self._row.metadata or {})

    def refresh(self) -> Session:
        # A durable step's held appends are written first: reads see their own writes.
        services.flush_buffer(session_id=self.id)
        self._row.refresh_from_db()
        return self

    @property
    def length(self) -> int:
        return self.refresh()._row.length

    def __len__(self) -> int:
        return self.length

    @property
    def usage(self) -> dict[str, int | float]:
        return self.refresh()._row.usage

    @property
    def chunks(self) -> ChunkList:
        return ChunkList(self.id, self.length)

    def text(self) -> str | None:
        """The text of the last assistant message (OpenRath's ``Session.text()``)."""
        for chunk in reversed(list(self.chunks)):
            if chunk.role == "assistant" and chunk.kind in ("message", "summary") and chunk.text:
                return chunk.text
        return None

    def __repr__(self) -> str:
        return f"<Session {self.id} op={self._row.op} length={self._row.length}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Session) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    # --- writes ----------------------------------------------------------------------------

    def append(
        self,
        content: Any = None,
        *,
        role: str = "user",
        kind: str = "message",
        agent: str = "",
        tool_call_id: str | None = None,
        usage: dict[str, Any] | None = None,
        trust: str | None = None,
    ) -> ChunkView:
        """Append one chunk; a plain string is a message's (or summary's) text."""
        item = {
            "role": role,
            "kind": kind,
            "content": content,
            "agent": agent,
            "tool_call_id": tool_call_id,
            "usage": usage,
            "trust": trust,
        }
        (stored,) = services.chunks_append(session=self._row, drafts=[_draft_from(item)])
        return ChunkView.of(stored)

    def extend(self, items: Iterable[Any]) -> list[ChunkView]:
        stored = services.chunks_append(session=self._row, drafts=[_draft_from(i) for i in items])
        return [ChunkView.of(c) for c in stored]

    def fork(self, *, title: str | None = None, at: int | None = None) -> Session:
        return Session(services.session_fork(session=self._row, at=at, title=title))

    def detach(self, *, title: str | None = None) -> Session:
        return Session(services.session_detach(session=self._row, title=title))

    @classmethod
    def merge(
        cls,
        *sessions: Session,
        strategy: str = "concat",
        title: str | None = None,
        summarizer: services.Summarizer | None = None,
    ) -> Session:
        rows = [s._row for s in sessions]
        return cls(
            services.session_merge(
                sessions=rows, strategy=strategy, title=title, summarizer=summarizer
            )
        )

    def to(self, backend: str = "local", *, spec: Any = None) -> Session:
        """Place the session on a sandbox backend (``"local"`` with a workspace path)."""
        if isinstance(spec, Path):
            spec = str(spec)
        services.session_place(session=self._row, backend=backend, spec=spec)
        return self

    # --- lineage and transfer ----------------------------------------------------------------

    def lineage(self, direction: str = "graph", *, limit: int = 500) -> LineageView:
        page = selectors.lineage_page(self._row, direction=direction, limit=limit)
        return LineageView(nodes=page.nodes, edges=page.edges)

    def export_jsonl(self, path: str | Path | None = None) -> str:
        """The session's lineage graph as JSONL (see docs/sessions.md); also written to ``path``."""
        from sessions_app.transfer import export_graph

        text = "".join(export_graph(self._row))
        if path is not None:
            Path(path).write_text(text)
        return text

    @classmethod
    def import_jsonl(
        cls, source: str | Path | Sequence[str | Path], *, project: Any = None
    ) -> list[Session]:
        """Import an export of ours, OpenRath v1 session logs (several files at once to rebuild
        their lineage, partial files included) or v1 lineage rows. Imported content is
        untrusted and historical."""
        from sessions_app.transfer import import_files

        paths = [source] if isinstance(source, str | Path) else list(source)
        files = []
        for item in paths:
            path = Path(item)
            files.append((path.name, path.read_text()))
        result = import_files(project=resolve_project(project), files=files)
        return [cls(row) for row in result.sessions]
