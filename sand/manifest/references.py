"""Checks that need the whole manifest: names, references, per-backend rules.

They read the raw YAML data (defensively: any part may be malformed), so they
run even when schema validation failed elsewhere and one `sand validate` shows
every problem at once. Each check yields (path, message) so the loader can
point at the exact line.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from sand.manifest.backends import CONFIGS
from sand.manifest.broker import check_brokered
from sand.manifest.forks import check_forks, inherited
from sand.manifest.generators import check_generators
from sand.manifest.images import check_sources, check_vm_image, golden_name
from sand.manifest.names import reserved_name_problem
from sand.manifest.pools import check_pools, with_pool
from sand.manifest.rawdata import Finding
from sand.manifest.rawdata import as_dict as _dict
from sand.manifest.rawdata import as_list as _list
from sand.manifest.rawdata import as_str as _str
from sand.manifest.yamlmarks import Path


def check_references(data: Any) -> Iterator[Finding]:
    data = _dict(data)
    backends = _dict(data.get("backends"))
    secrets = _dict(data.get("secrets"))
    repos = _dict(data.get("repos"))
    defaults = _dict(data.get("defaults"))
    images = _dict(data.get("images"))
    default_backend = _str(defaults.get("backend"))
    if default_backend is not None and backends and default_backend not in backends:
        yield ("defaults", "backend"), _unknown("backend", default_backend, backends)
    hook = _str(_dict(_dict(data.get("notify")).get("webhook")).get("secret"))
    if hook is not None and hook not in secrets:
        yield ("notify", "webhook", "secret"), _unknown("secret", hook, secrets)
    for name, repo in repos.items():
        token = _str(_dict(repo).get("token"))
        if token is not None and token not in secrets:
            yield ("repos", name, "token"), _unknown("secret", token, secrets)
    seen: dict[str, int] = {}
    used_by: dict[str, set[str]] = {}
    host_ports: dict[tuple[str, int], str] = {}
    pools = _dict(data.get("pools"))
    # A pooled VM takes its backend, image and sizes from its pool: checked on those.
    all_vms = [with_pool(v, pools) if isinstance(v, dict) else v for v in _list(data.get("vms"))]
    backend_of: dict[str, str | None] = {}
    for i, own in enumerate(all_vms):
        if not isinstance(own, dict):
            continue
        # A fork takes what it leaves out from its source: its backend and image rules
        # are checked on that; its own repos and secrets on what it writes itself.
        vm = inherited(own, all_vms)
        at: Path = ("vms", i)
        name = _str(vm.get("name")) or ""
        if name and name in seen:
            yield (*at, "name"), f"VM name {name!r} is already used by vms[{seen[name]}]"
        seen.setdefault(name, i)
        own_backend = _str(vm.get("backend"))
        backend_name = own_backend or default_backend
        if backend_name is None:
            if len(backends) == 1:
                backend_name = next(iter(backends))
            elif backends:
                yield at, f"VM {name!r} names no backend and defaults.backend is not set"
                continue
            else:
                continue
        backend_of[name] = backend_name
        if backend_name not in backends:
            if own.get("backend") is not None and backends:
                yield (*at, "backend"), _unknown("backend", backend_name, backends)
            continue
        backend = _dict(backends[backend_name])
        config = CONFIGS.get(str(backend.get("type")))
        if config is None:
            continue  # an unknown type is reported by the schema
        if name:
            why = reserved_name_problem(name) or config.name_problem(name)
            if why:
                yield (*at, "name"), why
        # A VM made from a golden image follows the image's rules (check_vm_image), not
        # the backend's for an image it would clone or download itself.
        golden = golden_name(vm, defaults, images)
        if golden is not None:
            used_by.setdefault(golden, set()).add(config.TYPE)
        yield from check_vm_image(at, own, defaults, images)
        yield from config.vm_findings(name, at, vm, backend, defaults, golden=golden is not None)
        for j, repo_name in enumerate(_list(own.get("repos"))):
            if isinstance(repo_name, str) and repo_name not in repos:
                yield (*at, "repos", j), _unknown("repo", repo_name, repos)
        yield from _secret_uses(at, _list(own.get("secrets")), secrets)
        ports = [_dict(p) for p in _list(own.get("ports"))]
        for j, port in enumerate(ports):
            host = port.get("host")
            if not isinstance(host, int):
                continue
            key = (backend_name, host)
            if key in host_ports:
                yield (
                    (*at, "ports", j, "host"),
                    (
                        f"host port {host} on backend {backend_name!r} is already forwarded "
                        f"for VM {host_ports[key]!r}"
                    ),
                )
            host_ports.setdefault(key, name)

    yield from check_forks(all_vms, backend_of)
    yield from check_brokered(data)
    yield from check_pools(data)
    yield from check_generators(data)
    yield from check_sources(images, used_by)


def _secret_uses(at: Path, uses: list[Any], secrets: Mapping[str, Any]) -> Iterator[Finding]:
    placed: set[tuple[str, str]] = set()
    for j, use in enumerate(uses):
        use = _dict(use)
        secret = _str(use.get("name"))
        if secret is None:
            continue
        if secret not in secrets:
            yield (*at, "secrets", j, "name"), _unknown("secret", secret, secrets)
        variable = _str(use.get("env")) or secret
        scope = _str(use.get("scope")) or ""
        if (scope, variable) in placed:
            yield (*at, "secrets", j), f"{variable} is placed twice at scope {scope}"
        placed.add((scope, variable))


def _unknown(kind: str, name: str, known: Mapping[str, object]) -> str:
    choices = ", ".join(sorted(known)) or "none defined"
    return f"unknown {kind} {name!r} (defined: {choices})"
