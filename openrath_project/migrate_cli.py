"""``openrath-migrate [--check]``: the console script around ``manage.py openrath_migrate``."""

from __future__ import annotations

import os
import sys


def main(argv: list[str] | None = None) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "openrath_project.settings")
    from django.core.management import execute_from_command_line

    args = sys.argv[1:] if argv is None else argv
    execute_from_command_line(["openrath-migrate", "openrath_migrate", *args])


if __name__ == "__main__":
    main()
