"""Settings, read from the environment (django-environ).

Two profiles:

* ``embedded`` (default): SQLite under ``OPENRATH_DATA_DIR``, in-memory channel layer, local
  filesystem storage, an in-process worker. Runs with nothing but ``pip install``.
* ``production``: PostgreSQL, Redis, S3-compatible storage, Celery workers. Refuses to start
  when a required setting is missing or unsafe (see :mod:`openrath_project.profiles`).

Every setting is documented in ``docs/operations.md``.
"""

from __future__ import annotations

import os
import secrets
import sysconfig
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import environ
from django.core.exceptions import ImproperlyConfigured

from openrath_project.profiles import PROFILES, format_refusal, production_problems
from openrath_project.secretfiles import SecretFileError, with_secret_files

BASE_DIR = Path(__file__).resolve().parent.parent
# Secrets may come from files (SECRET_KEY_FILE=/run/secrets/..., see openrath_project.secretfiles):
# read here into the settings only, never put back into the process environment.
try:
    _ENVIRON = with_secret_files(os.environ)
except SecretFileError as _exc:
    raise ImproperlyConfigured(str(_exc)) from None
env = environ.Env()
env.ENVIRON = _ENVIRON

PROFILE = env.str("OPENRATH_PROFILE", default="embedded").strip().lower()
if PROFILE not in PROFILES:
    raise ImproperlyConfigured(
        f"OPENRATH_PROFILE must be one of {', '.join(PROFILES)}; got {PROFILE!r}"
    )
PRODUCTION = PROFILE == "production"

if PRODUCTION:
    _problems = production_problems(_ENVIRON)
    if _problems:
        raise ImproperlyConfigured(format_refusal(_problems))

DATA_DIR = Path(env.str("OPENRATH_DATA_DIR", default=str(Path.cwd() / ".openrath"))).resolve()

# How tool commands are confined (docs/tools-and-sandbox.md): auto | bwrap | local. Read by
# sessions_app.sandbox from the environment; checked here so a typo refuses to start.
OPENRATH_SANDBOX = env.str("OPENRATH_SANDBOX", default="auto").strip().lower() or "auto"
if OPENRATH_SANDBOX not in ("auto", "bwrap", "local"):
    raise ImproperlyConfigured(
        f"OPENRATH_SANDBOX must be one of auto, bwrap, local; got {OPENRATH_SANDBOX!r}"
    )


def _embedded_secret_key() -> str:
    """A per-installation key kept in the data dir, so logins survive restarts."""
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    path = DATA_DIR / "secret_key"
    if not path.exists():
        path.write_text(secrets.token_urlsafe(64))
        path.chmod(0o600)
    return path.read_text().strip()


SECRET_KEY = env.str("SECRET_KEY", default="") or _embedded_secret_key()
DEBUG = env.bool("DEBUG", default=False)
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=[] if PRODUCTION else ["localhost", "127.0.0.1"])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    # Before the project's apps: its user_login_failed receiver runs first, so the project's
    # failed-login audit row knows whether the attempt was locked out.
    "axes",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "channels",
    "openrath_project.tenancy",
    "openrath_project.console",
    "sessions_app",
    "runs_app",
    "effects_app",
    "memory_app",
    "schedules_app",
    "webhooks_app",
    "retention_app",
    # The shell: process commands (serve, quickstart, run_worker, ...); wires the ports at ready.
    "openrath_project.server",
]

MIDDLEWARE = [
    # First, so the request duration it records includes every other middleware.
    "openrath_project.metrics.HttpMetricsMiddleware",
    "openrath_project.middleware.RequestIdMiddleware",
    # Outside everything that can answer early (the size limit), so those answers are audited too.
    "openrath_project.middleware.AuditMiddleware",
    "openrath_project.middleware.BodySizeLimitMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # Around WhiteNoise: its file responses stream through an async iterator under ASGI.
    "openrath_project.async_files.AsyncStreamingMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    # Content-Security-Policy (django-csp); Permissions-Policy, no-store (openrath_project.headers).
    "csp.middleware.CSPMiddleware",
    "openrath_project.headers.SecurityHeadersMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last: turns a locked-out login (django-axes) into the lockout page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "openrath_project.urls"
WSGI_APPLICATION = "openrath_project.wsgi.application"
ASGI_APPLICATION = "openrath_project.asgi.application"


def _site_templates() -> Path:
    """The project's ``templates/`` (DESIGN.md's layout): in a checkout, beside the packages;
    installed from a wheel, where pip put its data files (``[tool.setuptools.data-files]`` in
    pyproject.toml: ``<prefix>/share/openrath-django/templates``, or the user scheme's)."""
    checkout = BASE_DIR / "templates"
    if checkout.is_dir():
        return checkout
    for data in (sysconfig.get_path("data"), sysconfig.get_path("data", f"{os.name}_user")):
        installed = Path(data) / "share" / "openrath-django" / "templates"
        if installed.is_dir():
            return installed
    return checkout


TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [_site_templates()],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- Database -------------------------------------------------------------------------------
# DATABASE_URL is honoured in both profiles; it is the *runtime* role (DML only) in production.
# MIGRATION_DATABASE_URL is the owner role, used only by `openrath-migrate` (alias "migrations").

_default_db_url = f"sqlite:///{DATA_DIR / 'db.sqlite3'}"
DATABASE_URL = env.str("DATABASE_URL", default="") or _default_db_url


def _embedded_dispatch() -> bool:
    """Whether this process's runs are executed by its own worker threads (the default outside
    production; ``OPENRATH_DISPATCH``, read again below, decides)."""
    return env.str("OPENRATH_DISPATCH", default="celery" if PRODUCTION else "local") == "local"


def _database(url: str) -> dict[str, Any]:
    config: dict[str, Any] = environ.Env.db_url_config(url)
    engine = config["ENGINE"]
    if engine == "django.db.backends.sqlite3":
        Path(config["NAME"]).parent.mkdir(parents=True, exist_ok=True)
        config["OPTIONS"] = {
            # WAL lets readers proceed while the worker writes; IMMEDIATE takes the write lock at
            # BEGIN so two writers queue on busy_timeout instead of failing on lock upgrade.
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            "transaction_mode": "IMMEDIATE",
            "timeout": 30,
        }
    elif engine in {"django.db.backends.postgresql", "django.contrib.gis.db.backends.postgis"}:
        config["ENGINE"] = "django.db.backends.postgresql"
        # Persistent connections: no per-request or per-step connection set-up.
        config["CONN_MAX_AGE"] = env.int("DATABASE_CONN_MAX_AGE", default=300)
        config["CONN_HEALTH_CHECKS"] = True
        config.setdefault("OPTIONS", {})
        config["OPTIONS"].setdefault("connect_timeout", env.int("DATABASE_CONNECT_TIMEOUT", 5))
        config["OPTIONS"].setdefault("application_name", env.str("DATABASE_APP_NAME", "openrath"))
        # A partition drops packets without a reset: a query sent into it waits on Linux's
        # retransmissions (about 15 min) before failing. tcp_user_timeout fails it once sent data
        # has gone unacknowledged this long, keepalives find a dead peer on an idle connection;
        # either way the worker reconnects after the heal instead of waiting out the backoff
        # (network drills, docs/operations.md "Network faults"). 0 turns each off.
        tcp_user_timeout = env.int("DATABASE_TCP_USER_TIMEOUT_MS", default=10000)
        if tcp_user_timeout > 0:
            config["OPTIONS"].setdefault("tcp_user_timeout", tcp_user_timeout)
        keepalives_idle = env.int("DATABASE_KEEPALIVES_IDLE", default=10)
        if keepalives_idle > 0:
            config["OPTIONS"].setdefault("keepalives", 1)
            config["OPTIONS"].setdefault("keepalives_idle", keepalives_idle)
            config["OPTIONS"].setdefault("keepalives_interval", 5)
            config["OPTIONS"].setdefault("keepalives_count", 3)
        # Server-side prepared statements for the runtime's hot statements (claim, step commit);
        # Django's own queries bind client-side and never prepare. Turn off behind a pooler in
        # transaction mode (PgBouncer before 1.21): DATABASE_PREPARED_STATEMENTS=false.
        if env.bool("DATABASE_PREPARED_STATEMENTS", default=True):
            config["OPTIONS"].setdefault("prepare_threshold", 5)
        # The ASGI server runs each request's sync code on a thread of its own, so persistent
        # per-thread connections pile up until PostgreSQL refuses more (measured: 20 concurrent
        # clients exhausted max_connections=100). The web process therefore uses one bounded
        # psycopg pool instead; workers keep their persistent per-thread connections.
        if env.bool("DATABASE_POOL", default=os.environ.get("OPENRATH_PROCESS") == "asgi"):
            config["CONN_MAX_AGE"] = 0
            config["OPTIONS"]["pool"] = {
                "min_size": env.int("DATABASE_POOL_MIN_SIZE", default=2),
                "max_size": env.int("DATABASE_POOL_MAX_SIZE", default=16),
                # Waiting longer than this for a free connection is a 503 with Retry-After.
                "timeout": env.float("DATABASE_POOL_TIMEOUT", default=10.0),
                # psycopg_pool retries a failed connection with doubling delays for up to this
                # long (its default, 300 s, let the delay grow to 64 s: after a 30 s database
                # outage the web process stayed 503 for 27 s more). Giving up early is cheap:
                # the next request that finds no connection starts a fresh attempt at once.
                "reconnect_timeout": env.float("DATABASE_POOL_RECONNECT_TIMEOUT", default=5.0),
            }
            # One WAL flush per write, not two: the web process's commits do not wait for
            # theirs, and the audit row every write request ends with commits synchronously
            # (audit_record), flushing them with it before the response. Measured (py-spy, chunk
            # POSTs on the production profile, PostgreSQL shared with other jobs): the audit
            # INSERT waiting for its flush was half of the request's samples. Another session
            # may read a write in the moment before its audit row's flush; a PostgreSQL crash
            # then loses both, unanswered. Writes no audit row follows (a GET's, a failed
            # audit's) are durable within PostgreSQL's wal_writer_delay (3 x 200 ms) instead.
            # The `options` startup parameter: turn off behind PgBouncer (it refuses it).
            # Never by default in a web process that runs embedded workers (OPENRATH_DISPATCH
            # "local"): their step commits and effect-ledger intents share this pool and must
            # be durable before the step goes on, and no audit row follows them.
            if env.bool("DATABASE_ASYNC_COMMIT", default=not _embedded_dispatch()):
                if _embedded_dispatch():
                    raise ImproperlyConfigured(
                        "DATABASE_ASYNC_COMMIT=true needs runs executed outside the web process"
                        " (OPENRATH_DISPATCH=celery or none): embedded workers' step commits"
                        " share its connections and must not wait for a later flush"
                    )
                config["OPTIONS"]["options"] = "-c synchronous_commit=off"
    return config


DATABASES: dict[str, dict[str, Any]] = {"default": _database(DATABASE_URL)}
# A worker cut off in the middle of a transaction leaves its session on the server idle in
# transaction, holding its run's row lock: claims skip locked rows, so no other worker could take
# the run over until the server noticed (its TCP keepalive: hours). The runtime's transactions
# are short and do no network I/O, so a session idle that long in one is a lost client
# (network drills, docs/operations.md "Network faults"). Not the owner role's (migrations).
# Behind PgBouncer (which refuses the `options` startup parameter) set 0 and put it on the role.
# Production only by default: the embedded profile's (and the tests') transactions may wait on a
# person in `manage.py shell` or on a test's subprocess.
_IDLE_IN_TRANSACTION_MS = env.int(
    "DATABASE_IDLE_IN_TRANSACTION_TIMEOUT_MS", default=60000 if PRODUCTION else 0
)
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql" and _IDLE_IN_TRANSACTION_MS:
    _options = DATABASES["default"]["OPTIONS"]
    _options["options"] = (
        f"{_options.get('options', '')} "
        f"-c idle_in_transaction_session_timeout={_IDLE_IN_TRANSACTION_MS}"
    ).strip()
MIGRATION_DATABASE_URL = env.str("MIGRATION_DATABASE_URL", default="")
if MIGRATION_DATABASE_URL:
    DATABASES["migrations"] = _database(MIGRATION_DATABASE_URL)
    DATABASES["migrations"]["CONN_MAX_AGE"] = 0
    DATABASES["migrations"]["TEST"] = {"MIRROR": "default"}

#: The database role the runtime connects as; `openrath-migrate` grants it DML rights.
RUNTIME_DATABASE_ROLE = urlsplit(DATABASE_URL).username or ""

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Auth -------------------------------------------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "/console/login/"
LOGIN_REDIRECT_URL = "/console/"
# Login throttling (console and admin share Django's authenticate): django-axes refuses an
# account's logins for OPENRATH_LOGIN_LOCKOUT_MINUTES after OPENRATH_LOGIN_FAILURE_LIMIT failures,
# the right password included; a success resets the count. Attempts are counted per username by
# default (behind a proxy every client has the proxy's address); OPENRATH_LOGIN_LOCKOUT_BY takes
# "username", "ip_address" or a combination such as "username+ip_address", comma-separated.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_ENABLED = env.bool("OPENRATH_LOGIN_THROTTLE", default=True)
AXES_FAILURE_LIMIT = env.int("OPENRATH_LOGIN_FAILURE_LIMIT", default=5)
AXES_COOLOFF_TIME = timedelta(minutes=env.float("OPENRATH_LOGIN_LOCKOUT_MINUTES", default=15))
AXES_LOCKOUT_PARAMETERS = [
    part.split("+") if "+" in part else part
    for part in env.list("OPENRATH_LOGIN_LOCKOUT_BY", default=["username"])
]
# axes.W006 warns that a lockout without the address can be dodged by rotating a parameter
# (a user agent, a cookie); a username cannot be rotated for the same account, and the address
# alone would lock every user behind one proxy. Silenced only when the address is left out.
_LOGIN_CHECKS_SILENCED = [] if "ip_address" in str(AXES_LOCKOUT_PARAMETERS) else ["axes.W006"]
SILENCED_SYSTEM_CHECKS = list(_LOGIN_CHECKS_SILENCED)
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_CALLABLE = "openrath_project.tenancy.login_guard.lockout_response"
AXES_ENABLE_ADMIN = False  # its tables are not tenant-scoped: never shown in the admin
AXES_DISABLE_ACCESS_LOG = True  # successful logins are in the audit log already
AXES_VERBOSE = False

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

# --- Static files and storage -----------------------------------------------------------------
STATIC_URL = "/static/"
STATIC_ROOT = Path(env.str("STATIC_ROOT", default=str(DATA_DIR / "static")))
# Assets installed from a package registry at set-up time (npm), served locally, never a CDN.
# The console's lineage graph uses Cytoscape.js + cytoscape-dagre from
# openrath_project/console/assets/package.json (`./deploy/bin/install-dev` runs `npm ci` there);
# only their dist/ directories are served, under /static/vendor/<package>/.
OPENRATH_VENDOR_DIR = Path(
    env.str(
        "OPENRATH_VENDOR_DIR",
        default=str(BASE_DIR / "openrath_project" / "console" / "assets" / "node_modules"),
    )
)
OPENRATH_VENDOR_PACKAGES = ("cytoscape", "cytoscape-dagre")
STATICFILES_DIRS: list[Any] = [
    (f"vendor/{name}", OPENRATH_VENDOR_DIR / name / "dist")
    for name in OPENRATH_VENDOR_PACKAGES
    if (OPENRATH_VENDOR_DIR / name / "dist").is_dir()
]
if not PRODUCTION:
    STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # WhiteNoise serves finders; it wants a root
WHITENOISE_USE_FINDERS = not PRODUCTION
WHITENOISE_AUTOREFRESH = False

S3_ENDPOINT_URL = env.str("S3_ENDPOINT_URL", default="")
S3_BUCKET = env.str("S3_BUCKET", default="")
S3_REGION = env.str("S3_REGION", default="us-east-1")

STORAGES: dict[str, dict[str, Any]] = {
    "default": {
        "BACKEND": "django.core.files.storage.FileSystemStorage",
        "OPTIONS": {"location": str(DATA_DIR / "artifacts")},
    },
    "staticfiles": {
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"
        if not PRODUCTION
        else "whitenoise.storage.CompressedManifestStaticFilesStorage",
    },
}
if S3_BUCKET:
    STORAGES["default"] = {
        "BACKEND": "storages.backends.s3.S3Storage",
        "OPTIONS": {
            "bucket_name": S3_BUCKET,
            "endpoint_url": S3_ENDPOINT_URL or None,
            "access_key": env.str("S3_ACCESS_KEY_ID", default=""),
            "secret_key": env.str("S3_SECRET_ACCESS_KEY", default=""),
            "region_name": S3_REGION,
            "default_acl": None,
            "file_overwrite": False,
            "querystring_auth": True,
            "addressing_style": "path",
            "signature_version": "s3v4",
        },
    }
if S3_BUCKET:
    # Bounded network waits, so an S3 outage is reported in seconds (docs/operations.md).
    from openrath_project.s3config import s3_client_config

    STORAGES["default"]["OPTIONS"]["client_config"] = s3_client_config(
        connect_timeout=env.float("S3_CONNECT_TIMEOUT", default=3.0),
        read_timeout=env.float("S3_READ_TIMEOUT", default=10.0),
        max_attempts=env.int("S3_MAX_ATTEMPTS", default=2),
    )
#: Largest artifact (``openrath_project.artifacts``); 413 ``payload_too_large`` beyond it.
OPENRATH_MAX_ARTIFACT_BYTES = env.int("OPENRATH_MAX_ARTIFACT_BYTES", default=64 * 1024 * 1024)
#: Top-level run state values longer than this (JSON bytes) are kept as artifacts.
OPENRATH_STATE_INLINE_BYTES = env.int("OPENRATH_STATE_INLINE_BYTES", default=64 * 1024)
#: Networks that may scrape ``/metrics`` (comma-separated CIDRs); empty: every address.
OPENRATH_METRICS_ALLOWED_CIDRS = env.list("OPENRATH_METRICS_ALLOWED_CIDRS", default=[])
try:
    from openrath_project.cidrs import parse_cidrs

    parse_cidrs(OPENRATH_METRICS_ALLOWED_CIDRS)
except ValueError as _exc:
    raise ImproperlyConfigured(f"OPENRATH_METRICS_ALLOWED_CIDRS: {_exc}") from _exc

# Webhooks (docs/operations.md, "Webhooks"): targets, retries, automatic disabling.
from openrath_project.secretfiles import secret_value  # noqa: E402

#: Key the signing secrets are encrypted with (or WEBHOOK_SECRET_KEY_FILE; empty: SECRET_KEY).
WEBHOOK_SECRET_KEY = secret_value("WEBHOOK_SECRET_KEY", _ENVIRON)
#: Allow loopback, private and link-local targets (development, or receivers inside the network).
WEBHOOK_ALLOW_PRIVATE_TARGETS = env.bool("WEBHOOK_ALLOW_PRIVATE_TARGETS", default=False)
#: Networks allowed as targets even though they are not public (comma-separated CIDRs).
WEBHOOK_ALLOWED_CIDRS = env.list("WEBHOOK_ALLOWED_CIDRS", default=[])
try:
    parse_cidrs(WEBHOOK_ALLOWED_CIDRS)
except ValueError as _exc:
    raise ImproperlyConfigured(f"WEBHOOK_ALLOWED_CIDRS: {_exc}") from _exc
WEBHOOK_TIMEOUT_SECONDS = env.float("WEBHOOK_TIMEOUT_SECONDS", default=10.0)
WEBHOOK_MAX_ATTEMPTS = env.int("WEBHOOK_MAX_ATTEMPTS", default=10)
WEBHOOK_RETRY_BASE_SECONDS = env.float("WEBHOOK_RETRY_BASE_SECONDS", default=30.0)
WEBHOOK_RETRY_MAX_SECONDS = env.float("WEBHOOK_RETRY_MAX_SECONDS", default=6 * 3600.0)
WEBHOOK_DISABLE_AFTER_FAILURES = env.int("WEBHOOK_DISABLE_AFTER_FAILURES", default=20)
WEBHOOK_DISABLE_AFTER_SECONDS = env.float("WEBHOOK_DISABLE_AFTER_SECONDS", default=24 * 3600.0)
#: Deliveries one reconciler pass attempts at most, and the time it spends starting them.
WEBHOOK_TICK_LIMIT = env.int("WEBHOOK_TICK_LIMIT", default=50)
WEBHOOK_TICK_SECONDS = env.float("WEBHOOK_TICK_SECONDS", default=10.0)

# --- Redis, Celery, Channels ------------------------------------------------------------------
REDIS_URL = env.str("REDIS_URL", default="")

# The longest a lease may last before the reconciler requeues its run. Celery's visibility
# timeout must exceed it, so a message is never redelivered while its lease is still valid.
OPENRATH_LEASE_SECONDS = env.int("OPENRATH_LEASE_SECONDS", default=30)

#: Where run hints go: "celery" (broker), "local" (in-process worker threads) or "none".
OPENRATH_DISPATCH = env.str("OPENRATH_DISPATCH", default="celery" if PRODUCTION else "local")
#: Threads of the embedded in-process worker (started by `manage.py serve`).
OPENRATH_EMBEDDED_WORKERS = env.int("OPENRATH_EMBEDDED_WORKERS", default=2)
#: Most queued runs a tenant may have (429 beyond it).
OPENRATH_MAX_QUEUED_RUNS_PER_TENANT = env.int("OPENRATH_MAX_QUEUED_RUNS_PER_TENANT", default=1000)
#: Seconds a step gets to stop after its soft timeout before the hard backstop.
OPENRATH_HARD_TIMEOUT_GRACE = env.float("OPENRATH_HARD_TIMEOUT_GRACE", default=10.0)

CELERY_BROKER_URL = REDIS_URL or "memory://"
CELERY_BROKER_CONNECTION_TIMEOUT = 2
# Workers and beat reconnect to the broker for as long as it is away (with 1, a worker exited 2 s
# into a Redis outage: tests/drills/test_outage_drills.py). Publishing a run hint does not wait
# on this: dispatch.send() bounds its own retries and the reconciler re-sends what was dropped.
CELERY_BROKER_CONNECTION_MAX_RETRIES = None
CELERY_TASK_TIME_LIMIT = env.int("OPENRATH_TASK_TIME_LIMIT", default=6 * 3600)
CELERY_BEAT_SCHEDULE = {
    "openrath-reconcile": {"task": "runs_app.tasks.reconcile", "schedule": 5.0},
}
CELERY_TASK_ALWAYS_EAGER = False
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_IGNORE_RESULT = True
# No result backend is configured ("disabled", which holds no state): one shared instance, not
# one per thread. The web process runs each request on a thread of its own, so Celery built a
# backend for every run POST's dispatch (a cProfile of run POSTs: about 0.5 ms of each).
CELERY_RESULT_BACKEND_THREAD_SAFE = True
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": max(3600, OPENRATH_LEASE_SECONDS * 4),
    # No broker call may wait forever: a synchronous command (a publish, an ack, the restore of
    # unacknowledged messages on reconnect) on a connection that went silent gives up after 10 s
    # and the worker reconnects; kombu also drops a BRPOP connection whose reply is overdue by
    # more than 10 s (health_check_interval), and TCP keepalive finds a dead peer.
    "socket_timeout": 10,
    "socket_connect_timeout": 2,
    "socket_keepalive": True,
    "health_check_interval": 10,
}
CELERY_TIMEZONE = "UTC"
# Celery's Django fixup closes every database connection before and after every task unless
# this is set: each run a Celery worker executed opened a new PostgreSQL backend (its catalogue
# caches cold, the claim and step statements prepared again: about 7 ms of the claim's parse and
# bind alone, measured in the server log). Connections are kept as in the web tier and the
# database worker, for CONN_MAX_AGE, and closed when obsolete or unusable at every task's start
# and end (openrath_project/celery.py); this only stops the fixup closing them by count.
CELERY_DB_REUSE_MAX = 2**31
# Workers keep LOGGING (JSON lines with run and step) instead of Celery's own root handler.
CELERY_WORKER_HIJACK_ROOT_LOGGER = False

if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {
                # redis-py's pools stop at 100 connections and then raise: a burst of WebSocket
                # connects (each joins a group) would fail. Redis allows 10000 clients.
                "hosts": [
                    {
                        "address": REDIS_URL,
                        "max_connections": env.int(
                            "OPENRATH_CHANNELS_REDIS_MAX_CONNECTIONS", default=1000
                        ),
                        # redis-py 8 reads with a 5 s socket timeout by default, the length of
                        # channels_redis's blocking BZPOPMIN: an idle stream's receive timed out
                        # and the socket closed after 5 s without a chunk (measured). Longer.
                        "socket_timeout": env.float("OPENRATH_CHANNELS_REDIS_TIMEOUT", 15.0),
                    }
                ],
                "capacity": 1500,
                "expiry": 30,
            },
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

# WebSocket streams (docs/streaming.md).
#: Open streams one principal may hold (4429 beyond it); counted in Redis when REDIS_URL is set.
OPENRATH_MAX_WS_PER_PRINCIPAL = env.int("OPENRATH_MAX_WS_PER_PRINCIPAL", default=50)
#: Every this often an open stream re-checks its credentials and scope and re-reads the database.
OPENRATH_WS_RECHECK_SECONDS = env.float("OPENRATH_WS_RECHECK_SECONDS", default=30.0)
#: Hints the publisher queues in a process before it drops (and counts) them.
OPENRATH_WS_HINT_QUEUE = env.int("OPENRATH_WS_HINT_QUEUE", default=10_000)
#: Threads (so database connections) the WebSocket streams of a process read with.
OPENRATH_WS_DB_THREADS = env.int("OPENRATH_WS_DB_THREADS", default=8)

# --- API --------------------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "openrath_project.api.authentication.BearerTokenAuthentication",
        "openrath_project.api.authentication.ConsoleSessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["openrath_project.api.permissions.GrantRequired"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["openrath_project.api.parsers.StrictJSONParser"],
    "DEFAULT_PAGINATION_CLASS": "openrath_project.api.pagination.CursorPage",
    "DEFAULT_THROTTLE_CLASSES": ["openrath_project.api.throttling.WriteRateThrottle"],
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_SCHEMA_CLASS": "openrath_project.api.schema.OpenRathAutoSchema",
    "EXCEPTION_HANDLER": "openrath_project.api.exceptions.exception_handler",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
    "PAGE_SIZE": 50,
}

SPECTACULAR_SETTINGS = {
    "TITLE": "OpenRath on Django API",
    "DESCRIPTION": (
        "Durable multi-agent, multi-session LLM workflows. Authenticate with "
        "`Authorization: Bearer <token>`; every operation states the grant it needs in "
        '`x-required-grant`. Errors are `{"error": {"code", "message", "details"}}`.'
    ),
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    "SCHEMA_PATH_PREFIX": r"/api/v1",
    "AUTHENTICATION_WHITELIST": ["openrath_project.api.authentication.BearerTokenAuthentication"],
    "ENUM_NAME_OVERRIDES": {
        "ChunkKindEnum": "sessions_app.chunk_rules.KINDS",
        "ChunkRoleEnum": "sessions_app.chunk_rules.ROLES",
        "InterruptKindEnum": "runs_app.models.INTERRUPT_KINDS",
        "InterruptDecisionEnum": "runs_app.models.DECISIONS",
        "RunStatusEnum": "runs_app.transitions.STATUSES",
        "ScheduleKindEnum": "schedules_app.timing.KINDS",
        "WebhookDeliveryStatusEnum": "webhooks_app.models.DELIVERY_STATUSES",
        "WebhookEventTypeEnum": "webhooks_app.models.EVENT_TYPES",
    },
    "DISABLE_ERRORS_AND_WARNINGS": False,
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "openrath_project.api.schema.strip_database_integer_bounds",
        "openrath_project.api.schema.strict_request_bodies",
    ],
}

#: Largest request body accepted anywhere (413 beyond it).
OPENRATH_MAX_REQUEST_BYTES = env.int("OPENRATH_MAX_REQUEST_BYTES", default=2 * 1024 * 1024)
DATA_UPLOAD_MAX_MEMORY_SIZE = OPENRATH_MAX_REQUEST_BYTES
OPENRATH_MAX_PAGE_SIZE = env.int("OPENRATH_MAX_PAGE_SIZE", default=200)
#: Write rate limit per API token / console user: a token bucket (429 with Retry-After).
OPENRATH_RATE_LIMIT_WRITES_PER_MINUTE = env.int("OPENRATH_RATE_LIMIT_WRITES_PER_MINUTE", 600)
OPENRATH_RATE_LIMIT_BURST = env.int("OPENRATH_RATE_LIMIT_BURST", default=120)
#: Seconds a process trusts a bearer token it validated (openrath_project/api/authentication.py):
#: a revocation is refused everywhere within this bound; 0 checks the database on every request.
OPENRATH_TOKEN_CACHE_SECONDS = env.float("OPENRATH_TOKEN_CACHE_SECONDS", default=5.0)
#: Largest content of one chunk (413 beyond it).
OPENRATH_MAX_CHUNK_BYTES = env.int("OPENRATH_MAX_CHUNK_BYTES", default=256 * 1024)

# The user's workflow modules (docs/authoring.md). The product's own demo workflows (the
# quickstart's research team, docs/examples.md) are registered in addition to them, by default in
# the embedded profile only: setting OPENRATH_WORKFLOW_MODULES never unregisters the demo.
OPENRATH_WORKFLOW_MODULES = env.list("OPENRATH_WORKFLOW_MODULES", default=[])
# Tracing (docs/observability.md): exporting is switched by the standard OTEL_* variables.
# Projects ("tenant/project", "*" for all) whose prompt and completion text may go into spans.
OPENRATH_TRACE_CONTENT_PROJECTS = tuple(env.list("OPENRATH_TRACE_CONTENT_PROJECTS", default=[]))
# The console links a run's trace id here: "https://tracing.example/trace/{trace_id}".
OPENRATH_TRACE_URL_TEMPLATE = env.str("OPENRATH_TRACE_URL_TEMPLATE", default="")
OPENRATH_DEMO_WORKFLOW_MODULES = (
    ["openrath_project.examples.research_team"]
    if env.bool("OPENRATH_DEMO_WORKFLOWS", default=not PRODUCTION)
    else []
)
ADMIN_PATH = env.str("OPENRATH_ADMIN_PATH", default="admin/").strip("/") + "/"

# --- Security (production) --------------------------------------------------------------------
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_SAMESITE = "Lax"
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
#: A console (and admin) login lasts this many seconds, then the user logs in again; open
#: WebSocket streams of that login close at their next re-check.
SESSION_COOKIE_AGE = env.int("OPENRATH_CONSOLE_SESSION_SECONDS", default=8 * 60 * 60)
# No inline script or style anywhere (console, admin, API docs): everything is a static file of
# this origin; the live streams connect back to it (connect-src 'self' covers ws:/wss:).
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "img-src": ["'self'", "data:"],
        "font-src": ["'self'"],
        "connect-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'none'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    },
}
if PRODUCTION:
    SESSION_COOKIE_SECURE = env.bool("SESSION_COOKIE_SECURE", default=True)
    CSRF_COOKIE_SECURE = env.bool("CSRF_COOKIE_SECURE", default=True)
    SECURE_SSL_REDIRECT = env.bool("SECURE_SSL_REDIRECT", default=True)
    # Probes and scrapers reach the pod over plain HTTP inside the cluster.
    SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^metrics$"]
    SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", default=31_536_000)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", default=True)
    SECURE_HSTS_PRELOAD = env.bool("SECURE_HSTS_PRELOAD", default=False)
    if env.bool("SECURE_PROXY_SSL_HEADER", default=True):
        SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SILENCED_SYSTEM_CHECKS = _LOGIN_CHECKS_SILENCED + env.list(
        # W021: HSTS preload is an explicit opt-in (SECURE_HSTS_PRELOAD=true).
        "SILENCED_SYSTEM_CHECKS",
        default=[] if env.bool("SECURE_HSTS_PRELOAD", default=False) else ["security.W021"],
    )

# --- Logging ----------------------------------------------------------------------------------
LOG_LEVEL = env.str("LOG_LEVEL", default="INFO")
LOG_FORMAT = env.str("OPENRATH_LOG_FORMAT", default="json" if PRODUCTION else "text")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"context": {"()": "openrath_project.jsonlog.ContextFilter"}},
    "formatters": {
        "json": {"()": "openrath_project.jsonlog.JsonFormatter"},
        "text": {
            "format": "%(asctime)s %(levelname)s %(name)s [req=%(request_id)s] %(message)s",
        },
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": LOG_FORMAT,
            "filters": ["context"],
        }
    },
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {
        "django.db.backends": {"level": "INFO"},
        "celery": {"level": "INFO"},
        # django-axes logs every login at INFO; lockouts (WARNING) still show, and the audit
        # log has the rest.
        "axes": {"level": "WARNING"},
    },
}
