"""How many ASGI server processes the web tier runs when nobody says.

The production profile runs one per CPU this process may use (its affinity mask, which a
container's cpuset narrows; a CPU *quota* does not narrow it, so a container limited by quota
sets ``OPENRATH_WEB_WORKERS``). Each process serves HTTP and WebSockets on its own event loop
and shares the database and the Redis channel layer with the others, so the tier's throughput
follows the cores (docs/operations.md, "Sizing the web tier"). The embedded profile stays at
one: its in-process workers and SQLite belong to a single server process.
"""

from __future__ import annotations

import os

#: The environment variable that overrides the default (``openrath-server --workers`` too).
ENV_NAME = "OPENRATH_WEB_WORKERS"


def usable_cpus() -> int:
    """CPUs this process may run on (at least 1)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)


def default_web_workers(*, production: bool, environ: dict[str, str] | None = None) -> int:
    """``OPENRATH_WEB_WORKERS`` when set (a positive integer), else one per usable CPU in
    production and one in the embedded profile. Raises ``ValueError`` on a bad value."""
    raw = (environ if environ is not None else os.environ).get(ENV_NAME, "").strip()
    if raw:
        workers = int(raw)
        if workers < 1:
            raise ValueError(f"{ENV_NAME} must be at least 1 (got {raw!r})")
        return workers
    return usable_cpus() if production else 1
