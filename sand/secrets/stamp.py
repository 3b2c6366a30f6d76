"""The secrets stamp: what a VM records about the secret values it was given.

The stamp lives on the VM itself (a PVE tag, the Lima sidecar), so any host
holding the same values computes the same stamp and can tell "unchanged"
without host-side state: a fresh controller or CI runner plans no change.

It must reveal nothing useful to whoever can read a VM's tags. Each distinct
value goes through scrypt (about 35 ms and 16 MiB) with a salt derived from
the project, so a guess costs that much per guess and per project, and no
precomputed table applies; the VM's stamp is a truncated SHA-256 over its
(env, scope, scrypt output) triples and its name, so it confirms a guess only
when *every* value of that VM is guessed at once, and two VMs sharing a value
do not show it. What is recorded is ``<version>-<80 bits as hex>``: a new
version (other parameters, another salt) just re-delivers once.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping

from sand.desired.spec import DesiredVM
from sand.secrets.resolve import SecretValue, reveal

VERSION = 1
# scrypt cost: N=2^14, r=8 is 16 MiB and ~35 ms on a 2020s core (hashlib's
# default memory limit is 32 MiB); one per distinct value per run.
SCRYPT_N, SCRYPT_R, SCRYPT_P = 1 << 14, 8, 1
DIGEST_HEX = 20  # 80 bits: ample to tell one set of values from another
_STAMP = re.compile(rf"^[1-9][0-9]*-[0-9a-f]{{{DIGEST_HEX}}}$")


def project_salt(project: str, version: int = VERSION) -> bytes:
    """The scrypt salt every host of ``project`` derives alike (public, not secret)."""
    return hashlib.sha256(f"sand secrets stamp v{version}\0{project}".encode()).digest()[:16]


def is_stamp(text: str) -> bool:
    return bool(_STAMP.match(text))


class Stamper:
    """Computes VMs' stamps, running scrypt once per distinct value."""

    def __init__(self, project: str) -> None:
        self._salt = project_salt(project)
        self._keys: dict[str, str] = {}  # value -> its scrypt output (memory only)

    def _key(self, value: str) -> str:
        key = self._keys.get(value)
        if key is None:
            key = hashlib.scrypt(
                value.encode(), salt=self._salt, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P, dklen=32
            ).hex()
            self._keys[value] = key
        return key

    @property
    def kdf_runs(self) -> int:
        return len(self._keys)

    def stamp(self, vm: DesiredVM, values: Mapping[str, str | SecretValue]) -> str:
        """The stamp of the (env, scope, value) triples ``vm`` is given; "" for none.

        Repo tokens count as triples too (``git:<repo>``, checkout path, token),
        so rotating a clone token is a change like any other.
        """
        triples = sorted(
            [(s.env, s.scope, self._key(reveal(values[s.name]))) for s in vm.secrets]
            + [
                (f"git:{r.name}", r.path, self._key(reveal(values[r.token_secret])))
                for r in vm.repos
                if r.token_secret
            ]
            # A brokered secret placed by ``secrets:`` (its value goes to the broker, at
            # a delivery): a rotated one is a change, as a repo's token is.
            + [
                (f"broker:{env}", scope, self._key(reveal(values[g.secret])))
                for g in vm.brokered
                for scope, env in g.env
            ]
        )
        if not triples:
            return ""
        blob = json.dumps([VERSION, vm.name, triples], separators=(",", ":"), ensure_ascii=False)
        return f"{VERSION}-{hashlib.sha256(blob.encode()).hexdigest()[:DIGEST_HEX]}"
