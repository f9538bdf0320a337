"""Large JSON values live in the artifact store; rows keep a small reference to them.

A run's state is copied into every checkpoint (as a delta, with a keyframe every 32); a step
that puts a 5 MB document into its state would otherwise write megabytes per step and bloat
the run row, its checkpoints and the WAL. Instead, each top-level state value whose JSON is
longer than ``OPENRATH_STATE_INLINE_BYTES`` (default 64 KiB) is stored content-addressed
(:mod:`openrath_project.artifacts`) and replaced by a reference::

    {"$artifact": {"digest": "<sha256>", "size": 5242880, "media_type": "application/json"}}

Steps never see references: the executor hands them the state with every reference resolved
(:func:`hydrate`), verified against its digest on read. Identical values are stored once per
tenant, so a value carried unchanged from step to step costs one reference per checkpoint.
The API shows references as they are; ``GET /api/v1/runs/<id>/artifacts/<digest>/`` returns
the value behind one.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

from django.conf import settings

from openrath_project.artifacts import artifact_get, artifact_put

REF_KEY = "$artifact"
JSON_MEDIA_TYPE = "application/json"


def inline_limit() -> int:
    return int(getattr(settings, "OPENRATH_STATE_INLINE_BYTES", 64 * 1024))


def _encode(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, allow_nan=False).encode()


def is_ref(value: Any) -> bool:
    """Whether ``value`` is exactly a reference (one key, with a digest, size and media type)."""
    if not (isinstance(value, dict) and len(value) == 1 and REF_KEY in value):
        return False
    inner = value[REF_KEY]
    return (
        isinstance(inner, dict)
        and isinstance(inner.get("digest"), str)
        and isinstance(inner.get("size"), int)
        and inner.get("media_type") == JSON_MEDIA_TYPE
    )


def offload(tenant_id: uuid.UUID | str, state: dict[str, Any]) -> dict[str, Any]:
    """``state`` with each top-level value over the inline limit stored as an artifact."""
    limit = inline_limit()
    if len(_encode(state)) <= limit:  # the common case: one encoding, nothing to store
        return state
    out: dict[str, Any] = {}
    for key, value in state.items():
        if is_ref(value) or not isinstance(value, dict | list | str):
            out[key] = value
            continue
        data = _encode(value)
        if len(data) <= limit:
            out[key] = value
            continue
        ref = artifact_put(tenant_id=tenant_id, data=data, media_type=JSON_MEDIA_TYPE)
        out[key] = {
            REF_KEY: {"digest": ref.digest, "size": ref.size, "media_type": JSON_MEDIA_TYPE}
        }
    return out


def hydrate(tenant_id: uuid.UUID | str, value: Any) -> Any:
    """A fresh copy of ``value`` with every reference in it (at any depth) resolved."""
    if is_ref(value):
        loaded = json.loads(artifact_get(tenant_id=tenant_id, digest=value[REF_KEY]["digest"]))
        return hydrate(tenant_id, loaded)
    if isinstance(value, dict):
        return {key: hydrate(tenant_id, item) for key, item in value.items()}
    if isinstance(value, list):
        return [hydrate(tenant_id, item) for item in value]
    return value


def refs_in(value: Any) -> Iterator[str]:
    """The digests of the references in ``value`` (not of references inside stored values)."""
    if is_ref(value):
        yield value[REF_KEY]["digest"]
    elif isinstance(value, dict):
        for item in value.values():
            yield from refs_in(item)
    elif isinstance(value, list):
        for item in value:
            yield from refs_in(item)


def mentions(value: Any, digest: str, *, inside: bool = False) -> bool:
    """Whether ``value`` names ``digest`` as a reference's digest, also in a state *delta*
    (where a changed reference shows up as ``{"sub": {"$artifact": {"set": {"digest": ...}}}}``)."""
    if isinstance(value, dict):
        for key, item in value.items():
            if inside and key == "digest" and item == digest:
                return True
            if mentions(item, digest, inside=inside or key == REF_KEY):
                return True
    elif isinstance(value, list):
        return any(mentions(item, digest, inside=inside) for item in value)
    return False
