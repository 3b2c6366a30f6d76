"""On a real guest (netns rig): the repos step refuses a hostile payload by itself.

The host-side checks are bypassed on purpose (the step's stdin is written by
hand), so what is proven is the guest script's own defence over a real SSH
session: an option-like or ``ext::`` URL and a path out of the home directory
are refused, nothing is created, and no process on the host or guest ever
had the hostile value in its argv. A clean repo from the same payload
still runs, so the refusals are not a broken step.
"""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING

import pytest

from sand.desired.spec import DesiredRepo
from sand.errors import GuestCommandError
from sand.provision import provision
from sand.provision.provisioner import _run
from sand.provision.steps import Step, fields, script
from tests.provision.e2e_helpers import endpoint, root, stand_in_agents
from tests.provision.helpers import make_vm
from tests.rig.argv import ArgvWatch

if TYPE_CHECKING:
    from pathlib import Path

    from tests.rig.fixtures import MakeGuest
    from tests.rig.gitserver import GitServer

pytestmark = pytest.mark.e2e

HOME = "/home/claude"


def _repos_step(*records: tuple[str, ...]) -> Step:
    return Step("repos", script("repos.sh"), False, stdin=fields(*records), timeout=120)


async def _step(guest: object, vm: object, step: Step):  # type: ignore[no-untyped-def]
    """Run one step by itself, as provisioning runs its steps (the driver)."""
    return await _run(endpoint(guest), "vm1", "vm:vm1", "claude", [step], {}, None, "provision", 30)


def _exists(guest: object, path: str) -> bool:
    return guest.run_root(["test", "-e", path]).returncode == 0  # type: ignore[attr-defined]


async def test_the_guest_repos_step_refuses_hostile_records_and_keeps_argv_clean(
    netns_guest: MakeGuest, git_server: GitServer, tmp_path: Path
) -> None:
    guest = netns_guest()
    url = git_server.create_repo("app", {"README.md": "# app\n"})
    app = DesiredRepo(name="app", url=url, branch=None, path="~/src/app", token_secret="GIT")
    vm = make_vm(repos=(app,))
    values = {"GIT": git_server.token}
    await provision(
        endpoint(guest), vm, values, agent_source=str(stand_in_agents(tmp_path / "agents"))
    )
    assert root(guest, "cat", f"{HOME}/src/app/README.md") == "# app\n"

    # The watch sees every process on the host, other tests' too (a git
    # server's own `git upload-pack --http-backend-info-refs`), so what it
    # looks for carries a mark no other test's process can have.
    pwned = f"pwned{secrets.token_hex(4)}"
    hostile = [
        ("repo", "~/src/a", f"--upload-pack=touch /tmp/{pwned}-a", ""),
        ("repo", "~/src/b", f"ext::sh -c touch% /tmp/{pwned}-b", ""),
        ("repo", f"~/../../tmp/{pwned}-c", url, ""),
        ("repo", f"/tmp/{pwned}-d", url, ""),
        ("repo", "~/src/e", url, f"--orphan={pwned}-e"),
    ]
    with ArgvWatch(guest) as watch:
        for record in hostile:
            with pytest.raises(GuestCommandError) as info:
                await _step(guest, vm, _repos_step(record))
            assert "sand: " in str(info.value), str(info.value)
    assert watch.samples > 0
    for marker in (pwned, "--upload-pack=touch", "ext::sh"):
        assert watch.containing(marker) == [], marker
    for name in ("a", "b", "c", "d"):
        assert not _exists(guest, f"/tmp/{pwned}-{name}")
    for name in ("a", "b", "e"):
        assert not _exists(guest, f"{HOME}/src/{name}")
    # The same step with a clean record still runs: the refusals are the script's.
    # (The checkout and the ledger's record of it go first, so the step really runs.)
    root(guest, "rm", "-rf", f"{HOME}/src/app", "/var/lib/sand/ledger/repos")
    report = await _step(guest, vm, _repos_step(("repo", "~/src/app", url, "")))
    assert report.ran == ["repos"]
    assert root(guest, "cat", f"{HOME}/src/app/README.md") == "# app\n"
