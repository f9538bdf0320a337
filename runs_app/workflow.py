"""The ``Workflow`` base class users subclass (``flow.Workflow``), and workflow identity.

Like ``torch.nn.Module`` (and OpenRath's ``rath.flow.Workflow``), a workflow remembers the child
workflows assigned to its attributes. Durable workflows declare ``@step`` / ``@router`` methods
and are compiled by :func:`runs_app.plan.compile_workflow`; eager ones implement ``forward``.

Differences from OpenRath 2.0, on purpose:

- ``name`` (class attribute) names the workflow for the registry and the API; without it the
  identity is OpenRath's ``"{module}.{qualname}"``;
- a ``description`` class attribute is kept: ``__init__`` only overrides it when given one;
- ``named_children()`` keeps assignment order (as ``nn.Module`` does) instead of sorting.

Pure Python: no Django import.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar

__all__ = ["Workflow", "workflow_name"]


class Workflow:
    """Base class of every workflow: durable (``@step`` methods), eager (``forward``), or both."""

    name: ClassVar[str | None] = None
    description: str = ""
    workflow_version: str = "1"

    _children: dict[str, Workflow]

    def __init__(self, description: str | None = None) -> None:
        if "_children" not in self.__dict__:
            object.__setattr__(self, "_children", {})
        if description is not None:
            self.description = description

    def _child_registry(self) -> dict[str, Workflow]:
        # Subclasses that forget super().__init__() still track their children.
        children: dict[str, Workflow] | None = self.__dict__.get("_children")
        if children is None:
            children = {}
            object.__setattr__(self, "_children", children)
        return children

    def __setattr__(self, attr: str, value: Any) -> None:
        children = self._child_registry()
        if isinstance(value, Workflow):
            children[attr] = value
        else:
            children.pop(attr, None)
        super().__setattr__(attr, value)

    def __delattr__(self, attr: str) -> None:
        self._child_registry().pop(attr, None)
        super().__delattr__(attr)

    def named_children(self) -> tuple[tuple[str, Workflow], ...]:
        """``(attribute, child)`` for every child workflow, in assignment order."""
        return tuple(self._child_registry().items())

    def children(self) -> Iterator[Workflow]:
        """The child workflows, in assignment order."""
        for _attr, child in self.named_children():
            yield child

    def modules(self) -> list[Workflow]:
        """This workflow followed by every descendant (pre-order, depth-first)."""
        found: list[Workflow] = [self]
        for child in self.children():
            found.extend(child.modules())
        return found

    def forward(self, session: Any) -> Any:
        """Eager composition: transform ``session`` and return the resulting session."""
        raise NotImplementedError(
            f"{type(self).__qualname__}.forward(session) is not implemented: define "
            "forward(self, session) to call this workflow eagerly, or start a durable run "
            "of its @step methods"
        )

    def __call__(self, session: Any) -> Any:
        """Run ``forward`` tagged with this workflow's call path (``Outer/Inner``): the
        sessions, edges and chunks written inside record which workflow produced them."""
        # Imported here: sessions_app.composition imports this module. Both stay free of Django.
        from sessions_app.composition import workflow_call

        return workflow_call(self, session)

    def __repr__(self) -> str:
        entries = self.named_children()
        if not entries:
            return f"{type(self).__name__}()"
        lines = [f"{type(self).__name__}("]
        for attr, child in entries:
            body = repr(child).replace("\n", "\n  ")
            lines.append(f"  ({attr}): {body}")
        lines.append(")")
        return "\n".join(lines)


def workflow_name(workflow: type | object) -> str:
    """The workflow's identity: its ``name`` attribute if set, else ``"{module}.{qualname}"``.

    Accepts the class or an instance; the name is always read from the class.
    """
    cls = workflow if isinstance(workflow, type) else type(workflow)
    declared = getattr(cls, "name", None)
    if declared is None:
        return f"{cls.__module__}.{cls.__qualname__}"
    if not isinstance(declared, str) or not declared.strip():
        raise TypeError(
            f"{cls.__module__}.{cls.__qualname__}.name must be a non-empty string, got {declared!r}"
        )
    if declared != declared.strip():
        raise ValueError(
            f"{cls.__module__}.{cls.__qualname__}.name must not start or end with "
            f"whitespace: {declared!r}"
        )
    return declared
