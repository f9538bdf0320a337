"""``flow.Session``: the value that flows between agents, branches and runs.

A thin handle on a persisted session: every operation goes through the services, so every
session an agent touches is stored and traceable. Chunks are read lazily, a page at a time.

OpenRath 2.0's names and semantics are here too (docs/migrating-from-openrath.md):
``from_agent_prompt``, ``create(kind, text)``, ``chunk_table``, ``parent_session_ids``,
``lineage_kind`` / ``lineage_operator`` / ``lineage_extras``, ``cumulative_usage``,
``bind_sandbox`` / ``close_sandbox`` / ``with session:``, and ``a.merge(b)`` (all of ``a``'s
rows, then all of ``b``'s) next to ``Session.merge(*sessions, strategy=)``. Making a session
never copies its chunks: a fork or detach is one row and one edge (copy-on-write bases), and
``a.merge(b)`` stores only ``b``'s chunks on top of ``a``.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, overload

from openrath_project.errors import NotFound, ValidationFailed
from openrath_project.tenancy.models import Project
from sessions_app import context, selectors, services
from sessions_app.chunk_rules import ChunkDraft, make_draft
from sessions_app.chunk_table import ChunkTable, TokenUsage, row_drafts, rows_from_chunks
from sessions_app.lineage_graph import LineageKind, journal_record
from sessions_app.models import Chunk, LineageEdge
from sessions_app.models import Session as SessionRow

PAGE = 200


def resolve_project(project: Any = None) -> Project:
    """A Project from an instance, an id, ``"tenant/project"``, a slug unique across tenants,
    the write context's project, ``OPENRATH_DEFAULT_PROJECT``, then: in a script configured by
    the library the default project ``local/default`` (``openrath_project.library``), in a
    Django process the only project there is.

    Inside a write context that has a project (a durable step: the run's), a project named
    by the call must be in that project's tenant: another tenant's is "no project"."""
    if project is None:
        ctx_project = context.current().project
        if ctx_project is not None:
            return _find_project(ctx_project, tenant_id=None)
        default = os.environ.get("OPENRATH_DEFAULT_PROJECT")
        if default:
            return _find_project(default, tenant_id=None)
        from openrath_project import library

        if library.is_library_process():
            return library.default_project()
        # scope: no project named and no context: a single-project installation's only one
        only = list(Project.objects.unscoped()[:2])
        if len(only) == 1:
            return only[0]
        raise ValidationFailed(
            "say which project: project='tenant/project' (or set OPENRATH_DEFAULT_PROJECT)"
        )
    return _find_project(project, tenant_id=context_tenant_id())


def context_tenant_id() -> uuid.UUID | None:
    """The tenant of the write context's project (``None`` outside one): what in-process
    code running for a tenant (a durable step) may reach. The library acts for no principal;
    this is its scope."""
    ctx_project = context.current().project
    if ctx_project is None:
        return None
    if isinstance(ctx_project, Project):
        return ctx_project.tenant_id
    return _find_project(ctx_project, tenant_id=None).tenant_id


def _find_project(project: Any, *, tenant_id: uuid.UUID | None) -> Project:
    """The project ``project`` names, only in ``tenant_id`` when one is given (404 outside)."""
    if isinstance(project, Project):
        if tenant_id is not None and project.tenant_id != tenant_id:
            raise NotFound(f"no project {str(project)!r} in this tenant")
        return project
    ref = str(project)
    # scope: the library acts for no principal; limited to the context's tenant when it has one
    projects = Project.objects.unscoped()
    if tenant_id is not None:
        projects = projects.filter(tenant_id=tenant_id)
    as_uuid = _as_uuid(ref)
    if as_uuid is not None:
        found = projects.filter(id=as_uuid).first()
        if found is not None:
            return found
    if "/" in ref:
        tenant_slug, _, slug = ref.partition("/")
        found = projects.filter(tenant__slug=tenant_slug, slug=slug).first()
        if found is None:
            raise NotFound(f"no project {ref!r}")
        return found
    matches = list(projects.filter(slug=ref)[:2])
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise NotFound(f"no project {ref!r}")
    raise ValidationFailed(f"project slug {ref!r} exists in several tenants: say 'tenant/{ref}'")


def _as_uuid(ref: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(ref)
    except ValueError:
        return None


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


#: Our ``op`` -> OpenRath's lineage operator.
_OPERATORS = {
    "create": "Session.create",
    "fork": "Session.fork",
    "detach": "Session.detach",
    "merge": "Session.merge",
    "compress": "Compressor",
    "import": "import",
}
_KINDS = {
    "fork": LineageKind.OP_FORK,
    "detach": LineageKind.OP_DETACH,
    "merge": LineageKind.OP_MERGE,
    "compress": LineageKind.OP_SESSION_COMPRESS,
    "import": LineageKind.OP_IMPORT,
}
#: ``Session.create(kind, text)``: OpenRath's kinds -> our chunk role.
CREATE_KINDS = {"user": "user", "system": "system", "empty": None}


def _cumulative(row: SessionRow, depth: int = 0) -> TokenUsage:
    """What producing ``row`` spent: its own usage, plus (for a merge) its parents' cumulative
    usage, each parent counted as often as it is merged (OpenRath sums usage on merge). The
    totals stored on rows count every token once; this sum is computed on read."""
    own = TokenUsage.of(row.usage)
    if row.op != "merge" or depth > 64:
        return own
    parent_ids = selectors.session_parent_ids(row.id)
    # scope: the parents of a row already held (an edge never joins two tenants)
    parents = {p.id: p for p in SessionRow.objects.unscoped().filter(id__in=parent_ids)}
    for parent_id in parent_ids:
        if parent_id in parents:
            own = own + _cumulative(parents[parent_id], depth + 1)
    return own


class _MergeMethod:
    """``merge`` on the class is ours, ``Session.merge(*sessions, strategy="concat")``; on an
    instance it is OpenRath's, ``a.merge(b)`` = ``Session.merge(a, b, strategy="append")``."""

    def __get__(self, instance: Session | None, owner: type[Session]) -> Callable[..., Session]:
        if instance is None:

            def merge_sessions(
                *sessions: Session,
                strategy: str = "concat",
                title: str | None = None,
                summarizer: services.Summarizer | None = None,
            ) -> Session:
                return owner._merged(
                    sessions, strategy=strategy, title=title, summarizer=summarizer
                )

            return merge_sessions

        def merge_into(
            *others: Session,
            strategy: str = "append",
            title: str | None = None,
            summarizer: services.Summarizer | None = None,
        ) -> Session:
            return owner._merged(
                (instance, *others), strategy=strategy, title=title, summarizer=summarizer
            )

        return merge_into


class Session:
    """A persisted session. Cheap to pass around; reading ``chunks`` queries lazily.

    ``Session(row)`` wraps a stored row; ``Session(ChunkTable(...))`` (OpenRath's constructor)
    stores a new session holding those rows."""

    def __init__(self, row: SessionRow | ChunkTable, *, project: Any = None) -> None:
        if isinstance(row, ChunkTable):
            row = services.session_create(
                project=resolve_project(project),
                chunks=[_draft_from(item) for item in row_drafts(row.rows)],
            )
        self._row = row
        self._parent_ids: tuple[uuid.UUID, ...] | None = None
        self._first_role: str | None = None
        self._sandbox: Any = None
        self._sandbox_depth = 0
        #: A provider bound with ``session.to(provider)`` (in memory only, never stored).
        self.provider: Any = None

    @classmethod
    def _made(cls, row: SessionRow) -> Session:
        """A session an operation just made: noted in the attached lineage journal."""
        made = cls(row)
        journal_record(made.id)
        return made

    # --- construction ----------------------------------------------------------------------

    @classmethod
    def load(cls, session_id: uuid.UUID | str) -> Session:
        # scope: the library acts for no principal; in a durable step, only the run's tenant
        rows = SessionRow.objects.unscoped().filter(id=uuid.UUID(str(session_id)))
        tenant_id = context_tenant_id()
        if tenant_id is not None:
            rows = rows.filter(tenant_id=tenant_id)
        row = rows.first()
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
    def from_agent_prompt(
        cls,
        prompt: str,
        *,
        project: Any = None,
        title: str = "",
        metadata: dict[str, Any] | None = None,
    ) -> Session:
        """A new session holding one system message (OpenRath's agent-prompt session)."""
        return cls.create(
            [{"role": "system", "content": prompt}],
            project=project,
            title=title,
            metadata=metadata,
        )

    @classmethod
    def create(
        cls,
        chunks: Iterable[Any] | str = (),
        text: str = "",
        *,
        project: Any = None,
        title: str = "",
        metadata: dict[str, Any] | None = None,
    ) -> Session:
        """A new session from chunk dicts (ours), or OpenRath's ``create(kind, text)`` with
        kind ``"user"`` / ``"system"`` (one message holding ``text``) or ``"empty"``."""
        if isinstance(chunks, str):
            if chunks not in CREATE_KINDS:
                raise ValidationFailed(
                    f"Session.create: unknown kind {chunks!r}; expected one of "
                    f"{', '.join(CREATE_KINDS)}",
                    details={"kind": [f"unknown kind {chunks!r}"]},
                )
            role = CREATE_KINDS[chunks]
            items = [] if role is None else [{"role": role, "content": text}]
            made = cls.create(items, project=project, title=title, metadata=metadata)
            if role is not None:
                journal_record(made.id)
            return made
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

    # --- OpenRath's reads -------------------------------------------------------------------

    @property
    def chunk_table(self) -> ChunkTable:
        """The transcript as OpenRath's rows (``ChunkKind`` + payload), read now: an assistant
        message and its tool calls are one row; events and artifacts are left out."""
        return ChunkTable(rows=rows_from_chunks(self.chunks))

    @property
    def cumulative_usage(self) -> TokenUsage | None:
        """What producing this session spent (``None`` when nothing was): its own chunks'
        usage, plus its parents' for a merge. A fork starts at nothing, as in OpenRath."""
        total = _cumulative(self.refresh()._row)
        return None if total.is_zero else total

    @property
    def parent_session_ids(self) -> tuple[uuid.UUID, ...]:
        """The lineage parents, in order (a fork's one, a merge's in merge order; none for a
        new or detached session)."""
        if self._parent_ids is None:
            self._parent_ids = selectors.session_parent_ids(self.id)
        return self._parent_ids

    @property
    def lineage_operator(self) -> str:
        if self._row.op == "fork" and self._row.agent:
            return "run_session_loop"  # an agent's output, named as OpenRath names it
        return _OPERATORS.get(self._row.op, self._row.op)

    @property
    def lineage_kind(self) -> LineageKind:
        """``LEAF_USER`` / ``LEAF_SYSTEM`` for a new session starting with a user / system
        message (``OP_CREATE`` otherwise), ``OP_SESSION_LOOP`` for an agent's output fork, else
        the operation's kind."""
        op = self._row.op
        if op == "create":
            if self._first_role is None:
                first = selectors.chunk_page(self.id, after=-1, limit=1, upto=1)
                self._first_role = first[0].role if first else ""
            return {"user": LineageKind.LEAF_USER, "system": LineageKind.LEAF_SYSTEM}.get(
                self._first_role, LineageKind.OP_CREATE
            )
        if op == "fork" and self._row.agent:
            return LineageKind.OP_SESSION_LOOP
        return _KINDS.get(op, LineageKind.UNKNOWN)

    @property
    def lineage_extras(self) -> tuple[tuple[str, Any], ...]:
        metadata = self._row.metadata or {}
        if self._row.op == "merge" and "strategy" in metadata:
            return (("strategy", metadata["strategy"]),)
        if self._row.op == "compress":
            return (("compression.lossy", True), ("compression.rows_out", self._row.own_len))
        return ()

    def synchronize(self) -> Session:
        """OpenRath's wait for a lazily produced transcript: ours is written when the call
        returns, so this only re-reads the row."""
        return self.refresh()

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
        """A child that sees the first ``at`` chunks (all by default): one row and one edge,
        no chunk copied. Keeps the placement (and an in-memory provider)."""
        made = Session._made(services.session_fork(session=self._row, at=at, title=title))
        made.provider = self.provider
        return made

    def detach(self, *, title: str | None = None) -> Session:
        """A new lineage root with the same chunks (shared storage, no parents)."""
        made = Session._made(services.session_detach(session=self._row, title=title))
        made.provider = self.provider
        return made

    merge = _MergeMethod()

    @classmethod
    def _merged(
        cls,
        sessions: Sequence[Session],
        *,
        strategy: str,
        title: str | None,
        summarizer: services.Summarizer | None,
    ) -> Session:
        for item in sessions:
            if not isinstance(item, Session):
                raise TypeError(f"merge takes sessions, got {type(item).__name__}")
        row = services.session_merge(
            sessions=[s._row for s in sessions],
            strategy=strategy,
            title=title,
            summarizer=summarizer,
        )
        made = cls._made(row)
        made.provider = sessions[0].provider
        return made

    def to(
        self,
        backend: Any = "local",
        *,
        spec: Any = None,
        policy: Any = None,
        provider: Any = None,
    ) -> Session:
        """Place the session on a sandbox backend (``"local"``; ``spec=None`` is a workspace of
        the session's own, an absolute path is that directory, a relative one is relative to a
        plain script's working directory and, in the server, lives under the project's root)
        with an optional ``ToolPolicy``. ``to(provider)`` (a provider object,
        not a string) or ``to(provider=...)`` binds a provider to this value instead, in memory
        only (OpenRath's session-level provider). Returns the session."""
        if provider is not None or not isinstance(backend, str):
            chosen = provider if provider is not None else backend
            if isinstance(chosen, str):  # a preset of OpenRath's config.json, by name
                from openrath_project.config.store import ConfigStore
                from sessions_app.providers import make_provider

                entry = ConfigStore.load().get_llm_provider(chosen)
                chosen = make_provider(
                    provider_kind=entry.provider_kind,
                    model=entry.model,
                    api_key=entry.api_key,
                    base_url=entry.base_url,
                )
            self.provider = chosen
            return self
        if isinstance(spec, Path):
            spec = str(spec)
        if isinstance(spec, str) and spec and not os.path.isabs(spec):
            from openrath_project import library

            if library.is_library_process():
                # A plain script's relative path means what it means to the script, as in
                # OpenRath (spec="." is the working directory): the author's own placement.
                # In the server and its workers it stays under the project's root.
                spec = os.path.abspath(spec)
        self.close_sandbox()
        services.session_place(session=self._row, backend=backend, spec=spec, policy=policy)
        return self

    # --- the sandbox handle (OpenRath's device semantics) ----------------------------------

    @property
    def sandbox_backend(self) -> str | None:
        """The placement's backend name, ``None`` when the session is not placed."""
        backend = (self._row.placement or {}).get("backend")
        return str(backend) if backend else None

    @property
    def sandbox(self) -> Any:
        """The open sandbox handle, or ``None`` (opened by ``require_sandbox`` or ``with``)."""
        return self._sandbox

    def require_sandbox(self) -> Any:
        """The sandbox the placement names, built on first use and kept until
        ``close_sandbox``; ``NoSandbox`` when the session is not placed."""
        if self._sandbox is None:
            from sessions_app.sandbox import sandbox_for

            self._sandbox = sandbox_for(self._row.placement)
        return self._sandbox

    def bind_sandbox(self, sandbox: Any) -> Session:
        """Place the session in an existing sandbox's workspace (its backend, directory and
        policy); ``sandbox`` is a sandbox handle or another session."""
        if isinstance(sandbox, Session):
            placement = sandbox.placement
            if not placement:
                raise ValidationFailed(
                    "the session to share a sandbox with is not placed",
                    details={"sandbox": ["not placed"]},
                )
            self.close_sandbox()
            services.session_place(
                session=self._row,
                backend=placement["backend"],
                spec=placement.get("spec"),
                policy=placement.get("policy"),
            )
            return self
        root = getattr(sandbox, "root", None)
        name = getattr(sandbox, "name", None)
        if not isinstance(root, str) or not isinstance(name, str):
            raise ValidationFailed(
                "bind_sandbox takes a sandbox handle (with a name and a workspace root) or a "
                "placed session",
                details={"sandbox": [f"unsupported {type(sandbox).__name__}"]},
            )
        self.close_sandbox()
        services.session_place(
            session=self._row, backend=name, spec=root, policy=getattr(sandbox, "policy", None)
        )
        self._sandbox = sandbox
        return self

    def close_sandbox(self) -> Session:
        """Drop the open handle (the placement stays: the next use builds a new one). Our
        sandboxes hold no process or container between tool calls, so nothing else closes."""
        self._sandbox = None
        return self

    def __enter__(self) -> Session:
        if self._sandbox_depth == 0:
            self.require_sandbox()
        self._sandbox_depth += 1
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._sandbox_depth -= 1
        if self._sandbox_depth == 0:
            self.close_sandbox()

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
