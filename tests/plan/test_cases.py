"""The planner's rules as data: each ``cases/*.yaml`` is a manifest snippet, what the
backends show, and the plan expected, in the words ``sand plan --json`` prints.

A case file::

    rule: why this plan follows (one sentence, shown when the case fails)
    manifest:            # merged over BASE: backends pve (proxmox) and laptop (lima)
      vms: [{name: a}]
    observed:            # per backend entry; one not named here lists nothing
      pve:
        vms:
          - like: a                  # VM a as sand left it converged, then overrides:
            memory: 4GiB             #   sizes, power, lock, protect, node, ports, ...
            marker: {fingerprint: stale}   # converged | stale | a literal; null: none
      laptop:
        unknown: limactl list failed (exit 1)
    inputs:              # make_plan's other inputs (all optional)
      secret_stamps: {a: 1-aaaa}     # VM -> the stamp of its secret values now
      secrets_lost: {a: why}         # VM -> why a guest check found them gone
      correct_drift: false
      refresh_only: true
      presence: {a: {now: 10000, agents: [[claude, done, 1960]]}}  # who used a's guest
      asleep: {a: {how: stopped, since: 100, identity: a}}  # this host's sleep record
    expect:
      changes:           # every VM of the plan, by name: an action, or a mapping of
        a: no-op         #   plan_to_json keys (fields/drift/forces: field names;
        b:               #   reasons: substrings, each found in some reason)
          action: update
          fields: [memory]
          requires_restart: true
      summary: {add: 0, change: 1, destroy: 0, has_changes: true}
      unknown_backends: [laptop]
      warnings: [substring]

The runner builds the observations from ``sand.observed`` records and compares
only ``plan_to_json`` output, so renaming a Python field of the plan changes no case.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from sand.agentstate import AgentReport, AgentSession, GuestPresence
from sand.backends.abilities import capabilities_of
from sand.backends.lima.backend import LimaBackend
from sand.backends.proxmox.backend import ProxmoxBackend
from sand.desired import DesiredState, DesiredVM, build_desired
from sand.manifest import parse_manifest
from sand.observed import Marker, Observation, ObservedVM, Ownership
from sand.plan import make_plan
from sand.plan.idle import Asleep
from sand.plan.render import plan_to_json

CASES = sorted((Path(__file__).parent / "cases").glob("*.yaml"))

BASE: dict[str, Any] = {
    "apiVersion": "sand/v1",
    "project": "demo",
    "backends": {
        "pve": {
            "type": "proxmox",
            "host": "pve.test",
            "node": "pve1",
            "pool": "sand",
            "storage": "local-lvm",
            "template": 9000,
            "token_file": "pve.token",
            "identity": "id_ed25519",
        },
        "laptop": {"type": "lima"},
    },
    "defaults": {"backend": "pve"},
}

# What each backend type declares: which fields change in place, with a restart or by
# replacement, and whether its names are unique.
CAPABILITIES_BY_TYPE = {
    "proxmox": capabilities_of(ProxmoxBackend),
    "lima": capabilities_of(LimaBackend),
}

SIZE = re.compile(r"^(\d+)\s*([KMGT])iB$")
SIZE_FIELDS = ("memory", "disk")
VM_FIELDS = (
    "identity",
    "hibernated",
    "power",
    "cpus",
    "protect",
    "operator_protected",
    "lock",
    "node",
    "template",
    "booted_at",
    "deep",
)


def size(value: object) -> int | None:
    if value is None or isinstance(value, int):
        return value
    m = SIZE.match(str(value))
    assert m, f"not a size: {value!r} (write e.g. 4GiB)"
    return int(m.group(1)) << (10 * "KMGT".index(m.group(2)) + 10)


def converged(vm: DesiredVM) -> ObservedVM:
    """``vm`` as its backend shows it right after sand converged it."""
    return ObservedVM(
        backend=vm.backend,
        name=vm.name,
        identity=vm.name,
        ownership=Ownership.MANAGED,
        power=vm.state,
        cpus=vm.cpus,
        memory=vm.memory,
        disk=vm.disk,
        protect=vm.protect,
        # Lima reports forwarded ports; Proxmox VMs have none (None: not read).
        ports=tuple((p.guest, p.host) for p in vm.ports) if vm.backend_type == "lima" else None,
        marker=Marker(vm.project, vm.name, vm.name, vm.fingerprint, vm.guest_fingerprint, vm.image),
        deep=True,
    )


def marker_of(spec: Mapping[str, Any] | None, base: Marker | None, vm: DesiredVM | None) -> Any:
    if spec is None:
        return None
    marker = base or Marker("demo", "", "", "")
    fields: dict[str, Any] = dict(spec)
    for key, real in (("fingerprint", "fingerprint"), ("guest_fingerprint", "guest_fingerprint")):
        if fields.get(key) == "converged":
            assert vm is not None, "converged fingerprints need like:"
            fields[key] = getattr(vm, real)
        elif fields.get(key) == "stale":
            fields[key] = f"stale-{key}"
    return replace(marker, **fields)


def observed_vm(spec: Mapping[str, Any], desired: Mapping[str, DesiredVM], backend: str) -> Any:
    spec = dict(spec)
    like = spec.pop("like", None)
    vm = desired[like] if like else None
    if vm is not None:
        base = converged(vm)
    else:
        name = spec["name"]
        base = ObservedVM(backend, name, name, Ownership.MANAGED, "running")
    changes: dict[str, Any] = {}
    for key in ("name", *VM_FIELDS):
        if key in spec:
            changes[key] = spec.pop(key)
    for key in SIZE_FIELDS:
        if key in spec:
            changes[key] = size(spec.pop(key))
    if "ownership" in spec:
        changes["ownership"] = Ownership(spec.pop("ownership"))
    if "ports" in spec:
        changes["ports"] = tuple((p["guest"], p["host"]) for p in spec.pop("ports"))
    if "findings" in spec:
        changes["findings"] = tuple(spec.pop("findings"))
    if "marker" in spec:
        changes["marker"] = marker_of(spec.pop("marker"), base.marker, vm)
    assert not spec, f"unknown observed keys: {sorted(spec)}"
    if "name" in changes and "identity" not in changes and vm is not None:
        changes["identity"] = changes["name"]
    return replace(base, **changes)


def observations(case: Mapping[str, Any], state: DesiredState) -> dict[str, Observation]:
    desired = {vm.name: vm for vm in state.vms}
    out = {}
    for backend in state.manifest.backends:
        spec = (case.get("observed") or {}).get(backend) or {}
        vms = tuple(observed_vm(v, desired, backend) for v in spec.get("vms") or ())
        out[backend] = Observation(backend, vms, unknown_reason=spec.get("unknown"))
    return out


def desired_state(case: Mapping[str, Any]) -> DesiredState:
    manifest = {**BASE, **case.get("manifest", {})}
    manifest["defaults"] = {**BASE["defaults"], **case.get("manifest", {}).get("defaults", {})}
    # Lima VMs need an image; Proxmox ones clone their backend's template (a
    # defaults.image would be refused for them), so each Lima VM gets one here.
    manifest["vms"] = [
        {"image": "debian-12", **vm} if vm.get("backend") == "laptop" else vm
        for vm in manifest.get("vms", [])
    ]
    return build_desired(parse_manifest(yaml.safe_dump(manifest)), bundle_digest="bundle-v1")


def plan_words(case: Mapping[str, Any]) -> dict[str, Any]:
    """The plan, as ``sand plan --json`` prints it (the one call of the planner)."""
    state = desired_state(case)
    capabilities = {n: CAPABILITIES_BY_TYPE[b.type] for n, b in state.manifest.backends.items()}
    inputs = dict(case.get("inputs") or {})
    if "presence" in inputs:
        inputs["presence"] = {vm: presence_of(p) for vm, p in inputs["presence"].items()}
    if "asleep" in inputs:
        inputs["asleep"] = {vm: Asleep(**a) for vm, a in inputs["asleep"].items()}
    return plan_to_json(make_plan(state, observations(case, state), capabilities, **inputs))


def presence_of(spec: Mapping[str, Any]) -> GuestPresence:
    """A guest's presence line and agent sessions: ``agents`` as [agent, state, since]."""
    spec = dict(spec)
    sessions = tuple(
        AgentSession(agent, f"s{i}", state, since, "")
        for i, (agent, state, since) in enumerate(spec.pop("agents", []))
    )
    return GuestPresence(
        now=spec.pop("now"),
        tmux_clients=spec.pop("tmux_clients", 0),
        tmux_changed=spec.pop("tmux_changed", 0),
        ssh_sessions=spec.pop("ssh_sessions", 0),
        agents=AgentReport(sessions),
    )


NAMES = ("fields", "drift")


def check_change(vm: str, got: Mapping[str, Any], want: Any) -> list[str]:
    want = {"action": want} if isinstance(want, str) else dict(want)
    problems = []
    for key, expected in want.items():
        if key in NAMES:
            actual: Any = [f["field"] for f in got[key]]
        elif key == "forces":
            actual = [f["field"] for f in got["fields"] if f["forces_replacement"]]
        elif key == "reasons":
            missing = [r for r in expected if not any(r in said for said in got["reasons"])]
            if missing:
                problems.append(f"{vm}: no reason says {missing}; reasons: {got['reasons']}")
            continue
        else:
            actual = got[key]
        if actual != expected:
            problems.append(f"{vm}: {key} is {actual!r}, expected {expected!r}")
    return problems


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_case(path: Path) -> None:
    case = yaml.safe_load(path.read_text())
    assert set(case) <= {"rule", "manifest", "observed", "inputs", "expect"}, sorted(case)
    expect = case["expect"]
    assert set(expect) <= {"changes", "summary", "unknown_backends", "warnings"}, sorted(expect)
    words = plan_words(case)
    got = {c["vm"]: c for c in words["changes"]}
    problems = []
    wanted = expect.get("changes") or {}
    if set(got) != set(wanted):
        problems.append(f"the plan has changes for {sorted(got)}, the case names {sorted(wanted)}")
    for vm in sorted(set(got) & set(wanted)):
        problems += check_change(vm, got[vm], wanted[vm])
    for key in ("summary", "unknown_backends"):
        if key in expect:
            actual = words[key] if key == "summary" else sorted(words[key])
            # A case that names no VM finished from the journal expects none.
            summary = {"finish": 0, **expect[key]} if key == "summary" else {}
            expected = summary if key == "summary" else sorted(expect[key])
            if actual != expected:
                problems.append(f"{key} is {actual!r}, expected {expected!r}")
    for text in expect.get("warnings") or ():
        if not any(text in w for w in words["warnings"]):
            problems.append(f"no warning says {text!r}; warnings: {words['warnings']}")
    assert not problems, f"{path.name}: {case['rule']}\n  " + "\n  ".join(problems)


def test_there_are_cases_for_every_kind_of_plan() -> None:
    seen = set()
    for path in CASES:
        case = yaml.safe_load(path.read_text())
        for want in (case["expect"].get("changes") or {}).values():
            seen.add(want if isinstance(want, str) else want["action"])
    assert seen >= {"create", "no-op", "update", "replace", "delete", "blocked", "reprovision"}
