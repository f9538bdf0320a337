"""OpenRath on Django: settings, URLs, entry points, the `flow` facade and tenancy."""

# The Celery app is created whenever Django is (the usual Django + Celery set-up), so the
# web process's run hints (`send_task`, runs_app.dispatch) go to this app's broker (REDIS_URL),
# not to Celery's unconfigured default app.
from openrath_project.celery import app as celery_app

__all__ = ("celery_app",)
