"""PVE's answers are classified once, at the client: each reaches sand as an ErrorKind.

The table is PVE's own words (fakepve's catalogue, extracted from the PVE sources,
served over HTTP by fakepve): the client must turn each into the kind its callers
act on, and those callers (start, destroy, mark) must do the right thing with it.
"""

from __future__ import annotations

import socket

import pytest
from fakepve import errors as catalogue

from sand.backends.proxmox import marker as mk
from sand.backends.proxmox import vmops
from sand.backends.proxmox.backend import ProxmoxBackend
from sand.backends.proxmox.client import PveClient
from sand.backends.proxmox.errors import ErrorKind, ProxmoxError, classify_answer, classify_task
from sand.state.journal import Journal
from tests.fakepve_rig.rig import FakePveRig

K = ErrorKind
VM = "nodes/pve1/qemu/100"
# Every endpoint sand's Proxmox backend calls (vmid 100, template 9000, node pve1).
SAND_CALLS = [
    ("GET", "/cluster/resources"),
    ("GET", "/cluster/nextid"),
    ("GET", "/nodes"),
    ("GET", f"/{VM}/config"),
    ("PUT", f"/{VM}/config"),
    ("GET", f"/{VM}/status/current"),
    ("POST", f"/{VM}/status/start"),
    ("POST", f"/{VM}/status/stop"),
    ("POST", f"/{VM}/status/shutdown"),
    ("POST", "/nodes/pve1/qemu/9000/clone"),
    ("PUT", f"/{VM}/resize"),
    ("DELETE", f"/{VM}"),
    ("GET", f"/{VM}/agent/network-get-interfaces"),
    ("GET", "/nodes/pve1/tasks"),
    ("GET", "/nodes/pve1/tasks/UPID:pve1:0:0:0:qmstart:100:root@pam:/status"),
    ("GET", "/nodes/pve1/tasks/UPID:pve1:0:0:0:qmstart:100:root@pam:/log"),
    ("GET", "/nodes/pve1/network"),
    ("GET", "/pools/sand"),
    ("GET", "/access/permissions"),
    ("GET", "/version"),
]
# What a caller takes as PVE's definite word about the VM: never worth a retry.
DEFINITE = {K.NOT_FOUND, K.EXISTS, K.LOCKED, K.ALREADY_RUNNING, K.NOT_RUNNING}


def test_every_answer_pve_can_give_sand_has_one_kind_that_agrees_with_retrying() -> None:
    checked = 0
    for method, path in SAND_CALLS:
        entries = catalogue.errors_for(method, path)
        assert entries, f"{method} {path} is not in PVE's schema"
        for entry in entries:
            what = f"{method} {path} {entry['name']}"
            if entry["in_task"]:
                kind, transient = classify_task(entry["message"])
            else:
                text = entry["message"] + (f" {entry['errors']}" if entry.get("errors") else "")
                kind, transient = classify_answer(entry["status"], text)
            if entry["status"] == 401 and not entry["in_task"]:
                assert kind is K.AUTH, what
            if entry["status"] == 403 and not entry["in_task"]:
                assert kind is K.FORBIDDEN, what
            # Retried exactly when transient; PVE's definite words never are.
            assert (kind is K.TRANSIENT) == transient, what
            assert not (kind in DEFINITE and transient), what
            checked += 1
    assert checked > 200  # the catalogue was really read


# (method, path, PVE's error by name, expected kind, transient). In-task errors fail the
# worker (the client waits for it); the others fail the request.
PVE_SAYS = [
    ("GET", f"{VM}/config", "configuration_file_does_not_exist", K.NOT_FOUND, False),
    ("GET", f"{VM}/config", "permission_denied", K.FORBIDDEN, False),
    ("GET", f"{VM}/config", "invalid_ticket", K.AUTH, False),
    ("GET", f"{VM}/config", "no_route_to_host", K.TRANSIENT, True),
    ("GET", "cluster/nextid", "param_vmid_already_exists", K.EXISTS, False),
    ("PUT", f"{VM}/config", "checksum_mismatch_file_change_other", K.CONFLICT, False),
    ("PUT", f"{VM}/config", "locked", K.LOCKED, False),
    ("PUT", f"{VM}/config", "protection_mode_enabled", K.REFUSED, False),
    ("PUT", f"{VM}/config", "parameter_verification_failed", K.REFUSED, False),
    ("PUT", f"{VM}/config", "config_lock_timeout", K.TRANSIENT, True),
    ("PUT", f"{VM}/config", "no_quorum", K.TRANSIENT, True),
    ("POST", "nodes/pve1/qemu/9000/clone", "unable_create_config_file_already", K.EXISTS, False),
    ("PUT", f"{VM}/resize", "shrinking_disks_not_supported", K.REFUSED, False),
    ("DELETE", VM, "running_destroy_failed", K.REFUSED, False),
    ("DELETE", VM, "configuration_file_does_not_exist", K.NOT_FOUND, False),
    ("DELETE", VM, "base_volume_still_use_linked", K.TASK_FAILED, False),
    ("POST", f"{VM}/status/start", "already_running", K.ALREADY_RUNNING, False),
    ("POST", f"{VM}/status/start", "locked", K.LOCKED, False),
    ("POST", f"{VM}/status/start", "you_can_t_start_if", K.TASK_FAILED, False),
    ("POST", f"{VM}/status/start", "qemu_exited_code", K.TASK_FAILED, False),
    ("POST", f"{VM}/status/stop", "quit_powerdown_failed_got_timeout", K.TRANSIENT, True),
    ("GET", "version", "not_implemented", K.REFUSED, False),
]


async def test_pve_s_own_error_answers_reach_sand_as_their_kind(
    rig: FakePveRig, backend: ProxmoxBackend
) -> None:
    rig.seed_vm(100, "dev", status="stopped")
    client = backend.ctx.client
    wrong: dict[str, object] = {}
    for method, path, name, kind, transient in PVE_SAYS:
        (entry,) = [e for e in rig.pve.errors_for(method, "/" + path) if e["name"] == name]
        rig.fail(method, "/" + path, error=name)
        with pytest.raises(ProxmoxError) as caught:
            if entry["in_task"]:
                await client.task(method, path, what=name, timeout=5)
            else:
                await client.request(method, path)
        rig.clear_faults()
        e = caught.value
        if (e.kind, e.transient) != (kind, transient):
            wrong[f"{method} {path} {name}"] = (e.kind, e.transient, e.detail)
        # A task failure names its task; a request failure names PVE's status.
        assert (e.upid is not None) == entry["in_task"], name
        assert entry["in_task"] or e.status == entry["status"], name
    assert wrong == {}


async def test_what_pve_answers_on_its_own_reaches_sand_as_its_kind(
    rig: FakePveRig, backend: ProxmoxBackend
) -> None:
    rig.seed_vm(100, "running", status="running")
    rig.seed_vm(101, "stopped", status="stopped", protection=True)
    client = backend.ctx.client

    async def kind_of(method: str, path: str, **params: object) -> tuple[ErrorKind, bool]:
        with pytest.raises(ProxmoxError) as caught:
            if path.endswith(("/start", "/stop", "/shutdown")) or method == "DELETE":
                await client.task(method, path, params, what=path, timeout=5)
            else:
                await client.request(method, path, params)
        return caught.value.kind, caught.value.transient

    # PVE checks the token's rights on /vms/555 before the method says it does not exist.
    rig.grant(rig.token_id, "/vms/555", "VM.Audit")
    assert await kind_of("GET", "nodes/pve1/qemu/555/config") == (K.NOT_FOUND, False)
    assert await kind_of("GET", "cluster/nextid", vmid=9000) == (K.EXISTS, False)
    assert await kind_of("POST", f"{VM}/status/start") == (K.ALREADY_RUNNING, False)
    assert await kind_of("POST", "nodes/pve1/qemu/101/status/shutdown") == (K.NOT_RUNNING, False)
    assert await kind_of("DELETE", VM) == (K.REFUSED, False)  # running
    assert await kind_of("DELETE", "nodes/pve1/qemu/101") == (K.REFUSED, False)  # protected
    # A stale digest: "checksum mismatch", a conflict, not retried (the same write would
    # meet the same digest): the caller reads again.
    assert await kind_of("PUT", f"{VM}/config", memory=4096, digest="0" * 40) == (
        K.CONFLICT,
        False,
    )
    assert rig.count("PUT", f"/{VM}/config") == 1
    assert str(rig.vm(100).config["memory"]) == "2048"  # type: ignore[union-attr]


async def test_a_token_pve_rejects_or_limits_is_auth_or_forbidden(rig: FakePveRig) -> None:
    narrow = rig.add_token("sand@pve!narrow", acl="none")
    backend = rig.make_backend(token_file=str(narrow))
    with pytest.raises(ProxmoxError) as forbidden:
        await backend.ctx.client.get("nodes/pve1/qemu/9000/config")
    assert (forbidden.value.kind, forbidden.value.status) == (K.FORBIDDEN, 403)
    await backend.close()
    narrow.write_text("sand@pve!narrow=00000000-wrong\n")
    backend = rig.make_backend(token_file=str(narrow))
    with pytest.raises(ProxmoxError) as rejected:
        await backend.ctx.client.get("version")
    assert (rejected.value.kind, rejected.value.status) == (K.AUTH, 401)
    await backend.close()


async def test_no_answer_at_all_is_unreachable(rig: FakePveRig) -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    client = PveClient("pve", "127.0.0.1", port, rig.token_file, verify=rig.ca_file)
    with pytest.raises(ProxmoxError) as caught:
        await client.request("GET", "version", retry=False)
    assert caught.value.kind is K.UNREACHABLE and caught.value.status is None
    # Refused before PVE ever answered: the address is wrong, retrying it wastes time.
    assert not caught.value.transient
    await client.close()
    # Refused after PVE has answered: a node restarting pveproxy, which passes.
    client = PveClient("pve", "127.0.0.1", rig.port, rig.token_file, verify=rig.ca_file)
    await client.request("GET", "version", retry=False)
    client.port, client._api = port, None  # its next connection goes where none listens
    with pytest.raises(ProxmoxError) as caught:
        await client.request("GET", "version", retry=False)
    assert caught.value.kind is K.UNREACHABLE and caught.value.transient
    await client.close()


@pytest.mark.fakepve_rig(time_scale=1.0)
async def test_a_task_still_running_at_the_deadline_is_a_timeout(
    rig: FakePveRig, backend: ProxmoxBackend
) -> None:
    rig.seed_vm(100, "dev", status="stopped")
    rig.set_task_secs("qmstart", 3)
    with pytest.raises(ProxmoxError) as caught:
        await backend.ctx.client.task("POST", f"{VM}/status/start", what="start", timeout=0.2)
    e = caught.value
    assert e.kind is K.TIMEOUT and e.transient and e.upid and ":qmstart:" in e.upid


# --- what the callers do with a kind --------------------------------------------------


async def test_power_and_destroy_take_pve_s_already_for_done(
    rig: FakePveRig, backend: ProxmoxBackend
) -> None:
    rig.seed_vm(100, "running", status="running")
    rig.seed_vm(101, "stopped", status="stopped")
    ctx = backend.ctx
    await vmops.start(ctx, "pve1", 100)  # PVE: "VM 100 already running"
    await vmops.shutdown(ctx, "pve1", 101)  # PVE: "VM 101 not running"
    # PVE: 403 on /vms/555 (in no pool, so none of the token's rights reach it), then
    # "Configuration file ... does not exist" for a token with rights there.
    await vmops.destroy(ctx, "pve1", 555)
    assert rig.vm(100).status == "running" and rig.vm(101).status == "stopped"  # type: ignore[union-attr]
    assert await vmops.id_taken(ctx, 100) and not await vmops.id_taken(ctx, 555)
    # A failure of another kind still fails: a start of a template is not "already".
    with pytest.raises(ProxmoxError, match="if it's a template") as caught:
        await vmops.start(ctx, "pve1", 9000)
    assert caught.value.kind is K.TASK_FAILED


@pytest.mark.parametrize(
    ("message", "writes_refused"),
    [
        # Definite: not retried by the client, so mark's own retries meet it twice.
        ("checksum mismatch (file change by other user?)", 2),
        # Transient: the client retries the same (stale) write until it gives up.
        ("detected modified configuration - file changed by other user? Try again.", 4),
    ],
)
async def test_mark_converged_reads_again_after_a_config_conflict(
    rig: FakePveRig, backend: ProxmoxBackend, journal: Journal, message: str, writes_refused: int
) -> None:
    vm = rig.desired([{"name": "dev"}])[0]
    made = await backend.create(vm, journal)
    path = f"/nodes/pve1/qemu/{made.identity}/config"
    reads, writes = rig.count("GET", path), rig.count("PUT", path)
    rig.fail("PUT", path, 500, message, times=writes_refused)
    await backend.mark_converged(vm, made)
    tags = mk.split_tags(rig.vm(int(made.identity)).config["tags"])  # type: ignore[union-attr]
    assert f"sand-{made.identity}-{vm.fingerprint}" in tags
    assert rig.count("PUT", path) - writes == writes_refused + 1
    # Each try read the config again (a write against a stale digest never lands).
    assert rig.count("GET", path) - reads == (2 if writes_refused == 4 else 3)


async def test_mark_converged_gives_up_on_a_lasting_conflict(
    rig: FakePveRig, backend: ProxmoxBackend, journal: Journal
) -> None:
    vm = rig.desired([{"name": "dev"}])[0]
    made = await backend.create(vm, journal)
    path = f"/nodes/pve1/qemu/{made.identity}/config"
    rig.fail("PUT", path, error="checksum_mismatch_file_change_other")
    with pytest.raises(ProxmoxError, match="checksum mismatch") as caught:
        await backend.mark_converged(vm, made)
    assert caught.value.kind is K.CONFLICT and rig.count("PUT", path) >= 3
