from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.validation import validate_schema

DEFAULT_PATH = Path(settings.BASE_DIR) / "deploy" / "openapi-v1.json"


def render_schema() -> str:
    """The OpenAPI document as committed: validated, keys sorted, stable across runs."""
    schema = SchemaGenerator().get_schema(request=None, public=True)
    validate_schema(schema)
    return json.dumps(schema, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


class Command(BaseCommand):
    help = (
        "Write the OpenAPI document to deploy/openapi-v1.json; with --check, fail when the "
        "committed file is stale. Prints the path on the last line."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--check", action="store_true")
        parser.add_argument("--path", default=str(DEFAULT_PATH))

    def handle(self, *args: Any, **options: Any) -> None:
        path = Path(options["path"])
        rendered = render_schema()
        if options["check"]:
            current = path.read_text() if path.exists() else ""
            if current != rendered:
                raise CommandError(
                    f"{path} is stale: run `python manage.py openapi` and commit the result"
                )
            self.stdout.write("the committed OpenAPI document is current")
        else:
            path.write_text(rendered)
            self.stdout.write("wrote the OpenAPI document")
        self.stdout.write(str(path))
