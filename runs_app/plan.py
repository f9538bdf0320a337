"""The plan compiler: a workflow's ``@step`` / ``@router`` methods -> an immutable :class:`Plan`.

Compiling never runs workflow code: it reads the decorators' metadata, the handlers' signatures
and their source text. The plan is a value (frozen dataclasses and tuples, no handler objects);
:func:`bind_handlers` pairs it with a workflow instance at run time.

Identity
    ``Plan.hash`` is the SHA-256 of ``Plan.canonical_json()``: the sorted, compact JSON of
    ``Plan.to_dict()`` (format version, name, version, entry and every node with its decorator
    arguments, signature facts and ``source_hash``; and the workflow's ``input_schema`` /
    ``state_schema`` when it declares them). ``source_hash`` is the SHA-256 of the
    handler's dedented source, decorator lines included, so any edit to a handler changes the
    plan hash. When the source cannot be read, a fingerprint of the code object is hashed
    instead (bytecode, constants, names), with frozensets sorted and nested code objects
    expanded, so it holds no memory address and no hash-seed-dependent order. ``description`` is
    carried for display only and is not part of the identity (as in OpenRath): rewording it
    does not strand the runs pinned to a plan.

Validated statically, when compiling (:class:`PlanError`, ``ValueError``), in this order:
    1. the workflow has at least one decorated method;
    2. exactly one node has ``entry=True``;
    3. handler signatures: a step accepts ``(self, state, ctx)``; a router accepts
       ``(self, state)`` (OpenRath 2.0) or ``(self, state, ctx)``, recorded as ``takes_ctx``;
       handlers are plain methods, not ``staticmethod`` / ``classmethod``;
    4. every successor names a node;
    5. a ``@step`` has at most one successor (stricter than OpenRath, which fails at run time);
    6. every node is reachable from the entry (cycles are allowed: routers may loop back);
    7. the fan-out rules below.
    Decorator arguments (retry policy, effect class, idempotency key, timeout, successor lists)
    are checked earlier, when decorating, by :mod:`runs_app.authoring`.

Fan-out and join (our extension; OpenRath 2.0 has neither)
    A *branch* of router ``R`` is a successor ``s`` of ``R`` that is a step without
    ``join=True`` and from which following single successors through steps only (no router)
    reaches a step declared ``join=True``: the *chain* ``s -> ... -> J``. Branch chains contain
    no routers, so fan-outs never nest and a branch cannot loop back to its router.
    - Static rule A: all branches of one router reach the same join step ``J`` (otherwise
      "router 'r' successors lead to different join steps: [...]"). The router then *can fan
      out* to ``J``; ``Plan.fanouts`` lists it as ``FanOut(router, join, branches)``.
    - Static rule B: every ``join=True`` step is the join of at least one router.
    - A router successor that is not a branch (its chain ends at a step without successors,
      reaches a router, loops among steps, or is the join step itself) is an ordinary
      successor: the router can still route to it by returning its name.
    Checked at run time, by :meth:`Plan.resolve_route`, against the router's return value:
    - a ``str`` must be one of the router's successors; it is an ordinary transition, even when
      it names a branch or the join step (a join step reached this way runs as a plain step);
    - a ``list`` / ``tuple`` fans out: it must be non-empty, name only declared successors, none
      twice, and every name must be a branch of that router. The branches then run in
      parallel, in the listed order, each from the router's state, until each reaches ``J``;
      ``J`` runs once with all branch results. How the results are handed to ``J`` (and how
      branch steps are checkpointed) is the executor's contract, not the plan's;
    - anything else is refused with OpenRath's message
      ``"router 'r' returned invalid successor <value>"``.

Pure Python: no Django import (an import-linter contract keeps it so).
"""

from __future__ import annotations

import hashlib
import inspect
import json
import re
import textwrap
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Final

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from openrath_project.errors import ValidationFailed
from runs_app.authoring import EffectClass, NodeKind, NodeMeta, RetryPolicy, node_meta
from sessions_app.workflow import Workflow, workflow_name

__all__ = [
    "PLAN_FORMAT",
    "FanOut",
    "Plan",
    "PlanError",
    "PlanNode",
    "Route",
    "RouteError",
    "StateSchemaError",
    "UnknownNode",
    "bind_handlers",
    "call_handler",
    "check_input",
    "check_state",
    "compile_workflow",
    "declared_nodes",
    "source_hash",
]

#: Version of the ``Plan.to_dict()`` layout; part of the hash, so a layout change is visible.
PLAN_FORMAT: Final = 1

_HEX64 = re.compile(r"[0-9a-f]{64}")


class PlanError(ValueError):
    """A workflow declaration (or a stored plan) does not make a valid, deterministic plan."""


class RouteError(ValueError):
    """A router returned something its plan does not allow (checked at run time)."""


class UnknownNode(LookupError):
    """The plan has no node with that id."""


class StateSchemaError(ValueError):
    """A step returned a state that breaks the workflow's ``state_schema``; ``details`` names
    the fields (``{"state.<path>": [messages]}``)."""

    def __init__(self, message: str, details: dict[str, list[str]]) -> None:
        super().__init__(message)
        self.details = details


@dataclass(frozen=True)
class PlanNode:
    """One ``@step`` or ``@router``: everything the runtime needs, nothing executable."""

    id: str
    kind: NodeKind
    successors: tuple[str, ...]
    retry: RetryPolicy
    effects: EffectClass
    idempotency_key: str | None
    timeout_seconds: float | None
    checkpoint: bool
    join: bool
    is_async: bool
    takes_ctx: bool
    source_hash: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "successors": list(self.successors),
            "retry": self.retry.to_dict(),
            "effects": self.effects.value,
            "idempotency_key": self.idempotency_key,
            "timeout_seconds": self.timeout_seconds,
            "checkpoint": self.checkpoint,
            "join": self.join,
            "is_async": self.is_async,
            "takes_ctx": self.takes_ctx,
            "source_hash": self.source_hash,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PlanNode:
        """The node ``to_dict()`` produced; ``PlanError`` on a malformed mapping."""
        try:
            kind = data["kind"]
            if kind not in ("step", "router"):
                raise PlanError(f"node kind must be 'step' or 'router', got {kind!r}")
            source = data["source_hash"]
            if not isinstance(source, str) or not _HEX64.fullmatch(source):
                raise PlanError(f"node {data['id']!r} source_hash must be a SHA-256 hex digest")
            timeout = data["timeout_seconds"]
            return cls(
                id=str(data["id"]),
                kind=kind,
                successors=tuple(str(name) for name in data["successors"]),
                retry=RetryPolicy(**data["retry"]),
                effects=EffectClass.coerce(data["effects"]),
                idempotency_key=data["idempotency_key"],
                timeout_seconds=None if timeout is None else float(timeout),
                checkpoint=bool(data["checkpoint"]),
                join=bool(data["join"]),
                is_async=bool(data["is_async"]),
                takes_ctx=bool(data["takes_ctx"]),
                source_hash=source,
            )
        except PlanError:
            raise
        except (KeyError, TypeError, ValueError) as exc:
            raise PlanError(f"malformed plan node {dict(data)!r}: {exc}") from exc


@dataclass(frozen=True)
class FanOut:
    """A router that can fan out: its ``branches`` (declared order) all meet at ``join``."""

    router: str
    join: str
    branches: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"router": self.router, "join": self.join, "branches": list(self.branches)}


@dataclass(frozen=True)
class Route:
    """Where the run goes after a router: one ordinary successor, or parallel branches."""

    targets: tuple[str, ...]
    join: str | None = None

    @property
    def fans_out(self) -> bool:
        return self.join is not None


@dataclass(frozen=True)
class _ChainEnd:
    """Where following single successors through steps from a router successor stops."""

    kind: str  # "join" | "router" | "end" | "loop"
    node: str

    def describe(self, start: str) -> str:
        if self.kind == "join":
            return f"{start!r} is the join step itself"
        if self.kind == "router":
            return f"its chain reaches router {self.node!r}"
        if self.kind == "end":
            return f"its chain ends at step {self.node!r}"
        return f"its chain loops back at step {self.node!r}"


def _chain_end(by_id: Mapping[str, PlanNode], start: str) -> _ChainEnd:
    seen: set[str] = set()
    current = start
    while True:
        node = by_id[current]
        if node.kind == "router":
            return _ChainEnd("router", current)
        if node.join:
            return _ChainEnd("join", current)
        if not node.successors:
            return _ChainEnd("end", current)
        seen.add(current)
        current = node.successors[0]
        if current in seen:
            return _ChainEnd("loop", current)


@dataclass(frozen=True)
class Plan:
    """A compiled workflow: validated when constructed, immutable, identified by ``hash``."""

    name: str
    version: str
    description: str = field(compare=False)
    entry: str
    nodes: tuple[PlanNode, ...]
    fanouts: tuple[FanOut, ...] = field(init=False, repr=False)
    #: JSON Schemas (Draft 2020-12) of the submitted state and of every state a step returns
    #: (OpenRath's ``input_schema`` / ``state_schema`` workflow attributes); ``None``: unchecked.
    input_schema: Mapping[str, Any] | None = field(default=None, hash=False, repr=False)
    state_schema: Mapping[str, Any] | None = field(default=None, hash=False, repr=False)

    def __post_init__(self) -> None:
        nodes = tuple(sorted(self.nodes, key=lambda node: node.id))
        object.__setattr__(self, "nodes", nodes)
        object.__setattr__(self, "fanouts", _validate(self.entry, nodes))
        for attr in ("input_schema", "state_schema"):
            object.__setattr__(self, attr, _checked_schema(attr, getattr(self, attr)))

    # -- identity ----------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The canonical, JSON-able form that ``hash`` covers (no description, no handlers).

        The schemas are part of it when declared (so changing one is plan drift, as in
        OpenRath); a plan without them has the layout, and the hash, it always had."""
        data: dict[str, Any] = {
            "format": PLAN_FORMAT,
            "name": self.name,
            "version": self.version,
            "entry": self.entry,
            "nodes": [node.to_dict() for node in self.nodes],
        }
        for attr in ("input_schema", "state_schema"):
            value = getattr(self, attr)
            if value is not None:
                data[attr] = value
        return data

    def canonical_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"), ensure_ascii=False)

    @cached_property
    def hash(self) -> str:
        """SHA-256 hex of :meth:`canonical_json`."""
        return hashlib.sha256(self.canonical_json().encode("utf-8")).hexdigest()

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, description: str = "") -> Plan:
        """Rebuild (and re-validate) a plan stored as ``to_dict()``; same value, same hash."""
        if data.get("format") != PLAN_FORMAT:
            raise PlanError(
                f"unsupported plan format {data.get('format')!r}; expected {PLAN_FORMAT}"
            )
        try:
            raw_nodes = data["nodes"]
            name, version, entry = data["name"], data["version"], data["entry"]
        except KeyError as exc:
            raise PlanError(f"stored plan is missing {exc.args[0]!r}") from exc
        if not isinstance(raw_nodes, list) or not raw_nodes:
            raise PlanError("stored plan must have a non-empty list of nodes")
        nodes = tuple(PlanNode.from_dict(node) for node in raw_nodes)
        return cls(
            name=str(name),
            version=str(version),
            description=description,
            entry=str(entry),
            nodes=nodes,
            input_schema=data.get("input_schema"),
            state_schema=data.get("state_schema"),
        )

    # -- lookups -----------------------------------------------------------------------------

    @cached_property
    def _by_id(self) -> dict[str, PlanNode]:
        return {node.id: node for node in self.nodes}

    def node(self, node_id: str) -> PlanNode:
        try:
            return self._by_id[node_id]
        except KeyError:
            raise UnknownNode(f"plan {self.name!r} has no node {node_id!r}") from None

    def fanout(self, router_id: str) -> FanOut | None:
        """The router's fan-out (its branches and join), or ``None`` if it cannot fan out."""
        for fanout in self.fanouts:
            if fanout.router == router_id:
                return fanout
        return None

    def graph(self) -> dict[str, Any]:
        """Nodes and edges for the API and the console's plan graph (JSON-able)."""
        fanouts = {fanout.router: fanout for fanout in self.fanouts}
        nodes: list[dict[str, Any]] = []
        edges: list[dict[str, Any]] = []
        for node in self.nodes:
            fanout = fanouts.get(node.id)
            nodes.append(
                {
                    "id": node.id,
                    "kind": node.kind,
                    "entry": node.id == self.entry,
                    "successors": list(node.successors),
                    "join": node.join,
                    "fanout": None
                    if fanout is None
                    else {"join": fanout.join, "branches": list(fanout.branches)},
                    "effects": node.effects.value,
                    "retry": node.retry.to_dict(),
                    "idempotency_key": node.idempotency_key,
                    "timeout_seconds": node.timeout_seconds,
                    "checkpoint": node.checkpoint,
                    "is_async": node.is_async,
                }
            )
            for target in node.successors:
                edges.append(
                    {
                        "source": node.id,
                        "target": target,
                        "branch": fanout is not None and target in fanout.branches,
                    }
                )
        return {
            "name": self.name,
            "version": self.version,
            "description": self.description,
            "hash": self.hash,
            "entry": self.entry,
            "nodes": nodes,
            "edges": edges,
        }

    # -- run-time checks ---------------------------------------------------------------------

    def resolve_route(self, router_id: str, result: object) -> Route:
        """Check what router ``router_id`` returned and say where the run goes next."""
        node = self.node(router_id)
        if node.kind != "router":
            raise RouteError(f"node {router_id!r} is a step, not a router")
        invalid = f"router {router_id!r} returned invalid successor {result!r}"
        if isinstance(result, str):
            if result not in node.successors:
                raise RouteError(invalid)
            return Route(targets=(result,))
        if not isinstance(result, list | tuple):
            raise RouteError(invalid)
        if not result:
            raise RouteError(f"{invalid}: a fan-out names at least one successor")
        targets: list[str] = []
        for target in result:
            if not isinstance(target, str):
                raise RouteError(f"{invalid}: successor names must be strings")
            if target not in node.successors:
                raise RouteError(
                    f"{invalid}: {target!r} is not one of its successors {list(node.successors)!r}"
                )
            if target in targets:
                raise RouteError(f"{invalid}: {target!r} is listed twice")
            targets.append(target)
        fanout = self.fanout(router_id)
        if fanout is None:
            raise RouteError(
                f"{invalid}: router {router_id!r} cannot fan out, none of its successors "
                "leads through steps to a join=True step"
            )
        for target in targets:
            if target not in fanout.branches:
                reason = _chain_end(self._by_id, target).describe(target)
                raise RouteError(
                    f"{invalid}: {target!r} is not a branch meeting at join step "
                    f"{fanout.join!r} ({reason})"
                )
        return Route(targets=tuple(targets), join=fanout.join)


def _checked_schema(attr: str, schema: object) -> dict[str, Any] | None:
    """A declared schema as a plain JSON dict, checked against the JSON Schema metaschema."""
    if schema is None:
        return None
    if not isinstance(schema, Mapping):
        raise PlanError(f"{attr} must be a JSON Schema object (a dict) or None, got {schema!r}")
    try:
        plain = json.loads(json.dumps(schema, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise PlanError(f"{attr} must be JSON: {exc}") from exc
    try:
        Draft202012Validator.check_schema(plain)
    except SchemaError as exc:
        raise PlanError(f"{attr} is not a valid JSON Schema: {exc.message}") from exc
    return dict(plain)


def _violations(schema: Mapping[str, Any], value: Any) -> dict[str, list[str]]:
    errors = sorted(
        Draft202012Validator(schema).iter_errors(value), key=lambda e: list(e.absolute_path)
    )
    details: dict[str, list[str]] = {}
    for error in errors:
        path = "state" + "".join(f".{part}" for part in error.absolute_path)
        details.setdefault(path, []).append(error.message)
    return details


def check_input(plan: Plan, state: Any) -> None:
    """``ValidationFailed`` (a 400 over HTTP) naming the fields when the submitted ``state``
    breaks the plan's ``input_schema``."""
    if plan.input_schema is None:
        return
    details = _violations(plan.input_schema, state)
    if details:
        first = next(iter(details))
        raise ValidationFailed(
            f"state does not match the workflow's input_schema: {first}: {details[first][0]}",
            details=details,
        )


def check_state(plan: Plan, state: Any, *, step: str) -> None:
    """:class:`StateSchemaError` when the state step ``step`` returned breaks the plan's
    ``state_schema`` (checked before the state is committed)."""
    if plan.state_schema is None:
        return
    details = _violations(plan.state_schema, state)
    if details:
        first = next(iter(details))
        raise StateSchemaError(
            f"the state step {step!r} returned does not match the workflow's state_schema: "
            f"{first}: {details[first][0]}",
            details,
        )


def _validate(entry: str, nodes: tuple[PlanNode, ...]) -> tuple[FanOut, ...]:
    """Check the graph rules of the module docstring; return the routers that can fan out."""
    if not nodes:
        raise PlanError("a plan needs at least one node")
    by_id: dict[str, PlanNode] = {}
    for node in nodes:
        if node.id in by_id:
            raise PlanError(f"workflow node ids must be unique; repeated: {node.id!r}")
        by_id[node.id] = node
    if entry not in by_id:
        raise PlanError(f"entry {entry!r} is not a node of the workflow")
    for node in nodes:
        for successor in node.successors:
            if successor not in by_id:
                raise PlanError(f"node {node.id!r} references unknown successor {successor!r}")
        if node.kind == "router":
            if not node.successors:
                raise PlanError(f"router {node.id!r} requires successors")
            if node.join:
                raise PlanError(f"router {node.id!r} cannot be a join step")
        elif len(node.successors) > 1:
            raise PlanError(f"step {node.id!r} has multiple successors; use @router")

    reachable: set[str] = set()
    pending = [entry]
    while pending:
        current = pending.pop()
        if current not in reachable:
            reachable.add(current)
            pending.extend(by_id[current].successors)
    unreachable = sorted(set(by_id) - reachable)
    if unreachable:
        raise PlanError(f"unreachable workflow nodes: {unreachable}")

    fanouts: list[FanOut] = []
    for node in nodes:
        if node.kind != "router":
            continue
        branches: list[str] = []
        joins: set[str] = set()
        for successor in node.successors:
            end = _chain_end(by_id, successor)
            if end.kind == "join" and end.node != successor:
                branches.append(successor)
                joins.add(end.node)
        if len(joins) > 1:
            raise PlanError(
                f"router {node.id!r} successors lead to different join steps: {sorted(joins)}"
            )
        if branches:
            fanouts.append(FanOut(router=node.id, join=joins.pop(), branches=tuple(branches)))
    joined = {fanout.join for fanout in fanouts}
    for node in nodes:
        if node.join and node.id not in joined:
            raise PlanError(
                f"join step {node.id!r} is not where any router's branches meet: no router "
                "successor leads to it through steps only"
            )
    return tuple(fanouts)


# -- compiling --------------------------------------------------------------------------------


def declared_nodes(workflow: type | object) -> list[tuple[str, Callable[..., Any], NodeMeta]]:
    """``(attribute, function, metadata)`` of every decorated method, inherited ones included.

    Sorted by attribute name. Reads the classes' ``__dict__`` along the MRO (a subclass
    attribute shadows a base one, as ``getattr`` would) without calling any descriptor.
    """
    cls = workflow if isinstance(workflow, type) else type(workflow)
    seen: set[str] = set()
    found: list[tuple[str, Callable[..., Any], NodeMeta]] = []
    for klass in cls.__mro__:
        for attr, value in vars(klass).items():
            if attr in seen:
                continue
            seen.add(attr)
            if isinstance(value, staticmethod | classmethod):
                if _meta(attr, value) is not None or _meta(attr, value.__func__) is not None:
                    raise PlanError(
                        f"node {attr!r} must be a plain method, not a "
                        f"{type(value).__name__}: def {attr}(self, state, ctx)"
                    )
                continue
            meta = _meta(attr, value)
            if meta is not None:
                found.append((attr, value, meta))
    found.sort(key=lambda item: item[0])
    return found


def _meta(attr: str, value: object) -> NodeMeta | None:
    try:
        return node_meta(value)
    except TypeError as exc:
        raise PlanError(f"node {attr!r}: {exc}") from exc


def compile_workflow(workflow: type[Workflow] | Workflow) -> Plan:
    """Compile a workflow class (or an instance's class) into a validated :class:`Plan`."""
    cls = workflow if isinstance(workflow, type) else type(workflow)
    try:
        name = workflow_name(cls)
    except (TypeError, ValueError) as exc:
        raise PlanError(str(exc)) from exc
    version = str(getattr(cls, "workflow_version", "1"))
    description = str(getattr(workflow, "description", "") or "")
    declared = declared_nodes(cls)
    if not declared:
        raise PlanError(f"workflow {name} has no @step methods")
    entries = [attr for attr, _function, meta in declared if meta.entry]
    if len(entries) != 1:
        raise PlanError(f"workflow must declare exactly one entrypoint; found {len(entries)}")
    nodes = tuple(_plan_node(attr, function, meta) for attr, function, meta in declared)
    return Plan(
        name=name,
        version=version,
        description=description,
        entry=entries[0],
        nodes=nodes,
        input_schema=getattr(workflow, "input_schema", None),
        state_schema=getattr(workflow, "state_schema", None),
    )


def _plan_node(attr: str, function: Callable[..., Any], meta: NodeMeta) -> PlanNode:
    return PlanNode(
        id=attr,
        kind=meta.kind,
        successors=meta.successors,
        retry=meta.retry,
        effects=meta.effects,
        idempotency_key=meta.idempotency_key,
        timeout_seconds=meta.timeout_seconds,
        checkpoint=meta.checkpoint,
        join=meta.join,
        is_async=inspect.iscoroutinefunction(function),
        takes_ctx=_takes_ctx(attr, function, meta.kind),
        source_hash=source_hash(function),
    )


def _takes_ctx(attr: str, function: Callable[..., Any], kind: NodeKind) -> bool:
    """Whether the handler is called ``(state, ctx)``; refuse signatures that fit neither."""
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):  # builtins and C callables: trust the author
        return True
    positional = [
        parameter
        for parameter in signature.parameters.values()
        if parameter.kind in (parameter.POSITIONAL_ONLY, parameter.POSITIONAL_OR_KEYWORD)
    ]
    required = [parameter for parameter in positional if parameter.default is parameter.empty]
    variadic = any(
        parameter.kind is parameter.VAR_POSITIONAL for parameter in signature.parameters.values()
    )
    keyword_required = [
        parameter.name
        for parameter in signature.parameters.values()
        if parameter.kind is parameter.KEYWORD_ONLY and parameter.default is parameter.empty
    ]

    def accepts(count: int) -> bool:  # count includes self
        return (
            not keyword_required
            and len(required) <= count
            and (variadic or count <= len(positional))
        )

    if kind == "step":
        if not accepts(3):
            raise PlanError(f"step {attr!r} must be defined as def {attr}(self, state, ctx)")
        return True
    if accepts(3):
        return True
    if accepts(2):
        return False
    raise PlanError(
        f"router {attr!r} must be defined as def {attr}(self, state) "
        f"or def {attr}(self, state, ctx)"
    )


def source_hash(function: Callable[..., Any]) -> str:
    """SHA-256 hex of the handler's dedented source; a code fingerprint when there is none."""
    try:
        material = textwrap.dedent(inspect.getsource(function)).strip()
    except (OSError, TypeError):
        code = getattr(inspect.unwrap(function), "__code__", None)
        if not isinstance(code, types.CodeType):
            raise PlanError(
                f"cannot fingerprint handler {getattr(function, '__qualname__', function)!r}: "
                "it has neither source nor a code object"
            ) from None
        material = json.dumps(_code_fingerprint(code), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(material.encode("utf-8")).hexdigest()


def _code_fingerprint(code: types.CodeType) -> dict[str, Any]:
    return {
        "name": code.co_name,
        "bytecode": code.co_code.hex(),
        "constants": [_stable_constant(constant) for constant in code.co_consts],
        "names": list(code.co_names),
        "varnames": list(code.co_varnames),
        "argcount": code.co_argcount,
        "posonlyargcount": code.co_posonlyargcount,
        "kwonlyargcount": code.co_kwonlyargcount,
    }


def _stable_constant(value: object) -> Any:
    """A JSON-able form of a code constant with no address and no hash-seed-dependent order."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float | complex):
        return {"number": repr(value)}
    if isinstance(value, bytes):
        return {"bytes": value.hex()}
    if isinstance(value, tuple):
        return {"tuple": [_stable_constant(item) for item in value]}
    if isinstance(value, frozenset):
        items = (
            json.dumps(_stable_constant(item), sort_keys=True, separators=(",", ":"))
            for item in value
        )
        return {"frozenset": sorted(items)}
    if isinstance(value, types.CodeType):
        return {"code": _code_fingerprint(value)}
    if value is Ellipsis:
        return {"ellipsis": True}
    return {"repr": repr(value)}


# -- running ----------------------------------------------------------------------------------


def bind_handlers(plan: Plan, workflow: object) -> dict[str, Callable[..., Any]]:
    """The bound handler of every plan node on ``workflow`` (an instance), keyed by node id.

    Checks that the instance is of the plan's workflow and that each node is still a decorated
    method of the same kind; whether the code still hashes the same is the caller's drift check
    (compare ``compile_workflow(type(workflow)).hash`` with the pinned hash).
    """
    if isinstance(workflow, type):
        raise TypeError("bind_handlers needs a workflow instance, not a class")
    actual = workflow_name(workflow)
    if actual != plan.name:
        raise PlanError(f"workflow {actual} cannot run plan {plan.name}")
    handlers: dict[str, Callable[..., Any]] = {}
    for node in plan.nodes:
        function = getattr(type(workflow), node.id, None)
        meta = None if function is None else _meta(node.id, function)
        if meta is None or meta.kind != node.kind:
            raise PlanError(
                f"workflow {plan.name} has no @{node.kind} method {node.id!r} for its plan"
            )
        handlers[node.id] = getattr(workflow, node.id)
    return handlers


def call_handler(node: PlanNode, handler: Callable[..., Any], state: Any, ctx: object) -> Any:
    """Call a bound handler the way its signature asks: ``(state, ctx)`` or ``(state)``.

    ``ctx`` is handed to the handler as it is (the executor's ``StepContext``); the plan never
    reads it. Returns what the handler returns; for an async handler that is the coroutine to
    await.
    """
    if node.takes_ctx:
        return handler(state, ctx)
    return handler(state)
