"""The shared base of every model admin: tenant scoping, read-only engine rows, audited actions.

* :class:`TenantScopedAdmin` restricts the queryset before any admin view or action sees it:
  superusers see everything, other staff only rows of the tenants they are members of
  (``tenant_path`` says how a model reaches its tenant). Related choices and list filters are
  restricted the same way, so tenant names do not leak through a filter or a select.
* :class:`EngineAdmin` is for rows the runtime owns (runs, events, checkpoints, chunks, ...):
  no add, no change, no delete; large JSON is deferred in lists and shown read-only and pretty.
  State changes only through admin actions that call the services.
* Writes take the admin role in the tenant being written: the row's current tenant for a
  change or delete, and the tenant it is saved with (:meth:`TenantScopedAdmin.save_model`);
  forms offer only the tenants (and their projects and users) where the user is admin. A row's
  tenant and project are fixed at creation anyway (``tenancy.fixed_columns``).
* Every add, change and delete made here is audited under the row's tenant, with its id and
  the names of the changed fields (never their values: a token's hash is a field too); the
  middleware's own tenant-less row for the request is skipped.
* :func:`run_action` applies a service call to each selected row, checks the acting user's
  grant in that row's tenant, and writes one audit event per row (``audit_record``) with its
  outcome; the middleware's own row for the request is skipped.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any, ClassVar, TypeVar

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers, widgets
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import models
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from openrath_project.api.audit import audit_skip
from openrath_project.errors import DomainError
from openrath_project.tenancy.grants import GRANTS
from openrath_project.tenancy.models import Membership, Project, Tenant
from openrath_project.tenancy.principal import Principal
from openrath_project.tenancy.services import audit_record, principal_for_user

M = TypeVar("M", bound=models.Model)

#: Longest JSON shown on an admin page (the API has the rest).
MAX_JSON_CHARS = 50_000


def staff_tenant_ids(request: HttpRequest) -> frozenset[uuid.UUID] | None:
    """Tenants whose rows this admin user may see: ``None`` for a superuser (all of them)."""
    user: Any = request.user
    if user.is_superuser:
        return None
    cached = getattr(request, "_openrath_admin_tenants", None)
    if cached is None:
        cached = frozenset(Membership.objects.filter(user=user).values_list("tenant_id", flat=True))
        request._openrath_admin_tenants = cached  # type: ignore[attr-defined]
    return cached


def administered_tenant_ids(request: HttpRequest) -> frozenset[uuid.UUID] | None:
    """Tenants where this admin user holds the admin role (where it may write): ``None`` for
    a superuser (all of them)."""
    user: Any = request.user
    if user.is_superuser:
        return None
    cached = getattr(request, "_openrath_admin_writable", None)
    if cached is None:
        cached = frozenset(
            Membership.objects.filter(user=user, role="admin").values_list("tenant_id", flat=True)
        )
        request._openrath_admin_writable = cached  # type: ignore[attr-defined]
    return cached


def tenant_id_of(obj: Any, tenant_path: str) -> Any:
    """The tenant id of a model instance, following ``tenant_path`` (``""``: it is a Tenant)."""
    if not tenant_path:
        return obj.pk
    *hops, last = tenant_path.split("__")
    for hop in hops:
        obj = getattr(obj, hop, None)
        if obj is None:
            return None
    return getattr(obj, f"{last}_id", None)


def scope_to_tenants(queryset: QuerySet[M], request: HttpRequest, tenant_path: str) -> QuerySet[M]:
    """``queryset`` limited to the admin user's tenants (``tenant_path`` = ``""`` for Tenant)."""
    tenant_ids = staff_tenant_ids(request)
    if tenant_ids is None:
        return queryset
    scoped = queryset.filter(**{f"{tenant_path}__in" if tenant_path else "id__in": tenant_ids})
    # A reverse relation (a plan reached through its runs) can match a row more than once.
    return scoped.distinct() if tenant_path.startswith("runs__") else scoped


def pretty_json(value: Any, *, limit: int | None = MAX_JSON_CHARS) -> SafeString:
    """A JSON value as an indented, escaped ``<pre>``, cut at ``limit`` characters (``None``:
    whole, in a scrolling box — for a request someone is about to decide on)."""
    text = json.dumps(value, indent=2, ensure_ascii=False, default=str)
    if limit is not None and len(text) > limit:
        text = text[:limit] + f"\n… cut: {len(text) - limit} more characters"
    style = "white-space:pre-wrap" if limit is not None else "white-space:pre-wrap;"
    if limit is None:
        style += "max-height:40em;overflow:auto"
    return format_html('<pre class="openrath-json" style="{}">{}</pre>', style, text)


#: List filters over these relations only offer values present in the scoped queryset.
SCOPED_FILTER_FIELDS = ("tenant", "project")


class TenantScopedAdmin(admin.ModelAdmin):
    """Base of every model admin: non-superuser staff see only their tenants' rows."""

    #: How the model reaches its tenant: ``"tenant"`` (a direct FK), ``"run__tenant"``, or
    #: ``""`` for the Tenant model itself.
    tenant_path: ClassVar[str] = "tenant"

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        return scope_to_tenants(super().get_queryset(request), request, self.tenant_path)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        if not super().has_change_permission(request, obj):
            return False
        return obj is None or self._administers(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        if not super().has_delete_permission(request, obj):
            return False
        return obj is None or self._administers(request, obj)

    def has_add_permission(self, request: HttpRequest) -> bool:
        if not super().has_add_permission(request):
            return False
        writable = administered_tenant_ids(request)
        return writable is None or bool(writable)  # a new row needs a tenant to be written in

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        """Save only into a tenant the user administers (the target, whatever the form
        offered), and remember the changed fields for the audit row."""
        writable = administered_tenant_ids(request)
        if writable is not None and tenant_id_of(obj, self.tenant_path) not in writable:
            raise PermissionDenied("writing this tenant takes the admin role in it")
        obj._openrath_changed_fields = sorted(form.changed_data)
        super().save_model(request, obj, form, change)

    def log_addition(self, request: HttpRequest, obj: Any, message: Any) -> Any:
        entry = super().log_addition(request, obj, message)
        self._audit_write(request, obj, "add")
        return entry

    def log_change(self, request: HttpRequest, obj: Any, message: Any) -> Any:
        entry = super().log_change(request, obj, message)
        self._audit_write(request, obj, "change")
        return entry

    def log_deletions(self, request: HttpRequest, queryset: Any) -> Any:
        """Called before the rows are deleted: each is audited while its tenant is known."""
        entries = super().log_deletions(request, queryset)
        for obj in queryset:
            self._audit_write(request, obj, "delete")
        return entries

    def _audit_write(self, request: HttpRequest, obj: Any, verb: str) -> None:
        """One audit row for a write made through this admin, under the row's tenant."""
        audit_skip(request)
        opts = self.model._meta
        tenant_id = tenant_id_of(obj, self.tenant_path)
        # A row that refers to the tenant or project being deleted would keep it alive: the
        # object id names it instead.
        deleting_owner = verb == "delete" and isinstance(obj, Tenant | Project)
        project_id = None if deleting_owner else _project_id_of(obj)
        details: dict[str, Any] = {"via": "admin"}
        if verb != "delete":
            details["fields"] = list(getattr(obj, "_openrath_changed_fields", []))
        audit_record(
            actor=admin_actor(request),
            action=f"{opts.model_name}.{verb}",
            outcome="success",
            tenant=None if deleting_owner and isinstance(obj, Tenant) else _tenant(tenant_id),
            project=Project.objects.filter(pk=project_id).first() if project_id else None,
            object_type=str(opts.model_name),
            object_id=str(obj.pk),
            status_code=200,
            request_id=getattr(request, "request_id", ""),
            details=details,
        )

    def _administers(self, request: HttpRequest, obj: Any) -> bool:
        """Editing a row takes the admin role in its tenant, whatever Django model permissions
        the staff member holds (a viewer or operator only looks; superusers may do anything)."""
        user: Any = request.user
        if user.is_superuser:
            return True
        administered = Membership.objects.filter(user_id=user.pk, role="admin").values("tenant_id")
        lookup = f"{self.tenant_path}__in" if self.tenant_path else "pk__in"
        return self.model._default_manager.filter(pk=obj.pk, **{lookup: administered}).exists()

    def get_list_filter(self, request: HttpRequest) -> list[Any]:
        return [
            (f, admin.RelatedOnlyFieldListFilter) if f in SCOPED_FILTER_FIELDS else f
            for f in super().get_list_filter(request)
        ]

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        # A form writes: it offers only what the user may write to (its admin tenants').
        choices = scoped_choices(db_field.related_model, administered_tenant_ids(request))
        if choices is not None:
            kwargs.setdefault("queryset", choices)  # a subclass may narrow it further
            if db_field.name in self.raw_id_fields and "widget" not in kwargs:
                kwargs["widget"] = ScopedRawIdWidget(
                    db_field.remote_field,
                    self.admin_site,
                    using=kwargs.get("using"),
                    allowed=kwargs["queryset"],
                )
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def response_action(
        self, request: HttpRequest, queryset: QuerySet[Any], *args: Any, **kwargs: Any
    ) -> HttpResponse | None:
        """A selection that is not a primary key of this model (a forged form) selects nothing,
        instead of failing the action's query (a 500)."""
        pk = self.model._meta.pk
        assert pk is not None
        try:
            for value in request.POST.getlist(helpers.ACTION_CHECKBOX_NAME):
                pk.to_python(value)
        except ValidationError:
            self.message_user(request, "No such rows: nothing was changed.", messages.WARNING)
            return None
        return super().response_action(request, queryset, *args, **kwargs)

    def formfield_for_manytomany(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        choices = scoped_choices(db_field.related_model, administered_tenant_ids(request))
        if choices is not None:
            kwargs.setdefault("queryset", choices)  # e.g. a token's projects
        return super().formfield_for_manytomany(db_field, request, **kwargs)


def _tenant(tenant_id: Any) -> Tenant | None:
    return Tenant.objects.filter(pk=tenant_id).first() if tenant_id else None


def _project_id_of(obj: Any) -> Any:
    if isinstance(obj, Project):
        return obj.pk
    return getattr(obj, "project_id", None)


def scoped_choices(model: Any, tenant_ids: frozenset[uuid.UUID] | None) -> QuerySet[Any] | None:
    """The rows of ``model`` a staff member of ``tenant_ids`` may pick in a form: tenants,
    projects and users of those tenants only (their names would tell another tenant's);
    ``None`` when not restricted (a superuser, or a model without a tenant)."""
    if tenant_ids is None:
        return None
    if model is Tenant:
        return Tenant.objects.filter(id__in=tenant_ids)
    if model is Project:
        return Project.objects.filter(tenant_id__in=tenant_ids)
    if model is get_user_model():
        members = Membership.objects.filter(tenant_id__in=tenant_ids).values("user_id")
        return get_user_model().objects.filter(pk__in=members)
    return None


class ScopedRawIdWidget(widgets.ForeignKeyRawIdWidget):
    """A raw-id input that names the chosen row only when it is one of ``allowed``: the stock
    widget looks any id up, which would show another tenant's user or project by its id."""

    def __init__(self, *args: Any, allowed: QuerySet[Any], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.allowed = allowed

    def label_and_url_for_value(self, value: Any) -> tuple[str, str]:
        try:
            visible = self.allowed.filter(pk=value).exists()
        except (ValueError, ValidationError):
            visible = False
        return super().label_and_url_for_value(value) if visible else ("", "")


class EngineAdmin(TenantScopedAdmin):
    """Rows the runtime owns: read-only, never added or deleted here; big JSON deferred in
    lists and shown pretty on the detail page."""

    #: JSON fields shown pretty on the detail page and deferred in the list.
    json_fields: ClassVar[tuple[str, ...]] = ()
    #: Other large fields left out of the list query.
    deferred_fields: ClassVar[tuple[str, ...]] = ()

    def __init__(self, model: type[models.Model], admin_site: admin.AdminSite) -> None:
        super().__init__(model, admin_site)
        for name in self.json_fields:
            setattr(self, f"{name}_json", self._json_display(name))

    @staticmethod
    def _json_display(name: str) -> Callable[[Any], SafeString]:
        def show(obj: Any) -> SafeString:
            return pretty_json(getattr(obj, name))

        return admin.display(description=name.replace("_", " "))(show)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        qs = super().get_queryset(request)
        match = request.resolver_match
        if match is not None and (match.url_name or "").endswith("_changelist"):
            deferred = (*self.json_fields, *self.deferred_fields)
            if deferred:
                qs = qs.defer(*deferred)
        return qs

    def get_fields(self, request: HttpRequest, obj: Any = None) -> list[Any]:
        names = []
        for field in self.model._meta.get_fields():
            if not field.concrete or field.many_to_many or isinstance(field, models.AutoField):
                continue
            name = field.name
            names.append(f"{name}_json" if name in self.json_fields else name)
        return names

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return list(self.get_fields(request, obj))

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


# --- Actions -----------------------------------------------------------------------------------


class ReasonForm(forms.Form):
    reason = forms.CharField(
        max_length=500, required=False, widget=forms.TextInput(attrs={"size": 60})
    )

    def __init__(self, *args: Any, required: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["reason"].required = required


def admin_actor(request: HttpRequest) -> str:
    user: Any = request.user
    return f"user:{user.get_username()}"


def admin_principal(request: HttpRequest, tenant: Tenant) -> Principal | None:
    """The admin user acting in ``tenant``: a superuser holds every grant; other staff hold
    their role's grants there (and nothing in a tenant they are not a member of)."""
    user: Any = request.user
    if user.is_superuser:
        return Principal(
            tenant=tenant,
            grants=frozenset(GRANTS),
            project_ids=None,
            actor=admin_actor(request),
            user=user,
            role="superuser",
        )
    return principal_for_user(user, tenant_ref=str(tenant.id))


def _audit_row(
    request: HttpRequest,
    *,
    action: str,
    outcome: str,
    tenant: Tenant,
    project: Project | None,
    object_type: str,
    object_id: str,
    status_code: int,
    details: dict[str, Any],
) -> None:
    audit_record(
        actor=admin_actor(request),
        action=action,
        outcome=outcome,
        tenant=tenant,
        project=project,
        object_type=object_type,
        object_id=object_id,
        status_code=status_code,
        request_id=getattr(request, "request_id", ""),
        details=details,
    )


def run_action(
    modeladmin: admin.ModelAdmin,
    request: HttpRequest,
    rows: Iterable[Any],
    *,
    action: str,
    object_type: str,
    grant: str,
    apply: Callable[[Any, Principal], dict[str, Any] | None],
    details: dict[str, Any] | None = None,
    tenant_of: Callable[[Any], Tenant] = lambda row: row.tenant,
    project_of: Callable[[Any], Project | None] = lambda row: getattr(row, "project", None),
    label: Callable[[Any], str] = str,
) -> None:
    """Apply ``apply(row, principal)`` to each row and audit each outcome (one row each)."""
    audit_skip(request)  # the rows below are the audit trail of this request
    done = 0
    for row in rows:
        tenant = tenant_of(row)
        principal = admin_principal(request, tenant)
        base = {"via": "admin", **(details or {})}

        record = partial(
            _audit_row,
            request,
            action=action,
            tenant=tenant,
            project=project_of(row),
            object_type=object_type,
            object_id=str(row.pk),
        )
        if principal is None or not principal.has_grant(grant):
            record(outcome="denied", status_code=403, details={**base, "required_grant": grant})
            modeladmin.message_user(
                request, f"{label(row)}: your role may not do this (needs {grant}).", messages.ERROR
            )
            continue
        try:
            outcome = apply(row, principal) or {}
        except DomainError as exc:
            record(
                outcome="failure",
                status_code=exc.status_code,
                details={**base, "error_code": exc.code, "error": exc.message},
            )
            modeladmin.message_user(request, f"{label(row)}: {exc.message}", messages.ERROR)
            continue
        record(outcome="success", status_code=200, details={**base, **outcome})
        done += 1
    if done:
        modeladmin.message_user(request, f"{action}: done for {done} row(s).", messages.SUCCESS)


def reason_action(
    modeladmin: admin.ModelAdmin,
    request: HttpRequest,
    queryset: QuerySet[Any],
    *,
    title: str,
    action_name: str,
    required: bool,
    proceed: Callable[[str], None],
    show_request: bool = False,
) -> HttpResponse | None:
    """An action that first asks for a reason on an intermediate page, then ``proceed``s.

    ``show_request``: the page shows each row's request payload and digest (interrupts and
    effects), so the person deciding sees what the decision is bound to."""
    if request.POST.get("apply"):
        form = ReasonForm(request.POST, required=required)
        if form.is_valid():
            proceed(form.cleaned_data["reason"].strip())
            return None
    else:
        form = ReasonForm(required=required)
    opts = modeladmin.model._meta
    context = {
        **modeladmin.admin_site.each_context(request),
        "title": title,
        "opts": opts,
        "items": [
            {
                "obj": obj,
                # Whole: a decision is bound to the digest of all of it, so all of it is shown.
                "request": pretty_json(obj.request, limit=None) if show_request else None,
                "digest": obj.request_digest if show_request else "",
            }
            for obj in queryset[:200]
        ],
        "form": form,
        "action_name": action_name,
        "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        "media": modeladmin.media,
    }
    return TemplateResponse(request, "admin/openrath/action_reason.html", context)
