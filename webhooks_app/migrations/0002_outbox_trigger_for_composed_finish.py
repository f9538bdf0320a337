"""The outbox row of ``run.succeeded`` on PostgreSQL, written by a trigger on the run event table.

On PostgreSQL a run's last step commit is one composed statement (runs_app.services.checkpoints)
that inserts the ``run.succeeded`` event itself, committed on its own: no Python runs inside its
transaction. This trigger writes the deliveries in that statement (the same rows and payload as
webhooks_app.outbox.record_run_event; a test compares them). Where the event comes through the
ORM too, the unique (subscription, source_key) makes the second insert a no-op. Other databases
take the ORM path only and need no trigger.
"""

from django.db import migrations

CREATE = r"""
CREATE OR REPLACE FUNCTION webhooks_outbox_run_succeeded() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    target record;
    delivery uuid;
BEGIN
    FOR target IN
        SELECT s.id AS subscription_id, r.tenant_id, r.project_id, r.workflow
        FROM runs_app_run r
        JOIN webhooks_app_webhooksubscription s
          ON s.project_id = r.project_id AND s.enabled
         AND s.event_types @> '["run.succeeded"]'::jsonb
        WHERE r.id = NEW.run_id
    LOOP
        delivery := gen_random_uuid();
        INSERT INTO webhooks_app_webhookdelivery (
            id, tenant_id, project_id, subscription_id, webhook_id, source_key, event_type,
            payload, status, attempts, round_attempts, next_attempt_at, last_error,
            last_response, created_at, updated_at
        ) VALUES (
            delivery, target.tenant_id, target.project_id, target.subscription_id,
            'msg_' || replace(delivery::text, '-', ''),
            NEW.run_id::text || ':' || NEW.seq || ':run.succeeded',
            'run.succeeded',
            jsonb_build_object(
                'type', 'run.succeeded',
                'timestamp',
                to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"+00:00"'),
                'data', jsonb_build_object(
                    'run', NEW.run_id::text,
                    'project', target.project_id::text,
                    'workflow', target.workflow,
                    'status', 'succeeded',
                    'event', jsonb_build_object(
                        'type', NEW.type, 'seq', NEW.seq, 'step', NEW.step, 'data', NEW.data
                    )
                )
            ),
            'pending', 0, 0, now(), '', '', now(), now()
        )
        ON CONFLICT DO NOTHING;
    END LOOP;
    RETURN NULL;
END
$$;
CREATE TRIGGER webhooks_outbox_run_succeeded
AFTER INSERT ON runs_app_runevent
FOR EACH ROW WHEN (NEW.type = 'run.succeeded')
EXECUTE FUNCTION webhooks_outbox_run_succeeded();
"""

DROP = """
DROP TRIGGER IF EXISTS webhooks_outbox_run_succeeded ON runs_app_runevent;
DROP FUNCTION IF EXISTS webhooks_outbox_run_succeeded();
"""


def create_trigger(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(CREATE)


def drop_trigger(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP)


class Migration(migrations.Migration):
    dependencies = [
        ("webhooks_app", "0001_webhooks"),
        ("runs_app", "0005_run_forks_and_replays"),
    ]

    operations = [migrations.RunPython(create_trigger, drop_trigger)]
