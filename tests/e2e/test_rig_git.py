"""The rig's token-protected git server, exercised from a real guest."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

import pytest

from tests.rig.gitserver import GitServer
from tests.rig.ssh import run as ssh_run

if TYPE_CHECKING:
    # Not imported at run time: pytest_plugins must import it first to rewrite asserts.
    from tests.rig.fixtures import MakeGuest


pytestmark = pytest.mark.e2e

# The token reaches git through a credential helper reading a tmpfs file that
# was streamed in over stdin -- never argv -- the way sand hands it over.
_HELPER = (
    "!f() { echo username=x-access-token; printf 'password=%s\\n' \"$(cat /dev/shm/tok)\"; }; f"
)


def _git(args: str) -> str:
    return f"GIT_TERMINAL_PROMPT=0 git -c credential.helper={shlex.quote(_HELPER)} {args}"


async def test_clone_and_push_with_token_from_a_guest(
    netns_guest: MakeGuest, git_server: GitServer
) -> None:
    url = git_server.create_repo("project", {"README.md": "hello from the rig\n"})
    guest = netns_guest()
    await ssh_run(guest, "umask 077; cat > /dev/shm/tok", input=git_server.token)
    res = await ssh_run(guest, _git(f"clone -q {url} ~/project") + " && cat ~/project/README.md")
    assert str(res.stdout) == "hello from the rig\n"
    await ssh_run(
        guest,
        "cd ~/project && git checkout -q -b feature && echo change > f.txt && git add f.txt && "
        "git -c user.name=t -c user.email=t@t commit -qm change && "
        + _git("push -q origin feature"),
    )
    assert "feature" in git_server.branches("project")
    assert any(ok for _path, ok in git_server.request_log)


async def test_clone_without_or_with_a_wrong_token_fails(
    netns_guest: MakeGuest, git_server: GitServer
) -> None:
    url = git_server.create_repo("private")
    guest = netns_guest()
    anon = await ssh_run(guest, f"GIT_TERMINAL_PROMPT=0 git clone -q {url} ~/a", check=False)
    assert anon.exit_status != 0
    await ssh_run(guest, "cat > /dev/shm/tok", input="not-the-token")
    wrong = await ssh_run(guest, _git(f"clone -q {url} ~/b"), check=False)
    assert wrong.exit_status != 0
    assert "Authentication failed" in str(wrong.stderr)
    log = git_server.request_log
    assert log and not any(ok for _path, ok in log)
    # Nothing got cloned.
    ls = await ssh_run(guest, "ls -A ~", check=True)
    assert "a" not in str(ls.stdout).split() and "b" not in str(ls.stdout).split()


async def test_token_never_appears_in_logs_or_repr(
    netns_guest: MakeGuest, git_server: GitServer, capfd: pytest.CaptureFixture[str]
) -> None:
    url = git_server.create_repo("quiet")
    guest = netns_guest()
    await ssh_run(guest, "cat > /dev/shm/tok", input=git_server.token)
    await ssh_run(guest, _git(f"clone -q {url} ~/q"))
    out, err = capfd.readouterr()
    assert git_server.token not in out + err
    assert git_server.token not in repr(git_server)
    assert git_server.token not in repr(git_server.request_log)
