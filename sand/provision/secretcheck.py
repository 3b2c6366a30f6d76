"""The read-only check that a guest still holds the secret files sand delivered.

The files are named, never read: a reboot empties the tmpfs they are on, and this
tells so without any value crossing. A VM whose git goes through the broker holds
its broker credential there too (``git/broker``).
"""

from __future__ import annotations

import re

from sand.desired.spec import DesiredVM
from sand.provision.checks import guest_path, slug
from sand.provision.steps import BROKER_FILE, Step

# Exit 0 when one tmpfs root ($1.. relative to it) holds every file sand delivered,
# SECRETS_MISSING when none does (a reboot emptied it). Read-only; runs as the user.
SECRETS_MISSING = 3
CHECK_SECRETS = r"""
uid=$(id -u) || exit 1
for root in "/run/user/$uid/sand" "/dev/shm/sand-$uid"; do
  [ -d "$root" ] || continue
  for f do
    [ -f "$root/$f" ] || continue 2
  done
  exit 0
done
exit 3
"""
_SECRET_FILE = re.compile(r"^(env/[A-Za-z0-9._-]+\.sh|git/[A-Za-z0-9._-]+)$")


def secret_files(vm: DesiredVM) -> list[str]:
    """The tmpfs files secrets.sh writes for ``vm``, relative to its tmpfs root."""
    files = {
        f"env/{slug(guest_path(s.scope, f'scope of secret {s.name!r}'))}.sh" for s in vm.secrets
    }
    brokered = {g.secret for g in vm.brokered}
    files.update(
        f"git/{slug(guest_path(r.path, f'path of repo {r.name!r}'))}"
        for r in vm.repos
        if r.token_secret and r.token_secret not in brokered
    )
    if brokered:
        files.add(BROKER_FILE)
    files.update(
        f"env/{slug(guest_path(scope, f'scope of secret {env!r}'))}.sh"
        for g in vm.brokered
        for scope, env in g.env
    )
    assert all(_SECRET_FILE.match(f) for f in files)  # slug() keeps to these characters
    return sorted(files)


def check_secrets_step(vm: DesiredVM) -> Step:
    """A read-only check that the guest still holds ``vm``'s secret files (no values)."""
    argv = ("/bin/sh", "-c", CHECK_SECRETS, "sand-check-secrets", *secret_files(vm))
    return Step("check-secrets", argv, False, timeout=30)
