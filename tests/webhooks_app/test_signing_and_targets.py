"""Signatures against the Standard Webhooks test vector, the secret's storage, and the target
rule (plain Python: resolvers are injected, no network)."""

from __future__ import annotations

import ipaddress
from datetime import UTC, datetime

import pytest

from openrath_project.cidrs import parse_cidrs
from webhooks_app import secrets
from webhooks_app.services import signed_headers
from webhooks_app.targets import TargetPolicy, TargetRefused, refusal, vet_target

#: The test vector of the Standard Webhooks specification (standardwebhooks.com).
SPEC_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
SPEC_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
SPEC_TIMESTAMP = 1614265330
SPEC_BODY = '{"test": 2432232314}'
SPEC_SIGNATURE = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


def test_the_headers_match_the_specification_vector():
    at = datetime.fromtimestamp(SPEC_TIMESTAMP, tz=UTC)
    headers = signed_headers(secret=SPEC_SECRET, webhook_id=SPEC_ID, body=SPEC_BODY, at=at)
    assert headers == {
        "webhook-id": SPEC_ID,
        "webhook-timestamp": str(SPEC_TIMESTAMP),
        "webhook-signature": SPEC_SIGNATURE,
    }


def test_secrets_are_random_sealed_and_unsealed(settings):
    one, two = secrets.new_secret(), secrets.new_secret()
    assert one != two
    assert one.startswith("whsec_")
    assert len(one) == len("whsec_") + 44  # 32 random bytes
    sealed = secrets.seal(one)
    assert one not in sealed
    assert secrets.unseal(sealed) == one
    settings.WEBHOOK_SECRET_KEY = "another key"
    with pytest.raises(secrets.SecretUnreadable):
        secrets.unseal(sealed)


def resolves_to(*addresses):
    return lambda host, port: list(addresses)


STRICT = TargetPolicy()


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("127.0.0.1", "127.0.0.1 is a loopback address"),
        ("::1", "::1 is a loopback address"),
        ("10.0.0.5", "10.0.0.5 is a private or reserved address"),
        ("192.168.1.1", "192.168.1.1 is a private or reserved address"),
        ("100.64.0.1", "100.64.0.1 is a private or reserved address"),
        ("fd00::1", "fd00::1 is a private or reserved address"),
        ("169.254.169.254", "169.254.169.254 is a link-local address"),
        ("fe80::1", "fe80::1 is a link-local address"),
        ("224.0.0.1", "224.0.0.1 is a multicast address"),
        ("0.0.0.0", "0.0.0.0 is a private or reserved address"),  # noqa: S104
        ("::ffff:10.0.0.1", "10.0.0.1 is a private or reserved address"),
        ("93.184.215.14", None),
        ("2606:4700::1111", None),
    ],
)
def test_the_address_rule(address, reason):
    assert refusal(ipaddress.ip_address(address), STRICT) == reason


def test_the_operator_can_allow_private_targets_but_never_multicast():
    allow = TargetPolicy(allow_private=True)
    assert refusal(ipaddress.ip_address("10.0.0.5"), allow) is None
    assert refusal(ipaddress.ip_address("127.0.0.1"), allow) is None
    assert refusal(ipaddress.ip_address("224.0.0.1"), allow) == "224.0.0.1 is a multicast address"
    listed = TargetPolicy(allowed_networks=parse_cidrs(["10.20.0.0/16"]))
    assert refusal(ipaddress.ip_address("10.20.3.4"), listed) is None
    assert refusal(ipaddress.ip_address("10.21.3.4"), listed) is not None


def test_every_resolved_address_must_pass():
    target = vet_target("https://hooks.example/x", STRICT, resolves_to("93.184.215.14"))
    assert (target.host, target.port, target.scheme) == ("hooks.example", 443, "https")
    assert [str(a) for a in target.addresses] == ["93.184.215.14"]
    with pytest.raises(TargetRefused) as refused:  # one internal answer among public ones
        vet_target("https://hooks.example/x", STRICT, resolves_to("93.184.215.14", "10.0.0.1"))
    assert refused.value.reason == (
        "hooks.example is refused: 10.0.0.1 is a private or reserved address"
    )


def test_unresolvable_and_malformed_urls():
    def fails(host, port):
        raise OSError("Name or service not known")

    with pytest.raises(TargetRefused) as unresolved:
        vet_target("http://nowhere.invalid/", STRICT, fails)
    assert unresolved.value.code == "webhook_target_unresolved"
    for url in ("ftp://example.com/", "http:///path", "http://u:p@example.com/", "http://h:99999/"):
        with pytest.raises(TargetRefused) as bad:
            vet_target(url, STRICT, resolves_to("93.184.215.14"))
        assert bad.value.code == "webhook_url_invalid"
