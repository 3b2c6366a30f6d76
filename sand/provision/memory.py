"""Nothing secret in a saved memory: the guest scrubbed before sand saves its RAM.

A hibernation (Proxmox ``suspend todisk=1``) writes the guest's whole RAM to a state
volume on the cluster's storage, where it outlives the guest's tmpfs. Before it, the
``scrub`` command (root, one SSH exchange):

* overwrites every file sand delivered to the user's tmpfs (the secrets, the repo
  tokens, the ledger's digest over them) in place with zeros, then removes it: a
  removed tmpfs file's pages are freed as they are, so the overwrite comes first;
* drops the clean page cache (an agent's login file read from disk);
* says what it could not remove, by name only: the secrets in a running process's
  environment (direnv exported them to a shell or an agent), a running agent (its
  login is in its memory), and a kernel that does not zero freed pages
  (``init_on_free=1``, which the ``memory`` step puts on the kernel command line: the
  copies a finished ``secrets`` step left in freed pages, its pipe and its shell, are
  zeroed only then).

The caller saves the memory only when nothing is left or the VM's ``idle: {keepMemory:
true}`` allows it, and delivers the secrets again when the guest wakes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import get_args

from sand.desired.spec import DesiredVM
from sand.errors import GuestCommandError
from sand.guest.endpoint import GuestEndpoint
from sand.guest.runner import SshRunner
from sand.guest.ssh import connect, where
from sand.manifest.fields import Agent
from sand.provision.checks import check_user
from sand.provision.output import tail_of

# Seconds to wait for the guest to take the connection (it is running: it answers now).
SCRUB_CONNECT_DEADLINE = 15.0
SCRUB = r"""
set -u
user=$1; shift
uid=$(id -u -- "$user") || exit 1
agents=" claude codex opencode pi "
for root in "/run/user/$uid/sand" "/dev/shm/sand-$uid"; do
  [ -d "$root" ] && [ ! -L "$root" ] || continue
  find "$root" -xdev -type f -exec shred -n 0 -z -u -- {} + || exit 1
  rm -rf -- "$root" || exit 1
done
sync
echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || true
grep -qw 'init_on_free=1' /proc/cmdline || echo "left memory"
for dir in /proc/[0-9]*; do
  [ "$(stat -c %u -- "$dir" 2>/dev/null)" = "$uid" ] || continue
  names=$(tr '\0' '\n' <"$dir/environ" 2>/dev/null | sed 's/=.*//') || continue
  for name do
    printf '%s\n' "$names" | grep -qx -- "$name" && echo "left env $name"
  done
  comm=$(cat -- "$dir/comm" 2>/dev/null) || continue
  case $agents in *" $comm "*) echo "left agent $comm" ;; esac
done
exit 0
"""
_ENV = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_LEFT = re.compile(rb"^left (memory|env [A-Za-z_][A-Za-z0-9_]*|agent [a-z]+)$")
AGENTS = frozenset(get_args(Agent))


@dataclass(frozen=True)
class Scrubbed:
    """What the guest's memory still holds after the scrub, in words (empty: nothing)."""

    left: tuple[str, ...]


def scrub_command(vm: DesiredVM, login_user: str) -> str:
    """The scrub as a command line: fixed text, the user and the secrets' variable
    names (names, never values) as its arguments."""
    names = sorted({s.env for s in vm.secrets})
    assert all(_ENV.match(n) for n in names)  # the manifest refused any other
    prefix = "" if login_user == "root" else "sudo -n "
    quoted = " ".join(f"'{part}'" for part in ("sand-scrub", check_user(vm.user), *names))
    return f"{prefix}/bin/sh -c '{_single_quoted(SCRUB)}' {quoted}"


def _single_quoted(text: str) -> str:
    return text.replace("'", "'\"'\"'")


def left_words(output: bytes) -> tuple[str, ...]:
    """The scrub's report as words a plan and a log can show; anything that is not one
    of its own lines (a hostile guest's text) is not read."""
    said: list[str] = []
    for line in output.splitlines():
        found = _LEFT.match(line.strip())
        if found is None:
            continue
        kind, _, name = found[1].decode().partition(" ")
        if kind == "memory":
            said.append("freed pages not zeroed (init_on_free=1 from the guest's next boot)")
        elif kind == "env":
            said.append(f"{name} in a running process's environment")
        elif name in AGENTS:
            said.append(f"{name} login (its running session)")
    return tuple(dict.fromkeys(said))


async def scrub_memory(
    endpoint: GuestEndpoint, vm: DesiredVM, *, connect_deadline: float = SCRUB_CONNECT_DEADLINE
) -> Scrubbed:
    """Remove what sand delivered to the guest's memory; say what stays there."""
    async with connect(endpoint, deadline=connect_deadline) as conn:
        runner = SshRunner(conn, "scrub", where=where(endpoint))
        result = await runner.run_command(
            scrub_command(vm, endpoint.user), merge_stderr=True, timeout=120
        )
    if result.exit_status != 0:
        raise GuestCommandError("scrub", result.exit_status, tail_of(result.stdout, {}))
    return Scrubbed(left_words(result.stdout))
