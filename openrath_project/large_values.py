"""Large JSON values live in the artifact store; rows keep a small reference to them.

A step that puts a 5 MB document into its state, or keeps a conversation of thousands of
messages there, would otherwise write megabytes into the run row and its checkpoints. Instead,
each top-level state value whose JSON is longer than ``OPENRATH_STATE_INLINE_BYTES`` (default
64 KiB) is stored content-addressed (:mod:`openrath_project.artifacts`) and replaced by a
reference. A value is one artifact::

    {"$artifact": {"digest": "<sha256>", "size": 5242880, "media_type": "application/json"}}

and a long list is its items cut into blocks of about the limit each (an artifact holding a
JSON list) followed by an inline tail shorter than the limit::

    {"$artifact": {"blocks": [{"digest": "<sha256>", "size": 65590, "items": 131}, ...],
                   "tail": [...]}}

so a list that grows at the end writes each item once: into the tail (a state delta's
``append``), then into the one block it is sealed in. Blocks are cut by a rule that depends
only on the items, so the same list is the same blocks however it was built.

Steps never see references: the executor hands them the state with every reference resolved
(:func:`hydrate`), verified against its digest on read. Identical values are stored once per
tenant, so a value carried unchanged from step to step costs one reference per checkpoint.
The API shows references as they are; ``GET /api/v1/runs/<id>/artifacts/<digest>/`` returns
the value (or block) behind one.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Collection, Mapping
from typing import Any

from django.conf import settings

from openrath_project.artifacts import artifact_get, artifact_put
from openrath_project.jsontext import canonical, measure

REF_KEY = "$artifact"
JSON_MEDIA_TYPE = "application/json"
_MISSING = object()


def inline_limit() -> int:
    return int(getattr(settings, "OPENRATH_STATE_INLINE_BYTES", 64 * 1024))


def _encode(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, allow_nan=False).encode()


def is_ref(value: Any) -> bool:
    """Whether ``value`` is exactly a reference: to one value (a digest, size and media type)
    or to a long list (its sealed blocks and its tail)."""
    if not (isinstance(value, dict) and len(value) == 1 and REF_KEY in value):
        return False
    inner = value[REF_KEY]
    return _is_value_ref(inner) or _is_list_ref(inner)


def _is_value_ref(inner: Any) -> bool:
    return (
        isinstance(inner, dict)
        and isinstance(inner.get("digest"), str)
        and isinstance(inner.get("size"), int)
        and inner.get("media_type") == JSON_MEDIA_TYPE
    )


def _is_list_ref(inner: Any) -> bool:
    return (
        isinstance(inner, dict)
        and inner.keys() == {"blocks", "tail"}
        and isinstance(inner["blocks"], list)
        and isinstance(inner["tail"], list)
    )


def offload(
    tenant_id: uuid.UUID | str,
    state: dict[str, Any],
    *,
    before: dict[str, Any] | None = None,
    changed: Collection[str] = (),
    appended: Mapping[str, int] | None = None,
    lengths: Mapping[str, int] | None = None,
    tails: dict[str, tuple[list[Any], int]] | None = None,
) -> dict[str, Any]:
    """``state`` with each top-level value over the inline limit stored as artifacts.

    With ``before`` (the stored form of the state ``state`` was made from), only the keys in
    ``changed`` are looked at: the others keep their stored form. ``appended`` names the
    changed keys whose list only grew at the end, and by how many items: a long list stored in
    blocks then seals only what it gained (so a list that grows a message a step costs its new
    messages, not its length). What the caller knows of ``before`` saves encoding it again:
    ``lengths``, the canonical length of a stored value (an inline list that grew is measured
    by what it gained), and ``tails``, by key, a list reference's tail and its size as blocks
    are cut by (:func:`_items_size`) — updated with the tails this call stores."""
    limit = inline_limit()
    if before is None and measure(state, limit) <= limit:
        return state  # the common case: nothing to store, nothing encoded past the limit
    appended = appended or {}
    lengths = lengths or {}
    tails = tails if tails is not None else {}
    out: dict[str, Any] = {}
    for key, value in state.items():
        stored: Any = before.get(key, _MISSING) if before is not None else _MISSING
        if stored is not _MISSING and key not in changed:
            out[key] = stored
        elif key in appended and is_ref(stored) and _is_list_ref(stored[REF_KEY]):
            inner = stored[REF_KEY]
            gained = value[len(value) - appended[key] :]
            tail = inner["tail"]
            known = tails.get(key)
            out[key], size = _list_ref(
                tenant_id,
                list(inner["blocks"]),
                [*tail, *gained],
                unsealed=len(tail),
                unsealed_size=known[1] if known is not None and known[0] is tail else None,
            )
            tails[key] = (out[key][REF_KEY]["tail"], size)
        elif key in appended and type(stored) is list and key in lengths:
            gained = value[len(value) - appended[key] :]
            grown = lengths[key] + sum(len(canonical(item)) + 1 for item in gained)
            if grown - (0 if stored else 1) <= limit:
                out[key] = value  # still inline: known without encoding the whole list
            else:
                out[key] = _stored_value(tenant_id, value, limit, tails=tails, key=key)
        else:
            out[key] = _stored_value(tenant_id, value, limit, tails=tails, key=key)
    return out


def _stored_value(
    tenant_id: uuid.UUID | str,
    value: Any,
    limit: int,
    *,
    tails: dict[str, tuple[list[Any], int]] | None = None,
    key: str = "",
) -> Any:
    """A top-level value as it is stored: as it is when small, else a reference."""
    if is_ref(value) or not isinstance(value, dict | list | str):
        return value
    if measure(value, limit) <= limit:
        return value
    if isinstance(value, list):
        listed, size = _list_ref(tenant_id, [], list(value))
        if tails is not None:
            tails[key] = (listed[REF_KEY]["tail"], size)
        return listed
    ref = artifact_put(tenant_id=tenant_id, data=_encode(value), media_type=JSON_MEDIA_TYPE)
    return {REF_KEY: {"digest": ref.digest, "size": ref.size, "media_type": JSON_MEDIA_TYPE}}


def _list_ref(
    tenant_id: uuid.UUID | str,
    blocks: list[Any],
    tail: list[Any],
    *,
    unsealed: int = 0,
    unsealed_size: int | None = None,
) -> tuple[dict[str, Any], int]:
    """A long list as sealed blocks and a tail: the tail's items are sealed into a block (an
    artifact holding their JSON list) each time they reach the inline limit, from the start
    of the tail. The rule depends only on the items, so a list stored at once and the same list
    grown item by item are cut into the same blocks, and a block once written is never
    written again. ``unsealed``: how many leading items of ``tail`` are a stored tail already
    (together under the limit, so none of them ends a block): their size is measured in one
    call instead of item by item, or is ``unsealed_size`` when the caller knows it. Returns the
    reference and the size of its tail (:func:`_items_size`)."""
    limit = inline_limit()
    size = _items_size(tail[:unsealed]) if unsealed_size is None else unsealed_size
    start = 0
    if size >= limit:  # not a tail this limit would have left (the limit changed): item by item
        unsealed, size = 0, 0
    for index, item in enumerate(tail[unsealed:], start=unsealed):
        size += len(_encode(item)) + 1
        if size >= limit:
            data = _encode(tail[start : index + 1])
            ref = artifact_put(tenant_id=tenant_id, data=data, media_type=JSON_MEDIA_TYPE)
            blocks.append({"digest": ref.digest, "size": ref.size, "items": index + 1 - start})
            start, size = index + 1, 0
    return {REF_KEY: {"blocks": blocks, "tail": tail[start:]}}, size


def _items_size(items: list[Any]) -> int:
    """The sum over ``items`` of their encoded length plus one, as :func:`_list_ref` counts:
    the list's encoding is ``[``, the items separated by ``", "`` and ``]``."""
    return len(_encode(items)) - len(items) if items else 0


def hydrate(tenant_id: uuid.UUID | str, value: Any) -> Any:
    """A fresh copy of ``value`` with every reference in it (at any depth) resolved."""
    if is_ref(value):
        inner = value[REF_KEY]
        if _is_list_ref(inner):
            items: list[Any] = []
            for block in inner["blocks"]:
                items.extend(json.loads(artifact_get(tenant_id=tenant_id, digest=block["digest"])))
            items.extend(inner["tail"])
            return [hydrate(tenant_id, item) for item in items]
        loaded = json.loads(artifact_get(tenant_id=tenant_id, digest=inner["digest"]))
        return hydrate(tenant_id, loaded)
    if isinstance(value, dict):
        return {key: hydrate(tenant_id, item) for key, item in value.items()}
    if isinstance(value, list):
        return [hydrate(tenant_id, item) for item in value]
    return value


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
