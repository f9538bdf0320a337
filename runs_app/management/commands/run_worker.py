from __future__ import annotations

import signal
import threading
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from openrath_project.startup import require_migrations_applied
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

    def handle(self, *args: Any, **options: Any) -> None:
        require_migrations_applied("the worker")
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
