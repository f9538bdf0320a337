"""``{% load console_ids %}``: ids shown short but told apart, with the full id at hand.

``{{ run.id|short_id }}`` is ``<abbr class="id" title="<full id>">…9f3c2a7b</abbr>``: the last
digits (the random part of a uuid7; see ``display.short_id``), the full id on hover and for
assistive technology.
"""

from __future__ import annotations

from typing import Any

from django import template
from django.utils.html import format_html
from django.utils.safestring import SafeString

from openrath_project.console import display

register = template.Library()


@register.filter
def short_id(value: Any) -> SafeString | str:
    shown = display.short_id(value)
    if not shown:
        return ""
    return format_html('<abbr class="id" title="{}">{}</abbr>', str(value), shown)
