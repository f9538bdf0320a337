from __future__ import annotations

import getpass
import os
from typing import Any

from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from openrath_project.tenancy import services
from openrath_project.tenancy.grants import ROLES
from openrath_project.tenancy.management.cli import audit_cli, call_service, get_tenant

PASSWORD_ENV = "OPENRATH_NEW_PASSWORD"  # noqa: S105 - the name of a variable, not a secret


class Command(BaseCommand):
    help = (
        "Create a console user (or add an existing one) in a tenant with a role. The password "
        f"comes from {PASSWORD_ENV} or is prompted. Prints the username on the last line."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("tenant")
        parser.add_argument("username")
        parser.add_argument("--role", choices=ROLES, required=True)

    def _password(self) -> str:
        password = os.environ.get(PASSWORD_ENV, "")
        if password:
            return password
        if not os.isatty(0):
            raise CommandError(f"set {PASSWORD_ENV} (no terminal to prompt for a password)")
        first = getpass.getpass("Password: ")
        if first != getpass.getpass("Password (again): "):
            raise CommandError("the passwords differ")
        return first

    def handle(self, *args: Any, **options: Any) -> None:
        from django.contrib.auth import get_user_model

        tenant = get_tenant(options["tenant"])
        username = options["username"]
        exists = get_user_model().objects.filter(username=username).exists()
        password = None
        if not exists:
            password = self._password()
            try:
                validate_password(password)
            except ValidationError as exc:
                raise CommandError("password rejected: " + " ".join(exc.messages)) from exc
        user, created = call_service(
            services.user_join_tenant,
            tenant=tenant,
            username=username,
            role=options["role"],
            password=password,
        )
        audit_cli(
            action="membership.create",
            tenant=tenant,
            object_type="user",
            object_id=str(user.pk),
            details={"username": username, "role": options["role"], "user_created": created},
        )
        verb = "created user" if created else "added existing user"
        self.stdout.write(f"{verb} {username} to tenant {tenant.slug} as {options['role']}")
        self.stdout.write(username)
