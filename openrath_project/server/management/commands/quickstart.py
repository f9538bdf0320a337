from __future__ import annotations

import secrets
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser

from openrath_project.startup import workflow_modules_refusal
from openrath_project.tenancy import services
from openrath_project.tenancy.management.cli import audit_cli
from openrath_project.tenancy.models import ApiToken, Membership, Project, Tenant

DEMO_TENANT = "demo"
DEMO_PROJECT = "demo"
DEMO_USER = "operator"
#: The name of the demo's API token: each quickstart revokes the previous one and prints a new one
#: (a raw token is shown once and never stored, so it cannot be printed again).
DEMO_TOKEN_NAME = "quickstart"  # noqa: S105 (a token's display name, not a secret)

#: How to get an admin login (the demo operator is no staff member): Django's own command, run
#: in the same shell and directory as the quickstart so it writes the same database.
ADMIN_LOGIN_HINT = (
    ".venv/bin/python manage.py createsuperuser --username admin  (asks for an email and a "
    "password; a superuser sees every tenant in the admin)"
)

DEMO_WORKFLOW = "research_team"
#: One demo run per data directory: re-running the quickstart shows the same run again.
DEMO_IDEMPOTENCY_KEY = "quickstart-demo"


class Command(BaseCommand):
    help = (
        "The embedded quickstart: migrate, create a demo tenant, project, operator login and API "
        "token (idempotent), print them, then serve the console, admin and API."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--no-serve", action="store_true", help="set up, print, and exit")
        parser.add_argument(
            "--no-demo",
            action="store_true",
            help="do not start the research-team demo run",
        )

    def _demo_password(self) -> str:
        """The demo login's password, kept in the data dir so re-runs print the same one."""
        path = settings.DATA_DIR / "demo-password"
        if not path.exists():
            path.write_text(secrets.token_urlsafe(12))
            path.chmod(0o600)
        return path.read_text().strip()

    def handle(self, *args: Any, **options: Any) -> None:
        # Before anything is created or printed: the server would refuse to start anyway.
        refusal = workflow_modules_refusal("the quickstart")
        if refusal is not None:
            raise CommandError(refusal)
        call_command("migrate", interactive=False, verbosity=0)
        tenant = Tenant.objects.filter(slug=DEMO_TENANT).first() or services.tenant_create(
            slug=DEMO_TENANT, name="Demo"
        )
        project = Project.objects.filter(tenant=tenant, slug=DEMO_PROJECT).first()
        if project is None:
            project = services.project_create(tenant=tenant, slug=DEMO_PROJECT, name="Demo")
        password = self._demo_password()
        user = get_user_model().objects.filter(username=DEMO_USER).first()
        if user is None:
            services.user_join_tenant(
                tenant=tenant, username=DEMO_USER, role="operator", password=password
            )
        elif not Membership.objects.filter(user=user, tenant=tenant).exists():
            services.user_join_tenant(tenant=tenant, username=DEMO_USER, role="operator")
        revoked = self._revoke_previous_demo_tokens(tenant)
        token, raw = services.token_create(
            tenant=tenant, name=DEMO_TOKEN_NAME, grants=["*"], projects=[]
        )
        audit_cli(
            action="token.create",
            tenant=tenant,
            object_type="token",
            object_id=token.prefix,
            details={"grants": token.grants, "via": "quickstart"},
        )
        base = f"http://{options['host']}:{options['port']}"
        demo = None if options["no_demo"] else self._demo_run(project)
        lines = [
            "",
            f"OpenRath on Django ({settings.PROFILE} profile, data in {settings.DATA_DIR})",
            f"  console login : {base}/console/  user {DEMO_USER!r}, password {password!r}",
            f"  approvals     : {base}/console/approvals/  (runs: {base}/console/runs/)",
            f"  admin         : {base}/{settings.ADMIN_PATH}  (staff only: the operator above "
            "cannot open it)",
            f"  admin login   : {ADMIN_LOGIN_HINT}",
            f"  API docs      : {base}/api/v1/docs/",
            f"  API token     : {raw}"
            + (
                f"  (replaces the previous demo token, now revoked: prefix {', '.join(revoked)})"
                if revoked
                else ""
            ),
            f"  try           : curl -H 'Authorization: Bearer {raw}' {base}/api/v1/projects/",
            "",
        ]
        if demo is not None:
            report = settings.DATA_DIR / "reports" / f"{demo.id}.md"
            lines[-1:-1] = [
                f"  demo run      : {base}/console/runs/{demo.id}/  ({demo.workflow}, "
                f"{self._demo_state(demo, base)})",
                f"  its lineage   : {base}/console/sessions/{demo.session_id}/lineage/",
                f"  its report    : {report} "
                + ("(written)" if report.exists() else "(written once you approve)"),
            ]
        self.stdout.write("\n".join(lines))
        if options["no_serve"]:
            return
        call_command("serve", host=options["host"], port=options["port"])

    def _revoke_previous_demo_tokens(self, tenant: Tenant) -> list[str]:
        """Revoke the demo tokens earlier quickstarts printed; their prefixes."""
        prefixes = list(
            ApiToken.objects.filter(
                tenant=tenant, name=DEMO_TOKEN_NAME, revoked_at__isnull=True
            ).values_list("prefix", flat=True)
        )
        for prefix in prefixes:
            services.token_revoke(prefix=prefix)
            audit_cli(
                action="token.revoke",
                tenant=tenant,
                object_type="token",
                object_id=prefix,
                details={"via": "quickstart", "reason": "rotated by a new quickstart"},
            )
        return prefixes

    @staticmethod
    def _demo_state(demo: Any, base: str) -> str:
        """What the demo run is doing now, and what the operator can do about it."""
        if demo.status == "waiting":
            return f"waiting; approve it at {base}/console/approvals/"
        if demo.status in {"queued", "running"}:
            return f"{demo.status}; it will wait for your approval at {base}/console/approvals/"
        return str(demo.status)

    def _demo_run(self, project: Project) -> Any:
        """Start (once) the research team demo, which pauses for an operator's approval."""
        from runs_app import services as run_services
        from runs_app.registration import workflows
        from runs_app.registry import UnknownWorkflow

        try:
            entry = workflows().get(DEMO_WORKFLOW)
        except UnknownWorkflow:
            self.stderr.write(
                f"the demo workflow {DEMO_WORKFLOW!r} is not registered "
                "(OPENRATH_WORKFLOW_MODULES); no demo run started"
            )
            return None
        from openrath_project.examples.research_team import QUESTION

        run, _ = run_services.run_create(
            project=project,
            workflow=entry,
            user_message=QUESTION,
            idempotency_key=DEMO_IDEMPOTENCY_KEY,
            created_by="quickstart",
        )
        return run
