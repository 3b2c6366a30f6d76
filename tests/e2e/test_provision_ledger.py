"""The step ledger on a real guest (netns rig): a reprovision runs what changed, only.

Every claim is read off the guest: its ledger files (``/var/lib/sand/ledger``), its
step log (``/var/lib/sand/step-log``), its processes and files; the host side is
the run's own count of exchanges, asserted against the sshd's log of sessions.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import pytest

from sand.errors import GuestCommandError
from sand.provision import provision
from sand.provision.driver import LEDGER_DIR, STEP_LOG
from tests.provision.e2e_helpers import endpoint, root, scoped_env, stand_in_agents
from tests.provision.helpers import make_vm, secret

if TYPE_CHECKING:
    from tests.rig.fixtures import MakeGuest
    from tests.rig.guest import NetnsGuest

pytestmark = pytest.mark.e2e

VALUE = "ledger-canary-3f9d-secret"
MACHINE = {"packages", "toolchain", "agents"}
ALL = [
    "bundle",
    "user",
    "egress",  # a Lima VM's: without a policy, it removes what an earlier one told the guest
    "packages",
    "toolchain",
    "agents",
    "memory",
    "locale",
    "home",
    "secrets",
    "repos",
]


@pytest.fixture(autouse=True)
def _agents(tmp_path, monkeypatch):
    monkeypatch.setenv("SAND_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("SAND_AGENT_SOURCE", str(stand_in_agents(tmp_path / "agents")))


def _log(guest: NetnsGuest) -> list[list[str]]:
    text = guest.run_root(["cat", STEP_LOG]).stdout.decode()
    return [line.split() for line in text.splitlines()]


def _ledger(guest: NetnsGuest) -> dict[str, str]:
    names = root(guest, "ls", LEDGER_DIR).split()
    return {n: root(guest, "cat", f"{LEDGER_DIR}/{n}").strip() for n in names}


def _sessions(guest: NetnsGuest) -> int:
    """How many SSH sessions the guest's sshd started (its log, -e)."""
    return guest.log_text().count("Accepted publickey")


async def test_a_reprovision_runs_only_what_changed_and_a_no_op_is_one_exchange(
    netns_guest: MakeGuest,
) -> None:
    guest = netns_guest()
    vm = make_vm(secrets=(secret("API", "~/work", "API_KEY"),), timezone="Etc/UTC")
    values = {"API": VALUE}

    first = await provision(endpoint(guest), vm, values)
    assert first.ran == ALL and first.round_trips == 2
    ledger = _ledger(guest)
    # Every step but secrets is recorded on disk; the secrets' record is on tmpfs only
    # (the bundle is the driver itself, recorded by no step).
    assert set(ledger) == set(ALL) - {"bundle", "secrets"}
    assert VALUE not in root(guest, "cat", STEP_LOG)
    tmpfs = root(guest, "sh", "-c", f"ls /run/user/{guest.uid}/sand/.ledger")
    assert tmpfs.split() == ["secrets"]
    assert scoped_env(guest, "~/work", "API_KEY") == VALUE

    # Nothing changed: one exchange, nothing run, and the guest's log is not even written.
    log_before, sessions = _log(guest), _sessions(guest)
    again = await provision(endpoint(guest), vm, values)
    assert again.ran == [] and again.round_trips == 1 and again.changed == 0
    assert {s.name for s in again.steps} == set()  # the driver answered before any step
    assert _log(guest) == log_before
    assert _sessions(guest) == sessions + 1  # one connection, one command on it

    # One package more: only the packages step runs, the others are skipped by the ledger.
    more = replace(vm, packages=("bash",))
    changed = await provision(endpoint(guest), more, values)
    assert changed.ran == ["packages"] and changed.round_trips == 2
    skipped = {s.name for s in changed.steps if not s.ran}
    assert skipped == set(ALL) - {"bundle", "packages"}
    assert _ledger(guest)["packages"] != ledger["packages"]
    assert _ledger(guest)["toolchain"] == ledger["toolchain"]
    last = [line for line in _log(guest) if line[1] == "vm:vm1"][-len(ALL) + 1 :]
    assert [(w[2], w[3]) for w in last] == [
        (name, "ran" if name == "packages" else "skipped") for name in ALL[1:]
    ]

    # A rotated secret: the secrets step alone.
    rotated = await provision(endpoint(guest), more, {"API": VALUE + "-2"})
    assert rotated.ran == ["secrets"]
    assert scoped_env(guest, "~/work", "API_KEY") == VALUE + "-2"

    # A reboot empties the tmpfs, with the secrets' record: they are delivered again.
    guest.run_root(["sh", "-c", f"rm -rf /run/user/{guest.uid}/sand"], check=True)
    back = await provision(endpoint(guest), more, {"API": VALUE + "-2"})
    assert back.ran == ["secrets"]
    assert scoped_env(guest, "~/work", "API_KEY") == VALUE + "-2"


async def test_a_step_that_fails_is_not_recorded_and_the_next_run_tries_it_again(
    netns_guest: MakeGuest,
) -> None:
    guest = netns_guest()
    vm = make_vm(timezone="Etc/UTC")
    await provision(endpoint(guest), vm, {})
    recorded = _ledger(guest)

    # No mirror is reachable: installing a package the guest lacks fails.
    broken = replace(vm, packages=("sand-rig-no-such-package",), timezone="Europe/Berlin")
    with pytest.raises(GuestCommandError) as info:
        await provision(endpoint(guest), broken, {})
    assert info.value.step == "packages"
    assert _ledger(guest) == recorded  # neither the failed step nor any after it
    assert [w[2:4] for w in _log(guest)[-1:]] == [["packages", "failed"]]
    assert root(guest, "cat", "/etc/timezone").strip() == "Etc/UTC"  # locale never ran

    # Back to what the guest holds: nothing to do, in one exchange.
    again = await provision(endpoint(guest), vm, {})
    assert again.ran == [] and again.round_trips == 1
    # The change that failed is asked for again on the next run (not marked done).
    with pytest.raises(GuestCommandError):
        await provision(endpoint(guest), broken, {})


async def test_editing_one_bundle_script_re_runs_only_its_steps(
    netns_guest: MakeGuest, tmp_path
) -> None:
    import shutil

    from sand.provision.bundle import BUNDLE_DIR, Bundle

    guest = netns_guest()
    vm = make_vm(timezone="Etc/UTC")
    await provision(endpoint(guest), vm, {})
    edited = tmp_path / "bundle"
    shutil.copytree(BUNDLE_DIR, edited)
    with (edited / "home.sh").open("a") as fh:
        fh.write("\n# an edit\n")
    report = await provision(endpoint(guest), vm, {}, bundle=Bundle(edited))
    assert report.ran == ["bundle", "home"]
    assert root(guest, "tail", "-n", "1", "/usr/local/lib/sand/bundle/home.sh") == "# an edit\n"
