"""``celery -A openrath_project worker --metrics-port P``: Prometheus metrics of a Celery worker.

Steps run in the pool's child processes, so the worker's metrics are only complete with
``PROMETHEUS_MULTIPROC_DIR`` set (one directory per machine): the server in the worker's main
process then reports every process of the machine (docs/operations.md, "Metrics").
"""

from __future__ import annotations

import logging
from typing import Any

from celery import Celery, bootsteps
from click import Option

logger = logging.getLogger(__name__)


class MetricsServerStep(bootsteps.StartStopStep):
    """Starts the metrics HTTP server once the pool is up, when ``--metrics-port`` is given."""

    requires = ("celery.worker.components:Pool",)

    def __init__(
        self,
        parent: Any,
        metrics_port: int | None = None,
        metrics_addr: str = "0.0.0.0",  # noqa: S104 - scraped from other machines
        **options: Any,
    ) -> None:
        super().__init__(parent, **options)
        self.port = metrics_port
        self.addr = metrics_addr

    def start(self, parent: Any) -> None:
        if self.port is None:
            return
        from openrath_project.metrics import MULTIPROC_DIR, start_metrics_server

        if not MULTIPROC_DIR:
            logger.warning(
                "--metrics-port without PROMETHEUS_MULTIPROC_DIR: the pool's child processes "
                "(where steps run) are not included"
            )
        start_metrics_server(int(self.port), self.addr)


def install_metrics_option(app: Celery) -> None:
    """Add ``--metrics-port`` / ``--metrics-addr`` to ``celery worker``."""
    app.user_options["worker"].add(
        Option(
            ["--metrics-port"],
            type=int,
            default=None,
            help="Serve Prometheus metrics on this port.",
        )
    )
    app.user_options["worker"].add(
        Option(
            ["--metrics-addr"],
            default="0.0.0.0",  # noqa: S104 - scraped from other machines
            help="Address of --metrics-port (default: all interfaces).",
        )
    )
    app.steps["worker"].add(MetricsServerStep)
