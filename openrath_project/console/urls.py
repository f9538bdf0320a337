"""Console URLs, mounted at ``/console/`` (namespace ``console``)."""

from __future__ import annotations

from django.urls import path

from openrath_project.console import queues, retention, schedules, start_run, views, webhooks

app_name = "console"

urlpatterns = [
    path("", views.overview, name="overview"),
    path("login/", views.LoginView.as_view(), name="login"),
    path("logout/", views.LogoutView.as_view(next_page="console:login"), name="logout"),
    path("switch/", views.switch, name="switch"),
    path("approvals/", views.approvals, name="approvals"),
    path(
        "approvals/<uuid:interrupt_id>/resolve/",
        views.approval_resolve,
        name="approval-resolve",
    ),
    path("approvals/approve-many/", views.approval_resolve_many, name="approval-resolve-many"),
    path("effects/", views.effects, name="effects"),
    path("effects/<uuid:effect_id>/resolve/", views.effect_resolve_view, name="effect-resolve"),
    path("runs/", views.runs, name="runs"),
    path("runs/<uuid:run_id>/", views.run_detail, name="run"),
    path("runs/<uuid:run_id>/cancel/", views.run_cancel_view, name="run-cancel"),
    path("runs/<uuid:run_id>/resume/", views.run_resume_view, name="run-resume"),
    path("runs/<uuid:run_id>/fork/", views.run_fork_view, name="run-fork"),
    path("runs/<uuid:run_id>/replay/", views.run_replay_view, name="run-replay"),
    path(
        "runs/<uuid:run_id>/compare/<uuid:other_id>/",
        views.run_compare_view,
        name="run-compare",
    ),
    path("schedules/", schedules.schedules, name="schedules"),
    path("schedules/new/", schedules.schedule_create_view, name="schedule-create"),
    path(
        "schedules/<uuid:schedule_id>/delete/",
        schedules.schedule_delete_view,
        name="schedule-delete",
    ),
    path(
        "schedules/<uuid:schedule_id>/pause/",
        schedules.schedule_pause_view,
        name="schedule-pause",
    ),
    path(
        "schedules/<uuid:schedule_id>/resume/",
        schedules.schedule_resume_view,
        name="schedule-resume",
    ),
    path("webhooks/", webhooks.webhooks, name="webhooks"),
    path("webhooks/new/", webhooks.webhook_create_view, name="webhook-create"),
    path("webhooks/<uuid:webhook_id>/", webhooks.webhook_detail, name="webhook"),
    path("webhooks/<uuid:webhook_id>/enable/", webhooks.webhook_enable_view, name="webhook-enable"),
    path(
        "webhooks/<uuid:webhook_id>/disable/", webhooks.webhook_disable_view, name="webhook-disable"
    ),
    path("webhooks/<uuid:webhook_id>/delete/", webhooks.webhook_delete_view, name="webhook-delete"),
    path(
        "webhooks/<uuid:webhook_id>/deliveries/<uuid:delivery_id>/redeliver/",
        webhooks.delivery_redeliver_view,
        name="webhook-redeliver",
    ),
    path("retention/", retention.retention, name="retention"),
    path("retention/new/", retention.retention_create_view, name="retention-create"),
    path(
        "retention/<uuid:policy_id>/preview/",
        retention.retention_preview_view,
        name="retention-preview",
    ),
    path(
        "retention/<uuid:policy_id>/apply/", retention.retention_apply_view, name="retention-apply"
    ),
    path(
        "retention/<uuid:policy_id>/delete/",
        retention.retention_delete_view,
        name="retention-delete",
    ),
    path("queues/", queues.queues, name="queues"),
    path("sessions/", views.sessions, name="sessions"),
    path("sessions/compare/", views.session_compare, name="compare"),
    path("sessions/<uuid:session_id>/", views.session_detail, name="session"),
    path("sessions/<uuid:session_id>/lineage/", views.session_lineage, name="lineage"),
    path(
        "sessions/<uuid:session_id>/runs/new/",
        start_run.session_start_run_view,
        name="session-start-run",
    ),
]
