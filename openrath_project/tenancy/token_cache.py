"""The process's cache of validated bearer tokens (``openrath_project.api.authentication``).

Here, beside the token services, so that revoking a token in this process forgets every cached
principal at once (:func:`openrath_project.tenancy.services.token_revoke`); other processes
refuse a revoked token within ``OPENRATH_TOKEN_CACHE_SECONDS``.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from openrath_project.tenancy.principal import Principal

__all__ = ["TOKEN_CACHE_MAX_ENTRIES", "TokenCache", "token_cache"]

#: Entries kept at most (a process sees few distinct tokens; beyond this the oldest go).
TOKEN_CACHE_MAX_ENTRIES = 4096


@dataclass(frozen=True)
class _Validated:
    principal: Principal
    at: float  # time.monotonic() of the database check


class TokenCache:
    """Principals of recently validated tokens, by the digest of the raw token (never the raw
    token itself), each for at most ``ttl`` seconds after its database check."""

    def __init__(self, max_entries: int = TOKEN_CACHE_MAX_ENTRIES) -> None:
        self._lock = threading.Lock()
        self._entries: dict[bytes, _Validated] = {}
        self._max = max_entries

    def get(self, digest: bytes, ttl: float, now: float) -> Principal | None:
        with self._lock:
            entry = self._entries.get(digest)
            if entry is None:
                return None
            if now - entry.at >= ttl:
                del self._entries[digest]
                return None
            return entry.principal

    def put(self, digest: bytes, principal: Principal, now: float) -> None:
        with self._lock:
            if len(self._entries) >= self._max:  # dicts keep insertion order: oldest first
                for key in list(self._entries)[: max(1, self._max // 8)]:
                    del self._entries[key]
            self._entries[digest] = _Validated(principal, now)

    def discard(self, digest: bytes) -> None:
        with self._lock:
            self._entries.pop(digest, None)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


token_cache = TokenCache()
