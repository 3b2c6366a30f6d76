"""Forks and a warm pool on the real Lima (issue 29).

One source, provisioned, with a checkout holding uncommitted work, is stopped once,
copied twice by the real ``limactl clone`` and started again in one apply; each fork
boots from its copy and its provisioning gives it a machine of its own (machine-id,
SSH host keys, hostname) and a branch of its own, ``fork/<vm>``, at the source's HEAD
with the uncommitted work carried. A spare of a pool of one, made with the source
(their boots shared), is then claimed by a new VM: renamed by the real
``limactl rename`` and started once under its name, it holds only its own secret and
its repo checked out, and the pool refills in the same apply.

Boots under TCG (each 1-4 min, more under load), most of them side by side: the source
and the spare; the source again, the two forks; the claimed spare, the refill.
"""

from __future__ import annotations

import shlex

import pytest

from tests.e2e.test_real_lima import IDENTITY, READ_SECRET, SECRET, TEMPLATE, Tier, _sidecar
from tests.e2e.test_real_lima import tier as tier

pytestmark = [pytest.mark.e2e, pytest.mark.real_lima, pytest.mark.timeout(3600)]

POOL_CANARY = "real-lima-pool-canary-3b8e-only-in-agent-4"
# A repository inside the guest: the guests reach no forge, and a file:// URL is one a
# manifest may name. The copies carry it; the spare is given one before its claim.
REPO = "/var/tmp/app.git"
# derive_bases: false: the source and the spare boot side by side from the template, no
# base built and booted before them (at 8 GiB none is derived on Lima anyway).
SOURCE = f"""\
apiVersion: sand/v1
project: reallimafork
backends:
  laptop: {{type: lima, lima_home: ./lima, derive_bases: false}}
defaults: {{image: "template:{TEMPLATE}", cpus: 1, memory: 2GiB, disk: 8GiB}}
secrets:
  NPM_TOKEN: {{from: {{env: SAND_TEST_NPM}}}}
  POOL_TOKEN: {{from: {{env: SAND_TEST_POOL}}}}
repos:
  app: {{url: "file://{REPO}", path: ~/app}}
pools:
  agents: {{warm: 1}}
vms:
  - name: dev-1
    secrets: [{{name: NPM_TOKEN, scope: ~/src}}]
"""
FORK = "  - name: {}\n    from: {{vm: dev-1}}\n    repos: [app]\n"
FORKS = FORK.format("try-1") + FORK.format("try-2")
CLAIM = (
    "  - name: agent-4\n    pool: agents\n    repos: [app]\n"
    "    secrets: [{name: POOL_TOKEN, scope: ~/work}]\n"
)
# The repository, and a checkout of it with work not committed: a changed file, a new one.
MAKE_REPO = (
    "set -e; git config --global user.name Agent; git config --global user.email a@x.test;"
    f" git init -q --bare -b main {REPO} && git clone -q {REPO} /tmp/seed"
    " && cd /tmp/seed && echo hello > README && git add README && git commit -qm init"
    " && git push -q origin main && cd && rm -rf /tmp/seed"
)
CHECKOUT = (
    f"set -e; cd && git clone -q file://{REPO} ~/app && cd ~/app && echo more >> README"
    " && git commit -qam second && echo unsaved >> README && echo draft > notes.txt"
)
STATE = "cd ~/app && git rev-parse --abbrev-ref HEAD && git rev-parse HEAD && git status -s"


def _shell(tier: Tier, vm: str, command: str, step: str = "") -> str:
    return tier.ok("shell", vm, "--", "bash", "-c", command, step=step)


def test_two_forks_and_a_pool_claim_on_the_real_lima(tier: Tier) -> None:
    tier.env["SAND_TEST_POOL"] = POOL_CANARY
    tier.write("sand.yaml", SOURCE)
    tier.ok("apply", "--auto-approve", timeout=1800, step="apply-source-and-spare")
    _shell(tier, "dev-1", MAKE_REPO + "; " + CHECKOUT)
    source_state = _shell(tier, "dev-1", STATE).splitlines()
    assert source_state[0] == "main" and source_state[2:] == [" M README", "?? notes.txt"]
    source_id, source_key = _shell(tier, "dev-1", IDENTITY).splitlines()
    yaml_before = (tier.root / "lima" / "dev-1" / "lima.yaml").read_bytes()
    marker_before = _sidecar(tier, "dev-1")

    tier.write("sand.yaml", SOURCE + FORKS)
    plan = tier.ok("plan", step="plan-forks")
    for fork in ("try-1", "try-2"):
        assert f'+ vm "{fork}" (fork of dev-1 at apply time: stops dev-1 for the copy) {{' in plan
    tier.ok("apply", "--auto-approve", timeout=2400, step="apply-forks")
    states = {str(i["name"]): str(i["status"]) for i in tier.instances()}
    assert states == {
        "dev-1": "Running",
        "try-1": "Running",
        "try-2": "Running",
        "agents-spare-1": "Running",
    }, states
    # The source: stopped and started once for both copies, nothing else.
    assert (tier.root / "lima" / "dev-1" / "lima.yaml").read_bytes() == yaml_before
    # Its marker as it was but the time its secrets were delivered: the restart emptied
    # its tmpfs, and the same apply delivered them again (issue 36, item 5).
    marker_after = _sidecar(tier, "dev-1")
    assert int(str(marker_after.pop("secrets_at"))) > int(str(marker_before["secrets_at"]))
    assert marker_after == {k: v for k, v in marker_before.items() if k != "secrets_at"}
    assert _shell(tier, "dev-1", READ_SECRET) == SECRET + "\n"
    assert _shell(tier, "dev-1", STATE).splitlines() == source_state
    again_id, again_key = _shell(tier, "dev-1", IDENTITY).splitlines()
    # The same machine, reached after its restart (Lima gives a guest new host keys at
    # each boot, issue 23 L1: its key is not compared).
    assert again_id == source_id and again_key.startswith("ssh-ed25519 ")
    machines = {source_id: "dev-1"}
    keys = {source_key: "dev-1", again_key: "dev-1"}
    for fork in ("try-1", "try-2"):
        marker = _sidecar(tier, fork)
        assert marker["identity"] == fork and marker["image"] == "fork:dev-1"
        assert marker["uid"] != marker_before["uid"]
        # A machine of its own, made so by its provisioning.
        fork_id, fork_key = _shell(tier, fork, IDENTITY).splitlines()
        assert fork_key.startswith("ssh-ed25519 ")
        assert fork_id.strip() and fork_id not in machines, (fork, machines)
        assert fork_key not in keys, (fork, keys)
        machines[fork_id], keys[fork_key] = fork, fork
        assert _shell(tier, fork, "hostname") == f"{fork}\n"
        # Its own branch at the source's HEAD, the work not committed carried along.
        branch, head, *changes = _shell(tier, fork, STATE).splitlines()
        assert (branch, head, changes) == (f"fork/{fork}", source_state[1], source_state[2:])
    _claim_from_the_pool(tier)
    assert "No changes." in tier.ok("apply", "--auto-approve", timeout=600, step="apply-again")


def _claim_from_the_pool(tier: Tier) -> None:
    """A new VM naming the pool takes its spare: renamed, started under its name, given
    its own secret and repo; the pool refills in the same apply."""
    spare = "agents-spare-1"
    assert _shell(tier, spare, "ls ~/app ~/work 2>/dev/null | wc -l") == "0\n"
    _shell(tier, spare, MAKE_REPO)  # what its repo is cloned from (see REPO)
    spare_marker = _sidecar(tier, spare)
    tier.write("sand.yaml", SOURCE + FORKS + CLAIM)
    plan = tier.ok("plan", step="plan-claim")
    assert f'+ vm "agent-4" (claims spare {spare} of pool agents) {{' in plan, plan
    assert f'+ spare "{spare}" of pool agents (refill 1/1) {{' in plan, plan
    out = tier.ok("apply", "--auto-approve", timeout=2400, step="apply-claim")
    assert POOL_CANARY not in plan + out and SECRET not in plan + out
    claimed = _sidecar(tier, "agent-4")
    assert claimed["identity"] == "agent-4" and claimed["uid"] == spare_marker["uid"]
    assert _shell(tier, "agent-4", "hostname") == "agent-4\n"
    read = 'cd ~/work && eval "$(direnv export bash 2>/dev/null)" && printenv POOL_TOKEN'
    assert _shell(tier, "agent-4", read) == POOL_CANARY + "\n"
    # No other VM's secret anywhere on it (the canary of dev-1 and its forks). grep's
    # own exit is reported from inside sudo: 1 is "searched, no match"; a sudo that
    # failed prints no such line, a grep that failed says 2, and either fails here.
    search = 'grep -rlsF -D skip -- "$0" /home /run /dev/shm /etc /var/tmp; echo grep-exit=$?'
    found = _shell(tier, "agent-4", f"sudo -n bash -c {shlex.quote(search)} {shlex.quote(SECRET)}")
    assert found == "grep-exit=1\n", found
    assert _shell(tier, "agent-4", "cd ~/app && git log --format=%s && cat README") == (
        "init\nhello\n"
    )
    # Refilled: a new spare of the pool, another incarnation, running.
    refill = _sidecar(tier, spare)
    assert refill["uid"] != spare_marker["uid"] and refill.get("pool") == "agents", refill
    states = {str(i["name"]): str(i["status"]) for i in tier.instances()}
    assert states.get(spare) == "Running" and states.get("agent-4") == "Running", states
    for text in (tier.root / "lima" / "agent-4" / "sand-marker.json").read_text(), str(refill):
        assert POOL_CANARY not in text
