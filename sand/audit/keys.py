"""The host's two audit keys, made once, 0600 in the audit directory.

- ``signing.key``: an Ed25519 key (raw 32 bytes) that signs checkpoints; its public
  half, ``signing.pub``, is what a verifier elsewhere pins.
- ``digest.key``: 32 random bytes keying the HMAC-SHA256 that names a secret's value in
  the log without revealing it (a plain hash of a short secret can be guessed offline;
  a keyed one cannot without this file).

Each is created by linking a finished temporary file into place
(``sand.state.private.create_private_once``), so two sand processes
starting at once never see a half-written key: the second one's link fails and it reads
the first one's.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
)

from sand.errors import StateError
from sand.state.private import create_private_once

SIGNING_KEY = "signing.key"
SIGNING_PUB = "signing.pub"
DIGEST_KEY = "digest.key"


def signing_key(directory: Path) -> Ed25519PrivateKey:
    # private_bytes(Raw, Raw): private_bytes_raw() came with cryptography 40, above its floor
    made = Ed25519PrivateKey.generate()
    fresh = made.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
    raw = create_private_once(directory / SIGNING_KEY, fresh)
    if len(raw) != 32:
        raise StateError(f"the audit signing key {directory / SIGNING_KEY} is not 32 bytes")
    key = Ed25519PrivateKey.from_private_bytes(raw)
    pub = directory / SIGNING_PUB
    if not pub.exists():
        create_private_once(pub, public_text(key.public_key()).encode())
    return key


def public_text(pub: Ed25519PublicKey) -> str:
    """The public key as one line: ``ed25519 <base64 of the raw 32 bytes>``."""
    raw = pub.public_bytes(Encoding.Raw, PublicFormat.Raw)
    return "ed25519 " + base64.b64encode(raw).decode() + "\n"


def parse_public(text: str) -> Ed25519PublicKey:
    """The key ``public_text`` wrote; ValueError for anything else."""
    algo, _, b64 = text.strip().partition(" ")
    if algo != "ed25519":
        raise ValueError("not an ed25519 public key line")
    return Ed25519PublicKey.from_public_bytes(base64.b64decode(b64, validate=True))


def key_id(pub: Ed25519PublicKey) -> str:
    """A short name of the public key, stored in each checkpoint."""
    raw = pub.public_bytes(Encoding.Raw, PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


def digest_key(directory: Path) -> bytes:
    return create_private_once(directory / DIGEST_KEY, os.urandom(32))


def keyed_digest(key: bytes, value: bytes) -> str:
    """What the log holds in place of a secret: HMAC-SHA256 under the host's digest key.
    Two deliveries of one value show the same digest; the value cannot be read back."""
    return "hmac-sha256:" + hmac.new(key, value, hashlib.sha256).hexdigest()
