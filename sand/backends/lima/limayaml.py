"""The lima.yaml sand generates, and the security checks it applies to what it reads back.

The security model, as lima.yaml (keys from Lima's ``pkg/limatype/lima_yaml.go``):

* no host directory is mounted, except (optionally) a read-only provisioning bundle;
  Lima templates pull in ``template:_default/mounts`` (the host home) through ``base:``
  and Lima *appends* a base's lists to the instance's, so ``mounts: []`` in the file is
  not enough: the security keys are also passed as ``--set`` expressions, which Lima
  applies after the bases are embedded;
* ``ssh.forwardAgent``, X11 forwarding and ``~/.ssh/*.pub`` loading are off;
* containerd is off (no rootless daemon sand does not manage);
* ports: one rule per manifest port, bound to 127.0.0.1, then two ``ignore`` rules
  (guest ``0.0.0.0`` with ``guestIPMustBeZero`` and guest ``127.0.0.1``) so Lima's
  built-in catch-all forward of every guest port never applies;
* nothing samba-like: there is no host mount to share.

What ``limactl list --json`` shows as ``config`` is the resolved configuration (the
instance's lima.yaml plus ``_config/default.yaml`` and ``_config/override.yaml``);
:func:`security_findings` checks that, so a hand edit or a host-wide override is drift.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from sand.desired import DesiredPort, DesiredVM
from sand.manifest.backends.lima import BASE_DISK as BASE_DISK  # a base is small

# lima.yaml `param` keys (must match ^[a-zA-Z][a-zA-Z0-9_]*$ and be used by a provision
# step, which the data step below does). Lima copies them on `limactl clone`, which is
# why they are evidence of origin, never of ownership.
PARAM_PROJECT = "sandProject"
PARAM_INSTANCE = "sandInstance"
GUEST_IDENTITY_FILE = "/etc/sand-instance"
LOOPBACK = "127.0.0.1"
ALL_PORTS = [1, 65535]
BASE_CPUS = 1
BASE_MEMORY = 1 << 30

_IMAGE_SUFFIXES = (".qcow2", ".img", ".raw", ".iso", ".vmdk", ".xz", ".gz", ".zst", ".bz2")


@dataclass(frozen=True)
class BundleMount:
    """A read-only host directory with provisioning files, if a provisioner wants one."""

    location: str
    mount_point: str = "/mnt/sand-bundle"


def lima_size(n: int) -> str:
    """Bytes as a go-units string Lima parses back to exactly ``n`` (``RAMInBytes``)."""
    for unit, shift in (("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return str(n)


def image_source(image: str) -> dict[str, Any]:
    """``template://debian-12``, ``template:debian-12`` or ``debian-12`` → ``base:``;
    a URL, a path or a file name with an image suffix → ``images:``."""
    if image.startswith("template:"):
        return {"base": [f"template:{image.split(':', 1)[1].lstrip('/')}"]}
    if "://" in image or image.startswith(("/", "~", "./")) or image.endswith(_IMAGE_SUFFIXES):
        return {"images": [{"location": image}]}
    return {"base": [f"template:{image}"]}


def forward_rules(ports: Iterable[DesiredPort]) -> list[dict[str, Any]]:
    rules: list[dict[str, Any]] = [
        {"guestPort": p.guest, "hostPort": p.host, "hostIP": LOOPBACK, "proto": "tcp"}
        for p in sorted(ports)
    ]
    rules.append(
        {
            "guestIP": "0.0.0.0",
            "guestIPMustBeZero": True,
            "guestPortRange": ALL_PORTS,
            "proto": "any",
            "ignore": True,
        }
    )
    rules.append({"guestIP": LOOPBACK, "guestPortRange": ALL_PORTS, "proto": "any", "ignore": True})
    return rules


def mounts(bundle: BundleMount | None) -> list[dict[str, Any]]:
    if bundle is None:
        return []
    return [{"location": bundle.location, "mountPoint": bundle.mount_point, "writable": False}]


def security_settings(
    ports: Iterable[DesiredPort], bundle: BundleMount | None = None
) -> dict[str, Any]:
    """The keys that carry the security model (also re-asserted with ``--set``)."""
    return {
        "plain": False,
        "mounts": mounts(bundle),
        "ssh.forwardAgent": False,
        "ssh.forwardX11": False,
        "ssh.forwardX11Trusted": False,
        "ssh.loadDotSSHPubKeys": False,
        "containerd.system": False,
        "containerd.user": False,
        "portForwards": forward_rules(ports),
    }


def resource_settings(cpus: int, memory: int, disk: int) -> dict[str, Any]:
    return {"cpus": cpus, "memory": lima_size(memory), "disk": lima_size(disk)}


def set_expressions(settings: Mapping[str, Any]) -> list[str]:
    """``--set`` arguments: ``.a.b = <JSON>`` (valid yq; the stand-in accepts only this)."""
    return [f".{k} = {json.dumps(v, separators=(',', ':'))}" for k, v in settings.items()]


def _nest(flat: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for dotted, value in flat.items():
        node = out
        *parents, last = dotted.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value
    return out


def _provenance(project: str, instance: str) -> dict[str, Any]:
    return {
        "param": {PARAM_PROJECT: project, PARAM_INSTANCE: instance},
        "provision": [
            {
                "mode": "data",
                "path": GUEST_IDENTITY_FILE,
                "permissions": "0644",
                "content": (
                    f"project={{{{.Param.{PARAM_PROJECT}}}}}\n"
                    f"instance={{{{.Param.{PARAM_INSTANCE}}}}}\n"
                ),
            }
        ],
    }


def instance_config(
    *,
    image: str,
    user: str,
    cpus: int,
    memory: int,
    disk: int,
    ports: Sequence[DesiredPort],
    project: str,
    instance: str,
    bundle: BundleMount | None = None,
) -> dict[str, Any]:
    """The whole lima.yaml for a new instance (or a base, with no ports)."""
    doc: dict[str, Any] = {}
    doc.update(image_source(image))
    doc.update(resource_settings(cpus, memory, disk))
    doc["user"] = {"name": user}
    for key, value in _nest(security_settings(ports, bundle)).items():
        doc[key] = value
    doc.update(_provenance(project, instance))
    return doc


def vm_config(vm: DesiredVM, bundle: BundleMount | None = None) -> dict[str, Any]:
    return instance_config(
        image=vm.image,
        user=vm.user,
        cpus=vm.cpus,
        memory=vm.memory,
        disk=vm.disk,
        ports=vm.ports,
        project=vm.project,
        instance=vm.name,
        bundle=bundle,
    )


def base_config(*, image: str, user: str, project: str, name: str) -> dict[str, Any]:
    return instance_config(
        image=image,
        user=user,
        cpus=BASE_CPUS,
        memory=BASE_MEMORY,
        disk=BASE_DISK,
        ports=(),
        project=project,
        instance=name,
    )


def vm_edit_settings(vm: DesiredVM, bundle: BundleMount | None = None) -> dict[str, Any]:
    """What ``limactl clone``/``edit`` set on an instance to make it ``vm``."""
    return {
        **resource_settings(vm.cpus, vm.memory, vm.disk),
        **security_settings(vm.ports, bundle),
    }


def to_yaml(doc: Mapping[str, Any], *, header: str = "") -> str:
    body = yaml.safe_dump(dict(doc), sort_keys=False, default_flow_style=False)
    return (f"# {header}\n" if header else "") + body


# --- reading back -------------------------------------------------------------------------


def _is_loopback(value: object) -> bool:
    if value is None:
        return True  # Lima's default hostIP is 127.0.0.1
    try:
        return ipaddress.ip_address(str(value)).is_loopback
    except ValueError:
        return False


def _range(rule: Mapping[str, Any], single: str, many: str) -> tuple[int, int] | None:
    r = rule.get(many)
    if isinstance(r, list) and len(r) == 2 and all(isinstance(x, int) for x in r) and r != [0, 0]:
        return (r[0], r[1])
    p = rule.get(single)
    if isinstance(p, int) and p:
        return (p, p)
    return None


def _ignores_all(rule: Mapping[str, Any], zero: bool) -> bool:
    if not rule.get("ignore"):
        return False
    rng = _range(rule, "guestPort", "guestPortRange")
    if rng is not None and rng != (1, 65535):
        return False
    if rule.get("proto", "any") not in ("any", None):
        return False
    guest_ip = str(rule.get("guestIP") or LOOPBACK)
    if zero:
        return guest_ip == "0.0.0.0" and bool(rule.get("guestIPMustBeZero"))
    return guest_ip == LOOPBACK and not rule.get("guestIPMustBeZero")


def observed_ports(config: Mapping[str, Any] | None) -> tuple[tuple[int, int], ...] | None:
    """(guest, host) for each single-port TCP-capable forward, sorted like the manifest."""
    if config is None:
        return None
    rules = config.get("portForwards") or []
    if config.get("plain"):
        rules = [r for r in rules if isinstance(r, dict) and r.get("static")]
    out: set[tuple[int, int]] = set()
    for rule in rules:
        if not isinstance(rule, dict) or rule.get("ignore") or rule.get("reverse"):
            continue
        if rule.get("guestSocket") or rule.get("hostSocket"):
            continue
        guest = _range(rule, "guestPort", "guestPortRange")
        host = _range(rule, "hostPort", "hostPortRange")
        if guest and host and guest[0] == guest[1] and host[0] == host[1]:
            out.add((guest[0], host[0]))
    return tuple(sorted(out))


def security_findings(
    config: Mapping[str, Any] | None, bundle_location: str | None = None
) -> tuple[str, ...]:
    """What in a resolved instance config breaks the security model, one line each."""
    if config is None:
        return ()
    found: list[str] = []
    plain = bool(config.get("plain"))
    if not plain:
        for m in config.get("mounts") or []:
            if not isinstance(m, dict):
                continue
            loc = str(m.get("location", "?"))
            if m.get("writable"):
                found.append(f"writable host mount {loc!r}")
            elif bundle_location is None or loc != bundle_location:
                found.append(f"host mount {loc!r} (read-only)")
    ssh = config.get("ssh") or {}
    if isinstance(ssh, dict):
        if ssh.get("forwardAgent"):
            found.append("ssh.forwardAgent is on (the guest can use the host's SSH agent)")
        if ssh.get("forwardX11") or ssh.get("forwardX11Trusted"):
            found.append("X11 forwarding is on")
    rules = [r for r in (config.get("portForwards") or []) if isinstance(r, dict)]
    if plain:
        rules = [r for r in rules if r.get("static")]
    catch_zero = catch_loop = False
    for i, rule in enumerate(rules):
        if rule.get("ignore"):
            catch_zero = catch_zero or _ignores_all(rule, zero=True)
            catch_loop = catch_loop or _ignores_all(rule, zero=False)
            continue
        if catch_zero and catch_loop:
            continue  # unreachable: every guest port was already ignored
        what = _describe(rule)
        if rule.get("reverse"):
            found.append(f"reverse port forward {what} (guest reaches a host socket or port)")
        elif not _is_loopback(rule.get("hostIP")):
            found.append(f"port forward {what} bound to {rule.get('hostIP')} (not loopback)")
        else:
            guest = _range(rule, "guestPort", "guestPortRange")
            if guest is None or guest[0] != guest[1]:
                found.append(f"port forward of a guest port range {what}")
        if rule.get("hostSocket") and not rule.get("reverse"):
            found.append(f"port forward to host socket {rule.get('hostSocket')!r} (rule {i})")
    if not plain and not (catch_zero and catch_loop):
        found.append(
            "guest ports not listed in the manifest are forwarded (no ignore rules for "
            "0.0.0.0 and 127.0.0.1 binds)"
        )
    return tuple(dict.fromkeys(found))


def _describe(rule: Mapping[str, Any]) -> str:
    guest = rule.get("guestSocket") or _range(rule, "guestPort", "guestPortRange")
    host = rule.get("hostSocket") or _range(rule, "hostPort", "hostPortRange")

    def fmt(x: object) -> str:
        if isinstance(x, tuple):
            return str(x[0]) if x[0] == x[1] else f"{x[0]}-{x[1]}"
        return str(x)

    return f"guest {fmt(guest)} -> host {fmt(host)}"
