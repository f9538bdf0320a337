"""The two doors through which a retention pass removes rows that are append-only for the
runtime role (events, checkpoints, fork edges): ``SECURITY DEFINER`` functions owned by the
migration role, acting on terminal runs only. PostgreSQL only (elsewhere there are no roles)."""

from django.db import migrations

TERMINAL = "('succeeded', 'failed', 'cancelled', 'timed_out')"


def _tables(apps):
    names = {}
    for label in ("Run", "RunEvent", "Checkpoint", "RunFork"):
        names[label] = apps.get_model("runs_app", label)._meta.db_table
    return names


def create_functions(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    t = _tables(apps)
    schema_editor.execute(
        f"""
CREATE OR REPLACE FUNCTION retention_delete_runs(run_ids uuid[])
RETURNS TABLE(events bigint, checkpoints bigint, forks bigint, runs bigint)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public AS $$
DECLARE
    terminal uuid[];
BEGIN
    -- Only terminal runs, and the runs themselves go in the same call: this never leaves a
    -- run without the history it had while it is kept.
    SELECT coalesce(array_agg(id), '{{}}') INTO terminal FROM {t["Run"]}
     WHERE id = ANY(run_ids) AND status IN {TERMINAL};
    DELETE FROM {t["RunEvent"]} WHERE run_id = ANY(terminal);
    GET DIAGNOSTICS events = ROW_COUNT;
    DELETE FROM {t["Checkpoint"]} WHERE run_id = ANY(terminal);
    GET DIAGNOSTICS checkpoints = ROW_COUNT;
    DELETE FROM {t["RunFork"]} WHERE child_id = ANY(terminal) OR parent_id = ANY(terminal);
    GET DIAGNOSTICS forks = ROW_COUNT;
    DELETE FROM {t["Run"]} WHERE id = ANY(terminal);
    GET DIAGNOSTICS runs = ROW_COUNT;
    RETURN NEXT;
END
$$;
"""
    )
    schema_editor.execute(
        f"""
CREATE OR REPLACE FUNCTION retention_prune_runs(
    run_ids uuid[], events_below int[], checkpoints_below int[], keyframes jsonb[])
RETURNS TABLE(events bigint, checkpoints bigint)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public AS $$
BEGIN
    -- The first kept checkpoint becomes a keyframe (its digest is unchanged: readers verify
    -- the rebuilt state against it), then what is below the cuts goes; a run's last event and
    -- last checkpoint always stay, and no checkpoint goes below one that is not whole.
    UPDATE {t["Checkpoint"]} c SET "full" = true, state = cut.keyframe
      FROM unnest(run_ids, checkpoints_below, keyframes) AS cut(run_id, below, keyframe),
           {t["Run"]} r
     WHERE cut.keyframe IS NOT NULL AND c.run_id = cut.run_id AND c.seq = cut.below
       AND r.id = cut.run_id AND r.status IN {TERMINAL};
    DELETE FROM {t["RunEvent"]} e
     USING unnest(run_ids, events_below) AS cut(run_id, below), {t["Run"]} r
     WHERE e.run_id = cut.run_id AND e.seq < cut.below AND e.seq < r.event_seq
       AND r.id = cut.run_id AND r.status IN {TERMINAL};
    GET DIAGNOSTICS events = ROW_COUNT;
    DELETE FROM {t["Checkpoint"]} c
     USING unnest(run_ids, checkpoints_below) AS cut(run_id, below), {t["Run"]} r
     WHERE c.run_id = cut.run_id AND c.seq < cut.below AND c.seq < r.checkpoint_seq
       AND r.id = cut.run_id AND r.status IN {TERMINAL}
       AND EXISTS (SELECT 1 FROM {t["Checkpoint"]} k
                    WHERE k.run_id = cut.run_id AND k.seq = cut.below AND k."full");
    GET DIAGNOSTICS checkpoints = ROW_COUNT;
    RETURN NEXT;
END
$$;
"""
    )


def drop_functions(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute("DROP FUNCTION IF EXISTS retention_delete_runs(uuid[])")
    schema_editor.execute(
        "DROP FUNCTION IF EXISTS retention_prune_runs(uuid[], int[], int[], jsonb[])"
    )


class Migration(migrations.Migration):
    dependencies = [
        ("retention_app", "0001_retention"),
        ("runs_app", "0006_fair_claim"),
    ]

    operations = [migrations.RunPython(create_functions, drop_functions)]
