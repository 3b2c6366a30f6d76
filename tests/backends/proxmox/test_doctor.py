"""doctor(): every privilege sand needs, and nothing that reaches beyond the pool."""

from __future__ import annotations

from sand.backends.proxmox.doctor import check_permissions
from sand.backends.proxmox.refusals import holds
from tests.fakepve_rig.rig import FakePveRig


async def test_the_least_privilege_token_is_healthy(rig: FakePveRig) -> None:
    backend = rig.make_backend()
    report = await backend.doctor()
    assert report.ok and list(report) == [], report.lines()
    assert rig.count("GET", "/access/permissions") == 1
    assert any("holds every privilege" in line for line in report.lines())
    await backend.close()


async def test_a_token_with_rights_on_root_is_too_broad(rig: FakePveRig) -> None:
    token = rig.add_token("sand@pve!admin", acl="root")
    backend = rig.make_backend(token_file=str(token))
    report = await backend.doctor()
    problems = list(report)
    assert not report.ok
    assert any("too broad" in p and "on /," in p and "outside pool 'sand'" in p for p in problems)
    assert not any("missing privilege" in p for p in problems)
    await backend.close()


async def test_a_too_narrow_token_names_what_is_missing(rig: FakePveRig) -> None:
    token = rig.add_token("sand@pve!narrow", acl="none")
    rig.run(
        rig.grant_sand_privileges,
        "sand@pve!narrow",
        without=["VM.PowerMgmt", "SDN.Use", "VM.Clone", "Datastore.AllocateSpace"],
    )
    backend = rig.make_backend(token_file=str(token))
    problems = list(await backend.doctor())
    assert "error: missing privilege VM.PowerMgmt on /pool/sand" in problems
    assert "error: missing privilege SDN.Use on /sdn/zones/localnetwork/vmbr0" in problems
    assert "error: missing privilege VM.Clone on /vms/9000 (the template)" in problems
    assert any(p.startswith("error: missing privilege Datastore.AllocateSpace") for p in problems)
    assert not any("too broad" in p for p in problems)
    await backend.close()


async def test_a_token_that_cannot_see_the_template(rig: FakePveRig) -> None:
    token = rig.add_token("sand@pve!blind", acl="none")
    backend = rig.make_backend(token_file=str(token))
    problems = list(await backend.doctor())
    assert "error: template 'debian-13' not found (or the token lacks VM.Audit on it)" in problems
    await backend.close()


async def test_an_unreadable_token_file_is_reported_not_raised(rig: FakePveRig) -> None:
    rig.token_file.chmod(0o644)
    backend = rig.make_backend()
    (problem,) = list(await backend.doctor())
    assert "chmod 600" in problem
    assert rig.count() == 0
    await backend.close()


def test_privileges_propagate_and_pools_project() -> None:
    perms = {"/pool/sand": {"VM.Audit": 1}, "/sdn": {"SDN.Use": 1}, "/storage/x": {"A": 0}}
    assert holds(perms, "/pool/sand", "VM.Audit")
    assert holds(perms, "/vms/101", "VM.Audit", ("/pool/sand",))  # projected by the pool
    assert not holds(perms, "/vms/101", "VM.Audit")
    assert holds(perms, "/sdn/zones/localnetwork/vmbr0", "SDN.Use")
    assert holds(perms, "/storage/x", "A") and not holds(perms, "/storage/x/y", "A")


def test_escalation_privileges_anywhere_are_flagged() -> None:
    perms = {"/pool/sand": {"Permissions.Modify": 1}, "/vms": {"VM.Audit": 1}}
    findings = check_permissions(
        perms,
        pool="sand",
        storage="s",
        bridge="vmbr0",
        template="9000",
        template_in_pool=True,
        nodes=["pve1"],
    )
    text = [str(f) for f in findings]
    assert any("Permissions.Modify on /pool/sand is never needed" in t for t in text)
    assert any("too broad" in t and "on /vms" in t for t in text)


async def test_vm_snapshot_is_asked_for_only_when_a_vm_forks(rig: FakePveRig) -> None:
    """A fork snapshots its source (issue 29): without VM.Snapshot its apply would fail
    at PVE's permission check, so doctor names it, and only for a manifest with forks."""
    token = rig.add_token("sand@pve!nosnap", acl="none")
    rig.run(rig.grant_sand_privileges, "sand@pve!nosnap", without=["VM.Snapshot"])
    backend = rig.make_backend(token_file=str(token))
    source, fork = rig.desired([{"name": "agent-1"}, {"name": "try-1", "from": {"vm": "agent-1"}}])
    missing = "error: missing privilege VM.Snapshot on /pool/sand (a VM of the manifest is a fork)"
    assert list(await backend.doctor([source])) == []
    assert missing in list(await backend.doctor([source, fork]))
    await backend.close()


def _root_findings(root: dict[str, int], *, egress: bool) -> list[str]:
    perms = {"/": root} if root else {}
    findings = check_permissions(
        perms,
        pool="sand",
        storage="s",
        bridge="vmbr0",
        template=None,
        template_in_pool=False,
        nodes=["pve1"],
        egress=egress,
    )
    return [str(f) for f in findings if "on /," in str(f) or "Sys.Audit on /" in str(f)]


def test_sys_audit_on_root_unpropagated_is_the_one_grant_accepted_there() -> None:
    """Egress needs to read whether the datacenter's firewall is on: Sys.Audit on / alone,
    read-only, not propagated. Propagated, or anything beside it, stays too broad."""
    (ok,) = _root_findings({"Sys.Audit": 0}, egress=True)
    assert ok.startswith("ok: Sys.Audit on / (not propagated)")
    (broad,) = _root_findings({"Sys.Audit": 1}, egress=True)
    assert (
        broad.startswith("error: too broad: Sys.Audit on / propagates") and "--propagate 0" in broad
    )
    more = _root_findings({"Sys.Audit": 0, "VM.Audit": 0}, egress=False)
    assert any(t.startswith("error: too broad: the token holds VM.Audit on /,") for t in more)


def test_sys_audit_on_root_is_asked_for_only_when_a_vm_declares_egress() -> None:
    assert _root_findings({}, egress=False) == []
    (missing,) = _root_findings({}, egress=True)
    assert missing.startswith("error: missing privilege Sys.Audit on / (not propagated)")
    assert "pveum acl modify / --roles SandAudit" in missing and "--propagate 0" in missing


async def test_doctor_names_the_datacenter_read_for_a_manifest_with_egress(
    rig: FakePveRig,
) -> None:
    backend = rig.make_backend()
    plain, closed = rig.desired(
        [{"name": "a"}, {"name": "b", "egress": {"cidrs": ["10.20.0.0/16"]}}]
    )
    assert list(await backend.doctor([plain])) == []
    (problem,) = list(await backend.doctor([plain, closed]))
    assert problem.startswith("error: missing privilege Sys.Audit on / (not propagated)")
    # fakepve's grants propagate: doctor says so, never accepts it
    rig.grant(rig.token_id, "/", "Sys.Audit")
    (problem,) = list(await backend.doctor([plain, closed]))
    assert problem.startswith("error: too broad: Sys.Audit on / propagates")
    await backend.close()
