from __future__ import annotations

import signal
import threading
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from openrath_project.startup import require_migrations_applied, workflow_modules_refusal
from runs_app.worker import Worker, worker_name


class Command(BaseCommand):
    help = (
        "The database-claiming worker: claims runs from the database and executes them, and "
        "runs the reconciler. Needs no broker. Prints how many runs it executed on the last "
        "line when it stops (SIGTERM/SIGINT finish the current run first)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--threads", type=int, default=1)
        parser.add_argument("--max-runs", type=int, default=None)
        parser.add_argument(
            "--idle-exit", type=float, default=None, help="exit after this many idle seconds"
        )
        parser.add_argument("--poll", type=float, default=0.5)
        parser.add_argument("--name", default=None)
        parser.add_argument(
            "--metrics-port",
            type=int,
            default=None,
            help="serve Prometheus metrics on this port (for workers on other machines)",
        )
        parser.add_argument(
            "--metrics-addr",
            default="0.0.0.0",  # noqa: S104 - scraped from other machines
            help="address of --metrics-port (default: all interfaces)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        refusal = workflow_modules_refusal("the worker")
        if refusal is not None:  # it could execute none of those workflows' runs
            raise CommandError(refusal)
        require_migrations_applied("the worker")
        from openrath_project.publisher import install_publisher

        install_publisher(shared_layer_only=True)  # WebSocket hints (Redis layer only)
        if options["metrics_port"] is not None:
            from openrath_project.metrics import start_metrics_server

            start_metrics_server(options["metrics_port"], options["metrics_addr"])
        base = options["name"] or worker_name("db")
        workers = [
            Worker(name=f"{base}-{index}", poll_seconds=options["poll"], process_mode=True)
            for index in range(max(1, options["threads"]))
        ]

        def stop(signum: int, frame: Any) -> None:
            for worker in workers:
                worker.stop()

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        threads = [
            threading.Thread(
                target=w.loop,
                kwargs={"max_runs": options["max_runs"], "idle_exit": options["idle_exit"]},
            )
            for w in workers[1:]
        ]
        for thread in threads:
            thread.start()
        workers[0].loop(max_runs=options["max_runs"], idle_exit=options["idle_exit"])
        for thread in threads:
            thread.join()
        self.stdout.write(f"executed {sum(w.executed for w in workers)} run(s)")
        self.stdout.write(str(sum(w.executed for w in workers)))
