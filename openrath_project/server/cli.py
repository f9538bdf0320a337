"""The console scripts ``openrath-server``, ``openrath-worker`` and ``openrath-migrate``.

They take OpenRath 2.0's command lines (its options, their environment variables, its exit
codes: 0 done, 1 failed, 2 a usage error) and run this product's commands: ``manage.py serve``,
``run_worker`` and ``openrath_migrate``. What an OpenRath option means here, and the options
that do not apply (they are a usage error that says what to do instead), are in
docs/migrating-from-openrath.md, "Command lines". Each script sets ``DJANGO_SETTINGS_MODULE``
(unless the environment already names one), so it works from any directory once installed.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Sequence

__all__ = ["migrate_main", "server_main", "worker_main"]

#: The only ASGI application ``--app`` / ``OPENRATH_APP`` may name: the product's own.
PRODUCT_APP = "openrath_project.asgi:application"
_GUIDE = "docs/migrating-from-openrath.md, 'Command lines'"
_INSTEAD = (
    f"the server is this product's ASGI application ({PRODUCT_APP}); list the modules that "
    "define your workflows in OPENRATH_WORKFLOW_MODULES and create API tokens with "
    f"`manage.py create_token` (see {_GUIDE})"
)


def _env_default(*names: str, default: str | None = None) -> str | None:
    """The first of ``names`` set (non-empty) in the environment, else ``default``."""
    for name in names:
        value = os.environ.get(name, "").strip()
        if value:
            return value
    return default


def _env_number(parser: argparse.ArgumentParser, name: str, default: str, kind: type) -> str:
    """``name`` from the environment, checked now so that a bad value is a usage error (2)
    naming the variable, not a traceback."""
    value = _env_default(name, default=default) or default
    try:
        kind(value)
    except ValueError:
        parser.error(f"{name}={value!r} is not a valid {kind.__name__}")
    return value


def _parser(prog: str, description: str) -> argparse.ArgumentParser:
    return argparse.ArgumentParser(
        prog=prog,
        description=description,
        epilog=f"Options and environment variables: {_GUIDE}.",
    )


def _add_app_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--app",
        default=None,
        metavar="MODULE:ATTRIBUTE",
        help=(
            f"OpenRath's AgentServer reference (env OPENRATH_APP). Only {PRODUCT_APP} applies "
            "here, and it is the default: workflows come from OPENRATH_WORKFLOW_MODULES"
        ),
    )


def _check_app(parser: argparse.ArgumentParser, value: str | None) -> None:
    source = "--app"
    if value is None:
        value, source = _env_default("OPENRATH_APP"), "OPENRATH_APP"
    if value is not None and value != PRODUCT_APP:
        parser.error(f"{source} {value!r} does not apply: {_INSTEAD}")


def _use_dsn(parser: argparse.ArgumentParser, dsn: str | None, *, migrations: bool) -> None:
    """OpenRath's PostgreSQL DSN as this product's database URL. The runtime connects with
    ``DATABASE_URL``; for ``openrath-migrate`` a DSN next to a ``DATABASE_URL`` is the owner
    role that migrates (``MIGRATION_DATABASE_URL``) and the runtime role is granted its rights."""
    if dsn is None:
        return
    if "://" not in dsn:
        parser.error(
            "the DSN must be a URL here (postgres://user:password@host:5432/name), "
            "not libpq's key=value form"
        )
    runtime = os.environ.get("DATABASE_URL", "").strip()
    if not runtime or runtime == dsn:
        os.environ["DATABASE_URL"] = dsn
        return
    if not migrations:
        parser.error(
            "both DATABASE_URL and OPENRATH_POSTGRES_DSN are set, to different databases: "
            "keep one (DATABASE_URL is this product's setting)"
        )
    owner = os.environ.get("MIGRATION_DATABASE_URL", "").strip()
    if owner and owner != dsn:
        parser.error(
            "MIGRATION_DATABASE_URL and the DSN name different databases: keep one "
            "(MIGRATION_DATABASE_URL is this product's setting for the owner role)"
        )
    os.environ["MIGRATION_DATABASE_URL"] = dsn


def _refuse_schema(parser: argparse.ArgumentParser, value: str | None) -> None:
    source = "--schema"
    if value is None:
        value, source = _env_default("OPENRATH_DB_SCHEMA"), "OPENRATH_DB_SCHEMA"
    if value is not None:
        parser.error(
            f"{source}={value!r} does not apply: the tables live in the database's default "
            "schema (its search_path); give each deployment a database of its own instead"
        )


def _run(prog: str, command: str, arguments: Sequence[str]) -> None:
    """``manage.py <command> <arguments>`` under this script's name: Django's own error
    handling (a ``CommandError`` is one line on stderr and exit status 1)."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "openrath_project.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line([prog, command, *arguments])


def server_main(argv: Sequence[str] | None = None) -> None:
    """``openrath-server``: serve the API, the console and the WebSockets (``manage.py serve``)."""
    parser = _parser(
        "openrath-server",
        "Serve this product's ASGI application (HTTP API, console, WebSockets) with uvicorn; "
        "the embedded profile also starts its in-process workers. Same as `manage.py serve`.",
    )
    _add_app_option(parser)
    parser.add_argument(
        "--host",
        default=_env_default("OPENRATH_HOST", default="0.0.0.0"),  # noqa: S104 - as OpenRath's
        help="address to listen on (env OPENRATH_HOST, default 0.0.0.0)",
    )
    parser.add_argument(
        "--port",
        type=int,
        default=int(_env_number(parser, "OPENRATH_PORT", "8000", int)),
        help="port (env OPENRATH_PORT, default 8000)",
    )
    workers_env = _env_default("OPENRATH_WEB_WORKERS")
    parser.add_argument(
        "--workers",
        type=int,
        default=int(_env_number(parser, "OPENRATH_WEB_WORKERS", "1", int)) if workers_env else None,
        help="uvicorn worker processes (env OPENRATH_WEB_WORKERS; default one per CPU in the "
        "production profile, one in the embedded profile; each process shares the database "
        "and the Redis channel layer)",
    )
    args = parser.parse_args(argv)
    _check_app(parser, args.app)
    if args.workers is not None and args.workers < 1:
        parser.error("--workers must be at least 1")
    if not 0 < args.port < 65536:
        parser.error("--port must be between 1 and 65535")
    _use_dsn(parser, _env_default("OPENRATH_POSTGRES_DSN"), migrations=False)
    arguments = ["--host", args.host, "--port", str(args.port)]
    if args.workers is not None:  # else `serve` sizes the tier for the profile
        arguments += ["--workers", str(args.workers)]
    _run("openrath-server", "serve", arguments)


def _lease_seconds(parser: argparse.ArgumentParser, value: str | None, source: str) -> str | None:
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        parser.error(f"{source}={value!r} is not a number")
    if not math.isfinite(seconds) or seconds < 1 or not seconds.is_integer():
        parser.error(f"{source} must be a whole number of seconds, at least 1 (got {value!r})")
    return str(int(seconds))


def worker_main(argv: Sequence[str] | None = None) -> None:
    """``openrath-worker``: claim runs from the database and execute them (``run_worker``)."""
    parser = _parser(
        "openrath-worker",
        "Claim queued runs from the database and execute them, with the reconciler (expired "
        "leases, due timers, expired interrupts). Needs no broker. SIGTERM/SIGINT finish the "
        "current run, then exit 0. Same as `manage.py run_worker`.",
    )
    _add_app_option(parser)
    parser.add_argument(
        "--worker-id",
        default=_env_default("OPENRATH_WORKER_ID", "HOSTNAME"),
        help="the lease holder's name (env OPENRATH_WORKER_ID, then HOSTNAME; default "
        "db:<host>:<pid>); each thread appends -<n>",
    )
    parser.add_argument(
        "--lease-seconds",
        default=None,
        help="lease length of a claim, whole seconds (env OPENRATH_WORKER_LEASE_SECONDS, "
        "then OPENRATH_LEASE_SECONDS; default 30)",
    )
    extensions = parser.add_argument_group("this product's options")
    extensions.add_argument("--threads", type=int, default=1, help="worker threads (default 1)")
    extensions.add_argument("--max-runs", type=int, default=None, help="exit after this many runs")
    extensions.add_argument(
        "--idle-exit", type=float, default=None, help="exit after this many idle seconds"
    )
    extensions.add_argument("--poll", type=float, default=0.5, help="idle poll interval, seconds")
    extensions.add_argument(
        "--metrics-port", type=int, default=None, help="serve Prometheus metrics on this port"
    )
    extensions.add_argument(
        "--metrics-addr", default=None, help="address of --metrics-port (default all interfaces)"
    )
    args = parser.parse_args(argv)
    _check_app(parser, args.app)
    if args.threads < 1:
        parser.error("--threads must be at least 1")
    lease = _lease_seconds(parser, args.lease_seconds, "--lease-seconds")
    if lease is None:
        env_lease = _env_default("OPENRATH_WORKER_LEASE_SECONDS")
        lease = _lease_seconds(parser, env_lease, "OPENRATH_WORKER_LEASE_SECONDS")
    if lease is not None:
        os.environ["OPENRATH_LEASE_SECONDS"] = lease  # read by the settings: every claim's lease
    _use_dsn(parser, _env_default("OPENRATH_POSTGRES_DSN"), migrations=False)
    arguments = ["--threads", str(args.threads), "--poll", str(args.poll)]
    for option, value in (
        ("--name", args.worker_id),
        ("--max-runs", args.max_runs),
        ("--idle-exit", args.idle_exit),
        ("--metrics-port", args.metrics_port),
        ("--metrics-addr", args.metrics_addr),
    ):
        if value is not None:
            arguments += [option, str(value)]
    _run("openrath-worker", "run_worker", arguments)


def migrate_main(argv: Sequence[str] | None = None) -> None:
    """``openrath-migrate [--check]``: apply migrations as the owner role and grant the
    runtime role its rights (``manage.py openrath_migrate``)."""
    parser = _parser(
        "openrath-migrate",
        "Apply the database migrations with the owner role (MIGRATION_DATABASE_URL, else "
        "DATABASE_URL) and grant the runtime role (DATABASE_URL) what it needs. With --check: "
        "change nothing; exit 1 when migrations are unapplied (they are listed on stdout, one "
        "line on stderr says how many). Same as `manage.py openrath_migrate`.",
    )
    parser.add_argument(
        "--dsn",
        default=None,
        help="PostgreSQL URL (env OPENRATH_POSTGRES_DSN): the database, or, next to a "
        "DATABASE_URL, the owner role that migrates it",
    )
    parser.add_argument(
        "--schema",
        default=None,
        help="OpenRath's schema option (env OPENRATH_DB_SCHEMA): does not apply here",
    )
    parser.add_argument(
        "--check", action="store_true", help="verify the schema without applying changes"
    )
    args = parser.parse_args(argv)
    _refuse_schema(parser, args.schema)
    _use_dsn(parser, args.dsn or _env_default("OPENRATH_POSTGRES_DSN"), migrations=True)
    _run("openrath-migrate", "openrath_migrate", ["--check"] if args.check else [])
