"""Scoping that fails closed: the rule over the principal-facing code, checked on every run.

The principal-facing modules (every module under an ``api/`` package, every ``selectors.py``,
the console except the admin's own scoping, the WebSocket code and every ``consumers.py``) may
read a tenant-owned model (one with a foreign key to the tenant, found in the app registry)
only through ``Model.objects.for_principal(principal)`` or an explained
``Model.objects.unscoped()  # scope: <why>``. :func:`scoping_violations` reads their source
(the AST and its comments) and names each file, line and fix; the snippets below show it
reports what it must. ``ScopedAPIView`` keeps ``get_queryset`` / ``get_object`` final.

``openrath_project/console/admin_scope.py`` is not principal-facing in this sense: the admin
shows a staff user the rows of *every* tenant they belong to (a superuser: all rows), through
``tenant_path`` lookups that also reach models without a tenant column; no single principal
exists there, so ``for_principal`` does not apply (``tests/console/test_admin.py`` covers it).
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.apps import apps
from django.core.exceptions import ImproperlyConfigured
from django.db import models
from rest_framework import mixins, viewsets

from openrath_project.api.views import ScopedAPIView
from openrath_project.tenancy.models import Project, Tenant
from openrath_project.tenancy.principal import Principal
from openrath_project.tenancy.scoping import ScopedQuerySet, project_path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = (
    "openrath_project",
    "sessions_app",
    "runs_app",
    "effects_app",
    "memory_app",
    "schedules_app",
    "webhooks_app",
)
#: The first call on a tenant-owned model's manager that the rule accepts. ``none()`` reads
#: no row at all (the schema generator's ``queryset = Model.objects.none()``).
ALLOWED_FIRST = frozenset({"for_principal", "unscoped", "none"})
MANAGERS = frozenset({"objects", "_default_manager"})
SCOPE_COMMENT = re.compile(r"#\s*scope:\s*\S")


# --- The checker ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Violation:
    path: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}"


def tenant_owned_models() -> list[type[models.Model]]:
    """Every installed model with a foreign key to the tenant (from the registry)."""
    return [
        model
        for model in apps.get_models()
        if any(
            isinstance(field, models.ForeignKey) and field.related_model is Tenant
            for field in model._meta.concrete_fields
        )
    ]


def tenant_owned_names() -> dict[str, str]:
    """Dotted import path -> model name, for each tenant-owned model."""
    return {f"{m.__module__}.{m.__qualname__}": m.__name__ for m in tenant_owned_models()}


def _imported_names(tree: ast.Module, module: str) -> dict[str, str]:
    """Local name -> the dotted path it was imported as (relative imports resolved)."""
    names: dict[str, str] = {}
    package = module.rsplit(".", 1)[0] if "." in module else ""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - (node.level - 1)] if node.level > 1 else parts
                base = ".".join(p for p in (*parts, base) if p)
            for alias in node.names:
                names[alias.asname or alias.name] = f"{base}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    names[alias.asname] = alias.name
                else:
                    top = alias.name.split(".")[0]
                    names[top] = top
    return names


def _dotted(node: ast.expr, names: dict[str, str]) -> str | None:
    if isinstance(node, ast.Name):
        return names.get(node.id)
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value, names)
        return f"{base}.{node.attr}" if base is not None else None
    return None


def _scope_comment_lines(source: str) -> tuple[set[int], set[int]]:
    """Lines with a ``# scope: <why>`` comment, and lines that hold only a comment."""
    explained: set[int] = set()
    comment_only: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type != tokenize.COMMENT:
            continue
        line = token.start[0]
        if SCOPE_COMMENT.match(token.string):
            explained.add(line)
        if not token.line[: token.start[1]].strip():
            comment_only.add(line)
    return explained, comment_only


def _explained(first: int, line: int, explained: set[int], comment_only: set[int]) -> bool:
    """A ``# scope:`` comment on a line of the statement up to ``line`` (the one with the
    call), or in the comment block directly above the statement (which starts at ``first``)."""
    if any(n in explained for n in range(first, line + 1)):
        return True
    above = first - 1
    while above in comment_only:
        if above in explained:
            return True
        above -= 1
    return False


def _statement_start(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> int:
    while not isinstance(node, ast.stmt) and node in parents:
        node = parents[node]
    return getattr(node, "lineno", 1)


def scoping_violations(
    source: str, path: str, tenant_owned: dict[str, str], module: str = ""
) -> list[Violation]:
    """Every read of a tenant-owned model in ``source`` that does not start with
    ``for_principal`` or ``unscoped``, and every ``unscoped()`` without a ``# scope:`` reason
    (in its statement, or in the comment lines right above the statement)."""
    tree = ast.parse(source, filename=path)
    names = _imported_names(tree, module)
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    explained, comment_only = _scope_comment_lines(source)
    found: list[Violation] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in MANAGERS:
            dotted = _dotted(node.value, names)
            model = tenant_owned.get(dotted or "")
            if model is None:
                continue
            parent = parents.get(node)
            first = parent.attr if isinstance(parent, ast.Attribute) else None
            called = isinstance(parent, ast.Attribute) and (
                isinstance(call := parents.get(parent), ast.Call) and call.func is parent
            )
            if first in ALLOWED_FIRST and called:
                continue
            shown = f"{model}.{node.attr}" + (f".{first}(...)" if first else "")
            found.append(
                Violation(
                    path,
                    node.lineno,
                    f"{shown} reads tenant-owned rows without a scope: start with "
                    f"{model}.{node.attr}.for_principal(principal) (or call a selector); if the "
                    f"ids are already in scope, {model}.{node.attr}.unscoped() with a "
                    "'# scope: <why>' comment",
                )
            )
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "unscoped"
        ):
            line = node.func.end_lineno or node.lineno
            first = _statement_start(node, parents)
            if not _explained(first, line, explained, comment_only):
                found.append(
                    Violation(
                        path,
                        line,
                        "unscoped() without a reason: add '# scope: <why the rows are in "
                        "scope>' on this line or on a comment line directly above the statement",
                    )
                )
    return sorted(found, key=lambda v: v.line)


def principal_facing_modules() -> list[Path]:
    """The modules the rule covers (see the module docstring)."""
    chosen: set[Path] = set()
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            relative = path.relative_to(ROOT)
            parts = relative.parts
            if "migrations" in parts:
                continue
            if (
                "api" in parts[:-1]
                or path.name in ("selectors.py", "consumers.py")
                or parts[:2] == ("openrath_project", "ws")
                or (parts[:2] == ("openrath_project", "console") and path.name != "admin_scope.py")
            ):
                chosen.add(path)
    return sorted(chosen)


def _module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


# --- The rule holds in the code --------------------------------------------------------------


def test_the_rule_covers_the_principal_facing_modules() -> None:
    covered = {str(p.relative_to(ROOT)) for p in principal_facing_modules()}
    for expected in (
        "openrath_project/api/views.py",
        "openrath_project/tenancy/api/views.py",
        "sessions_app/api/views.py",
        "runs_app/api/views.py",
        "effects_app/api/views.py",
        "memory_app/api/views.py",
        "schedules_app/api/views.py",
        "webhooks_app/api/views.py",
        "openrath_project/tenancy/selectors.py",
        "sessions_app/selectors.py",
        "runs_app/selectors.py",
        "effects_app/selectors.py",
        "memory_app/selectors.py",
        "schedules_app/selectors.py",
        "webhooks_app/selectors.py",
        "openrath_project/console/views.py",
        "openrath_project/console/schedules.py",
        "openrath_project/console/access.py",
        "openrath_project/ws/auth.py",
        "openrath_project/ws/consumers.py",
        "runs_app/consumers.py",
        "sessions_app/consumers.py",
    ):
        assert expected in covered, expected
    assert "openrath_project/console/admin_scope.py" not in covered


def test_tenant_owned_models_come_from_the_registry_and_have_the_scoped_manager() -> None:
    owned = tenant_owned_models()
    labels = {m._meta.label for m in owned}
    # A sample, not the definition: the set is whatever has a tenant foreign key.
    assert {"tenancy.Project", "sessions_app.Session", "runs_app.Run"} <= labels
    assert "tenancy.Tenant" not in labels
    for model in owned:
        manager = model._default_manager
        assert manager.name == "objects", model
        assert isinstance(manager.all(), ScopedQuerySet), (
            f"{model._meta.label}: its default manager must be made from ScopedQuerySet "
            "(objects = ScopedManager()), so that for_principal and unscoped exist"
        )
        project_path(model)  # every one says how it reaches its project (or that it does not)


def test_no_principal_facing_module_reads_tenant_rows_unscoped() -> None:
    owned = tenant_owned_names()
    found: list[Violation] = []
    for path in principal_facing_modules():
        found += scoping_violations(
            path.read_text(), str(path.relative_to(ROOT)), owned, _module_name(path)
        )
    assert not found, "\n".join(str(v) for v in found)


@pytest.mark.django_db
def test_every_tenant_owned_model_scopes_by_tenant_and_project_in_sql(tenant: Tenant) -> None:
    """Each model's project path is a real lookup: the query runs, and names the tenant."""
    project = Project.objects.create(tenant=tenant, slug="only", name="Only")
    restricted = Principal(
        tenant=tenant, grants=frozenset(), project_ids=frozenset({project.id}), actor="test"
    )
    for model in tenant_owned_models():
        queryset = model._default_manager.all().for_principal(restricted)  # type: ignore[attr-defined]
        assert '"tenant_id"' in str(queryset.query), model
        queryset.exists()


# --- The checker catches what it must ---------------------------------------------------------

OWNED = {"runs_app.models.Run": "Run", "sessions_app.models.Session": "Session"}


def check(source: str) -> list[str]:
    return [str(v) for v in scoping_violations(source, "snippet.py", OWNED, "app.views")]


def test_an_unscoped_read_is_reported_with_file_line_and_fix() -> None:
    source = (
        "from runs_app.models import Run\n"
        "\n"
        "def view(run_id):\n"
        "    return Run.objects.filter(id=run_id).first()\n"
    )
    (report,) = check(source)
    assert report.startswith("snippet.py:4: Run.objects.filter(...) reads tenant-owned rows")
    assert "Run.objects.for_principal(principal)" in report
    assert "# scope: <why>" in report


def test_every_spelling_of_the_model_and_manager_is_seen() -> None:
    source = (
        "import runs_app.models\n"
        "from runs_app import models as run_models\n"
        "from runs_app.models import Run as R\n"
        "from sessions_app.models import Session\n"
        "a = runs_app.models.Run.objects.get(id=1)\n"
        "b = run_models.Run._default_manager.all()\n"
        "c = R.objects.select_related('plan')\n"
        "d = Session.objects\n"
        "e = Session.objects.for_principal\n"
    )
    lines = [report.split(":")[1] for report in check(source)]
    assert lines == ["5", "6", "7", "8", "9"]


def test_scoped_reads_and_explained_exceptions_pass() -> None:
    source = (
        "from runs_app.models import Run\n"
        "from sessions_app.models import Session\n"
        "from sessions_app.value import Session as Value  # not a model: never flagged\n"
        "a = Run.objects.for_principal(principal).filter(id=1)\n"
        "b = Run.objects.unscoped().filter(id=1)  # scope: the id came from a scoped read\n"
        "# scope: the parents of a session read in scope\n"
        "c = Session.objects.unscoped().filter(id__in=ids)\n"
        "d = (\n"
        "    # scope: several lines may explain it,\n"
        "    # as long as the block ends right above\n"
        "    Session.objects.unscoped()\n"
        "    .filter(id=1)\n"
        ")\n"
        "# scope: above the statement that spans several lines\n"
        "g = (\n"
        "    Run.objects.unscoped()\n"
        "    .filter(id=1)\n"
        ")\n"
        "queryset = Run.objects.none()\n"
        "e = Value.objects.filter(id=1)\n"
        "f = Run.DoesNotExist\n"
    )
    assert check(source) == []


def test_an_unexplained_unscoped_is_reported() -> None:
    source = (
        "from runs_app.models import Run\n"
        "# scope: a reason two lines up does not count\n"
        "\n"
        "a = Run.objects.unscoped().filter(id=1)\n"
        "b = Run.objects.unscoped()  # scope:\n"
        "c = some_queryset.unscoped()  # the rule is about the call, whatever the receiver\n"
    )
    reports = check(source)
    assert [r.split(":")[1] for r in reports] == ["4", "5", "6"]
    assert all("unscoped() without a reason" in r for r in reports)


def test_relative_imports_are_resolved() -> None:
    source = "from .models import Run\nx = Run.objects.all()\n"
    reports = [
        str(v) for v in scoping_violations(source, "runs_app/views.py", OWNED, "runs_app.views")
    ]
    assert len(reports) == 1
    assert reports[0].startswith("runs_app/views.py:2: Run.objects.all(...)")


# --- Project paths ------------------------------------------------------------------------------


def test_a_model_must_say_how_it_reaches_its_project() -> None:
    # Tenant has no project field and declares no scope_project_path: guessing "the whole
    # tenant" would widen a project-restricted token's reach, so it is refused.
    with pytest.raises(ImproperlyConfigured, match="scope_project_path"):
        project_path(Tenant)


# --- ScopedAPIView keeps its queryset final -------------------------------------------------


def test_overriding_get_queryset_is_refused_at_class_creation() -> None:
    with pytest.raises(TypeError) as refused:

        class Leaky(ScopedAPIView, mixins.ListModelMixin, viewsets.GenericViewSet):
            def get_queryset(self):  # type: ignore[no-untyped-def]
                return Project.objects.all()

    message = str(refused.value)
    assert "Leaky overrides get_queryset()" in message
    assert "implement scope_queryset(principal) instead" in message


def test_overriding_get_object_is_refused_at_class_creation() -> None:
    with pytest.raises(TypeError, match=r"ByPk overrides get_object\(\)"):

        class ByPk(ScopedAPIView, viewsets.GenericViewSet):
            def get_object(self):  # type: ignore[no-untyped-def]
                return Project.objects.get(pk=self.kwargs["pk"])


def test_an_override_through_a_mixin_listed_first_is_refused() -> None:
    class Unscoped:
        def get_queryset(self):  # type: ignore[no-untyped-def]
            return Project.objects.all()

    with pytest.raises(TypeError, match=r"ViaMixin overrides get_queryset\(\)"):

        class ViaMixin(Unscoped, ScopedAPIView, viewsets.GenericViewSet):
            pass


def test_a_view_that_implements_scope_queryset_is_accepted() -> None:
    class Scoped(ScopedAPIView, mixins.ListModelMixin, viewsets.GenericViewSet):
        def scope_queryset(self, principal: Principal) -> models.QuerySet[Project]:
            return Project.objects.for_principal(principal)

    assert Scoped.get_queryset is ScopedAPIView.get_queryset
