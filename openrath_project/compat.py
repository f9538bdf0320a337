"""OpenRath names the product deliberately does not provide, and the one error that says so.

A script ported from OpenRath that uses such a name gets :class:`OpenRathNameUnsupported`
(an ``ImportError``, so ``from openrath_project.session import run_session_loop`` fails on the
import line with this message, not a bare "cannot import name"), naming why and what to use.
Each compatibility module's ``__getattr__`` calls :func:`missing_name`. Names that were never
OpenRath's get the usual ``AttributeError``. Pure Python: no Django import.

The table is the reference for docs/migrating-from-openrath.md (rows marked *unsupported*).
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["UNSUPPORTED", "OpenRathNameUnsupported", "missing_name"]

_GUIDE = "docs/migrating-from-openrath.md"

_STORED = (
    "sessions are stored in the project's database (every chunk and lineage edge), "
    "not in per-session JSONL files"
)
_LOOP = "the tool loop is flow.Agent's; there is no separate loop executor"

#: module -> OpenRath name -> (why it is not provided, what to use instead)
UNSUPPORTED: Mapping[str, Mapping[str, tuple[str, str]]] = {
    "openrath_project.session": {
        "run_session_loop": (_LOOP, "out = flow.Agent(prompt, provider, tools=...)(session)"),
        "SessionLoopExecutor": (_LOOP, "flow.Agent (subclass it, or pass tools=)"),
        "DefaultSessionLoopExecutor": (_LOOP, "flow.Agent"),
        "run_session_compress": (
            "compression is a component",
            "flow.Compressor(instruction, provider)(session)",
        ),
        "select_session": ("selection is a component", "flow.Selector(provider).forward(...)"),
        "LineageRecorder": (
            "lineage is recorded by the services when a session is made, never stamped by hand",
            "session.fork() / .detach() / .merge(); read session.parent_session_ids",
        ),
        "SessionLineage": (
            "the legacy producer DTO is replaced by stored lineage edges",
            "session.parent_session_ids, session.lineage(), rath-style graph helpers",
        ),
        "PersistedSession": (_STORED, "Session.load(id)"),
        "PersistedSessionHeader": (_STORED, "Session.load(id).row"),
        "PersistedSessionMeta": (_STORED, "Session.load(id).row"),
        "SessionWriter": (_STORED, "session.append(...) / session.extend(...)"),
        "PersistenceError": (_STORED, "openrath_project.errors.DomainError"),
        "list_persisted_sessions": (_STORED, "GET /api/v1/sessions/ or the console"),
        "delete_session": (
            "sessions are an append-only audit record and are never deleted one by one",
            "leave them; export with session.export_jsonl(path)",
        ),
        "prune_sessions": (
            "sessions are an append-only audit record",
            "operations.md (retention is the operator's)",
        ),
    },
    "openrath_project.session.graph": {
        "LineageRecorder": (
            "lineage is recorded by the services when a session is made",
            "session.fork() / .detach() / .merge()",
        ),
        "SessionLineage": (
            "the legacy producer DTO is replaced by stored lineage edges",
            "session.parent_session_ids",
        ),
    },
    "openrath_project.backend": {
        "TrustedHostBackend": (
            "no backend runs tools on the host unconfined; 'local' confines paths and runs "
            "commands in bubblewrap where it works",
            "session.to('local', spec=...) with a ToolPolicy",
        ),
        "set_default": (
            "a session's placement is explicit (session.to(...)) or inherited from its parent",
            "session.to('local')",
        ),
        "register": (
            "backends are registered by the product, not by a class decorator",
            "sessions_app.sandbox.register_backend(name, factory)",
        ),
        "Stream": (
            "tool calls return their result; streaming is the agent's",
            "flow.Agent(on_event=...)",
        ),
        "Event": (
            "tool calls return their result; streaming is the agent's",
            "flow.Agent(on_event=...)",
        ),
        "Future": ("tool calls return their result", "call the tool"),
    },
    "openrath_project.config.store": {},
}


class OpenRathNameUnsupported(ImportError):
    """An OpenRath name this product does not provide on purpose; the message says why and
    what to use instead."""

    def __init__(self, module: str, name: str, reason: str, alternative: str) -> None:
        self.openrath_name = name
        self.reason = reason
        self.alternative = alternative
        origin = module.replace("openrath_project", "rath", 1)
        super().__init__(
            f"{module}.{name} (OpenRath's {origin}.{name}) is not supported: {reason}. "
            f"Use instead: {alternative}. See {_GUIDE}.",
            name=module,
        )


def missing_name(module: str, name: str) -> Exception:
    """The exception for ``module.name`` that is not provided: the unsupported-name error for
    OpenRath names in the table, else a plain ``AttributeError``. Dunder lookups always get
    ``AttributeError`` (the import system probes them)."""
    if not name.startswith("__"):
        entry = UNSUPPORTED.get(module, {}).get(name)
        if entry is not None:
            return OpenRathNameUnsupported(module, name, *entry)
    return AttributeError(f"module {module!r} has no attribute {name!r}")
