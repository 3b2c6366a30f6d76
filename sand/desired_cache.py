"""The desired-state cache: a plan of a manifest that has not changed since the last run
reads its desired state from one JSON file instead of parsing, validating and
resolving the manifest (at 5,000 VMs those were a third of a no-op plan's CPU).

One file per manifest (named by a digest of its resolved path) in sand's cache
directory (``sand.state.cache``: the user cache dir, or $SAND_CACHE_DIR). It is used
only when its key matches, a digest of everything the desired state is made from:
the manifest's bytes and path, sand's version and the source of the code that reads a
manifest and resolves it (``sand/manifest``, ``sand/desired``), the host's timezone and
locale (the defaults of VMs that name none) and the provisioning bundle's digests. Any
other file (another key, another format, cut short, not JSON) is a miss, and the run
writes it anew. It holds what the manifest says (names, sizes, repos, secret names and
where they go, backend settings), never a secret's value: those are resolved at each
run.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sand.desired import DesiredState
from sand.desired.stored import vm_data, vm_of
from sand.manifest import LoadedManifest, Manifest
from sand.manifest.backends import CONFIGS, BackendConfig
from sand.manifest_key import manifest_key
from sand.state.cache import manifest_cache_file, read_cached, write_cached

# Bumped when the file's layout changes meaning.
CACHE_FORMAT = 2

Hit = tuple[DesiredState, dict[str, BackendConfig]]


def _key(file: Path, raw: bytes, inputs: tuple[str, ...]) -> str:
    return manifest_key(file, raw, inputs, format=CACHE_FORMAT)


def cache_path(file: Path) -> Path:
    """Where the desired state of the manifest at ``file`` is cached."""
    return manifest_cache_file("desired", file)


def cached_desired(
    file: Path, raw: bytes, inputs: tuple[str, ...], manifest: Callable[[], Manifest]
) -> Hit | None:
    """The desired state of the manifest ``raw`` read from ``file`` and its backends'
    configs, when the cache holds them for exactly these inputs; else None. The
    state's manifest is ``manifest()``, called only if someone asks for it."""
    data = read_cached(cache_path(file))
    if data is None:
        return None
    try:
        stored = json.loads(data)
        if stored.get("format") != CACHE_FORMAT or stored.get("key") != _key(file, raw, inputs):
            return None
        vms = tuple(vm_of(vm) for vm in stored["vms"])
        configs = {name: _config(config) for name, config in stored["backends"].items()}
        pools = {str(name): int(warm) for name, warm in stored["pools"].items()}
        desired = DesiredState(str(stored["project"]), vms, tuple(configs), pools, manifest)
    except (ValueError, KeyError, TypeError, AttributeError):  # pydantic's errors too
        return None
    return desired, configs


def _config(data: Any) -> BackendConfig:
    """A backend's settings as :func:`_config_data` kept them."""
    if "raw" in data:
        validated: BackendConfig = CONFIGS[data["raw"]["type"]].model_validate(data["raw"])
        return validated
    fields = data["fields"]
    made: BackendConfig = CONFIGS[fields["type"]].model_construct(set(data["set"]), **fields)
    return made


def _config_data(raw: Any, config: BackendConfig) -> dict[str, Any]:
    """A backend's settings as the cache keeps them: its validated fields, made into a
    config again without validating them (validating built the model's validator:
    ~15 ms of a plan), where JSON carries them unchanged; else as the manifest wrote
    them (``raw``), validated again on a hit."""
    kept = {"fields": config.model_dump(), "set": sorted(config.model_fields_set)}
    try:
        if _config(json.loads(json.dumps(kept))) == config:
            return kept
    except (ValueError, TypeError):  # a value JSON does not carry
        pass
    return {"raw": raw}


def keep_desired(
    file: Path, raw: bytes, inputs: tuple[str, ...], loaded: LoadedManifest, desired: DesiredState
) -> None:
    """Cache ``desired``, built from ``loaded`` (the manifest ``raw`` at ``file``)."""
    if loaded.marks is None:
        return
    configs = loaded.manifest.backends
    try:
        written = loaded.marks.data["backends"]
        backends = {name: _config_data(written[name], c) for name, c in configs.items()}
        # Kept only when they read back as the manifest's own (a handful, unlike VMs).
        if {name: _config(data) for name, data in backends.items()} != configs:
            return
        text = json.dumps(
            {
                "format": CACHE_FORMAT,
                "key": _key(file, raw, inputs),
                "project": desired.project,
                "backends": backends,
                "pools": dict(desired.pools),
                "vms": [vm_data(vm) for vm in desired.vms],
            },
            separators=(",", ":"),
        )
    except (ValueError, KeyError, TypeError, AttributeError):
        return  # a value this cache cannot carry: the next run builds it again
    write_cached(cache_path(file), text.encode())
