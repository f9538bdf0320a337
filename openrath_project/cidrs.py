"""Parsing network allow-lists (``OPENRATH_METRICS_ALLOWED_CIDRS``). Pure Python."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_cidrs(values: Iterable[str]) -> tuple[Network, ...]:
    """``10.0.0.0/8``, ``127.0.0.1`` (a single address), ``::1/128``; a bad entry is a
    ``ValueError`` naming it."""
    networks: list[Network] = []
    for value in values:
        text = value.strip()
        if not text:
            continue
        try:
            networks.append(ipaddress.ip_network(text, strict=False))
        except ValueError as exc:
            raise ValueError(f"{text!r} is not a network in CIDR notation ({exc})") from exc
    return tuple(networks)
