"""Serializer helpers shared by every app's API."""

from __future__ import annotations

import threading
from typing import Any, ClassVar

from rest_framework import serializers


class StrictInputSerializer(serializers.Serializer):
    """An input serializer that refuses unknown fields (400 naming them), never ignores them."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError({name: ["unknown field"] for name in unknown})
        return super().to_internal_value(data)


class OutputModelSerializer(serializers.ModelSerializer):
    # An output serializer of a model whose fields are built and bound once per class. (A
    # comment, not a docstring: drf-spectacular would make it every output schema's description.)
    #
    # DRF builds a ModelSerializer's fields from the model and deep-copies them for every
    # serializer it makes: for a run about 0.4 ms of a write request's CPU, more than the
    # representation itself (issue 20, benchmarks/api_latency.py). Representing an instance
    # reads the fields and never changes them, so a serializer made without a context
    # represents through one bound instance of its class, made on first use; with a context
    # (which a field or method may read) it builds its own fields as DRF does. Subclasses must
    # not change ``fields`` per instance.

    _shared: ClassVar[dict[type, serializers.ModelSerializer]] = {}
    _shared_lock: ClassVar[threading.Lock] = threading.Lock()

    def to_representation(self, instance: Any) -> Any:
        if self.context:
            return super().to_representation(instance)
        cls = type(self)
        shared = self._shared.get(cls)
        if shared is None:
            with self._shared_lock:
                shared = self._shared.get(cls)
                if shared is None:
                    shared = cls()
                    _ = shared.fields  # built and bound once, before another thread reads it
                    self._shared[cls] = shared
        return serializers.ModelSerializer.to_representation(shared, instance)


class ProjectRefField(serializers.CharField):
    """A project given by slug or id; resolved against the principal by the view."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("max_length", 100)
        kwargs.setdefault("help_text", "The project's slug or id.")
        super().__init__(**kwargs)


class ErrorDetailSerializer(serializers.Serializer):
    code = serializers.CharField()
    message = serializers.CharField()
    details = serializers.DictField()


class ErrorSerializer(serializers.Serializer):
    """The one error body of the API."""

    error = ErrorDetailSerializer()
