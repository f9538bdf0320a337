"""Output serializers whose fields are bound once per class (OutputModelSerializer): the same
representation as DRF's own per-instance fields, for every output model serializer."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from rest_framework import serializers

from openrath_project.api.serializers import OutputModelSerializer
from openrath_project.tenancy.api.serializers import ProjectOut
from runs_app.api.serializers import InterruptOut, RunEventOut, RunOut
from runs_app.models import RunEvent
from sessions_app.api.serializers import ChunkOut, SessionOut
from sessions_app.models import Chunk
from tests.factories.runs import InterruptFactory, RunFactory
from tests.factories.sessions import SessionFactory

pytestmark = pytest.mark.django_db


def _drf_own(serializer_class: type[OutputModelSerializer], instance: Any) -> Any:
    """What DRF's ModelSerializer gives: fields built for this serializer alone."""
    own = serializer_class(context={"request": None})
    return serializers.ModelSerializer.to_representation(own, instance)


def test_every_output_model_serializer_shares_its_fields():
    import django.apps

    for app in django.apps.apps.get_app_configs():
        try:
            __import__(f"{app.name}.api.serializers")
        except ModuleNotFoundError:
            continue
    project_modules = {"runs_app", "sessions_app", "effects_app", "memory_app", "openrath_project"}
    project_modules |= {"webhooks_app", "schedules_app", "retention_app"}

    def subclasses(cls: type) -> list[type]:
        return [c for sub in cls.__subclasses__() for c in (sub, *subclasses(sub))]

    plain = [
        cls
        for cls in subclasses(serializers.ModelSerializer)
        if cls.__module__.split(".")[0] in project_modules
        and not issubclass(cls, OutputModelSerializer)
        and cls is not OutputModelSerializer
    ]
    assert plain == [], "output model serializers should derive from OutputModelSerializer"


def test_the_shared_fields_represent_as_drf_does(project):
    session = SessionFactory(project=project, messages=["hello", "there"])
    run = RunFactory(project=project, state={"messages": [{"role": "user", "content": "x"}]})
    interrupt = InterruptFactory(run=run)
    event = RunEvent.objects.filter(run_id=run.id).first()
    chunk = Chunk.objects.filter(session_id=session.id).order_by("seq").last()
    cases: list[tuple[type[OutputModelSerializer], Any]] = [
        (RunOut, run),
        (InterruptOut, interrupt),
        (RunEventOut, event),
        (SessionOut, session),
        (ProjectOut, project),
        (ChunkOut, chunk),
    ]
    for serializer_class, instance in cases:
        assert serializer_class(instance).data == _drf_own(serializer_class, instance)
        many = serializer_class([instance, instance], many=True).data
        assert many == [_drf_own(serializer_class, instance)] * 2


def test_threads_represent_through_the_shared_fields_at_once(project):
    runs = [RunFactory(project=project, state={"n": i}) for i in range(4)]
    expected = [_drf_own(RunOut, run) for run in runs]
    results: list[list[Any]] = [[] for _ in range(4)]
    barrier = threading.Barrier(4)

    def represent(index: int) -> None:
        barrier.wait()
        for _ in range(50):
            results[index].append(RunOut(runs[index]).data)

    threads = [threading.Thread(target=represent, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for index in range(4):
        assert results[index] == [expected[index]] * 50
