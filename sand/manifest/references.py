"""Checks that need the whole manifest: names, references, per-backend rules.

Each check yields (path, message) so the loader can point at the exact line;
all of them run, so one `sand validate` shows every broken reference at once.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from sand.manifest.models import LimaBackend, Manifest, ProxmoxBackend
from sand.manifest.names import check_vm_name
from sand.manifest.yamlmarks import Path

Finding = tuple[Path, str]


def check_references(m: Manifest) -> Iterator[Finding]:
    if m.defaults.backend is not None and m.defaults.backend not in m.backends:
        yield ("defaults", "backend"), _unknown("backend", m.defaults.backend, m.backends)
    for name, repo in m.repos.items():
        if repo.token is not None and repo.token not in m.secrets:
            yield ("repos", name, "token"), _unknown("secret", repo.token, m.secrets)
    seen: dict[str, int] = {}
    host_ports: dict[tuple[str, int], str] = {}
    for i, vm in enumerate(m.vms):
        at: Path = ("vms", i)
        if vm.name in seen:
            yield (*at, "name"), f"VM name {vm.name!r} is already used by vms[{seen[vm.name]}]"
        seen.setdefault(vm.name, i)
        backend_name = vm.backend or m.defaults.backend
        if backend_name is None:
            if len(m.backends) == 1:
                backend_name = next(iter(m.backends))
            else:
                yield at, f"VM {vm.name!r} names no backend and defaults.backend is not set"
                continue
        backend = m.backends.get(backend_name)
        if backend is None:
            if vm.backend is not None:
                yield (*at, "backend"), _unknown("backend", backend_name, m.backends)
            continue
        why = check_vm_name(vm.name, backend.type)
        if why:
            yield (*at, "name"), why
        if (vm.image or m.defaults.image) is None and isinstance(backend, LimaBackend):
            yield at, f"VM {vm.name!r} has no image and defaults.image is not set"
        for j, repo_name in enumerate(vm.repos):
            if repo_name not in m.repos:
                yield (*at, "repos", j), _unknown("repo", repo_name, m.repos)
        scopes: set[tuple[str, str]] = set()
        for j, use in enumerate(vm.secrets):
            if use.name not in m.secrets:
                yield (*at, "secrets", j, "name"), _unknown("secret", use.name, m.secrets)
            variable = use.env or use.name
            if (use.scope, variable) in scopes:
                yield (*at, "secrets", j), f"{variable} is placed twice at scope {use.scope}"
            scopes.add((use.scope, variable))
        yield from _backend_rules(vm.name, at, backend, vm.node, [p.host for p in vm.ports])
        for j, port in enumerate(vm.ports):
            key = (backend_name, port.host)
            if key in host_ports:
                yield (
                    (*at, "ports", j, "host"),
                    (
                        f"host port {port.host} on backend {backend_name!r} is already forwarded "
                        f"for VM {host_ports[key]!r}"
                    ),
                )
            host_ports.setdefault(key, vm.name)


def _backend_rules(
    vm: str, at: Path, backend: LimaBackend | ProxmoxBackend, node: str | None, ports: list[int]
) -> Iterator[Finding]:
    if isinstance(backend, ProxmoxBackend):
        if ports:
            yield (
                (*at, "ports"),
                (
                    "ports are forwarded only on Lima; a Proxmox VM has its own address on the "
                    "bridge, so reach its ports there"
                ),
            )
        if node is not None and node not in backend.placement_nodes:
            yield (
                (*at, "node"),
                (
                    f"node {node!r} is not one of this backend's nodes: "
                    + ", ".join(backend.placement_nodes)
                ),
            )
    elif node is not None:
        yield (*at, "node"), f"VM {vm!r}: 'node' applies only to Proxmox backends"


def _unknown(kind: str, name: str, known: Mapping[str, object]) -> str:
    choices = ", ".join(sorted(known)) or "none defined"
    return f"unknown {kind} {name!r} (defined: {choices})"
