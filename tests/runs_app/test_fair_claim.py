"""The fair claim: tenants, then a tenant's projects, take turns; priority orders a tenant's own
runs; ``max_running_runs`` limits hold, also for concurrent claimers on PostgreSQL.

Every order test runs down both claim paths (``runs_app.services.leases``: the composed
statement on PostgreSQL, the portable ORM path forced by patching ``composed_sql``; on SQLite
only the latter) and asserts the exact sequence of claimed runs.
"""

from __future__ import annotations

import threading
import time
import uuid
from datetime import timedelta
from io import StringIO

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.db import connection, transaction
from django.test import Client
from django.utils import timezone

from openrath_project.tenancy.models import AuditEvent, Project, Tenant
from runs_app import services
from runs_app.executor import execute_claim
from runs_app.models import Run
from runs_app.services import composed as composed_path
from runs_app.services import lease_claim
from tests.factories import MembershipFactory, ProjectFactory, TenantFactory, UserFactory
from tests.support import require_postgres


@pytest.fixture(params=["composed", "orm"])
def claim_path(request, monkeypatch, db) -> str:
    """The claim path under test: ``composed`` needs PostgreSQL (skipped elsewhere)."""
    if request.param == "composed":
        require_postgres()
    else:
        monkeypatch.setattr(composed_path, "composed_sql", lambda: False)
    return request.param


def submit(registry, project: Project, count: int = 1, *, priority: int = 0) -> list[uuid.UUID]:
    workflow = registry.get("linear")
    return [
        services.run_create(project=project, workflow=workflow, state={}, priority=priority)[0].id
        for _ in range(count)
    ]


def claim_id(**kwargs) -> uuid.UUID | None:
    claim = lease_claim(worker="fair-test", **kwargs)
    return claim.run_id if claim is not None else None


def serve(registry, turns: int) -> list[uuid.UUID | None]:
    """One worker: claim, execute to the end, claim again (nothing stays running)."""
    served: list[uuid.UUID | None] = []
    for _ in range(turns):
        claim = lease_claim(worker="fair-test")
        served.append(claim.run_id if claim is not None else None)
        if claim is not None:
            assert execute_claim(claim, registry=registry).status == "succeeded"
    return served


def hold(turns: int, **kwargs) -> list[uuid.UUID | None]:
    """Claims that keep running (many workers, none finished yet)."""
    return [claim_id(**kwargs) for _ in range(turns)]


@pytest.fixture
def tenants(db) -> tuple[Project, Project, Project]:
    """Three tenants with one project each, created in this order (ids increase)."""
    return tuple(  # type: ignore[return-value]
        ProjectFactory(tenant=TenantFactory(slug=slug), slug="work") for slug in ("aa", "bb", "cc")
    )


def test_a_deep_backlog_does_not_starve_a_single_run_of_another_tenant(
    claim_path, registry, tenants
):
    """One worker, A's backlog first: B's run is the second claimed, not the last."""
    a, b, _ = tenants
    a_runs = submit(registry, a, 4)
    (b_run,) = submit(registry, b)
    assert serve(registry, 6) == [a_runs[0], b_run, *a_runs[1:], None]


@pytest.mark.django_db(transaction=True)  # the task closes its connection, as in a worker
def test_a_celery_message_executes_the_next_run_in_the_fair_order(
    claim_path, registry, tenants, monkeypatch
):
    """A message names the run that became claimable; the task executes the fair claim's run
    (so the Celery start order is fair too), and a message that finds nothing is a no-op."""
    from runs_app import tasks

    monkeypatch.setattr(tasks, "workflows", lambda: registry)
    a, b, _ = tenants
    a_runs = submit(registry, a, 3)
    (b_run,) = submit(registry, b)
    messages = [*a_runs, b_run, a_runs[0]]  # the dispatch order, then a duplicate delivery
    outcomes = [tasks.execute_run(str(run_id)) for run_id in messages]
    assert outcomes == ["succeeded"] * 4 + ["not-claimable"]
    finished = Run.objects.filter(status="succeeded").order_by("finished_at")
    assert list(finished.values_list("id", flat=True)) == [a_runs[0], b_run, *a_runs[1:]]


def test_tenants_with_backlogs_take_turns(claim_path, registry, tenants):
    """Round robin by the time each tenant was last served (a single worker: every tenant
    has 0 running at each claim)."""
    a, b, c = tenants
    a_runs, b_runs, c_runs = submit(registry, a, 3), submit(registry, b, 3), submit(registry, c)
    assert serve(registry, 8) == [
        a_runs[0],
        b_runs[0],
        c_runs[0],
        a_runs[1],
        b_runs[1],
        a_runs[2],
        b_runs[2],
        None,
    ]


def test_the_tenant_with_fewest_running_runs_goes_first(claim_path, registry, tenants):
    """Claims that stay running: each goes to the tenant with fewest running runs."""
    a, b, _ = tenants
    a_runs = submit(registry, a, 4)
    b_runs = submit(registry, b, 2)
    assert hold(7) == [a_runs[0], b_runs[0], a_runs[1], b_runs[1], a_runs[2], a_runs[3], None]


def test_priority_orders_a_tenants_own_runs_and_never_another_tenants(
    claim_path, registry, tenants
):
    a, b, _ = tenants
    (a_low,) = submit(registry, a)
    (a_high,) = submit(registry, a, priority=5)
    (b_top,) = submit(registry, b, priority=100)
    (b_low,) = submit(registry, b, priority=-1)
    # A first (neither served yet: the older tenant), with its own highest priority; B's 100
    # does not jump A's turn.
    assert serve(registry, 5) == [a_high, b_top, a_low, b_low, None]


def test_projects_of_a_tenant_take_turns_at_equal_priority(claim_path, registry, tenants):
    a, b, _ = tenants
    second = ProjectFactory(tenant=a.tenant, slug="second")
    a_runs = submit(registry, a, 3)
    second_runs = submit(registry, second, 2)
    (b_run,) = submit(registry, b)
    assert serve(registry, 7) == [
        a_runs[0],
        b_run,
        second_runs[0],
        a_runs[1],
        second_runs[1],
        a_runs[2],
        None,
    ]


def test_a_tenant_limit_caps_its_running_runs(claim_path, registry, tenants):
    a, b, _ = tenants
    Tenant.objects.filter(id=a.tenant_id).update(max_running_runs=2)
    a_runs = submit(registry, a, 4)
    (b_run,) = submit(registry, b)
    assert hold(4) == [a_runs[0], b_run, a_runs[1], None]
    assert Run.objects.filter(tenant_id=a.tenant_id, status="running").count() == 2
    # Asked for by id (a Celery delivery), a run over its tenant's limit stays queued.
    assert claim_id(run_id=a_runs[2]) is None
    assert Run.objects.get(id=a_runs[2]).status == "queued"
    # A finished run frees its place.
    claim = lease_claim(worker="fair-test", run_id=a_runs[0])
    assert claim is None  # already running: not claimable again
    Tenant.objects.filter(id=a.tenant_id).update(max_running_runs=3)
    assert hold(2) == [a_runs[2], None]


def test_a_project_limit_caps_its_running_runs_and_leaves_the_others(claim_path, registry, tenants):
    a, _, _ = tenants
    Project.objects.filter(id=a.id).update(max_running_runs=1)
    other = ProjectFactory(tenant=a.tenant, slug="other")
    a_runs = submit(registry, a, 3)
    other_runs = submit(registry, other, 2)
    assert hold(4) == [a_runs[0], other_runs[0], other_runs[1], None]
    assert Run.objects.filter(project=a, status="running").count() == 1


def test_a_limit_of_zero_pauses_and_clearing_it_resumes(claim_path, registry, tenants):
    a, _, _ = tenants
    Tenant.objects.filter(id=a.tenant_id).update(max_running_runs=0)
    (run,) = submit(registry, a)
    assert hold(1) == [None]
    Tenant.objects.filter(id=a.tenant_id).update(max_running_runs=None)
    assert hold(1) == [run]


def test_a_finished_run_frees_its_place_under_a_limit(claim_path, registry, tenants):
    a, _, _ = tenants
    Tenant.objects.filter(id=a.tenant_id).update(max_running_runs=1)
    a_runs = submit(registry, a, 3)
    assert serve(registry, 4) == [*a_runs, None]


def test_the_claim_keeps_its_filters(claim_path, registry, tenants):
    """Timers, skipped tenants and workflow names still decide what is claimable."""
    a, b, _ = tenants
    a_runs = submit(registry, a, 2)
    (b_run,) = submit(registry, b)
    Run.objects.filter(id=a_runs[0]).update(wake_at=timezone.now() + timedelta(hours=1))
    assert claim_id(workflows=("routed",)) is None
    assert claim_id(skip_tenants=("bb",)) == a_runs[1]  # A's first run sleeps
    assert claim_id(skip_tenants=("aa",)) == b_run
    assert claim_id() is None
    Run.objects.filter(id=a_runs[0]).update(wake_at=timezone.now() - timedelta(seconds=1))
    assert claim_id(workflows=("linear",)) == a_runs[0]


def test_the_last_service_is_recorded_where_others_compete(claim_path, registry, tenants):
    """A tenant (project) alone in the queue is not stamped: its order cannot change; with
    another tenant (project) competing, the claim stamps the one it served."""
    a, b, _ = tenants
    submit(registry, a, 2)
    assert claim_id() is not None
    assert Tenant.objects.get(id=a.tenant_id).last_claimed_at is None
    assert Project.objects.get(id=a.id).last_claimed_at is None
    (b_run,) = submit(registry, b)
    before = timezone.now()
    assert claim_id() == b_run  # A has a run running, B none
    tenant = Tenant.objects.get(id=b.tenant_id)
    assert tenant.last_claimed_at is not None
    assert tenant.last_claimed_at >= before
    assert Project.objects.get(id=b.id).last_claimed_at is None  # no other project of B
    assert Tenant.objects.get(id=a.tenant_id).last_claimed_at is None


# --- Concurrency (PostgreSQL: row locks) -------------------------------------------------------


def _claim_in_threads(threads: int, claims_each: int) -> list[uuid.UUID]:
    barrier = threading.Barrier(threads)
    claimed: list[uuid.UUID] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def work(index: int) -> None:
        try:
            barrier.wait(timeout=60)
            for _ in range(claims_each):
                run_id = claim_id()
                if run_id is not None:
                    with lock:
                        claimed.append(run_id)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    pool = [threading.Thread(target=work, args=(n,)) for n in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join(timeout=120)
    assert not errors, errors
    return claimed


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("level", ["tenant", "project"])
def test_concurrent_claimers_never_exceed_a_limit(registry, level):
    """Eight threads claim at once, three times each, against a limit of 3: exactly three of
    the limited runs are claimed, whatever the interleaving; the unlimited tenant's runs are
    all claimed."""
    require_postgres()
    limited = ProjectFactory(tenant=TenantFactory(slug="limited"), slug="work")
    free = ProjectFactory(tenant=TenantFactory(slug="free"), slug="work")
    if level == "tenant":
        Tenant.objects.filter(id=limited.tenant_id).update(max_running_runs=3)
    else:
        Project.objects.filter(id=limited.id).update(max_running_runs=3)
    limited_runs = set(submit(registry, limited, 12))
    free_runs = set(submit(registry, free, 6))
    claimed = _claim_in_threads(8, 3)
    assert len(claimed) == len(set(claimed))  # no run claimed twice
    assert len(set(claimed) & limited_runs) == 3
    assert set(claimed) & free_runs == free_runs
    assert Run.objects.filter(tenant_id=limited.tenant_id, status="running").count() == 3


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_claimers_of_one_project_each_get_a_run(registry):
    """Without limits, claimers of one project never wait for each other or miss a run: the
    second claimer skips the first's locked run and takes the next of the same project."""
    require_postgres()
    project = ProjectFactory(tenant=TenantFactory(slug="solo"), slug="work")
    runs = set(submit(registry, project, 16))
    claimed = _claim_in_threads(8, 2)
    assert sorted(map(str, claimed)) == sorted(map(str, runs))


def _wait_for_lock_wait(timeout: float = 60) -> None:
    """Until another backend of this database waits for a row lock (generous: a loaded
    machine)."""
    deadline = time.monotonic() + timeout
    with connection.cursor() as cursor:
        while time.monotonic() < deadline:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND wait_event_type = 'Lock'"
            )
            if cursor.fetchone()[0]:
                return
            time.sleep(0.02)
    raise AssertionError("no claim waited for the limit's row lock")


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("limit", "second_claims"), [(1, False), (2, True)])
def test_a_claim_that_counted_before_a_concurrent_claim_committed_counts_again(
    registry, limit, second_claims
):
    """The race a count in the claim statement would lose: claim 1 holds its transaction
    open; claim 2 counts 0 running, waits at the tenant's fence, and after claim 1 commits
    sees the fence moved and claims again with a fresh count: under a limit of 1 it takes
    nothing, under 2 it takes the next run."""
    require_postgres()
    project = ProjectFactory(tenant=TenantFactory(slug="raced"), slug="work")
    Tenant.objects.filter(id=project.tenant_id).update(max_running_runs=limit)
    first_run, second_run = submit(registry, project, 2)
    claimed_first = threading.Event()
    release = threading.Event()
    results: dict[str, uuid.UUID | None] = {}
    errors: list[BaseException] = []

    def first() -> None:
        try:
            with transaction.atomic():
                results["first"] = claim_id()
                claimed_first.set()
                release.wait(timeout=60)
        except BaseException as exc:
            errors.append(exc)
        finally:
            claimed_first.set()
            connection.close()

    def second() -> None:
        try:
            results["second"] = claim_id()
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    one = threading.Thread(target=first)
    one.start()
    assert claimed_first.wait(timeout=60)
    two = threading.Thread(target=second)
    two.start()
    _wait_for_lock_wait()
    release.set()
    one.join(timeout=60)
    two.join(timeout=60)
    assert not errors, errors
    assert results["first"] == first_run
    assert results["second"] == (second_run if second_claims else None)
    running = Run.objects.filter(tenant_id=project.tenant_id, status="running").count()
    assert running == (2 if second_claims else 1)


# --- Operators: the CLI, the admin, the API and the console show and set the limits -----------


def test_the_cli_sets_shows_and_clears_limits_and_audits_each_change(registry, tenants):
    a, _, _ = tenants
    submit(registry, a, 2)
    assert claim_id() is not None
    out = StringIO()
    call_command("queue_limits", "set", "aa", "3", stdout=out)
    assert out.getvalue().splitlines()[-1] == "aa: max_running_runs none -> 3"
    out = StringIO()
    call_command("queue_limits", "set", "aa", "1", "--project", "work", stdout=out)
    assert out.getvalue().splitlines()[-1] == "aa/work: max_running_runs none -> 1"
    assert Tenant.objects.get(id=a.tenant_id).max_running_runs == 3
    assert Project.objects.get(id=a.id).max_running_runs == 1
    out = StringIO()
    call_command("queue_limits", "show", "aa", stdout=out)
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("tenant aa\tmax_running_runs=3\trunning=1\tqueued=1\t")
    assert lines[1].startswith("project work\tmax_running_runs=1\trunning=1\tqueued=1\t")
    assert lines[-1] == "1 project(s)"
    assert claim_id() is None  # the project is at its limit of 1
    out = StringIO()
    call_command("queue_limits", "clear", "aa", "--project", "work", stdout=out)
    assert out.getvalue().splitlines()[-1] == "aa/work: max_running_runs 1 -> none"
    audits = list(
        AuditEvent.objects.filter(action__endswith=".queue_limit")
        .order_by("id")
        .values_list("action", "object_type", "details")
    )
    assert audits == [
        ("tenant.queue_limit", "tenant", {"max_running_runs": {"before": None, "after": 3}}),
        ("project.queue_limit", "project", {"max_running_runs": {"before": None, "after": 1}}),
        ("project.queue_limit", "project", {"max_running_runs": {"before": 1, "after": None}}),
    ]


def test_the_cli_refuses_a_negative_limit_and_changes_nothing(tenants):
    a, _, _ = tenants
    with pytest.raises(CommandError, match="a running limit is between 0 and 2147483647"):
        call_command("queue_limits", "set", "aa", "-1", stdout=StringIO())
    with pytest.raises(CommandError, match="no project 'nope' in tenant 'aa'"):
        call_command("queue_limits", "set", "aa", "2", "--project", "nope", stdout=StringIO())
    assert Tenant.objects.get(id=a.tenant_id).max_running_runs is None
    assert not AuditEvent.objects.filter(action__endswith=".queue_limit").exists()


def test_the_api_shows_a_projects_limit_read_only(tenant, project, make_token, client_for):
    Project.objects.filter(id=project.id).update(max_running_runs=4)
    client = client_for(make_token(["projects:read", "projects:write"]))
    listed = client.get("/api/v1/projects/").json()["results"]
    assert [(p["slug"], p["max_running_runs"]) for p in listed] == [("research", 4)]
    created = client.post(
        "/api/v1/projects/", {"slug": "fresh", "max_running_runs": 9}, format="json"
    )
    assert created.status_code == 400  # not an input: operators set limits
    assert not Project.objects.filter(slug="fresh").exists()


def test_an_admin_change_of_a_limit_is_audited(tenants):
    a, _, _ = tenants
    admin_user = UserFactory(username="root-admin", is_staff=True, is_superuser=True)
    admin_user.save()
    client = Client()
    client.force_login(admin_user)
    page = client.get(f"/{settings.ADMIN_PATH}tenancy/tenant/{a.tenant_id}/change/")
    assert page.status_code == 200
    assert b'name="max_running_runs"' in page.content
    response = client.post(
        f"/{settings.ADMIN_PATH}tenancy/tenant/{a.tenant_id}/change/",
        {"slug": "aa", "name": a.tenant.name, "max_running_runs": "7"},
    )
    assert response.status_code == 302
    assert Tenant.objects.get(id=a.tenant_id).max_running_runs == 7
    audit = AuditEvent.objects.get(action="tenant.change")
    assert audit.details == {"via": "admin", "fields": ["max_running_runs"]}


def test_the_console_queues_page_shows_counts_and_limits(registry, tenants):
    a, b, _ = tenants
    Project.objects.filter(id=a.id).update(max_running_runs=1)
    submit(registry, a, 3)
    submit(registry, b, 1)
    assert claim_id() is not None  # one of A's (the older tenant) runs now
    viewer = UserFactory(username="viewer-aa")
    viewer.save()
    MembershipFactory(user=viewer, tenant=a.tenant, role="viewer")
    client = Client()
    client.force_login(viewer)
    page = client.get("/console/queues/")
    assert page.status_code == 200
    html = page.content.decode()
    assert '<tr data-project="work" class="at-limit">' in html
    assert '<td class="running">1</td>' in html
    assert '<td class="queued">2</td>' in html
    assert 'data-tenant="aa"' in html
    assert 'data-tenant="bb"' not in html  # another tenant's queue is not shown
