"""The generated lima.yaml enforces the security model; hand edits show up as findings."""

from __future__ import annotations

import ipaddress
from dataclasses import replace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from sand.backends.lima import LimaBackend
from sand.backends.lima import limayaml as cfg
from sand.desired import DesiredPort
from sand.plan.model import Action
from sand.plan.planner import make_plan
from sand.state.journal import Journal
from tests.backends.lima.conftest import build_golden, desired, golden_desired, one
from tests.limactl_standin import StandIn
from tests.limactl_standin import standin as standin_impl

PORTS = "    ports: [{guest: 3000, host: 13000}, {guest: 5432, host: 15432}]\n"


def assert_secure(config: dict[str, Any], ports: set[tuple[int, int]]) -> None:
    """Fail on any host mount, any non-loopback or unlisted forward, agent forwarding."""
    plain = bool(config.get("plain"))
    mounts = [] if plain else (config.get("mounts") or [])
    assert mounts == [], f"host mounts: {mounts}"
    for m in mounts:
        assert not m.get("writable"), f"writable mount {m}"
    assert (config.get("ssh") or {}).get("forwardAgent") in (False, None)
    assert (config.get("ssh") or {}).get("loadDotSSHPubKeys") in (False, None)
    containerd = config.get("containerd") or {}
    assert not containerd.get("system") and not containerd.get("user")
    rules = config.get("portForwards") or []
    forwarded: set[tuple[int, int]] = set()
    ignores = set()
    for rule in rules:
        if rule.get("ignore"):
            ignores.add((rule.get("guestIP"), bool(rule.get("guestIPMustBeZero"))))
            if len(ignores) == 2:
                break  # everything after both catch-all ignores is unreachable
            continue
        host_ip = rule.get("hostIP", "127.0.0.1")
        assert ipaddress.ip_address(host_ip).is_loopback, f"forward bound to {host_ip}: {rule}"
        assert not rule.get("reverse")
        forwarded.add((rule["guestPort"], rule["hostPort"]))
    assert forwarded == ports
    if not plain:
        assert ("0.0.0.0", True) in ignores and ("127.0.0.1", False) in ignores


async def test_generated_lima_yaml_for_a_direct_create(
    standin: StandIn, backend: LimaBackend, journal: Journal
) -> None:
    vm = one("  - name: vm1\n" + PORTS)
    await backend.observe([vm])
    created = await backend.create(vm, journal)
    raw = standin.read_yaml("vm1")
    # template:debian-12 pulls in the host-home mount through `base:`; it must be gone.
    assert raw["mounts"] == []
    assert_secure(raw, {(3000, 13000), (5432, 15432)})
    (listed,) = standin.list_json("vm1")
    assert_secure(listed["config"], {(3000, 13000), (5432, 15432)})
    assert created.findings == ()


async def test_generated_lima_yaml_for_clones_and_updates(
    standin: StandIn, backend: LimaBackend, journal: Journal
) -> None:
    state = golden_desired("  - name: a\n" + PORTS + "  - name: b\n")
    await backend.observe(state.vms)
    base = (await build_golden(backend, state.vms[0], journal)).identity
    a = await backend.create(state.vms[0], journal, from_base=True)
    await backend.create(state.vms[1], journal, from_base=True)
    for name, ports in ((base, set()), ("a", {(3000, 13000), (5432, 15432)}), ("b", set())):
        assert_secure(standin.read_yaml(name), ports)
        assert_secure(standin.list_json(name)[0]["config"], ports)
    moved = replace(state.vms[0], ports=(DesiredPort(8080, 18080),), cpus=3)
    await backend.update(moved, a, ["ports", "cpus"], journal)
    assert_secure(standin.read_yaml("a"), {(8080, 18080)})


@given(
    ports=st.lists(
        # Any the manifest allows: 1-65535 but 22, which Lima keeps (and refuses).
        st.tuples(st.integers(1, 65535).filter(lambda p: p != 22), st.integers(1024, 65535)),
        max_size=6,
        unique=True,
    ),
    image=st.sampled_from(
        [
            "debian-12",
            "template://ubuntu-24.04",
            "template:fedora",
            "default",
            "https://example.test/img.qcow2",
            "/srv/images/x.img",
        ]
    ),
)
@settings(max_examples=60, deadline=None)
def test_any_manifest_ports_give_a_secure_config(ports: list[tuple[int, int]], image: str) -> None:
    desired_ports = tuple(sorted(DesiredPort(g, h) for g, h in ports))
    vm = replace(one(), ports=desired_ports, image=image)
    doc = cfg.vm_config(vm)
    # What Lima does with it: embed base templates, apply the --set expressions, fill defaults.
    embedded = standin_impl.embed(doc, {})
    for expr in cfg.set_expressions(cfg.security_settings(vm.ports)):
        embedded = standin_impl.apply_yq(embedded, expr)
    standin_impl.validate(embedded)
    resolved = standin_impl.resolve(embedded, {})
    assert_secure(resolved, {(p.guest, p.host) for p in desired_ports})
    assert cfg.security_findings(resolved) == ()
    assert cfg.observed_ports(resolved) == tuple((p.guest, p.host) for p in desired_ports)


async def _managed(standin: StandIn, backend: LimaBackend, journal: Journal) -> None:
    vm = one("  - name: vm1\n" + PORTS)
    await backend.observe([vm])
    await backend.mark_converged(vm, await backend.create(vm, journal))


async def _findings(backend: LimaBackend) -> tuple[str, ...]:
    obs = await backend.observe([one("  - name: vm1\n" + PORTS)])
    (vm,) = obs.vms
    return vm.findings


async def test_hand_edits_are_reported_as_findings(
    standin: StandIn, backend: LimaBackend, journal: Journal
) -> None:
    await _managed(standin, backend, journal)
    assert await _findings(backend) == ()
    clean = standin.read_yaml("vm1")

    y = dict(clean, mounts=[{"location": "/home/me", "writable": True}])
    standin.write_yaml("vm1", y)
    assert any("writable host mount '/home/me'" in f for f in await _findings(backend))

    y = dict(clean, mounts=[{"location": "/home/me"}])
    standin.write_yaml("vm1", y)
    assert any("host mount '/home/me' (read-only)" in f for f in await _findings(backend))

    rules = [dict(r) for r in clean["portForwards"]]
    rules[0]["hostIP"] = "0.0.0.0"
    standin.write_yaml("vm1", dict(clean, portForwards=rules))
    assert any("bound to 0.0.0.0 (not loopback)" in f for f in await _findings(backend))

    standin.write_yaml("vm1", dict(clean, portForwards=[r for r in rules if not r.get("ignore")]))
    assert any("not listed in the manifest are forwarded" in f for f in await _findings(backend))

    standin.write_yaml("vm1", dict(clean, ssh=dict(clean["ssh"], forwardAgent=True)))
    assert any("forwardAgent" in f for f in await _findings(backend))

    standin.write_yaml(
        "vm1", dict(clean, portForwards=[{"guestPortRange": [1, 65535], "hostIP": "0.0.0.0"}])
    )
    found = await _findings(backend)
    assert any("not loopback" in f for f in found)

    standin.write_yaml("vm1", clean)
    assert await _findings(backend) == ()


async def test_a_host_wide_override_is_a_finding(
    standin: StandIn, backend: LimaBackend, journal: Journal
) -> None:
    await _managed(standin, backend, journal)
    override = standin.lima_home / "_config" / "override.yaml"
    override.write_text("mounts:\n- location: /\n  writable: true\n")
    assert any("writable host mount '/'" in f for f in await _findings(backend))
    override.write_text("ssh:\n  forwardAgent: true\n")
    assert any("forwardAgent" in f for f in await _findings(backend))


async def test_findings_plan_as_drift_that_forces_replacement(
    standin: StandIn, backend: LimaBackend, journal: Journal
) -> None:
    await _managed(standin, backend, journal)
    y = standin.read_yaml("vm1")
    standin.write_yaml("vm1", dict(y, mounts=[{"location": "/", "writable": True}]))
    state = desired("  - name: vm1\n" + PORTS)
    obs = await backend.observe(state.vms)
    plan = make_plan(state, {"laptop": obs}, {"laptop": backend.capabilities})
    (change,) = plan.changes
    assert change.action is Action.REPLACE
    assert any(f.field == "security" for f in change.drift)


async def test_no_changes_after_create(
    standin: StandIn, backend: LimaBackend, journal: Journal
) -> None:
    """Zero perpetual diff: sizes and ports round-trip exactly through lima.yaml."""
    state = desired(
        "  - name: vm1\n    memory: 1536MiB\n    disk: 21474836481B\n"
        + PORTS
        + "  - name: vm2\n    memory: 3GiB\n"
    )
    await backend.observe(state.vms)
    for vm in state.vms:
        await backend.mark_converged(vm, await backend.create(vm, journal))
    obs = await backend.observe(state.vms)
    plan = make_plan(state, {"laptop": obs}, {"laptop": backend.capabilities})
    assert [c.action for c in plan.changes] == [Action.NOOP, Action.NOOP]
    assert not plan.has_changes


def test_lima_sizes_round_trip() -> None:
    for n in (1, 1023, 1024, 1536 << 20, 8 << 30, (8 << 30) + 1, 3 << 40):
        assert standin_impl.ram_in_bytes(cfg.lima_size(n)) == n


def test_findings_on_configs() -> None:
    base = standin_impl.resolve(cfg.vm_config(one()), {})
    assert cfg.security_findings(base) == ()
    plain = dict(base, plain=True, mounts=[{"location": "/", "writable": True}])
    assert cfg.security_findings(plain) == ()  # Lima mounts nothing in plain mode
    reverse = dict(
        base,
        portForwards=[
            {"guestSocket": "/run/x.sock", "hostSocket": "/tmp/x", "reverse": True},
            *base["portForwards"],
        ],
    )
    assert any("reverse" in f for f in cfg.security_findings(reverse))
    x11 = dict(base, ssh=dict(base["ssh"], forwardX11=True))
    assert "X11 forwarding is on" in cfg.security_findings(x11)
    bundle = dict(base, mounts=[{"location": "/srv/bundle", "writable": False}])
    assert cfg.security_findings(bundle, "/srv/bundle") == ()
    assert cfg.security_findings(bundle) != ()


def test_read_only_bundle_mount_is_the_only_mount_allowed() -> None:
    bundle = cfg.BundleMount("/srv/bundle")
    doc = cfg.vm_config(one(), bundle)
    assert doc["mounts"] == [
        {"location": "/srv/bundle", "mountPoint": "/mnt/sand-bundle", "writable": False}
    ]
    settings_ = cfg.security_settings((), bundle)
    assert settings_["mounts"] == doc["mounts"]
