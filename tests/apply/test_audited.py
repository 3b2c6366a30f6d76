"""What an apply run writes to the host's audit trail: each change it carried out, with
the manifest it came from, and the lease it held; the chain verifies afterwards."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path
from types import SimpleNamespace

from sand.apply.audited import manifest_fields
from sand.verbs.power import find_vm, sleep_now, wake_if_asleep
from tests.audit.helpers import audit_records, verify_host
from tests.memory_backend.session import Fleet
from tests.memory_backend.world import World


def test_each_change_names_its_vm_the_manifest_and_the_lease_around_it(
    fleet: Fleet, world: World, tmp_path: Path
) -> None:
    fleet.write([{"name": "a"}, {"name": "b"}])
    end = fleet.apply()
    assert end.outcome is not None and end.outcome.ok
    fleet.write([{"name": "a"}])
    assert fleet.apply().outcome is not None

    state = tmp_path / "state"
    records = audit_records(state)
    changes = [(r["vm"], r["change"], r["ok"]) for r in records if r["kind"] == "apply.change"]
    assert changes == [("a", "create", True), ("b", "create", True), ("b", "delete", True)]
    last = [r for r in records if r["kind"] == "apply.change"][-1]
    assert last["manifest"] == str(fleet.manifest) and last["project"] == "demo"
    assert last["manifest_sha256"] == hashlib.sha256(fleet.manifest.read_bytes()).hexdigest()
    assert last["backend"] == "box" and last["identity"]
    leases = [(r["kind"], r["backend"]) for r in records if r["kind"].startswith("lease.")]
    assert leases == [("lease.taken", "box"), ("lease.released", "box")] * 2
    told = [r for r in records if r["kind"] != "audit.checkpoint"]  # the log's own carry no who
    assert all(r["user"] and r["host"] and r["version"] for r in told)
    assert verify_host(state / "audit").ok
    # each run that changed something ends its records with a signed checkpoint
    kinds = [r["kind"] for r in records]
    assert kinds.count("audit.checkpoint") == 2
    assert kinds[kinds.index("audit.checkpoint") - 1] == "apply.change"


def test_a_person_putting_a_vm_to_sleep_and_a_use_waking_it_are_recorded(
    fleet: Fleet, world: World, tmp_path: Path
) -> None:
    fleet.write([{"name": "a"}])
    fleet.apply()

    async def sleep_then_wake() -> None:
        session = fleet.session()
        try:
            vm, current = await find_vm(session, str(fleet.manifest), "a")
            await sleep_now(session, vm, current, stop=True, force=True)
            vm, current = await find_vm(session, str(fleet.manifest), "a")
            await wake_if_asleep(session, vm, current, None)
        finally:
            await session.close()

    asyncio.run(sleep_then_wake())
    records = audit_records(tmp_path / "state")
    power = [
        (r["kind"], r["vm"], r["by"]) for r in records if r["kind"] in ("vm.slept", "vm.woken")
    ]
    assert power == [("vm.slept", "a", "person"), ("vm.woken", "a", "use")]
    assert [r["how"] for r in records if r["kind"] == "vm.slept"] == ["stopped"]


def test_a_claimed_spare_is_recorded_with_the_vm_that_claimed_it(
    fleet: Fleet, world: World, tmp_path: Path
) -> None:
    fleet.write([{"name": "a"}])
    with_pool = fleet.manifest.read_text().replace(
        "defaults:", "pools:\n  agents: {warm: 1}\ndefaults:"
    )
    fleet.manifest.write_text(with_pool)
    assert fleet.apply().outcome is not None  # the spare is made
    fleet.manifest.write_text(with_pool + "- {backend: box, name: b, pool: agents}\n")
    end = fleet.apply()
    assert end.outcome is not None and end.outcome.ok
    claims = [r for r in audit_records(tmp_path / "state") if r["kind"] == "pool.claimed"]
    assert [(r["vm"], r["spare"], r["ok"]) for r in claims] == [("b", "agents-spare-1", True)]


def test_a_manifest_sand_sync_applies_names_its_commit(tmp_path: Path) -> None:
    commit = "0123456789abcdef0123456789abcdef01234567"
    synced = tmp_path / "sync" / "revisions" / commit / "sand.yaml"
    text = "project: p\n"
    session = SimpleNamespace(project="p", loaded=SimpleNamespace(path=synced, text=text))
    fields = manifest_fields(session)  # type: ignore[arg-type]
    assert fields == {
        "project": "p",
        "manifest": str(synced),
        "manifest_sha256": hashlib.sha256(text.encode()).hexdigest(),
        "commit": commit,
    }
    session.loaded.path = tmp_path / "revisions" / "not-a-commit" / "sand.yaml"
    assert "commit" not in manifest_fields(session)  # type: ignore[arg-type]
