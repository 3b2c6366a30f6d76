"""Host-side secrets: resolve values from their sources, hash what was delivered.

Values are resolved only for the VMs being applied, live only in memory as
:class:`SecretValue`, and reach a guest only over an SSH channel's stdin
(``sand.provision``). What stays on the host is a keyed hash per VM.
"""

from sand.secrets.digests import DigestStore, digest_key, secrets_digest
from sand.secrets.resolve import SecretValue, resolve_secrets, reveal, secret_names

__all__ = [
    "DigestStore",
    "SecretValue",
    "digest_key",
    "resolve_secrets",
    "reveal",
    "secret_names",
    "secrets_digest",
]
