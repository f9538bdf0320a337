from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from openrath_project.server.web_workers import ENV_NAME, default_web_workers
from openrath_project.startup import workflow_modules_refusal


class Command(BaseCommand):
    help = "Serve HTTP and WebSocket (ASGI, uvicorn) for this profile."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument(
            "--workers",
            type=int,
            default=None,
            help=f"uvicorn worker processes (default: {ENV_NAME}, else one per CPU in the "
            "production profile and one in the embedded profile)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        import uvicorn

        # Checked here too, before uvicorn starts: with --workers N its supervisor would
        # restart each refusing child process again and again.
        refusal = workflow_modules_refusal("the server")
        if refusal is not None:
            raise CommandError(refusal)
        workers = options["workers"]
        if workers is None:
            try:
                workers = default_web_workers(production=settings.PRODUCTION)
            except ValueError as exc:
                raise CommandError(str(exc)) from exc
        if workers < 1:
            raise CommandError("--workers must be at least 1")

        # The embedded workers start in each server process from the ASGI lifespan
        # (openrath_project.lifespan), as under `uvicorn openrath_project.asgi:application`.
        address = f"http://{options['host']}:{options['port']}/"
        self.stdout.write(
            f"serving the {settings.PROFILE} profile on {address} with {workers} process(es)"
        )
        uvicorn.run(
            "openrath_project.asgi:application",
            host=options["host"],
            port=options["port"],
            workers=workers,
            log_level="info",
            proxy_headers=True,
            lifespan="on",
        )
