"""The base of factories whose objects are made by a service, not by saving a raw row."""

from __future__ import annotations

from typing import Any

import factory


class ServiceFactory(factory.Factory):
    """``create()`` calls the service (``_create``); ``build()`` is refused: an unsaved copy of a
    row the service writes (with its counters, postings or events) would be a half-truth."""

    class Meta:
        abstract = True

    @classmethod
    def _build(cls, model_class: Any, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(f"{cls.__name__} makes its rows through a service: use create()")
