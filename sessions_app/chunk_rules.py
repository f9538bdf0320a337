"""What a chunk may be: roles, kinds, content shapes, trust, sizes. Pure Python.

Used by the services (every write path validates through here) and by the API serializers, so a
bad chunk is refused with the same message wherever it comes from.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from openrath_project.jsontext import nul_path

ROLES = ("system", "user", "assistant", "tool")
KINDS = ("message", "tool_call", "tool_result", "summary", "event", "artifact")
TRUST_LABELS = ("trusted", "untrusted")
USAGE_KEYS = ("prompt_tokens", "completion_tokens", "total_tokens")

#: Which roles each kind may carry.
KIND_ROLES: Mapping[str, frozenset[str]] = {
    "message": frozenset(ROLES) - {"tool"},
    "tool_call": frozenset({"assistant"}),
    "tool_result": frozenset({"tool"}),
    "summary": frozenset({"system", "user", "assistant"}),
    "event": frozenset(ROLES),
    "artifact": frozenset(ROLES),
}

DEFAULT_MAX_CHUNK_BYTES = 256 * 1024


class ChunkInvalid(ValueError):
    """A chunk breaks a rule; ``field`` names the offending field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class ChunkTooLarge(ChunkInvalid):
    pass


@dataclass(frozen=True)
class ChunkDraft:
    """A validated chunk about to be stored (``seq`` is assigned by the append)."""

    role: str
    kind: str
    content: dict[str, Any]
    agent: str = ""
    tool_call_id: str = ""
    trust: str = "trusted"
    usage: dict[str, Any] | None = None
    branch: str = ""
    run_id: str | None = None
    step: str = ""


def _require_str(content: Mapping[str, Any], key: str, *, allow_empty: bool = True) -> None:
    value = content.get(key)
    if not isinstance(value, str):
        raise ChunkInvalid(f"content.{key}", "must be a string")
    if not allow_empty and not value:
        raise ChunkInvalid(f"content.{key}", "must not be empty")


def check_content(kind: str, content: Any) -> None:
    """The content shape of each kind (DESIGN section 10)."""
    if not isinstance(content, dict):
        raise ChunkInvalid("content", "must be a JSON object")
    if kind in ("message", "summary"):
        _require_str(content, "text")
    elif kind == "tool_call":
        _require_str(content, "id", allow_empty=False)
        _require_str(content, "name", allow_empty=False)
        if "arguments" not in content:
            raise ChunkInvalid("content.arguments", "is required")
    elif kind == "tool_result":
        _require_str(content, "tool_call_id", allow_empty=False)
        _require_str(content, "name")
        if "output" not in content:
            raise ChunkInvalid("content.output", "is required")
        if content.get("error") is not None and not isinstance(content["error"], str):
            raise ChunkInvalid("content.error", "must be a string or null")
    elif kind == "artifact":
        _require_str(content, "digest", allow_empty=False)


def check_usage(usage: Any) -> dict[str, Any] | None:
    if usage is None:
        return None
    if not isinstance(usage, dict):
        raise ChunkInvalid("usage", "must be an object")
    for key in USAGE_KEYS:
        value = usage.get(key, 0)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ChunkInvalid(f"usage.{key}", "must be a non-negative integer")
    cost = usage.get("cost_usd")
    if cost is not None and (not isinstance(cost, int | float) or cost < 0):
        raise ChunkInvalid("usage.cost_usd", "must be a non-negative number")
    normalised = dict(usage)
    if "total_tokens" not in normalised:
        normalised["total_tokens"] = int(usage.get("prompt_tokens", 0)) + int(
            usage.get("completion_tokens", 0)
        )
    return normalised


def default_trust(role: str, kind: str) -> str:
    """Tool output is untrusted unless someone says otherwise; the rest is the tenant's own."""
    return "untrusted" if role == "tool" or kind == "tool_result" else "trusted"


def make_draft(
    *,
    role: str,
    kind: str = "message",
    content: Any,
    agent: str = "",
    tool_call_id: str | None = None,
    trust: str | None = None,
    usage: Any = None,
    branch: str = "",
    run_id: str | None = None,
    step: str = "",
    max_bytes: int = DEFAULT_MAX_CHUNK_BYTES,
) -> ChunkDraft:
    """Validate one chunk; raises :class:`ChunkInvalid` naming the field."""
    if role not in ROLES:
        raise ChunkInvalid("role", f"must be one of {', '.join(ROLES)}; got {role!r}")
    if kind not in KINDS:
        raise ChunkInvalid("kind", f"must be one of {', '.join(KINDS)}; got {kind!r}")
    if role not in KIND_ROLES[kind]:
        allowed = ", ".join(sorted(KIND_ROLES[kind]))
        raise ChunkInvalid("role", f"a {kind} chunk must have role {allowed}; got {role!r}")
    check_content(kind, content)
    text = json.dumps(content, ensure_ascii=False, separators=(",", ":"))
    size = len(text.encode())
    if size > max_bytes:
        raise ChunkTooLarge("content", f"is {size} bytes; the limit is {max_bytes} bytes")
    if "\\u0000" in text and (where := nul_path(content, "content")) is not None:
        raise ChunkInvalid(where, "must not contain the NUL character \\u0000")
    if trust is not None and trust not in TRUST_LABELS:
        raise ChunkInvalid("trust", f"must be one of {', '.join(TRUST_LABELS)}")
    if not isinstance(agent, str) or len(agent) > 200:
        raise ChunkInvalid("agent", "must be a string of at most 200 characters")
    if tool_call_id is None:
        if kind == "tool_call":
            tool_call_id = str(content["id"])
        elif kind == "tool_result":
            tool_call_id = str(content["tool_call_id"])
        else:
            tool_call_id = ""
    return ChunkDraft(
        role=role,
        kind=kind,
        content=content,
        agent=agent,
        tool_call_id=tool_call_id[:200],
        trust=trust or default_trust(role, kind),
        usage=check_usage(usage),
        branch=branch,
        run_id=run_id,
        step=step,
    )


def usage_totals(drafts: list[ChunkDraft]) -> dict[str, int | float]:
    """Summed usage of the drafts (what appending them spends); a chunk without
    ``total_tokens`` counts prompt + completion."""
    totals: dict[str, int | float] = dict.fromkeys(USAGE_KEYS, 0)
    totals["cost_usd"] = 0.0
    for draft in drafts:
        if not draft.usage:
            continue
        prompt = int(draft.usage.get("prompt_tokens", 0))
        completion = int(draft.usage.get("completion_tokens", 0))
        totals["prompt_tokens"] += prompt
        totals["completion_tokens"] += completion
        totals["total_tokens"] += int(draft.usage.get("total_tokens") or prompt + completion)
        totals["cost_usd"] += float(draft.usage.get("cost_usd") or 0.0)
    return totals
