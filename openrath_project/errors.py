"""Domain errors: one base class, mapped once to HTTP by the DRF exception handler.

Pure Python (no Django import) so services, plain-logic modules and the worker can raise them.
The HTTP body is always ``{"error": {"code", "message", "details"}}``.
"""

from __future__ import annotations

from typing import Any


class DomainError(Exception):
    """Base of every error the product reports to a caller on purpose."""

    status_code: int = 400
    code: str = "invalid"

    def __init__(
        self, message: str, *, details: dict[str, Any] | None = None, code: str | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.details: dict[str, Any] = details or {}
        if code is not None:
            self.code = code

    def as_body(self) -> dict[str, Any]:
        return {"error": {"code": self.code, "message": self.message, "details": self.details}}


class ValidationFailed(DomainError):
    """The input is malformed or breaks a rule; ``details`` names the fields."""

    status_code = 400
    code = "invalid"


class NotAuthenticated(DomainError):
    status_code = 401
    code = "not_authenticated"


class PermissionDenied(DomainError):
    """The principal is known but lacks the grant or role for this action."""

    status_code = 403
    code = "permission_denied"


class NotFound(DomainError):
    """Missing, or outside the caller's scope: the two are indistinguishable on purpose."""

    status_code = 404
    code = "not_found"


class Conflict(DomainError):
    """The request is valid but conflicts with the current state (duplicate, already resolved)."""

    status_code = 409
    code = "conflict"


class PayloadTooLarge(DomainError):
    status_code = 413
    code = "payload_too_large"


class RateLimited(DomainError):
    """Too many requests or queued work; ``retry_after`` seconds is sent as ``Retry-After``."""

    status_code = 429
    code = "rate_limited"

    def __init__(
        self,
        message: str,
        *,
        retry_after: int = 1,
        details: dict[str, Any] | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message, details=details, code=code)
        self.retry_after = max(1, int(retry_after))


class ArtifactStoreUnavailable(DomainError):
    """The artifact storage (S3 or the local directory) did not answer or refused the request;
    the caller may retry later. Never the caller's fault, so never a 4xx."""

    status_code = 503
    code = "storage_unavailable"


class IllegalTransition(Conflict):
    """A state machine was asked for a transition its table does not allow."""

    code = "illegal_transition"


def error_body(code: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    """The documented error body, for places that build one without raising."""
    return {"error": {"code": code, "message": message, "details": details or {}}}
