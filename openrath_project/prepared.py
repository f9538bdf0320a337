"""Querysets compiled to SQL once per process and run again with other values.

Building a queryset and compiling it (``filter`` -> ``Query`` -> ``SQLCompiler.as_sql``) costs
0.3-0.5 ms of CPU per statement, several times what PostgreSQL spends answering a primary-key
lookup; a run POST spent about a quarter of its CPU there (issue 20, ``benchmarks/api_latency.py``).
A hot read whose query has one shape (the same filters; only the values differ) is declared once
as a :class:`PreparedQuery`: the ORM builds and compiles it, on first use, with sample values,
and every later call sends the same SQL with the caller's values and builds the instances as the
queryset would (the compiler's select list, converters and ``select_related`` populators).

The queryset is still written with the ORM (``Model.objects.for_principal(principal)...``), so
the scope, the columns and the SQL are the ORM's own; the mechanism only learns where each value
went among the parameters. It compiles twice with different samples and refuses (an
``ImproperlyConfigured``) a query whose SQL or parameter places differ between the two, and a
value it cannot find among the parameters (a lookup that rewrites it, ``icontains`` say): such a
query stays an ordinary queryset.

The arguments a query takes are declared by kind: ``uuid.UUID``, ``str``, ``int``, or
:class:`~openrath_project.tenancy.principal.Principal` (its tenant and project scope; a
restricted principal's ``IN`` list has one compiled variant per number of projects). Not
supported (refused on compiling): ``prefetch_related``, ``values()`` and other non-model
iterables, querysets with known related objects.
"""

from __future__ import annotations

import secrets
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from django.core.exceptions import EmptyResultSet, ImproperlyConfigured
from django.db import connections, models
from django.db.models.query import ModelIterable, QuerySet, get_related_populators
from django.db.transaction import TransactionManagementError

from openrath_project.tenancy.principal import Principal

M = TypeVar("M", bound=models.Model)

#: A parameter's source: an argument's name and, for a principal, which of its values.
_Source = tuple[str, str, int]


@dataclass(frozen=True)
class _Slot:
    """One SQL parameter: a caller's value (``source``, in ``form``) or a constant."""

    source: _Source | None
    form: Callable[[Any], Any]
    constant: Any = None


@dataclass(frozen=True)
class _Compiled:
    alias: str
    sql: str
    slots: tuple[_Slot, ...]
    for_update: bool
    col_count: int
    model: type[models.Model]
    init_list: tuple[str, ...]
    model_span: tuple[int, int]
    converters: tuple[tuple[int, tuple[Callable[..., Any], ...], Any], ...]
    populators: tuple[Any, ...]
    annotations: tuple[tuple[str, int], ...]


def _as_is(value: Any) -> Any:
    return value


def _hex(value: uuid.UUID) -> str:
    return value.hex


def _forms(value: Any) -> list[Callable[[Any], Any]]:
    """How a sample value may appear among the parameters (a UUID as itself on PostgreSQL, as
    its hex on SQLite)."""
    forms: list[Callable[[Any], Any]] = [_as_is]
    if isinstance(value, uuid.UUID):
        forms += [_hex, str]
    return forms


def _sample(kind: Any, variant: int) -> Any:
    if kind is uuid.UUID:
        return uuid.uuid4()
    if kind is str:
        return f"prepared-{secrets.token_hex(8)}"
    if kind is int:
        return 2**40 + secrets.randbelow(2**40)
    if kind is Principal:
        # An unsaved tenant: only its id is read, by the scope's filter.
        from openrath_project.tenancy.models import Tenant

        projects = None if variant < 0 else frozenset(uuid.uuid4() for _ in range(variant))
        return Principal(
            tenant=Tenant(id=uuid.uuid4()), grants=frozenset(), project_ids=projects, actor=""
        )
    raise ImproperlyConfigured(f"PreparedQuery: no sample for an argument of kind {kind!r}")


def _sources(name: str, value: Any) -> list[tuple[_Source, Any]]:
    """The values an argument contributes to the parameters, each with its source."""
    if isinstance(value, Principal):
        found: list[tuple[_Source, Any]] = [((name, "tenant", 0), value.tenant_id)]
        for i, project_id in enumerate(list(value.project_ids or ())):
            found.append(((name, "project", i), project_id))
        return found
    return [((name, "", 0), value)]


def _value_of(source: _Source, values: dict[str, Any]) -> Any:
    name, part, index = source
    value = values[name]
    if part == "tenant":
        return value.tenant_id
    if part == "project":
        return list(value.project_ids)[index]
    return value


def _variant(kinds: dict[str, Any], values: dict[str, Any]) -> tuple[int, ...]:
    """Which compiled variant a call needs: a principal's project count (-1: unrestricted)."""
    return tuple(
        -1 if values[name].project_ids is None else len(values[name].project_ids)
        for name, kind in kinds.items()
        if kind is Principal
    )


class PreparedQuery(Generic[M]):
    """A queryset of one shape, compiled once per database and variant, run with new values.

    ``build`` takes the declared arguments by keyword and returns a queryset of ``model``:
    ``PreparedQuery(Session, lambda session_id: ..., session_id=uuid.UUID)``. :meth:`fetch`
    returns its rows as model instances (a list), :meth:`first` the first of them as
    ``QuerySet.first`` would, :meth:`get` the one row as ``QuerySet.get``."""

    def __init__(self, model: type[M], build: Callable[..., QuerySet[M]], **kinds: Any) -> None:
        self._model = model
        self._build = build
        self._kinds = kinds
        self._compiled: dict[tuple[Any, ...], _Compiled | None] = {}
        self._lock = threading.Lock()

    def fetch(self, **values: Any) -> list[M]:
        return self._run(False, values)

    def first(self, **values: Any) -> M | None:
        found = self._run(True, values)
        return found[0] if found else None

    def get(self, **values: Any) -> M:
        """The one row, as ``QuerySet.get``: the model's ``DoesNotExist`` without one,
        ``MultipleObjectsReturned`` with more (every row is read: for lookups of one row)."""
        found = self._run(False, values)
        if len(found) == 1:
            return found[0]
        model: Any = self._model
        if not found:
            raise model.DoesNotExist(f"{model.__name__} matching query does not exist.")
        raise model.MultipleObjectsReturned(f"get() returned {len(found)} {model.__name__} rows")

    # --- compiling -------------------------------------------------------------------------

    def _queryset(self, first: bool, samples: dict[str, Any]) -> QuerySet[M]:
        queryset = self._build(**samples)
        if queryset.model is not self._model:
            raise ImproperlyConfigured(
                f"PreparedQuery of {self._model.__name__}: the queryset is of "
                f"{queryset.model.__name__}"
            )
        if first:  # what QuerySet.first() runs
            queryset = (queryset if queryset.ordered else queryset.order_by("pk"))[:1]
        return queryset

    def _compile_once(
        self, first: bool, variant: tuple[int, ...]
    ) -> tuple[QuerySet[M], Any, str, tuple[_Slot, ...]]:
        principals = iter(variant)
        samples = {
            name: _sample(kind, next(principals) if kind is Principal else 0)
            for name, kind in self._kinds.items()
        }
        queryset = self._queryset(first, samples)
        internals: Any = queryset  # attributes the stubs do not declare
        if (
            internals._iterable_class is not ModelIterable
            or internals._prefetch_related_lookups
            or internals._known_related_objects
        ):
            raise ImproperlyConfigured(
                "PreparedQuery: only model querysets without prefetch_related or known related "
                "objects can be prepared"
            )
        compiler = queryset.query.get_compiler(using=queryset.db)
        # A FOR UPDATE query compiles only inside a transaction (as_sql refuses it outside):
        # where its first call is, as every later call's check (in _run) requires.
        try:
            sql, params = compiler.as_sql()
        except EmptyResultSet:  # e.g. a principal restricted to no project: no row, no query
            return queryset, compiler, "", ()
        candidates = [
            (source, value)
            for name in self._kinds
            for source, value in _sources(name, samples[name])
        ]
        slots = []
        seen: set[_Source] = set()
        for param in params:
            slot = _Slot(source=None, form=_as_is, constant=param)
            for source, value in candidates:
                form = next((f for f in _forms(value) if _same(f(value), param)), None)
                if form is not None:
                    slot = _Slot(source=source, form=form)
                    seen.add(source)
                    break
            slots.append(slot)
        missing = {source for source, _ in candidates} - seen
        if missing:
            raise ImproperlyConfigured(
                f"PreparedQuery: the values of {sorted(s[0] for s in missing)} are not among the "
                "query's parameters as given (a lookup that rewrites them cannot be prepared)"
            )
        return queryset, compiler, sql, tuple(slots)

    def _compile(self, first: bool, variant: tuple[int, ...]) -> _Compiled | None:
        """The compiled query; ``None`` for a query that matches nothing whatever the values."""
        queryset, compiler, sql, slots = self._compile_once(first, variant)
        _, _, again, slots_again = self._compile_once(first, variant)
        if again != sql or [s.source for s in slots] != [s.source for s in slots_again]:
            raise ImproperlyConfigured(
                "PreparedQuery: the query's SQL or parameters change with the values given; "
                "it has no single shape to prepare"
            )
        if not sql:
            return None
        select, klass_info = compiler.select, compiler.klass_info
        fields = [s[0] for s in select[0 : compiler.col_count]]
        start, end = klass_info["select_fields"][0], klass_info["select_fields"][-1] + 1
        return _Compiled(
            alias=queryset.db,
            sql=sql,
            slots=slots,
            for_update=bool(queryset.query.select_for_update),
            col_count=compiler.col_count,
            model=klass_info["model"],
            init_list=tuple(f[0].target.attname for f in select[start:end]),
            model_span=(start, end),
            converters=tuple(
                (i, tuple(convs), expression)
                for i, (convs, expression) in compiler.get_converters(fields).items()
            ),
            # Django 5.2's signature (the stubs describe 6's, with a fetch mode)
            populators=tuple(get_related_populators(klass_info, select, queryset.db)),  # type: ignore[call-arg]
            annotations=tuple(compiler.annotation_col_map.items()),
        )

    # --- running ---------------------------------------------------------------------------

    def _run(self, first: bool, values: dict[str, Any]) -> list[M]:
        if set(values) != set(self._kinds):
            raise TypeError(f"PreparedQuery takes {sorted(self._kinds)}, got {sorted(values)}")
        for name, kind in self._kinds.items():
            if not isinstance(values[name], kind):
                raise TypeError(f"PreparedQuery: {name} must be a {kind.__name__}")
        variant = _variant(self._kinds, values)
        key = (first, variant)
        if key not in self._compiled:
            with self._lock:
                if key not in self._compiled:
                    self._compiled[key] = self._compile(first, variant)
        compiled = self._compiled[key]
        if compiled is None:
            return []
        params = [
            slot.constant if slot.source is None else slot.form(_value_of(slot.source, values))
            for slot in compiled.slots
        ]
        connection = connections[compiled.alias]
        if compiled.for_update and connection.get_autocommit():
            raise TransactionManagementError(
                "select_for_update cannot be used outside of a transaction."
            )
        with connection.cursor() as cursor:
            cursor.execute(compiled.sql, params)
            rows = cursor.fetchall()
        return [self._instance(compiled, row, connection) for row in rows]

    @staticmethod
    def _instance(compiled: _Compiled, row: tuple[Any, ...], connection: Any) -> Any:
        values = list(row[: compiled.col_count])
        for i, convs, expression in compiled.converters:
            value = values[i]
            for convert in convs:
                value = convert(value, expression, connection)
            values[i] = value
        start, end = compiled.model_span
        obj = compiled.model.from_db(connection.alias, list(compiled.init_list), values[start:end])
        for populator in compiled.populators:
            populator.populate(values, obj)
        for name, position in compiled.annotations:
            setattr(obj, name, values[position])
        return obj


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b
