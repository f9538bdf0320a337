"""Leave room on each page of the run and session tables so the per-step UPDATEs (which touch
no indexed column) are heap-only tuple updates: no index is rewritten at every step."""

from django.db import migrations


def set_fillfactor(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute("ALTER TABLE runs_app_run SET (fillfactor = 70)")
    schema_editor.execute("ALTER TABLE sessions_app_session SET (fillfactor = 80)")


def reset_fillfactor(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute("ALTER TABLE runs_app_run RESET (fillfactor)")
    schema_editor.execute("ALTER TABLE sessions_app_session RESET (fillfactor)")


class Migration(migrations.Migration):
    dependencies = [
        ("runs_app", "0001_runs_initial"),
        ("sessions_app", "0003_chunk_run_index"),
    ]

    operations = [migrations.RunPython(set_fillfactor, reset_fillfactor)]
