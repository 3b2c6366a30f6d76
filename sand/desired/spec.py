"""Desired state: one fully-resolved, normalised spec per VM.

Defaults are applied here, once, so every later layer (plan, backends,
provisioning) reads a single flat record and never has to re-derive a value.
The fingerprints are what backends store on the VM, so a no-op plan needs no
per-VM reads: equal fingerprints mean nothing sand manages has changed.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from functools import partial

from sand.desired.bases import BASE_FORMAT as BASE_FORMAT  # re-exported: imported from here
from sand.desired.bases import DesiredBase as DesiredBase
from sand.desired.bases import MachineContent as MachineContent
from sand.desired.bases import derived_base as derived_base
from sand.desired.bases import with_base_fingerprint as with_base_fingerprint
from sand.desired.brokered import BrokerGrant, grants_for, tmpfs_uses, with_grants
from sand.desired.digest import digest as digest  # re-exported: imported from here
from sand.desired.fork import FORK_PREFIX, DesiredFork, desired_fork, with_inherited
from sand.desired.generated import GeneratedFrom, WorkItems, generated, with_item_branch
from sand.desired.host import FALLBACK_LOCALE, FALLBACK_TIMEZONE, HostLocale
from sand.desired.parts import DesiredPort as DesiredPort  # re-exported: imported from here
from sand.desired.parts import DesiredRepo as DesiredRepo
from sand.desired.parts import DesiredSecret as DesiredSecret
from sand.desired.parts import ImageStep as ImageStep
from sand.desired.parts import expiry_of, first_set, norm_path, preserved
from sand.desired.pools import pooled, spares
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
from sand.manifest.egress import DENY, EgressPolicy, egress_of
from sand.manifest.expiry import Expiry
from sand.manifest.idle import IdlePolicy, policy_of
from sand.manifest.loader import LoadedManifest
from sand.manifest.models import VM, Manifest


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
    # When and how the VM sleeps once nobody uses it (``idle:``); in neither fingerprint:
    # it changes nothing on the machine, only when it runs.
    idle: IdlePolicy | None = None
    # Where the VM may send packets (``egress:``), enforced by its backend outside the
    # guest; None: no policy. In the fingerprint only when set (as ``cpu``), so the
    # fleets that write none keep theirs.
    egress: EgressPolicy | None = None
    # Where sand's egress proxy for the VM's guest listens on this host (ADDRESS:PORT),
    # when its backend's owner declared one (Proxmox's ``egress_proxy``): the firewall
    # lets the VM reach it, and it serves the policy's ``domains``. In no fingerprint:
    # it moves with this host, not with the VM.
    egress_proxy: str | None = None
    # The golden base this VM is made from (an image under ``images``: ``declared``), or
    # the one sand may derive for VMs sharing its machine-level content (None: neither,
    # e.g. a VM sand does not provision). Not in the fingerprints: a VM made from a
    # golden image changes with the image only when it is rebuilt.
    base: DesiredBase | None = None
    # What a changed golden image does to this VM: "manual" (shown out of date) or
    # "onBaseChange" (replaced by a VM of the new base).
    rebuild: str = "manual"
    fork: DesiredFork | None = None  # made from another VM at the apply that creates it
    # The warm pool a VM claims a spare of (``pool:``), or a spare's own; ``spare``: this
    # is one of the pool's spares (sand.desired.pools). In neither fingerprint.
    pool: str | None = None
    spare: bool = False
    generated: GeneratedFrom | None = None  # made by a generator from a work item
    # The brokered secrets its repos or its ``secrets:`` name (never in ``secrets``, which
    # go to the guest's tmpfs): reached through the host's broker.
    brokered: tuple[BrokerGrant, ...] = ()
    guest_fingerprint: str = field(default="", compare=False)
    fingerprint: str = field(default="", compare=False)

    @property
    def spare_of(self) -> str:
        """The pool this VM is a spare of ("" for a VM that is not a spare)."""
        return (self.pool or "") if self.spare else ""

    @property
    def delivers_secrets(self) -> bool:
        """Whether its provisioning delivers anything secret: a value to its tmpfs, a
        repo token, or a broker credential."""
        return bool(self.secrets or self.brokered) or any(r.token_secret for r in self.repos)

    @property
    def golden(self) -> bool:
        """Made from an image under ``images``: its machine content is the image's."""
        return self.base is not None and self.base.declared

    def guest_content(self) -> dict[str, object]:
        """What provisioning puts in the guest; a change here means reprovision."""
        content = with_grants(self._content(), self.brokered)
        if self.generated is not None and self.generated.text:  # only where there is one
            content["item"] = self.generated.text
        policy = self.egress
        if self.egress_proxy and policy is not None and policy.policy == DENY and policy.domains:
            # The guest is told its proxy: gaining, moving or losing one reprovisions it.
            content["egress_proxy"] = self.egress_proxy
        return content

    def _content(self) -> dict[str, object]:
        if self.golden:
            assert self.base is not None
            # The image's content is the base's: a VM follows it only when rebuilt.
            return {
                "image": self.base.name,
                "user": self.user,
                "agents": list(self.agents),
                "packages": list(self.packages),
                "repos": [asdict(r) for r in self.repos],
                "secrets": [asdict(s) for s in self.secrets],
                "locale": self.locale,
                "timezone": self.timezone,
                "bundle": self.bundle_digest,
            }
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
        # A VM that claims a spare is made from its pool (a later change of the pool's
        # image replaces the spares, never it): the pool is what its fingerprint holds.
        image = f"pool:{self.pool}" if self.pool and not self.spare else self.image
        infra: dict[str, object] = {"image": image, "cpus": self.cpus}
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
        if self.egress is not None:
            # Its summary and a digest of the whole: what the backend records as enforced,
            # and the plan shows (a list of a thousand domains is no plan line).
            infra["egress"] = f"{self.egress.summary} #{digest(self.egress.as_data(), 12)}"
        return infra


@dataclass(frozen=True)
class DesiredState:
    project: str
    vms: tuple[DesiredVM, ...]
    backends: tuple[str, ...]  # the names under ``backends``, in the manifest's order
    pools: Mapping[str, int]  # each pool's ``warm`` count
    # The validated manifest, asked for only where the run needs more than the above:
    # a plan read from the desired-state cache (``sand.project``) never reads it.
    read_manifest: Callable[[], Manifest] = field(compare=False, repr=False)
    notes: tuple[str, ...] = ()  # what the plan says of work items left out

    @property
    def manifest(self) -> Manifest:
        return self.read_manifest()

    def for_backend(self, backend: str) -> list[DesiredVM]:
        return [vm for vm in self.vms if vm.backend == backend]


def state_of(m: Manifest, vms: tuple[DesiredVM, ...], notes: tuple[str, ...] = ()) -> DesiredState:
    """The desired state of manifest ``m`` holding ``vms``."""
    pools = {name: pool.warm for name, pool in m.pools.items()}
    return DesiredState(m.project, vms, tuple(m.backends), pools, lambda: m, notes)


def with_fingerprints(vm: DesiredVM) -> DesiredVM:
    """A copy of ``vm`` with its two fingerprints set.

    A copy, not dataclasses.replace: that runs the frozen __init__ of ~40 fields again,
    a third of building a 5,000-VM fleet's desired state. The digests are no input of
    that __init__ (compare=False, no check)."""
    return _fingerprinted(copy.copy(vm))


def _fingerprinted(vm: DesiredVM) -> DesiredVM:
    """``vm`` itself, its fingerprints set: only for one just made, that no one else
    holds yet (``_resolve``'s; copying it cost a quarter of resolving a VM)."""
    # An unprovisioned VM has no guest content sand answers for.
    guest = digest(vm.guest_content()) if vm.provision else ""
    whole = digest({"project": vm.project, "name": vm.name, "infra": vm.infra(), "guest": guest})
    object.__setattr__(vm, "guest_fingerprint", guest)
    object.__setattr__(vm, "fingerprint", whole)
    return vm


def build_desired(
    loaded: LoadedManifest | Manifest,
    bundle_digest: str = "",
    *,
    host: HostLocale | None = None,
    machine_digest: str = "",
    items: WorkItems | None = None,
) -> DesiredState:
    """Resolve defaults into one DesiredVM per manifest entry (manifest order kept).

    ``host`` is this machine's timezone and locale, for VMs the manifest gives
    none (read from the environment and /etc when not passed). ``machine_digest``:
    the digest of the bundle scripts a golden base runs (part of each base's
    fingerprint). ``items``: each generator's work items (``sand.workitems``).
    """
    m = loaded.manifest if isinstance(loaded, LoadedManifest) else loaded
    here = host or HostLocale.detect()
    resolve = partial(
        _resolve, m, here=here, bundle_digest=bundle_digest, machine_digest=machine_digest
    )
    entries = [pooled(entry, m.pools) for entry in m.vms]
    vms = [resolve(with_inherited(entry, entries)) for entry in entries]
    vms += spares(m, resolve, _as_spare)
    made, notes = generated(m, items or {}, resolve, _as_generated, (v.name for v in vms))
    return state_of(m, tuple(vms + made), tuple(notes))


def _as_generated(
    spec: DesiredVM, repo: str, source: GeneratedFrom, branch: str | None
) -> DesiredVM:
    """A VM of a generator's template given its item's branch (``sand.desired.generated``)."""
    repos = with_item_branch(spec.repos, repo, branch)
    return with_fingerprints(replace(spec, repos=repos, generated=source))


def _as_spare(spec: DesiredVM, pool: str) -> DesiredVM:
    """A VM of ``pool`` made one of its spares (``sand.desired.pools``)."""
    spare = replace(spec, pool=pool, spare=True, state="running", protect=False, preserve=())
    return with_fingerprints(replace(spare, expires=None, idle=None, rebuild="onBaseChange"))


def _resolve(
    m: Manifest, vm: VM, *, here: HostLocale, bundle_digest: str, machine_digest: str
) -> DesiredVM:
    """One manifest entry (its fork's and pool's fields already taken) as a DesiredVM."""
    d = m.defaults
    backend_name = vm.backend or d.backend or next(iter(m.backends))
    backend = m.backends[backend_name]
    image_name = vm.image or d.image
    golden = m.images.get(image_name) if image_name else None
    user = vm.user or d.user or DEFAULT_USER
    provision = first_set(vm.provision, d.provision, DEFAULT_PROVISION)
    base: DesiredBase | None = None
    if golden is not None and image_name is not None:
        base = with_base_fingerprint(
            DesiredBase(
                project=m.project,
                backend=backend_name,
                name=image_name,
                declared=True,
                source=backend.image_ref(
                    str(golden.source) if golden.source is not None else None, None
                ),
                content=MachineContent(
                    user=user,
                    packages=tuple(sorted(set(golden.packages))),
                    agents=tuple(sorted(set(golden.agents or DEFAULT_AGENTS))),
                    docker=golden.docker,
                    steps=tuple(ImageStep(s.name, s.run, s.timeout) for s in golden.steps),
                ),
                scripts=machine_digest,
            )
        )
        image = f"{GOLDEN_PREFIX}{image_name}"
        agents = tuple(sorted(set(vm.agents or d.agents or base.content.agents)))
        docker = golden.docker
    else:
        image = backend.image_ref(vm.image, d.image)
        agents = tuple(sorted(set(vm.agents or d.agents or DEFAULT_AGENTS)))
        docker = first_set(vm.docker, d.docker, DEFAULT_DOCKER)
    packages = tuple(sorted(set(vm.packages or d.packages or ())))
    disk = vm.disk or d.disk or DEFAULT_DISK
    if base is None and provision and backend.derives_base_for(disk):
        base = derived_base(
            m.project,
            backend_name,
            image,
            MachineContent(user=user, packages=packages, agents=agents, docker=docker),
            machine_digest,
        )
    if vm.fork is not None:  # made from its source's disk: no image, no base of its own
        image, base = FORK_PREFIX + vm.fork.vm, None
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
        DesiredSecret(name=s.name, scope=norm_path(s.scope), env=s.env or s.name)
        for s in tmpfs_uses(m, vm.secrets)
    )
    spec = DesiredVM(
        project=m.project,
        name=vm.name,
        backend=backend_name,
        backend_type=backend.type,
        image=image,
        cpus=vm.cpus or d.cpus or DEFAULT_CPUS,
        memory=vm.memory or d.memory or DEFAULT_MEMORY,
        disk=disk,
        state=vm.state or d.state or DEFAULT_STATE,
        protect=vm.protect,
        node=vm.node,
        cpu=backend.cpu_type(vm.cpu),
        ports=tuple(sorted(DesiredPort(p.guest, p.host) for p in vm.ports)),
        user=user,
        agents=agents,
        packages=packages,
        repos=repos,
        secrets=secrets,
        bundle_digest=bundle_digest,
        provision=provision,
        docker=docker,
        locale=vm.locale or d.locale or here.locale,
        timezone=vm.timezone or d.timezone or here.timezone,
        preserve=tuple(norm_path(p) for p in preserved(vm.preserve, d.preserve)),
        expires=expiry_of(vm.expires or d.expires),
        idle=policy_of(vm.idle, d.idle),
        egress=egress_of(vm.egress, d.egress),
        egress_proxy=getattr(backend, "egress_proxy", None),
        base=base,
        rebuild=vm.rebuild or d.rebuild or DEFAULT_REBUILD,
        fork=desired_fork(vm),
        pool=vm.pool,
        brokered=grants_for(m, vm.repos, vm.secrets),
    )
    return _fingerprinted(spec)


# How a VM made from a golden image shows its image (in the plan and its marker).
GOLDEN_PREFIX = "golden:"
DEFAULT_REBUILD = "manual"
