"""A Proxmox VM with a deny policy and brokered secrets reaches the broker: against
fakepve and the real broker process, the VM's firewall gets one more sand rule, out to
where the broker listens for it (its entry in the broker's state, the port in run.json),
once the apply granted it; the rule follows a restarted broker, goes with the VM's last
grant, and the drift read counts it as sand's while it matches and as drift when a hand
removed or changed it (docs/egress.md#proxmox)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sand.backends.proxmox.backend import ProxmoxBackend
from sand.backends.proxmox.firewall import IPSET, RULE_COMMENT
from sand.broker.client import grant, revoke
from sand.broker.store import read_running
from sand.desired.brokered import BrokerGrant
from sand.state.paths import project_dir
from tests.backends.proxmox.test_cli import Sand
from tests.backends.proxmox.test_egress_drift_proxmox import _applied
from tests.backends.proxmox.test_egress_proxmox import CIDRS, firewall_of
from tests.fakepve_rig.rig import FakePveRig

PROJECT = "demo"
GRANTS = (BrokerGrant("GITHUB_TOKEN", ("https://github.com/acme/webapp.git",), ("agent/*",)),)
TOKENS = {"GITHUB_TOKEN": "canary-token-never-in-a-rule"}


@pytest.fixture
def run(rig: FakePveRig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Sand]:
    """The CLI and this process (the grant, as an apply makes it) share one state dir;
    the broker a test started is stopped with its last grant."""
    sand = Sand(rig, tmp_path)
    monkeypatch.setenv("SAND_STATE_DIR", sand.env["SAND_STATE_DIR"])
    yield sand
    revoke(PROJECT, "a")


async def _open(backend: ProxmoxBackend, rig: FakePveRig, policy: dict[str, Any]) -> None:
    """What the apply does after granting the VM, before its delivery."""
    (vm,) = rig.desired([{"name": "a", "egress": policy}])
    seen = await backend.observe([vm])
    (current,) = [v for v in seen.vms if v.name == "a"]
    await backend.open_to_broker(vm, current)


async def _granted(
    run: Sand, rig: FakePveRig, backend: ProxmoxBackend, policy: dict[str, Any] = CIDRS
) -> int:
    """VM ``a`` created with ``policy`` (no rule to the broker: it has not started),
    then granted and opened as an apply's delivery does; its vmid."""
    vmid = _applied(run, rig, policy)
    assert [r for r in _mine(rig, vmid) if r[1] != f"+{IPSET}"] == []
    grant(PROJECT, "a", "127.0.0.1", GRANTS, TOKENS)
    await _open(backend, rig, policy)
    return vmid


def _broker_now() -> tuple[str, str]:
    running = read_running(project_dir(PROJECT) / "broker")
    assert running is not None
    ((address, port),) = running.ports.items()
    return address, str(port)


def _mine(rig: FakePveRig, vmid: int) -> list[tuple[str, str, str, str]]:
    """sand's rules at fakepve's side, in order: (action, dest, proto, dport)."""
    rules = sorted(firewall_of(rig, vmid)["rules"], key=lambda r: int(r.get("pos", 0)))
    return [
        (r["action"], r["dest"], r.get("proto", ""), str(r.get("dport", "")))
        for r in rules
        if r.get("comment") == RULE_COMMENT and r["type"] == "out" and int(r["enable"]) == 1
    ]


CIDR_RULE = ("ACCEPT", f"+{IPSET}", "tcp", "22,443")


async def test_a_granted_deny_vm_gets_a_rule_to_where_the_broker_listens_for_it(
    run: Sand, rig: FakePveRig, backend: ProxmoxBackend
):
    vmid = await _granted(run, rig, backend)
    address, port = _broker_now()
    assert _mine(rig, vmid) == [CIDR_RULE, ("ACCEPT", address, "tcp", port)]
    assert TOKENS["GITHUB_TOKEN"] not in repr(firewall_of(rig, vmid))


async def test_a_deny_all_vm_gets_the_broker_as_its_only_way_out(
    run: Sand, rig: FakePveRig, backend: ProxmoxBackend
):
    deny_all = {"policy": "deny"}
    vmid = await _granted(run, rig, backend, deny_all)
    address, port = _broker_now()
    assert _mine(rig, vmid) == [("ACCEPT", address, "tcp", port)]


async def test_no_grant_no_rule_and_the_last_grant_takes_it_away(
    run: Sand, rig: FakePveRig, backend: ProxmoxBackend
):
    vmid = _applied(run, rig, CIDRS)
    await _open(backend, rig, CIDRS)
    assert _mine(rig, vmid) == [CIDR_RULE]
    grant(PROJECT, "a", "127.0.0.1", GRANTS, TOKENS)
    await _open(backend, rig, CIDRS)
    assert len(_mine(rig, vmid)) == 2
    revoke(PROJECT, "a")  # the VM's last brokered grant went from its entry
    await _open(backend, rig, CIDRS)
    assert _mine(rig, vmid) == [CIDR_RULE]
    assert run("plan", "--detailed-exitcode").returncode == 0


async def test_a_restarted_broker_moves_the_rule_and_the_plan_shows_the_stale_one(
    run: Sand, rig: FakePveRig, backend: ProxmoxBackend
):
    vmid = await _granted(run, rig, backend)
    before = _broker_now()
    revoke(PROJECT, "a")  # the broker stops with its last VM ...
    grant(PROJECT, "a", "127.0.0.1", GRANTS, TOKENS)  # ... and a new one takes a new port
    after = _broker_now()
    assert after != before
    assert _mine(rig, vmid)[1] == ("ACCEPT", *before[:1], "tcp", before[1])
    plan = run("plan", "--detailed-exitcode")
    assert plan.returncode == 2, plan.stdout + plan.stderr
    assert "changed outside sand: sand's rule changed (dport)" in plan.stdout
    await _open(backend, rig, CIDRS)  # the next delivery's
    assert _mine(rig, vmid) == [CIDR_RULE, ("ACCEPT", after[0], "tcp", after[1])]
    quiet = run("plan", "--detailed-exitcode")
    assert quiet.returncode == 0, quiet.stdout + quiet.stderr


async def test_the_drift_read_is_quiet_with_the_broker_rule_and_loud_without_it(
    run: Sand, rig: FakePveRig, backend: ProxmoxBackend
):
    vmid = await _granted(run, rig, backend)
    quiet = run("plan", "--detailed-exitcode")
    assert quiet.returncode == 0, quiet.stdout + quiet.stderr
    address, port = _broker_now()

    def remove_broker_rule() -> None:
        conf = rig.pve.firewall_config("vm", "pve1", vmid)
        conf["rules"][:] = [r for r in conf["rules"] if r.get("dest") != address]

    rig.run(remove_broker_rule)
    plan = run("plan", "--detailed-exitcode")
    assert plan.returncode == 2, plan.stdout + plan.stderr
    said = f"changed outside sand: 1 rules marked {RULE_COMMENT!r}, sand writes 2"
    assert said in plan.stdout
    done = run("apply", "--auto-approve")  # the egress rewrite knows the broker too
    assert done.returncode == 0, done.stdout + done.stderr
    assert _mine(rig, vmid) == [CIDR_RULE, ("ACCEPT", address, "tcp", port)]
    assert run("plan", "--detailed-exitcode").returncode == 0


async def test_a_policy_rewrite_keeps_the_rule_to_the_broker(
    run: Sand, rig: FakePveRig, backend: ProxmoxBackend
):
    vmid = await _granted(run, rig, backend)
    address, port = _broker_now()
    wider = {"cidrs": [*CIDRS["cidrs"], "198.51.100.0/24"], "ports": [443]}
    run.write([{"name": "a", "egress": wider}])
    done = run("apply", "--auto-approve")
    assert done.returncode == 0, done.stdout + done.stderr
    assert _mine(rig, vmid) == [
        ("ACCEPT", f"+{IPSET}", "tcp", "443"),
        ("ACCEPT", address, "tcp", port),
    ]
    assert run("plan", "--detailed-exitcode").returncode == 0
