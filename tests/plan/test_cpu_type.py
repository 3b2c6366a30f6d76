"""The Proxmox CPU type: validated where it is written, defaulted to host, planned as a
restart, and absent from every Lima VM (whose fingerprints it must not move)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sand.errors import ManifestError
from sand.manifest import parse_manifest
from sand.observed import Observation
from sand.plan import Action, make_plan
from sand.plan.render import render_text
from tests.plan.helpers import MANIFEST, POLICIES, converged, desired, stale_marker


def errors_of(text: str) -> list[str]:
    with pytest.raises(ManifestError) as info:
        parse_manifest(text, "m.yaml")
    return [str(p) for p in info.value.problems]


def with_cpu_on_a(value: str) -> str:
    return MANIFEST.replace("  - name: a\n", f"  - name: a\n    cpu: {value}\n")


def test_proxmox_vms_default_to_host_and_lima_vms_have_no_cpu_type():
    state = {vm.name: vm for vm in desired().vms}
    assert state["a"].cpu == "host" and state["b"].cpu == "host"
    assert state["a"].infra()["cpu"] == "host"
    assert state["c"].cpu is None
    assert "cpu" not in state["c"].infra()  # a Lima VM's fingerprint is what it was


def test_a_vm_and_the_backend_choose_the_cpu_type():
    text = with_cpu_on_a("x86-64-v2-AES").replace(
        "    template: 9000\n", "    template: 9000\n    cpu: EPYC-Rome\n"
    )
    state = {vm.name: vm for vm in desired(text).vms}
    assert state["a"].cpu == "x86-64-v2-AES"
    assert state["b"].cpu == "EPYC-Rome"
    assert state["a"].fingerprint != desired().vms[0].fingerprint


@pytest.mark.parametrize(
    "value", ["host", "kvm64", "x86-64-v3", "Skylake-Server-v5", "custom-fast"]
)
def test_known_and_custom_cpu_types_are_accepted(value):
    vm = next(vm for vm in desired(with_cpu_on_a(value)).vms if vm.name == "a")
    assert vm.cpu == value


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            "x86-64-v2-aes",
            "m.yaml:20:10: vms[0].cpu: 'x86-64-v2-aes' is not a PVE CPU type; PVE's names are "
            "case-sensitive: 'x86-64-v2-AES'",
        ),
        (
            "pentium4",
            "m.yaml:20:10: vms[0].cpu: 'pentium4' is not a CPU type PVE defines (e.g. 'host', "
            "'x86-64-v2-AES', 'kvm64', 'EPYC-Rome'); a cluster's own model is written "
            "'custom-<name>'",
        ),
        (
            '"host,flags=+aes"',
            "m.yaml:20:10: vms[0].cpu: 'host,flags=+aes': name only the CPU type (e.g. 'host' or "
            "'x86-64-v2-AES'); sand does not manage CPU flags",
        ),
        (
            "custom-9",
            "m.yaml:20:10: vms[0].cpu: 'custom-9' is not a valid custom CPU model name: 'custom-' "
            "then a letter, then letters, digits, '_' or '-'",
        ),
    ],
)
def test_a_cpu_type_pve_would_refuse_is_a_located_error(value, message):
    assert errors_of(with_cpu_on_a(value)) == [message]


def test_the_backend_cpu_is_checked_too():
    text = MANIFEST.replace("    template: 9000\n", "    template: 9000\n    cpu: Host\n")
    assert errors_of(text) == [
        "m.yaml:11:10: backends.pve.cpu: 'Host' is not a PVE CPU type; PVE's names are "
        "case-sensitive: 'host'"
    ]


def test_cpu_on_a_lima_vm_is_refused():
    text = MANIFEST.replace("    backend: laptop\n", "    backend: laptop\n    cpu: host\n")
    assert errors_of(text) == [
        "m.yaml:24:10: VM 'c': 'cpu' (the CPU type) applies only to Proxmox backends"
    ]


def test_another_cpu_type_is_an_update_that_needs_a_restart():
    state = desired()
    obs = converged(state)
    a = stale_marker(replace(obs["pve"].vms[0], cpu="kvm64"))
    obs["pve"] = Observation("pve", (a, *obs["pve"].vms[1:]))
    plan = make_plan(state, obs, POLICIES)
    change = next(c for c in plan.changes if c.vm == "a")
    assert change.action is Action.UPDATE
    assert [(f.field, f.before, f.after) for f in change.fields] == [("cpu", "kvm64", "host")]
    assert change.requires_restart
    assert '~ cpu = "kvm64" -> "host" # requires restart' in render_text(plan)


def test_the_create_plan_shows_the_cpu_type():
    state = desired()
    empty = {"pve": Observation("pve", ()), "laptop": Observation("laptop", ())}
    text = render_text(make_plan(state, empty, POLICIES))
    block_a = text[text.index('+ vm "a"') : text.index('+ vm "b"')]
    lines = [line.split() for line in block_a.splitlines()]
    assert ["+", "cpu", "=", '"host"'] in lines
    lima = [line.split()[:2] for line in text[text.index('+ vm "c"') :].splitlines()]
    assert ["+", "cpus"] in lima and ["+", "cpu"] not in lima
