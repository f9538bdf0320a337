"""The operator CLI: each command prints its result last and fails readably."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from openrath_project.tenancy.models import ApiToken, AuditEvent, Membership, Project, Tenant
from openrath_project.tenancy.services import token_authenticate

pytestmark = pytest.mark.django_db


def _run(capsys, *args):
    call_command(*args)
    return capsys.readouterr().out.strip().splitlines()


def test_cli_end_to_end(capsys, monkeypatch):
    assert _run(capsys, "create_tenant", "acme")[-1] == str(Tenant.objects.get(slug="acme").id)
    assert _run(capsys, "create_project", "acme", "research")[-1] == str(
        Project.objects.get(slug="research").id
    )
    monkeypatch.setenv("OPENRATH_NEW_PASSWORD", "a-long-enough-passphrase")
    assert _run(capsys, "create_user", "acme", "olivia", "--role", "operator")[-1] == "olivia"
    assert Membership.objects.get(user__username="olivia").role == "operator"
    out = _run(
        capsys,
        "create_token",
        "acme",
        "--grants",
        "runs:read,runs:write",
        "--project",
        "research",
        "--name",
        "ci",
        "--expires-in",
        "3600",
    )
    token = token_authenticate(out[-1])
    assert out[0] == (
        f"token {token.prefix} named 'ci' for tenant acme, projects: research, "
        "grants: runs:read, runs:write; store it now, it is not shown again:"
    )
    assert token.name == "ci"
    assert token.grants == ["runs:read", "runs:write"]
    assert [p.slug for p in token.projects.all()] == ["research"]
    assert token.expires_at is not None
    listed = _run(capsys, "list_tokens", "acme")
    assert listed[-1] == "1 token(s)"
    assert listed[0].startswith(token.prefix)
    assert "active" in listed[0]
    assert out[-1] not in "\n".join(listed)
    assert _run(capsys, "revoke_token", token.prefix)[-1] == token.prefix
    assert ApiToken.objects.get(pk=token.pk).revoked_at is not None
    actions = list(AuditEvent.objects.order_by("id").values_list("action", "actor"))
    assert [a for a, _ in actions] == [
        "tenant.create",
        "project.create",
        "membership.create",
        "token.create",
        "token.revoke",
    ]
    assert all(actor.startswith("cli:") for _, actor in actions)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("create_tenant", "Bad Slug"), "slug must be"),
        (("create_project", "nope", "x"), "no tenant with slug 'nope'"),
        (("create_token", "acme", "--grants", "runs:read,runs:fly"), "unknown grant(s): runs:fly"),
        (("create_token", "acme", "--grants", "runs:read", "--project", "zzz"), "no project"),
        (("create_token", "acme", "--grants", "runs:read", "--expires-in", "-5"), "positive"),
        (("revoke_token", "ort_nosuchpref_x"), "no token with prefix"),
    ],
)
def test_errors_are_readable(tenant, args, message):
    with pytest.raises(CommandError, match=message.replace("(", r"\(").replace(")", r"\)")):
        call_command(*args)


@pytest.mark.parametrize(
    "grant_args",
    [
        ("runs:read", "runs:write", "memory:read"),
        ("runs:read,runs:write,memory:read",),
        ("runs:read,", "runs:write", " memory:read , runs:read"),
    ],
    ids=["spaces", "commas", "mixed"],
)
def test_grants_may_be_space_or_comma_separated(tenant, capsys, grant_args):
    out = _run(capsys, "create_token", "acme", "--grants", *grant_args, "--name", "ci")
    token = token_authenticate(out[-1])
    assert token.grants == ["memory:read", "runs:read", "runs:write"]
    assert "grants: memory:read, runs:read, runs:write;" in out[0]


def test_an_unnamed_token_for_every_project_says_so(tenant, capsys):
    out = _run(capsys, "create_token", "acme", "--grants", "runs:read")
    token = token_authenticate(out[-1])
    assert token.name == token.prefix  # an unnamed token is named by its prefix
    assert out[0] == (
        f"token {token.prefix} for tenant acme, projects: all, grants: runs:read; "
        "store it now, it is not shown again:"
    )


def test_unknown_space_separated_grant_is_refused_and_mints_nothing(tenant):
    with pytest.raises(CommandError) as excinfo:
        call_command("create_token", "acme", "--grants", "runs:read", "runs:fly", "sessions:swim")
    assert str(excinfo.value).startswith("unknown grant(s): runs:fly, sessions:swim; known grants:")
    assert not ApiToken.objects.exists()
    assert not AuditEvent.objects.filter(action="token.create").exists()


def test_grants_need_at_least_one_name(tenant):
    with pytest.raises(CommandError, match="a token needs at least one grant"):
        call_command("create_token", "acme", "--grants", ",", " ")
    with pytest.raises(CommandError, match="expected at least one argument"):
        call_command("create_token", "acme", "--grants")
    assert not ApiToken.objects.exists()


def test_duplicate_tenant_and_member(tenant, monkeypatch):
    with pytest.raises(CommandError, match="already exists"):
        call_command("create_tenant", "acme")
    monkeypatch.setenv("OPENRATH_NEW_PASSWORD", "a-long-enough-passphrase")
    call_command("create_user", "acme", "ann", "--role", "viewer")
    with pytest.raises(CommandError, match="already a member"):
        call_command("create_user", "acme", "ann", "--role", "admin")


def test_weak_password_is_refused(tenant, monkeypatch):
    monkeypatch.setenv("OPENRATH_NEW_PASSWORD", "123")
    with pytest.raises(CommandError, match="password rejected"):
        call_command("create_user", "acme", "weak", "--role", "viewer")


def test_failing_command_exits_non_zero(tmp_path):
    from tests.support import run_manage

    env = {"OPENRATH_DATA_DIR": str(tmp_path), "DATABASE_URL": f"sqlite:///{tmp_path}/x.db"}
    assert run_manage("migrate", "-v0", env=env).returncode == 0
    result = run_manage("create_project", "ghost", "p", env=env)
    assert result.returncode == 1
    assert "no tenant with slug 'ghost'" in result.stderr
