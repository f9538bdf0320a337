"""Effect ledger factories: a non-idempotent effect that needs review, on a run that waits for
that review (what a worker dying inside the effect leaves behind)."""

from __future__ import annotations

import factory
from django.utils import timezone

from effects_app.models import EffectRecord
from effects_app.services import derive_idempotency_key
from openrath_project.jsontext import digest
from tests.factories.runs import RunFactory


class EffectRecordFactory(factory.django.DjangoModelFactory):
    """``EffectRecordFactory()``: ``needs_review`` on a ``needs_review`` run; pass ``status``
    (and ``run=RunFactory(status=...)``) for another state of the ledger."""

    class Meta:
        model = EffectRecord

    run = factory.SubFactory(RunFactory, status="needs_review")
    tenant_id = factory.SelfAttribute("run.tenant_id")
    project_id = factory.SelfAttribute("run.project_id")
    step = "only"
    key = factory.Sequence(lambda n: f"send-{n}")
    idempotency_key = factory.LazyAttribute(
        lambda o: derive_idempotency_key(o.run.id, o.step, o.key)
    )
    effect_class = "non_idempotent"
    request = factory.Sequence(
        lambda n: {"fn": "notify.send_mail", "args": [f"ops{n}@example.com"]}
    )
    request_digest = factory.LazyAttribute(lambda o: digest(o.request))
    status = "needs_review"
    attempts = 1
    fencing_token = factory.SelfAttribute("run.fencing_token")
    started_at = factory.LazyFunction(timezone.now)
