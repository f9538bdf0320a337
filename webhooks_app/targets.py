"""Which webhook targets may be called. Pure Python.

The rule: ``http`` or ``https`` URLs without credentials, whose host resolves only to public
unicast addresses. Loopback, private (RFC 1918, unique-local), link-local, shared (CGNAT),
reserved, unspecified and multicast addresses are refused unless the operator allows private
targets (``WEBHOOK_ALLOW_PRIVATE_TARGETS``) or lists the network (``WEBHOOK_ALLOWED_CIDRS``).
Every address the name resolves to must pass (one bad answer refuses the target), and the
delivery connects to the address that was checked, not to a second lookup: a name that
re-resolves to an internal address between the check and the connection (DNS rebinding) is
never reached.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from openrath_project.cidrs import Network

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], Sequence[str]]


class TargetRefused(ValueError):
    """The URL may not be called: ``reason`` says why (shown to the subscription's owner)."""

    def __init__(self, reason: str, *, code: str = "webhook_target_refused") -> None:
        super().__init__(reason)
        self.reason = reason
        self.code = code


@dataclass(frozen=True)
class TargetPolicy:
    """What the operator allows beyond public addresses."""

    allow_private: bool = False
    allowed_networks: tuple[Network, ...] = ()


@dataclass(frozen=True)
class Target:
    """A vetted URL: where it resolved to, checked address first."""

    url: str
    scheme: str
    host: str
    port: int
    addresses: tuple[Address, ...]


def parse_url(url: str) -> tuple[str, str, int]:
    """``(scheme, host, port)`` of an http(s) URL without credentials, or :class:`TargetRefused`."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise TargetRefused(f"not a valid URL: {exc}", code="webhook_url_invalid") from exc
    if parts.scheme not in ("http", "https"):
        raise TargetRefused("the URL must be http or https", code="webhook_url_invalid")
    if not parts.hostname:
        raise TargetRefused("the URL has no host", code="webhook_url_invalid")
    if parts.username is not None or parts.password is not None:
        raise TargetRefused("the URL may not carry credentials", code="webhook_url_invalid")
    return parts.scheme, parts.hostname, port or (443 if parts.scheme == "https" else 80)


def refusal(address: Address, policy: TargetPolicy) -> str | None:
    """Why ``address`` may not be called under ``policy``, or ``None`` when it may."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if any(address in network for network in policy.allowed_networks):
        return None
    if address.is_multicast:
        return f"{address} is a multicast address"
    if policy.allow_private:
        return "the unspecified address cannot be called" if address.is_unspecified else None
    if address.is_loopback:
        return f"{address} is a loopback address"
    if address.is_link_local:
        return f"{address} is a link-local address"
    if not address.is_global:
        return f"{address} is a private or reserved address"
    return None


def system_resolver(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to (TCP), in the resolver's order."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def vet_target(url: str, policy: TargetPolicy, resolver: Resolver | None = None) -> Target:
    """Resolve the URL's host (``resolver``, else :func:`system_resolver` looked up when
    called) and check every address; :class:`TargetRefused` otherwise."""
    scheme, host, port = parse_url(url)
    resolver = resolver or globals()["system_resolver"]
    try:
        literal: Address | None = ipaddress.ip_address(host)
    except ValueError:
        literal = None
    if literal is not None:
        addresses: tuple[Address, ...] = (literal,)
    else:
        try:
            found = resolver(host, port)
        except (OSError, UnicodeError) as exc:
            raise TargetRefused(
                f"the host {host!r} does not resolve ({exc})", code="webhook_target_unresolved"
            ) from exc
        addresses = tuple(ipaddress.ip_address(a.split("%", 1)[0]) for a in found)
        if not addresses:
            raise TargetRefused(
                f"the host {host!r} does not resolve", code="webhook_target_unresolved"
            )
    for address in addresses:
        reason = refusal(address, policy)
        if reason is not None:
            raise TargetRefused(f"{host} is refused: {reason}")
    return Target(url=url, scheme=scheme, host=host, port=port, addresses=addresses)
