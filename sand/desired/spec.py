"""Desired state: one fully-resolved, normalised spec per VM.

Defaults are applied here, once, so every later layer (plan, backends,
provisioning) reads a single flat record and never has to re-derive a value.
The fingerprints are what backends store on the VM, so a no-op plan needs no
per-VM reads: equal fingerprints mean nothing sand manages has changed.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field

from sand.desired.host import FALLBACK_LOCALE, FALLBACK_TIMEZONE, HostLocale
from sand.manifest.builtin import (
    DEFAULT_AGENTS,
    DEFAULT_CPUS,
    DEFAULT_DISK,
    DEFAULT_DOCKER,
    DEFAULT_MEMORY,
    DEFAULT_PROVISION,
    DEFAULT_STATE,
    DEFAULT_USER,
)
from sand.manifest.expiry import Expiry, parse_expiry
from sand.manifest.loader import LoadedManifest
from sand.manifest.models import Manifest


@dataclass(frozen=True)
class DesiredRepo:
    name: str
    url: str
    branch: str | None
    path: str
    token_secret: str | None


@dataclass(frozen=True)
class DesiredSecret:
    """Where a secret goes. The value is resolved separately and never stored here."""

    name: str
    scope: str
    env: str


@dataclass(frozen=True, order=True)
class DesiredPort:
    guest: int
    host: int


@dataclass(frozen=True)
class DesiredVM:
    project: str
    name: str
    backend: str
    backend_type: str
    image: str
    cpus: int
    memory: int
    disk: int
    state: str
    protect: bool
    node: str | None
    ports: tuple[DesiredPort, ...]
    user: str
    agents: tuple[str, ...]
    packages: tuple[str, ...]
    repos: tuple[DesiredRepo, ...]
    secrets: tuple[DesiredSecret, ...]
    bundle_digest: str
    provision: bool = True
    # The guest's CPU type where the backend sets one (Proxmox: its cputype), else None.
    cpu: str | None = None
    docker: bool = False
    locale: str = FALLBACK_LOCALE
    timezone: str = FALLBACK_TIMEZONE
    # Guest paths kept across replace and reprovision; not in either fingerprint
    # (changing what is kept changes nothing on the machine).
    preserve: tuple[str, ...] = ()
    # When the VM is due to be deleted (``expires:``); in neither fingerprint either: an
    # expiry changes nothing on the machine, only when it goes.
    expires: Expiry | None = None
    guest_fingerprint: str = field(default="", compare=False)
    fingerprint: str = field(default="", compare=False)

    def guest_content(self) -> dict[str, object]:
        """What provisioning puts in the guest; a change here means reprovision."""
        return {
            "user": self.user,
            "agents": list(self.agents),
            "packages": list(self.packages),
            "repos": [asdict(r) for r in self.repos],
            "secrets": [asdict(s) for s in self.secrets],
            "docker": self.docker,
            "locale": self.locale,
            "timezone": self.timezone,
            "bundle": self.bundle_digest,
        }

    def infra(self) -> dict[str, object]:
        """What the backend holds; compared field by field by the planner."""
        infra: dict[str, object] = {"image": self.image, "cpus": self.cpus}
        if self.cpu is not None:
            # Only where a backend sets it: a field that is always None would still change
            # the fingerprint of every VM of the other backends, and re-plan them all.
            infra["cpu"] = self.cpu
        infra.update(
            memory=self.memory,
            disk=self.disk,
            state=self.state,
            protect=self.protect,
            node=self.node,
            ports=[asdict(p) for p in self.ports],
        )
        return infra


@dataclass(frozen=True)
class DesiredState:
    project: str
    manifest: Manifest
    vms: tuple[DesiredVM, ...]

    def for_backend(self, backend: str) -> list[DesiredVM]:
        return [vm for vm in self.vms if vm.backend == backend]


def digest(value: object, length: int = 16) -> str:
    """Stable short hash of JSON-able data (sorted keys, no whitespace)."""
    blob = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:length]


def with_fingerprints(vm: DesiredVM) -> DesiredVM:
    # An unprovisioned VM has no guest content sand answers for.
    guest = digest(vm.guest_content()) if vm.provision else ""

    whole = digest({"project": vm.project, "name": vm.name, "infra": vm.infra(), "guest": guest})
    return _replace(vm, guest_fingerprint=guest, fingerprint=whole)


def _replace(vm: DesiredVM, **changes: object) -> DesiredVM:
    from dataclasses import replace

    return replace(vm, **changes)  # type: ignore[arg-type]


def build_desired(
    loaded: LoadedManifest | Manifest, bundle_digest: str = "", *, host: HostLocale | None = None
) -> DesiredState:
    """Resolve defaults into one DesiredVM per manifest entry (manifest order kept).

    ``host`` is this machine's timezone and locale, for VMs the manifest gives
    none (read from the environment and /etc when not passed).
    """
    m = loaded.manifest if isinstance(loaded, LoadedManifest) else loaded
    d = m.defaults
    here = host or HostLocale.detect()
    vms: list[DesiredVM] = []
    for vm in m.vms:
        backend_name = vm.backend or d.backend or next(iter(m.backends))
        backend = m.backends[backend_name]
        image = backend.image_ref(vm.image, d.image)
        repos = tuple(
            DesiredRepo(
                name=r,
                url=m.repos[r].url,
                branch=m.repos[r].branch,
                path=m.repos[r].path or f"~/src/{r}",
                token_secret=m.repos[r].token,
            )
            for r in vm.repos
        )
        secrets = tuple(
            DesiredSecret(name=s.name, scope=_norm_path(s.scope), env=s.env or s.name)
            for s in vm.secrets
        )
        spec = DesiredVM(
            project=m.project,
            name=vm.name,
            backend=backend_name,
            backend_type=backend.type,
            image=image,
            cpus=vm.cpus or d.cpus or DEFAULT_CPUS,
            memory=vm.memory or d.memory or DEFAULT_MEMORY,
            disk=vm.disk or d.disk or DEFAULT_DISK,
            state=vm.state or d.state or DEFAULT_STATE,
            protect=vm.protect,
            node=vm.node,
            cpu=backend.cpu_type(vm.cpu),
            ports=tuple(sorted(DesiredPort(p.guest, p.host) for p in vm.ports)),
            user=vm.user or d.user or DEFAULT_USER,
            agents=tuple(sorted(set(vm.agents or d.agents or DEFAULT_AGENTS))),
            packages=tuple(sorted(set(vm.packages or d.packages or ()))),
            repos=repos,
            secrets=secrets,
            bundle_digest=bundle_digest,
            provision=_first(vm.provision, d.provision, DEFAULT_PROVISION),
            docker=_first(vm.docker, d.docker, DEFAULT_DOCKER),
            locale=vm.locale or d.locale or here.locale,
            timezone=vm.timezone or d.timezone or here.timezone,
            preserve=tuple(_norm_path(p) for p in _preserved(vm.preserve, d.preserve)),
            expires=_expiry(vm.expires or d.expires),
        )
        vms.append(with_fingerprints(spec))
    return DesiredState(project=m.project, manifest=m, vms=tuple(vms))


def _preserved(own: list[str] | None, default: list[str] | None) -> list[str]:
    """The VM's own list replaces the default one (an empty list preserves nothing)."""
    return own if own is not None else (default or [])


def _expiry(text: str | None) -> Expiry | None:
    """The VM's own ``expires:`` (``never`` too) wins over its defaults'."""
    return parse_expiry(text) if text else None


def _first(*values: bool | None) -> bool:
    return next(v for v in values if v is not None)


def _norm_path(path: str) -> str:
    return path.rstrip("/") if len(path) > 1 else path
