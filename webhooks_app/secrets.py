"""Signing secrets: generated here, shown once, stored encrypted.

A signing secret must be recoverable (the sender computes the HMAC with it), so it cannot be
stored as a hash like an API token. It is stored as a Fernet token (AES-128-CBC + HMAC-SHA256)
under a key derived (HKDF-SHA256) from ``WEBHOOK_SECRET_KEY`` (``SECRET_KEY`` when that is
unset); a database dump alone does not reveal it. Rotating the key makes existing secrets
unreadable: re-create the subscriptions (``docs/operations.md``, "Webhooks").
"""

from __future__ import annotations

import base64
import secrets

from cryptography.fernet import Fernet, InvalidToken
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings

SECRET_PREFIX = "whsec_"  # noqa: S105 - the format's prefix, not a secret
#: Bytes of randomness in a secret (Standard Webhooks asks for 24 to 64).
SECRET_BYTES = 32


class SecretUnreadable(RuntimeError):
    """The stored secret cannot be decrypted (the key changed)."""


def _fernet() -> Fernet:
    material = (getattr(settings, "WEBHOOK_SECRET_KEY", "") or settings.SECRET_KEY).encode()
    key = HKDF(
        algorithm=hashes.SHA256(), length=32, salt=b"openrath-webhooks", info=b"signing-secret"
    ).derive(material)
    return Fernet(base64.urlsafe_b64encode(key))


def new_secret() -> str:
    """A fresh ``whsec_<base64>`` secret."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode()


def seal(secret: str) -> str:
    """The stored form of ``secret``."""
    return _fernet().encrypt(secret.encode()).decode()


def unseal(ciphertext: str) -> str:
    """The secret back from its stored form; :class:`SecretUnreadable` if the key changed."""
    try:
        return _fernet().decrypt(ciphertext.encode()).decode()
    except InvalidToken as exc:
        raise SecretUnreadable("the webhook secret cannot be decrypted with this key") from exc
