"""A chunk's tenant and session are no longer database foreign keys (issue 20, rows read per
step): each constraint made every inserted chunk read its session row and its tenant row again,
in the statement that had just updated that session row. The ORM's ``PROTECT`` still refuses
deleting a session or tenant that has chunks; see the comment on ``Chunk`` in models.py."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("sessions_app", "0006_chunk_fewer_indexes"),
        ("tenancy", "0001_tenancy_initial"),
    ]

    operations = [
        migrations.AlterField(
            model_name="chunk",
            name="session",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="own_chunks",
                to="sessions_app.session",
            ),
        ),
        migrations.AlterField(
            model_name="chunk",
            name="tenant",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="tenancy.tenant",
            ),
        ),
    ]
