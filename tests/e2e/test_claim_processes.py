"""What a warm claim's provisioning starts in the guest (issue 41, item 4), counted on a
real netns guest: every program the guest's processes exec during the claim's one run
(its driver and its steps: pool-identity, secrets, repos), traced from this host with
strace attached to the guest's sshd; and the requests the rig's git server got.

Under emulation (a TCG VM) each process started costs tens to hundreds of milliseconds,
and the claim's own steps were little else: about 120 programs for a hostname, one
scope's secret and one repository, where bash can read, compare and write its files
itself. And the default branch was asked of the git server over a second connection
(``git ls-remote``) after the fetch, which the clone's own answers."""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from sand.desired.spec import DesiredBase, MachineContent, with_base_fingerprint, with_fingerprints
from sand.provision import provision
from sand.provision.bundle import machine_digest
from tests.provision.e2e_helpers import as_user, endpoint, scoped_env, stand_in_agents
from tests.provision.helpers import make_vm, repo, secret
from tests.required import require

pytestmark = pytest.mark.e2e

VALUE = "claim-processes-value-not-secret"
# What a claim's run has bash do itself now (reading, comparing and writing its files,
# the time, a user's uid, the hostname), and the second connection it no longer makes.
NOT_STARTED = (
    "cat", "date", "dirname", "realpath", "stat", "mktemp", "awk", "sed", "grep", "sort",
    "cut", "id", "hostname", "cmp", "od", "ssh-keygen",
)  # fmt: skip
# The driver, sudo and timeout for each step, bash for each, the files renamed into
# place, direnv's allow, and git's own (the clone, its helper, index-pack, checkout):
# 35 in the run measured; the run before started 120.
MOST = 45
_EXECVE = re.compile(r'^\d+ execve\("([^"]*)", \[(.*?)\], .* = 0$')


def _spec(base_user: str) -> tuple[Any, Any]:
    """A spare of a golden base (its machine steps taken as done: the rig's workbench
    tree holds them) and the VM that claims it: a secret at ~/work and a repo."""
    content = MachineContent(base_user, (), ("claude",), False)
    base = with_base_fingerprint(
        DesiredBase("claims", "rig", "workbench", True, "debian", content, machine_digest())
    )
    common = {"base": base, "timezone": "Etc/UTC", "pool": "agents"}
    spare = make_vm(name="agents-spare-1", spare=True, **common)
    return spare, common


def test_a_claim_starts_few_programs_and_asks_the_forge_once(
    tmp_path: Path, netns_guest, git_server, monkeypatch: pytest.MonkeyPatch
) -> None:
    require(shutil.which("strace") is not None, "needs strace")
    monkeypatch.setenv("SAND_AGENT_SOURCE", str(stand_in_agents(tmp_path / "agents")))
    monkeypatch.setenv("SAND_STATE_DIR", str(tmp_path / "state"))
    guest = netns_guest()
    url = git_server.create_repo("app", {"README.md": "claimed\n"})
    spare, common = _spec(guest.user)
    claim = with_fingerprints(
        replace(
            make_vm(name="agent-w", **common),
            secrets=(secret("API", "~/work", "API_KEY"),),
            repos=(repo("app", url, "~/src/app", token="GIT"),),
        )
    )
    values = {"API": VALUE, "GIT": git_server.token}
    where = endpoint(guest, policy="none")
    asyncio.run(provision(where, spare, {}))

    # The listener: the oldest sshd of the guest (each session is a child of it).
    sshd = min((p for p in guest.guest_pids() if "sshd" in p.argv[0]), key=lambda p: p.pid)
    trace = tmp_path / "execve.trace"
    strace = subprocess.Popen(
        ["strace", "-f", "-qq", "-s", "256", "-e", "trace=execve", "-o", str(trace),
         "-p", str(sshd.host_pid)],
        stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        # Attached once strace has written its first line or stopped: no fixed wait.
        _wait_attached(strace, sshd.host_pid)
        requests = len(git_server.request_log)
        report = asyncio.run(provision(where, claim, values))
    finally:
        strace.terminate()
        strace.wait(timeout=30)

    assert [s.name for s in report.steps if s.ran] == ["pool-identity", "secrets", "repos"]
    # Ready: its hostname, its secret through direnv, its checkout.
    assert as_user(guest, "hostname").stdout.decode().strip() == "agent-w"
    assert scoped_env(guest, "~/work", "API_KEY") == VALUE
    assert as_user(guest, "cat ~/src/app/README.md").stdout.decode() == "claimed\n"

    started = [m.groups() for line in trace.read_text().splitlines() if (m := _EXECVE.match(line))]
    programs = Counter(Path(path).name for path, _ in started)
    assert len(started) <= MOST, programs
    assert not set(programs) & set(NOT_STARTED), programs
    assert not any('"ls-remote"' in argv for _, argv in started), started
    listings = [p for p, ok in git_server.request_log[requests:] if p.endswith("/info/refs") and ok]
    assert listings == ["/app.git/info/refs"], git_server.request_log[requests:]


def _wait_attached(strace: subprocess.Popen[bytes], pid: int) -> None:
    """Until strace is attached to ``pid`` (the traced process names its tracer)."""
    status = Path(f"/proc/{pid}/status")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if strace.poll() is not None:
            raise AssertionError(f"strace stopped: {strace.stderr.read() if strace.stderr else ''}")
        tracer = next(ln for ln in status.read_text().splitlines() if ln.startswith("TracerPid:"))
        if tracer.split()[1] == str(strace.pid):
            return
        time.sleep(0.01)  # a poll of the condition above, not a wait for it
    raise AssertionError("strace did not attach")
