"""Serializer helpers shared by every app's API."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers


class StrictInputSerializer(serializers.Serializer):
    """An input serializer that refuses unknown fields (400 naming them), never ignores them."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError({name: ["unknown field"] for name in unknown})
        return super().to_internal_value(data)


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
