"""Secrets read from files (the ``*_FILE`` convention), so they need not be in the environment.

A process's initial environment stays readable in ``/proc/<pid>/environ`` for its whole life, by
anything running as the same user (a tool command under the path-confined fallback sandbox,
for one). With ``SECRET_KEY_FILE=/run/secrets/secret_key`` instead of ``SECRET_KEY=...`` the
environment holds a path; the value is read at start into the settings only. Pure Python.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

FILE_SUFFIX = "_FILE"
#: The settings that may come from a file (each also as ``<NAME>_FILE``).
SECRET_SETTINGS = (
    "SECRET_KEY",
    "DATABASE_URL",
    "MIGRATION_DATABASE_URL",
    "REDIS_URL",
    "S3_ACCESS_KEY_ID",
    "S3_SECRET_ACCESS_KEY",
    "OPENAI_API_KEY",
)


class SecretFileError(ValueError):
    """A ``*_FILE`` variable names a file that cannot be read, or both forms are set."""


def read_secret_file(variable: str, path: str) -> str:
    """The file's text without its trailing newline; ``SecretFileError`` naming the variable."""
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read().rstrip("\r\n")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise SecretFileError(
            f"{variable}={path!r} cannot be read: {type(exc).__name__}: {reason}"
        ) from None


def secret_value(name: str, environ: Mapping[str, str] | None = None) -> str:
    """``name`` from the environment, else the content of the file ``<name>_FILE`` names."""
    source = os.environ if environ is None else environ
    value = source.get(name, "")
    if value:
        return value
    path = source.get(name + FILE_SUFFIX, "").strip()
    return read_secret_file(name + FILE_SUFFIX, path) if path else ""


def with_secret_files(
    environ: Mapping[str, str], names: tuple[str, ...] = SECRET_SETTINGS
) -> dict[str, str]:
    """A copy of ``environ`` with each ``<NAME>_FILE`` of ``names`` read into ``NAME``.

    Setting both ``NAME`` and ``NAME_FILE`` is refused: which one wins would be a guess.
    """
    resolved = dict(environ)
    for name in names:
        path = environ.get(name + FILE_SUFFIX, "").strip()
        if not path:
            continue
        if environ.get(name, ""):
            raise SecretFileError(f"set {name} or {name}{FILE_SUFFIX}, not both")
        resolved[name] = read_secret_file(name + FILE_SUFFIX, path)
    return resolved
