"""Sessions API: create, list, read, chunks, fork, detach, merge, lineage, export, import."""

from __future__ import annotations

from typing import Any, ClassVar

import django_filters
from django.conf import settings
from django.db.models import QuerySet
from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_view,
)
from rest_framework import mixins, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from openrath_project.api.filters import CreatedRangeFilterSet
from openrath_project.api.parsers import (
    JSONLines,
    JSONLinesParser,
    NDJSONParser,
    StrictJSONParser,
)
from openrath_project.api.views import ScopedAPIView
from openrath_project.artifacts import artifact_get
from openrath_project.errors import NotFound, PayloadTooLarge, ValidationFailed
from openrath_project.tenancy.principal import Principal
from openrath_project.tenancy.selectors import parse_uuid, project_get
from sessions_app import selectors, services, transfer
from sessions_app.api.serializers import (
    ChunkOut,
    ChunkPageQuery,
    ChunksAppendIn,
    DetachIn,
    ForkIn,
    ImportIn,
    ImportJSONLinesQuery,
    ImportOut,
    LineageEdgeOut,
    LineageNodeOut,
    LineageOut,
    LineageQuery,
    MergeIn,
    SessionCreateIn,
    SessionOut,
)
from sessions_app.chunk_rules import ChunkDraft, ChunkInvalid, ChunkTooLarge, make_draft
from sessions_app.models import SESSION_OPS, Session


def drafts_from(items: list[dict[str, Any]], field: str = "chunks") -> list[ChunkDraft]:
    """Validated drafts; a bad item is a 400 (413 when too large) naming its index and field."""
    limit = int(settings.OPENRATH_MAX_CHUNK_BYTES)
    drafts = []
    for index, item in enumerate(items):
        try:
            drafts.append(
                make_draft(
                    role=item["role"],
                    kind=item.get("kind", "message"),
                    content=item["content"],
                    agent=item.get("agent", ""),
                    tool_call_id=item.get("tool_call_id"),
                    trust=item.get("trust"),
                    usage=item.get("usage"),
                    max_bytes=limit,
                )
            )
        except ChunkInvalid as exc:
            nested: list[dict[str, Any]] = [{} for _ in items]
            nested[index] = {exc.field: [exc.message]}
            message = f"{field}[{index}].{exc.field} {exc.message}"
            if isinstance(exc, ChunkTooLarge):
                raise PayloadTooLarge(message, details={field: nested}) from exc
            raise ValidationFailed(
                f"invalid input in field(s) {field}: {message}", details={field: nested}
            ) from exc
    return drafts


class SessionFilter(CreatedRangeFilterSet):
    op = django_filters.ChoiceFilter(choices=[(o, o) for o in SESSION_OPS])
    agent = django_filters.CharFilter(method="filter_agent")

    class Meta:
        model = Session
        fields: ClassVar[list[str]] = []

    def filter_agent(self, queryset: QuerySet[Session], name: str, value: str) -> Any:
        return selectors.sessions_with_agent(queryset, value)


@extend_schema_view(list=extend_schema(summary="List sessions (newest first)"))
class SessionViewSet(
    ScopedAPIView,
    mixins.ListModelMixin,
    viewsets.GenericViewSet,
):
    """Sessions of the caller's tenant and projects."""

    grants: ClassVar[dict[str, str]] = {
        "list": "sessions:read",
        "retrieve": "sessions:read",
        "lineage": "sessions:read",
        "export": "sessions:read",
        "artifact": "sessions:read",
        "create": "sessions:write",
        "fork": "sessions:write",
        "detach": "sessions:write",
        "merge": "sessions:write",
        "import_sessions": "sessions:write",
        "chunks.GET": "sessions:read",
        "chunks.POST": "sessions:write",
    }
    audit_actions: ClassVar[dict[str, str]] = {
        "create": "session.create",
        "fork": "session.fork",
        "detach": "session.detach",
        "merge": "session.merge",
        "import_sessions": "session.import",
        "chunks.POST": "session.append",
    }
    audit_object_type = "session"
    extra_error_statuses = (409,)
    serializer_class = SessionOut
    queryset = Session.objects.none()
    filterset_class = SessionFilter
    cursor_ordering = ("-id",)
    action_query_params: ClassVar[dict[str, tuple[str, ...]]] = {
        "chunks": ("after", "limit"),
        "lineage": ("direction", "limit", "after"),
    }

    def scope_queryset(self, principal: Principal) -> QuerySet[Session]:
        return selectors.session_list(principal=principal)

    def _session(self, pk: str) -> Session:
        session = selectors.session_get(principal=self.principal, session_id=pk)
        self.audit(object_id=session.id, project=session.project)
        return session

    def _chunk_log(self, pk: str) -> Session:
        """The session of the chunk endpoints, in one query: without the lineage prefetch (they
        show no parents) and with the project the audit note names joined in."""
        as_uuid = parse_uuid(pk)
        session = None
        if as_uuid is not None:
            session = selectors.session_with_project(principal=self.principal, session_id=as_uuid)
        if session is None:
            raise NotFound("session not found", details={"session": str(pk)})
        self.audit(object_id=session.id, project=session.project)
        return session

    def _out(self, session: Session, status: int = 200) -> Response:
        fresh = selectors.session_list(principal=self.principal).get(id=session.id)
        return Response(SessionOut(fresh).data, status=status)

    @extend_schema(summary="Get a session")
    def retrieve(self, request: Request, pk: str) -> Response:
        return Response(SessionOut(self._session(pk)).data)

    @extend_schema(
        request=SessionCreateIn,
        responses={201: SessionOut},
        summary="Create a session (from a user message, from chunks, or empty)",
    )
    def create(self, request: Request) -> Response:
        data = SessionCreateIn(data=request.data)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        project = project_get(principal=self.principal, ref=values["project"])
        self.audit(project=project)
        if "user_message" in values:
            drafts = drafts_from(
                [{"role": "user", "kind": "message", "content": {"text": values["user_message"]}}]
            )
            title = values["title"] or values["user_message"][:80]
        else:
            drafts = drafts_from(values.get("chunks", []))
            title = values["title"]
        session = services.session_create(
            project=project,
            title=title,
            chunks=drafts,
            metadata=values["metadata"],
            created_by=self.principal.actor,
        )
        self.audit(object_id=session.id)
        return self._out(session, status=201)

    @extend_schema(
        methods=["GET"],
        parameters=[
            OpenApiParameter("after", int, description="Return chunks with seq > after."),
            OpenApiParameter("limit", int, description="Page size (1 to the maximum)."),
        ],
        responses={200: ChunkOut(many=True)},
        summary="Read a page of the session's logical chunk list",
    )
    @extend_schema(
        methods=["POST"],
        request=ChunksAppendIn,
        responses={201: ChunkOut(many=True)},
        summary="Append chunks (returns the stored chunks)",
    )
    @action(detail=True, methods=["get", "post"])
    def chunks(self, request: Request, pk: str) -> Response:
        session = self._chunk_log(pk)
        if request.method == "POST":
            data = ChunksAppendIn(data=request.data)
            data.is_valid(raise_exception=True)
            stored = services.chunks_append(
                session=session, drafts=drafts_from(data.validated_data["chunks"])
            )
            self.audit(details={"appended": len(stored)})
            return Response(ChunkOut(stored, many=True).data, status=201)
        query = ChunkPageQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        limit = query.validated_data["limit"]
        if limit > settings.OPENRATH_MAX_PAGE_SIZE:
            raise ValidationFailed(
                f"limit must be between 1 and {settings.OPENRATH_MAX_PAGE_SIZE}",
                details={"limit": [f"out of range 1..{settings.OPENRATH_MAX_PAGE_SIZE}"]},
            )
        after = query.validated_data["after"]
        length = session.length
        page = selectors.chunk_page(session.id, after=after, limit=limit, upto=length)
        more = bool(page) and page[-1].seq < length - 1
        next_url = (
            request.build_absolute_uri(f"{request.path}?after={page[-1].seq}&limit={limit}")
            if more
            else None
        )
        return Response({"results": ChunkOut(page, many=True).data, "next": next_url})

    @extend_schema(
        request=ForkIn,
        responses={201: SessionOut},
        summary="Fork (copy-on-write: no chunk is copied)",
    )
    @action(detail=True, methods=["post"])
    def fork(self, request: Request, pk: str) -> Response:
        session = self._session(pk)
        data = ForkIn(data=request.data)
        data.is_valid(raise_exception=True)
        child = services.session_fork(
            session=session,
            at=data.validated_data.get("at"),
            title=data.validated_data.get("title"),
            created_by=self.principal.actor,
        )
        self.audit(details={"child": str(child.id)})
        return self._out(child, status=201)

    @extend_schema(
        request=DetachIn,
        responses={201: SessionOut},
        summary="Detach: a new lineage root with the same content",
    )
    @action(detail=True, methods=["post"])
    def detach(self, request: Request, pk: str) -> Response:
        session = self._session(pk)
        data = DetachIn(data=request.data)
        data.is_valid(raise_exception=True)
        child = services.session_detach(
            session=session, title=data.validated_data.get("title"), created_by=self.principal.actor
        )
        self.audit(details={"child": str(child.id)})
        return self._out(child, status=201)

    @extend_schema(request=MergeIn, responses={201: SessionOut}, summary="Merge sessions")
    @action(detail=False, methods=["post"])
    def merge(self, request: Request) -> Response:
        data = MergeIn(data=request.data)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        parents = [
            selectors.session_get(principal=self.principal, session_id=sid)
            for sid in values["sessions"]
        ]
        self.audit(project=parents[0].project)
        summarizer = None
        if values["strategy"] == "summary":
            from sessions_app.summaries import default_summarizer

            summarizer = default_summarizer()
        merged = services.session_merge(
            sessions=parents,
            strategy=values["strategy"],
            title=values.get("title"),
            summarizer=summarizer,
            created_by=self.principal.actor,
        )
        self.audit(object_id=merged.id, details={"parents": [str(p.id) for p in parents]})
        return self._out(merged, status=201)

    @extend_schema(
        parameters=[LineageQuery],
        responses={200: LineageOut},
        summary="Lineage: ancestors, descendants or the connected graph (paged)",
    )
    @action(detail=True, methods=["get"])
    def lineage(self, request: Request, pk: str) -> Response:
        session = self._session(pk)
        query = LineageQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        values = query.validated_data
        page = selectors.lineage_page(
            session,
            direction=values["direction"],
            limit=values["limit"],
            after=str(values["after"]) if values.get("after") else None,
        )
        next_url = None
        if page.next_after:
            next_url = request.build_absolute_uri(
                f"{request.path}?direction={values['direction']}&limit={values['limit']}"
                f"&after={page.next_after}"
            )
        agents = selectors.lineage_node_agents(self.principal, [node.id for node in page.nodes])
        return Response(
            {
                "nodes": LineageNodeOut(page.nodes, many=True, context={"agents": agents}).data,
                "edges": LineageEdgeOut(page.edges, many=True).data,
                "next": next_url,
            }
        )

    @extend_schema(
        responses={(200, "application/jsonl"): OpenApiResponse(OpenApiTypes.STR)},
        summary="Export the session's lineage graph as JSONL",
    )
    @action(detail=True, methods=["get"])
    def export(self, request: Request, pk: str) -> HttpResponse:
        session = self._session(pk)
        # Exports are bounded (transfer.MAX_EXPORT_SESSIONS), so the body is built in full:
        # errors surface as a proper error response, never half-way through a stream.
        body = "".join(transfer.export_graph(session))
        response = HttpResponse(body, content_type="application/jsonl; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="session-{session.id}.jsonl"'
        return response

    @extend_schema(
        responses={(200, "application/octet-stream"): OpenApiResponse(OpenApiTypes.BINARY)},
        summary="An artifact the session refers to (by its digest), verified on read",
        description=(
            "Artifact chunks and tool results whose whole output was kept (a truncated tool "
            "output) refer to artifacts by SHA-256 digest. 404 unless one of the session's "
            "chunks refers to that digest."
        ),
    )
    @action(detail=True, methods=["get"], url_path=r"artifacts/(?P<digest>[0-9a-f]{64})")
    def artifact(self, request: Request, pk: str, digest: str) -> HttpResponse:
        session = self._session(pk)
        ref = selectors.chunk_artifact(session, digest)
        if ref is None:
            raise NotFound("the session refers to no such artifact", details={"digest": digest})
        data = artifact_get(tenant_id=session.project.tenant_id, digest=digest)
        # Only inert types are echoed: a chunk's media_type is caller input, and a text/html
        # artifact served from the API's origin would be a stored XSS.
        media_type = ref.get("media_type")
        if media_type not in ("application/json", "text/plain"):
            media_type = "application/octet-stream"
        response = HttpResponse(data, content_type=media_type)
        response["Content-Disposition"] = f'attachment; filename="{digest}"'
        return response

    def _import_request(self, request: Request) -> tuple[str, list[tuple[str, str]]]:
        """The project and the files of an import: a JSON envelope, or one raw JSON Lines body
        (``application/jsonl`` or ``application/x-ndjson``) with ``?project=``."""
        if isinstance(request.data, JSONLines):
            query = ImportJSONLinesQuery(data=request.query_params)
            query.is_valid(raise_exception=True)
            values = query.validated_data
            return values["project"], [(values["name"], str(request.data))]
        data = ImportIn(data=request.data)
        data.is_valid(raise_exception=True)
        files = [(f["name"], f["content"]) for f in data.validated_data["files"]]
        return data.validated_data["project"], files

    @extend_schema(
        request={
            "application/json": ImportIn,
            "application/jsonl": OpenApiTypes.STR,
            "application/x-ndjson": OpenApiTypes.STR,
        },
        parameters=[
            OpenApiParameter(
                "project",
                str,
                description="With a JSON Lines body only: the project (slug or id).",
            ),
            OpenApiParameter(
                "name",
                str,
                description="With a JSON Lines body only: the file name errors name "
                "(default `body.jsonl`).",
            ),
        ],
        responses={201: ImportOut},
        summary="Import JSONL: our export, OpenRath v1 session logs or v1 lineage rows",
        description=(
            "Either a JSON envelope `{project, files: [{name, content}]}`, or the raw JSONL of "
            "one file with `Content-Type: application/jsonl` (or `application/x-ndjson`) and "
            "`?project=`: `curl --data-binary @graph.jsonl -H 'Content-Type: application/jsonl' "
            "'.../sessions/import/?project=default'` imports what export returned."
        ),
    )
    @action(
        detail=False,
        methods=["post"],
        url_path="import",
        parser_classes=[StrictJSONParser, JSONLinesParser, NDJSONParser],
    )
    def import_sessions(self, request: Request) -> Response:
        project_ref, files = self._import_request(request)
        project = project_get(principal=self.principal, ref=project_ref)
        self.audit(project=project)
        result = transfer.import_files(
            project=project, files=files, created_by=self.principal.actor
        )
        self.audit(details={"sessions": len(result.sessions)})
        rows = list(
            selectors.session_list(principal=self.principal)
            .filter(id__in=[s.id for s in result.sessions])
            .order_by("id")
        )
        return Response(
            {
                "sessions": SessionOut(rows, many=True).data,
                "mapping": {k: str(v.id) for k, v in result.mapping.items()},
            },
            status=201,
        )
