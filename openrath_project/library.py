"""Zero set-up for scripts: the library configures Django on first use.

``from openrath_project import flow`` (or ``openrath_project.session`` / ``.backend``) in a
plain script, notebook or test needs no settings and no server. The first name that needs the
database calls :func:`ensure_ready`, which:

* inside a configured Django process (the server, a worker, ``manage.py``, pytest-django) does
  nothing at all;
* in a plain process sets ``DJANGO_SETTINGS_MODULE`` to the product's settings (the embedded
  profile unless ``OPENRATH_PROFILE`` says otherwise: SQLite under ``OPENRATH_DATA_DIR``,
  default ``./.openrath``), calls ``django.setup()`` and, in the embedded profile, applies
  unapplied migrations quietly, under a file lock in the data directory so two scripts
  starting together do not migrate at once.

Such a process is a *library process*: a session made without a project goes to the default
project ``local/default`` (tenant ``local``, project ``default``; ``OPENRATH_LIBRARY_TENANT``
renames the tenant), created on first use, unless ``OPENRATH_DEFAULT_PROJECT`` or the call
names one. The server's embedded workers never claim runs of the library tenant, so a script
and a server sharing one data directory do not take each other's runs (docs/sessions.md).
"""

from __future__ import annotations

import contextlib
import io
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from openrath_project.tenancy.models import Project

__all__ = [
    "DEFAULT_PROJECT_SLUG",
    "DEFAULT_TENANT_SLUG",
    "default_project",
    "ensure_ready",
    "is_library_process",
    "library_tenant_slug",
]

SETTINGS_MODULE = "openrath_project.settings"
DEFAULT_TENANT_SLUG = "local"
DEFAULT_PROJECT_SLUG = "default"
LIBRARY_TENANT_SETTING = "OPENRATH_LIBRARY_TENANT"
MIGRATE_LOCK = "migrate.lock"

_lock = threading.RLock()
_ready = False
_library_process = False


def library_tenant_slug() -> str:
    """The tenant of scripts' default project (``OPENRATH_LIBRARY_TENANT``, default
    ``local``); the server's embedded workers do not claim its runs."""
    return os.environ.get(LIBRARY_TENANT_SETTING, "").strip() or DEFAULT_TENANT_SLUG


def is_library_process() -> bool:
    """Whether this process was configured by :func:`ensure_ready` (a script, not a server)."""
    return _library_process


def ensure_ready() -> None:
    """Make Django usable in this process (see the module docstring); idempotent, thread-safe."""
    global _ready, _library_process
    if _ready:
        return
    with _lock:
        if _ready:
            return
        from django.apps import apps

        if apps.ready:
            _ready = True  # a configured process: change nothing
            return
        if apps.loading:
            return  # called while Django is populating its apps: let it finish
        from django.conf import settings

        if not settings.configured and not os.environ.get("DJANGO_SETTINGS_MODULE"):
            os.environ["DJANGO_SETTINGS_MODULE"] = SETTINGS_MODULE
        if not settings.configured:
            # A script's output is its own, as with OpenRath: warnings and errors only, unless
            # the caller asks for more (LOG_LEVEL=INFO).
            os.environ.setdefault("LOG_LEVEL", "WARNING")
        import django

        django.setup()
        _library_process = True
        if not getattr(settings, "PRODUCTION", False):
            migrate_if_needed(Path(settings.DATA_DIR))
        _ready = True


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """An exclusive lock between processes (``flock``; a no-op where there is none)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        try:
            import fcntl
        except ImportError:  # pragma: no cover - Windows: no flock
            yield
            return
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def migrate_if_needed(data_dir: Path) -> None:
    """Apply the migrations ``data_dir``'s database lacks, once however many processes ask."""
    from django.core.management import call_command

    from openrath_project.tenancy.dbroles import unapplied_migrations

    # The check is under the lock too: on a fresh directory the first connection creates the
    # SQLite file and switches it to WAL, which another process starting at the same moment
    # cannot wait for (SQLite answers "database is locked" at once, whatever the busy timeout).
    with _file_lock(data_dir / MIGRATE_LOCK):
        if unapplied_migrations():  # another process may have migrated while we waited
            call_command("migrate", interactive=False, verbosity=0, stdout=io.StringIO())


def default_project() -> Project:
    """The library's default project ``<library tenant>/default``, created on first use (two
    processes creating it at once both end up with the same row)."""
    from openrath_project.errors import Conflict
    from openrath_project.tenancy.models import Project, Tenant
    from openrath_project.tenancy.services import project_create, tenant_create

    ensure_ready()
    tenant_slug = library_tenant_slug()
    tenant = Tenant.objects.filter(slug=tenant_slug).first()
    if tenant is None:
        try:
            tenant = tenant_create(slug=tenant_slug, name="Local scripts")
        except Conflict:
            tenant = Tenant.objects.get(slug=tenant_slug)
    project = Project.objects.filter(tenant=tenant, slug=DEFAULT_PROJECT_SLUG).first()
    if project is None:
        try:
            project = project_create(tenant=tenant, slug=DEFAULT_PROJECT_SLUG, name="Default")
        except Conflict:
            project = Project.objects.get(tenant=tenant, slug=DEFAULT_PROJECT_SLUG)
    return project


def lazy_attribute(module: str, exports: dict[str, str], name: str) -> Any:
    """The value of ``exports[name]`` (``"module:attr"``), after :func:`ensure_ready`; the
    unsupported-name error or ``AttributeError`` for anything else. For the compatibility
    modules' ``__getattr__``."""
    import importlib

    from openrath_project.compat import missing_name

    target = exports.get(name)
    if target is None:
        raise missing_name(module, name)
    ensure_ready()
    module_name, _, attr = target.partition(":")
    return getattr(importlib.import_module(module_name), attr)
