"""The workflow registry: names -> (class, compiled plan), filled by discovery or explicitly.

Discovery imports the modules it is given (the caller reads ``OPENRATH_WORKFLOW_MODULES``;
this module never reads Django settings) and registers every subclass of
:class:`~sessions_app.workflow.Workflow` *defined in* one of those modules (``cls.__module__`` is
the listed module; classes merely imported there are not picked up, so shared base classes can
live in a module that is not listed) that declares at least one ``@step`` / ``@router`` method.
Each is compiled; the name is :func:`~sessions_app.workflow.workflow_name` (``name`` or
``"{module}.{qualname}"``).

A discovery is all-or-nothing: an import failure, a workflow that does not compile or a
duplicate name raises :class:`RegistryError` and registers nothing from that call.

State lives in :class:`WorkflowRegistry` instances; :data:`default_registry` is the one
process-wide instance the module-level helpers use. Pure Python: no Django import.
"""

from __future__ import annotations

import importlib
import inspect
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from types import ModuleType
from typing import TypeVar

from openrath_project.errors import ValidationFailed
from runs_app.plan import Plan, PlanError, compile_workflow, declared_nodes
from sessions_app.workflow import Workflow, workflow_name

__all__ = [
    "INPUT_POLICIES",
    "RegisteredWorkflow",
    "RegistryError",
    "UnknownWorkflow",
    "WorkflowRegistry",
    "default_registry",
    "discover",
    "get",
    "register",
]

W = TypeVar("W", bound=type[Workflow] | Workflow)

#: What a run submitted on a session with an active run does (docs/concurrent-input.md); the
#: same tuple as ``runs_app.models.INPUT_POLICIES`` (this module imports no Django).
INPUT_POLICIES = ("reject", "enqueue", "interrupt", "rollback")
#: The default of a workflow that declares none.
DEFAULT_INPUT_POLICY = "reject"


class RegistryError(Exception):
    """Workflows could not be registered: an import failure, a bad workflow, a duplicate name."""


class UnknownWorkflow(ValidationFailed, KeyError):
    """No workflow is registered under that name (a 400 for API callers, a ``KeyError`` too)."""

    code = "unknown_workflow"

    def __init__(self, name: str) -> None:
        super().__init__(f"unknown workflow {name!r}", details={"workflow": name})
        self.name = name

    def __str__(self) -> str:  # KeyError would quote the message
        return self.message


@dataclass(frozen=True)
class RegisteredWorkflow:
    """A registered workflow: its name, its class, the plan its code compiles to and, when it
    was registered as an instance (OpenRath's way: constructor arguments matter), that
    instance. :meth:`build` is what a worker executes."""

    name: str
    cls: type[Workflow]
    plan: Plan
    instance: Workflow | None = None
    #: The concurrent-input policy of a run submitted without one: the class's
    #: ``input_policy`` attribute, or ``register(..., input_policy=)``, else ``reject``.
    input_policy: str = DEFAULT_INPUT_POLICY

    def build(self) -> Workflow:
        """The object whose handlers run: the registered instance, else a new ``cls()``."""
        if self.instance is not None:
            return self.instance
        return self.cls()


def check_input_policy(value: object, *, where: str) -> str:
    """``value`` if it names a concurrent-input policy; ``RegistryError`` otherwise."""
    if not isinstance(value, str) or value not in INPUT_POLICIES:
        raise RegistryError(
            f"{where}: input_policy must be one of {', '.join(INPUT_POLICIES)}, got {value!r}"
        )
    return value


def _declared_policy(cls: type[Workflow]) -> str:
    """The workflow class's ``input_policy`` attribute (default ``reject``), checked."""
    declared = getattr(cls, "input_policy", None)
    if declared is None:
        return DEFAULT_INPUT_POLICY
    return check_input_policy(declared, where=f"workflow {_qualified(cls)}")


def _check_constructible(cls: type[Workflow]) -> None:
    """Refuse a class the runtime could not build with ``cls()`` (it needs arguments)."""
    try:
        signature = inspect.signature(cls)
    except (TypeError, ValueError):  # a signature Python cannot read: let building tell
        return
    try:
        signature.bind()
    except TypeError as exc:
        raise RegistryError(
            f"workflow {_qualified(cls)} cannot be constructed without arguments ({exc}); "
            "register an instance instead: register(MyWorkflow(...)) or "
            "LocalRuntime.register(MyWorkflow(...))"
        ) from None


def _qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _has_nodes(cls: type) -> bool:
    try:
        return bool(declared_nodes(cls))
    except PlanError:
        return True  # let compiling report what is wrong with it


class WorkflowRegistry:
    """Registered workflows by name. Thread-safe; registration is idempotent per class."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._workflows: dict[str, RegisteredWorkflow] = {}

    # -- writes ------------------------------------------------------------------------------

    def register(
        self, workflow: type[Workflow] | Workflow, *, input_policy: str | None = None
    ) -> RegisteredWorkflow:
        """Compile and register a workflow class or instance.

        A class is built with ``cls()`` by the worker, so one that needs constructor arguments
        is refused (``RegistryError``): register an instance of it. Registering the same class
        again is a no-op (unless ``input_policy`` changes its default); registering an instance
        (again) makes that instance the one the workers run. ``PlanError`` if it does not
        compile, ``RegistryError`` if its name is taken by another class or ``input_policy``
        (default: the class's ``input_policy`` attribute, else ``reject``) is not a policy.
        """
        instance: Workflow | None = None
        if isinstance(workflow, Workflow):
            instance, cls = workflow, type(workflow)
        elif isinstance(workflow, type) and issubclass(workflow, Workflow):
            cls = workflow
        else:
            raise TypeError(f"register() takes a Workflow subclass or instance, got {workflow!r}")
        policy = (
            _declared_policy(cls)
            if input_policy is None
            else check_input_policy(input_policy, where=f"register({_qualified(cls)})")
        )
        entry = RegisteredWorkflow(
            name=workflow_name(cls),
            cls=cls,
            plan=compile_workflow(cls),
            instance=instance,
            input_policy=policy,
        )
        if instance is None:
            _check_constructible(cls)
        with self._lock:
            self._check_free([entry])
            current = self._workflows.get(entry.name)
            if current is None or instance is not None:
                self._workflows[entry.name] = entry
            elif input_policy is not None and current.input_policy != policy:
                self._workflows[entry.name] = replace(current, input_policy=policy)
            return self._workflows[entry.name]

    def discover(self, modules: Iterable[str]) -> dict[str, RegisteredWorkflow]:
        """Import ``modules`` and register their workflows; returns what they define, by name.

        Blank module names are ignored and repeated ones imported once, so a comma-separated
        setting can be passed through ``str.split(",")`` as is.
        """
        names = list(dict.fromkeys(name.strip() for name in modules if name.strip()))
        found: list[RegisteredWorkflow] = []
        for module_name in names:
            module = _import(module_name)
            for cls in _workflow_classes(module):
                try:
                    plan = compile_workflow(cls)
                except PlanError as exc:
                    raise RegistryError(
                        f"workflow {_qualified(cls)} in module {module_name!r} does not "
                        f"compile: {exc}"
                    ) from exc
                try:
                    _check_constructible(cls)
                except RegistryError as exc:
                    raise RegistryError(f"in module {module_name!r}: {exc}") from None
                try:
                    policy = _declared_policy(cls)
                except RegistryError as exc:
                    raise RegistryError(f"in module {module_name!r}: {exc}") from None
                found.append(
                    RegisteredWorkflow(name=plan.name, cls=cls, plan=plan, input_policy=policy)
                )
        by_name: dict[str, RegisteredWorkflow] = {}
        for entry in found:
            other = by_name.get(entry.name)
            if other is not None:
                raise RegistryError(_duplicate_message(entry.name, other.cls, entry.cls))
            by_name[entry.name] = entry
        with self._lock:
            self._check_free(found)
            for entry in found:
                self._workflows.setdefault(entry.name, entry)
            return {entry.name: self._workflows[entry.name] for entry in found}

    def _check_free(self, entries: Iterable[RegisteredWorkflow]) -> None:
        """Refuse names held by another class. Caller holds ``_lock``."""
        for entry in entries:
            existing = self._workflows.get(entry.name)
            if existing is not None and existing.cls is not entry.cls:
                raise RegistryError(_duplicate_message(entry.name, existing.cls, entry.cls))

    def clear(self) -> None:
        with self._lock:
            self._workflows.clear()

    # -- reads -------------------------------------------------------------------------------

    def get(self, name: str) -> RegisteredWorkflow:
        """The workflow registered as ``name``; :class:`UnknownWorkflow` if there is none."""
        with self._lock:
            entry = self._workflows.get(name)
            if entry is None:
                raise UnknownWorkflow(name)
            return entry

    def names(self) -> list[str]:
        with self._lock:
            return sorted(self._workflows)

    def all(self) -> list[RegisteredWorkflow]:
        """Every registered workflow, sorted by name."""
        with self._lock:
            return [self._workflows[name] for name in sorted(self._workflows)]

    def __contains__(self, name: object) -> bool:
        with self._lock:
            return name in self._workflows

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        with self._lock:
            return len(self._workflows)


def _duplicate_message(name: str, first: type, second: type) -> str:
    return (
        f"duplicate workflow name {name!r}: {_qualified(first)} and {_qualified(second)}; "
        "give one of them another `name`"
    )


#: Where a newcomer reads how a workflow module is written, placed and registered.
REGISTERING_DOC = "docs/authoring.md, 'Registering a workflow'"


def _import(module_name: str) -> ModuleType:
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if module_name == missing or module_name.startswith(missing + "."):
            # The module itself (or its package) is not on the path: say how to put it there.
            raise RegistryError(
                f"cannot import workflow module {module_name!r}: no module named {missing!r} "
                "on the Python path. Put the directory that holds it on PYTHONPATH (or install "
                "it into the project's environment), then "
                f"restart the server and its workers; see {REGISTERING_DOC}"
            ) from exc
        raise RegistryError(
            f"cannot import workflow module {module_name!r}: it imports {missing!r}, which is "
            "not installed in this environment"
        ) from exc
    except Exception as exc:  # any other failure while importing user code is reported the same
        raise RegistryError(
            f"cannot import workflow module {module_name!r}: {type(exc).__name__}: {exc}"
        ) from exc


def _workflow_classes(module: ModuleType) -> list[type[Workflow]]:
    """Workflow subclasses defined in ``module`` with decorated methods, in definition order."""
    classes: list[type[Workflow]] = []
    for value in vars(module).values():
        if (
            inspect.isclass(value)
            and issubclass(value, Workflow)
            and value is not Workflow
            and value.__module__ == module.__name__
            and _has_nodes(value)
        ):
            classes.append(value)
    return classes


#: The process-wide registry the module-level helpers (and the runtime) use.
default_registry = WorkflowRegistry()


def _or_default(registry: WorkflowRegistry | None) -> WorkflowRegistry:
    # Not `registry or default_registry`: an empty registry is falsy (it has __len__).
    return default_registry if registry is None else registry


def discover(
    modules: Iterable[str], *, registry: WorkflowRegistry | None = None
) -> dict[str, RegisteredWorkflow]:
    """:meth:`WorkflowRegistry.discover` on ``registry`` (default: :data:`default_registry`)."""
    return _or_default(registry).discover(modules)


def register(
    cls: W, *, registry: WorkflowRegistry | None = None, input_policy: str | None = None
) -> W:
    """Register ``cls`` (a class or an instance) and return it unchanged, so it also works as
    a class decorator. ``input_policy``: the workflow's default concurrent-input policy."""
    _or_default(registry).register(cls, input_policy=input_policy)
    return cls


def get(name: str, *, registry: WorkflowRegistry | None = None) -> RegisteredWorkflow:
    """The workflow registered as ``name``; :class:`UnknownWorkflow` if there is none."""
    return _or_default(registry).get(name)
