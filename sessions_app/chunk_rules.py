"""What a chunk may be: roles, kinds, content shapes, trust, sizes. Pure Python.

Used by the services (every write path validates through here) and by the API serializers, so a
bad chunk is refused with the same message wherever it comes from.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from openrath_project.jsonlimits import MAX_VALUE_DEPTH, json_problem

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

# --- Numeric domains (docs/api.md, "Numbers and their domains") ---------------------------------
#: Each token count of one chunk's usage: an integer 0..MAX_CHUNK_TOKENS (a billion tokens; no
#: model call comes near it, and 1000 chunks of it still fit a session's totals).
MAX_CHUNK_TOKENS = 10**9
#: One chunk's ``cost_usd``: a finite number 0..MAX_CHUNK_COST_USD.
MAX_CHUNK_COST_USD = 10**6
#: A session's usage totals (each token count, and the cost): kept by the database constraint
#: ``session_usage_within_domain``, far below what its columns hold (``bigint``;
#: ``numeric(20, 8)``, under 10^12), so no sum of chunks can overflow them.
MAX_SESSION_TOKENS = 10**15
MAX_SESSION_COST_USD = 10**10
#: Positions in a session's chunk list (``seq``, lengths, ``at``, ``after``): what the
#: ``integer`` columns hold.
MAX_SEQ = 2**31 - 1


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
    #: The workflow path that wrote the chunk (stamped from the write context).
    workflow: str = ""


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


def _check_counts(
    usage: Mapping[str, Any], *, max_tokens: int, max_cost: int, null_counts: bool = False
) -> None:
    """Token counts are integers in 0..max_tokens (absent: 0; null too with ``null_counts``),
    ``cost_usd`` a finite number in 0..max_cost (or absent / null)."""
    for key in USAGE_KEYS:
        value = usage.get(key, 0)
        if value is None and null_counts:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= max_tokens:
            raise ChunkInvalid(f"usage.{key}", f"must be an integer between 0 and {max_tokens}")
    cost = usage.get("cost_usd")
    if cost is None:
        return
    if (
        not isinstance(cost, int | float | Decimal)
        or isinstance(cost, bool)
        or not math.isfinite(cost)
        or not 0 <= cost <= max_cost
    ):
        raise ChunkInvalid("usage.cost_usd", f"must be a number between 0 and {max_cost}")


def check_usage(usage: Any) -> dict[str, Any] | None:
    """A chunk's usage: ``prompt_tokens``, ``completion_tokens``, ``total_tokens`` (integers
    0..MAX_CHUNK_TOKENS), ``cost_usd`` (0..MAX_CHUNK_COST_USD) and free-form extra keys; with
    ``total_tokens`` filled in as prompt + completion when absent."""
    if usage is None:
        return None
    if not isinstance(usage, dict):
        raise ChunkInvalid("usage", "must be an object")
    _check_counts(usage, max_tokens=MAX_CHUNK_TOKENS, max_cost=MAX_CHUNK_COST_USD)
    if (problem := json_problem(usage, root="usage")) is not None:
        raise ChunkInvalid(problem.path, problem.message)
    normalised = dict(usage)
    if "total_tokens" not in normalised:
        normalised["total_tokens"] = int(usage.get("prompt_tokens", 0)) + int(
            usage.get("completion_tokens", 0)
        )
    return normalised


def check_session_usage(usage: Any) -> None:
    """A session's usage totals as an export or an OpenRath v1 log states them (the same keys
    as a chunk's, each within the session's domain); raises :class:`ChunkInvalid`."""
    if usage is None:
        return
    if not isinstance(usage, dict):
        raise ChunkInvalid("usage", "must be an object")
    _check_counts(
        usage, max_tokens=MAX_SESSION_TOKENS, max_cost=MAX_SESSION_COST_USD, null_counts=True
    )


def check_client_chunk(kind: str, content: Any) -> None:
    """What an API client may not write: references to artifacts. The product itself records
    them (a tool output kept whole, an artifact a workflow stored) and serves an artifact only
    through such a reference, so a client that learnt another project's digest cannot point
    its own session at those bytes (issue 14, item 5)."""
    if kind == "artifact":
        raise ChunkInvalid(
            "kind",
            "artifact chunks are recorded by the product (tools, workflows), not sent by clients",
        )
    if kind == "tool_result" and isinstance(content, dict) and "artifact" in content:
        raise ChunkInvalid(
            "content.artifact", "is recorded by the product when it keeps a tool output whole"
        )


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
    workflow: str = "",
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
    size = _checked_size(content)
    if size > max_bytes:
        raise ChunkTooLarge("content", f"is {size} bytes; the limit is {max_bytes} bytes")
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
        workflow=workflow[:300],
    )


#: Integers of 19 digits or more may lie outside the 64-bit range: walk to be sure.
_LONG_DIGITS = re.compile(r"\d{19}")


def _checked_size(content: dict[str, Any]) -> int:
    """The content's size as compact UTF-8 JSON, once it is known to be in the JSON domain
    (:mod:`openrath_project.jsonlimits`). The encoding runs in C; the content is walked in
    Python only when its text shows a possible problem."""
    try:
        text = json.dumps(content, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        size = len(text.encode())
    except (TypeError, ValueError, RecursionError):  # infinity, too deep, a surrogate, a set
        text, size = "", -1
    if (
        size < 0
        or "\\u0000" in text
        or text.count("{") + text.count("[") > MAX_VALUE_DEPTH
        or _LONG_DIGITS.search(text)
    ):
        problem = json_problem(content, root="content")
        if problem is not None:
            raise ChunkInvalid(problem.path, problem.message)
        if size < 0:  # not a problem of the domain: a value JSON cannot encode at all
            raise ChunkInvalid("content", "must be JSON-compatible")
    return size


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
