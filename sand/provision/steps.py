"""What provisioning runs in a guest, as data: one :class:`Step` per bundle script.

Everything here is pure: a DesiredVM and its secret values go in, steps come
out. A step's command line holds only fixed paths and names checked against
strict patterns (a user name, an agent from a closed set); everything else --
paths, URLs, and above all secret values -- travels in the step's stdin as
NUL-terminated fields, so no value can appear in a guest process listing.

Each step has a *scope*: ``machine`` steps (packages, the toolchain, agents, an
image's own steps) make what a golden base holds, the same for every VM made
from it; ``vm`` steps (the user, the clock and language, the home, secrets,
repos) are each VM's own and run on every VM, also one cloned from a base. A
step's *digest* covers everything that decides what it does (its argv, its
stdin, the bundle files it runs); the guest keeps the digest of every step that
succeeded (``driver.py``), so a step whose digest is unchanged is not run again.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sand.broker.access import RESTRICTED_LIMA_ADDRESS, BrokerAccess
from sand.desired.spec import DesiredBase, DesiredVM, ImageStep, MachineContent
from sand.egress.shim import PROXY_ADDRESS as EGRESS_PROXY_ADDRESS
from sand.egress.shim import PROXY_PORT as EGRESS_PROXY_PORT
from sand.manifest.broker import broker_variables
from sand.manifest.egress import DENY
from sand.provision.agent_upload import AGENT_SOURCE_ENV, agent_tar
from sand.provision.bundle import GUEST_DIR, Bundle
from sand.provision.checks import (
    ProvisionSpecError,
    check_timezone_and_locale,
    check_url,
    check_user,
    checked_agents,
    checked_packages,
    credential_context,
    guest_path,
    slug,
)
from sand.refname import branch_problem

# Always present on a provisioned guest, whatever the VM lists: the workbench
# an agent expects (git, tmux, a compiler and make), what sand's own steps use
# (direnv for scoped secrets, curl and CA certificates for the upstream apt
# keys), and what the locale step sets from (locales, tzdata). Node.js, npm
# and gh come from the toolchain step, which may add upstream apt sources.
BASE_PACKAGES = (
    "build-essential",
    "ca-certificates",
    "curl",
    "direnv",
    "git",
    "locales",
    "tmux",
    "tzdata",
)

_ENV = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_IMAGE_STEP = re.compile(r"^[a-z][a-z0-9-]{0,39}$")


# The broker credential's file on the guest's tmpfs, beside the tokens (no slug is it).
BROKER_FILE = "git/broker"
DISK, TMPFS, NONE = "disk", "tmpfs", "none"  # where a step's ledger record lives
MACHINE = "machine"  # what a golden base holds: the same for every VM made from it
VM = "vm"  # each VM's own: run on every VM, a clone of a base included
# Scripts every step sources, and the extra bundle files some steps read: what the
# step's digest covers besides its own script.
_SHARED_FILES = ("lib.sh",)
_STEP_FILES = {"home.sh": ("files/",), "secrets.sh": ("git-credential-sand",)}


@dataclass(frozen=True)
class Step:
    name: str
    argv: tuple[str, ...]  # fixed paths and validated names only
    as_root: bool
    stdin: bytes = field(default=b"", repr=False)  # may hold secret values
    timeout: float = 300.0
    scope: str = VM
    # Where the guest records that the step ran with these inputs: on disk (DISK), on
    # the user's tmpfs beside the secrets (TMPFS: a reboot empties both at once, and a
    # digest over secret values never reaches a disk), or nowhere (NONE: run each time).
    ledger: str = "disk"

    def command(self, login_user: str, user: str) -> str:
        """The guest command line; sshd hands it to the login shell."""
        if self.as_root:
            prefix = [] if login_user == "root" else ["sudo", "-n"]
        else:
            prefix = ["sudo", "-n", "-H", "-u", user, "--"]
        return shlex.join([*prefix, *self.argv])


def script(name: str, *args: str) -> tuple[str, ...]:
    return ("/bin/bash", f"{GUEST_DIR}/{name}", *args)


def bundle_files(step: Step) -> tuple[str, ...]:
    """The bundle files (paths, or directory prefixes ending in '/') ``step`` runs."""
    if len(step.argv) < 2 or not step.argv[1].startswith(f"{GUEST_DIR}/"):
        return ()
    name = step.argv[1][len(GUEST_DIR) + 1 :]
    return (*_SHARED_FILES, name, *_STEP_FILES.get(name, ()))


def step_digest(step: Step, bundle: Bundle, user: str) -> str:
    """What decides what ``step`` does, as a hex digest ("-" for a step never recorded).

    Its name, argv, who it runs as, its stdin and the bundle files it runs: equal
    digests mean running it again would change nothing it was asked for. A digest over
    secret values (the secrets step's stdin) is kept only on the guest's tmpfs, beside
    the values themselves, and never in its step log."""
    if step.ledger == NONE:
        return "-"
    h = hashlib.sha256(b"sand-step-v1\0")
    runs_as = "root" if step.as_root else user
    for part in (step.name, runs_as, *step.argv):
        h.update(part.encode() + b"\0")
    h.update(hashlib.sha256(step.stdin).digest())
    h.update(bundle.files_digest(bundle_files(step)).encode())
    return h.hexdigest()[:32]


def fields(*records: Sequence[str]) -> bytes:
    """NUL-terminated fields for a step's stdin, closed by the "end" record."""
    out = bytearray()
    for record in [*records, ("end",)]:
        for value in record:
            if "\x00" in value:
                raise ProvisionSpecError("a provisioning value contains a NUL character")
            out += value.encode() + b"\x00"
    return bytes(out)


# --- the steps ----------------------------------------------------------------------


def egress_step(vm: DesiredVM, proxy: str | None = None, direct: str = "") -> list[Step]:
    """Where the VM's egress goes through sand's proxy (docs/egress.md), its software
    told it: on Lima, where the VM's network is restricted to sand's forwards (its broker
    reached directly); on Proxmox, ``proxy`` (the backend's declared proxy, with the VM's
    credential: sent on stdin, never in an argv; ``direct`` the addresses not proxied).
    Without it, what an earlier run told the guest removed. A VM of another backend, or a
    Proxmox VM that never had a policy: no step."""
    if vm.backend_type == "lima":
        if vm.egress is None or vm.egress.policy != DENY:
            return [Step("egress", script("egress.sh", "-"), True)]
        url = f"http://{EGRESS_PROXY_ADDRESS}:{EGRESS_PROXY_PORT}"
        return [Step("egress", script("egress.sh", url, RESTRICTED_LIMA_ADDRESS), True)]
    if vm.backend_type != "proxmox" or vm.egress is None:
        return []
    if proxy is None:
        return [Step("egress", script("egress.sh", "-"), True)]
    return [Step("egress", script("egress.sh", "stdin", direct), True, stdin=proxy.encode())]


def _host_of(broker: BrokerAccess | None) -> str:
    """The broker's address, which the guest reaches directly, not through the proxy."""
    return "" if broker is None else broker.url.removeprefix("http://").rpartition(":")[0]


def user_step(user: str) -> Step:
    """The login user with passwordless sudo: each VM's own (a base has one too, for
    its machine steps; a clone runs it again)."""
    return Step("user", script("user.sh", check_user(user)), True)


def machine_steps(content: MachineContent, *, agent_source: str | None = None) -> list[Step]:
    """packages → toolchain → agents → the image's own steps: what a base holds."""
    user = check_user(content.user)
    agents = checked_agents(content.agents)
    packages = checked_packages([*content.packages, *BASE_PACKAGES])
    source = agent_source if agent_source is not None else os.environ.get(AGENT_SOURCE_ENV)
    if source:
        agents_step = Step(
            "agents",
            script("agents.sh", user, "upload", *agents),
            True,
            stdin=agent_tar(Path(source), agents),
            scope=MACHINE,
        )
    else:
        agents_step = Step(
            "agents",
            script("agents.sh", user, "registry", *agents),
            True,
            timeout=1800,
            scope=MACHINE,
        )
    steps = [
        Step(
            "packages",
            script("packages.sh"),
            True,
            stdin=fields(packages),
            timeout=1800,
            scope=MACHINE,
        ),
        Step(
            "toolchain",
            script("toolchain.sh", user, "docker" if content.docker else "no-docker"),
            True,
            timeout=1800,
            scope=MACHINE,
        ),
        agents_step,
        Step("memory", script("memory.sh"), True, scope=MACHINE),  # init_on_free=1
    ]
    for extra in content.steps:
        steps.append(image_step(extra))
    return steps


def image_step(extra: ImageStep) -> Step:
    """One of an image's own steps: its shell text run by bash as root, sent on stdin."""
    if not _IMAGE_STEP.match(extra.name):
        raise ProvisionSpecError(f"image step {extra.name!r}: not a step name")
    if "\x00" in extra.run:
        raise ProvisionSpecError(f"image step {extra.name!r}: its text holds a NUL character")
    return Step(
        f"image-{extra.name}",
        script("image-step.sh", extra.name),
        True,
        stdin=extra.run.encode(),
        timeout=extra.timeout,
        scope=MACHINE,
    )


def vm_steps(vm: DesiredVM) -> list[Step]:
    """The clock and language, the VM's own packages on a golden image, the home."""
    timezone, locale = check_timezone_and_locale(vm)
    steps = [Step("locale", script("locale.sh", timezone, locale), True, timeout=600)]
    if vm.base is not None and vm.base.declared and vm.packages:
        # Packages a VM made from a golden image adds to the image's.
        steps.append(
            Step(
                "vm-packages",
                script("packages.sh"),
                True,
                stdin=fields(checked_packages(vm.packages)),
                timeout=1800,
            )
        )
    steps.append(Step("home", script("home.sh", *checked_agents(vm.agents)), False))
    return steps


def provision_steps(
    vm: DesiredVM,
    values: Mapping[str, str],
    *,
    agent_source: str | None = None,
    broker: BrokerAccess | None = None,
    egress_proxy: str | None = None,
) -> list[Step]:
    """Every step of a provision, in order: user, the machine's steps (not for a VM made
    from a golden image: its image holds them), the VM's own, secrets, repos."""
    machine = (
        []
        if vm.base is not None and vm.base.declared
        else machine_steps(machine_content(vm), agent_source=agent_source)
    )
    return [
        user_step(vm.user),
        # Before anything the guest fetches (packages): where its requests go.
        *egress_step(vm, egress_proxy, _host_of(broker)),
        # A spare, and the VM that claimed one: its own machine-id and host keys (made
        # at the spare's first boot, or by this step when the spare is provisioned),
        # and its name.
        *([pool_identity_step(vm)] if vm.pool else []),
        *machine,
        *vm_steps(vm),
        secrets_step(vm, values, broker),
        repos_step(vm),
        *([fork_identity_step(vm), fork_step(vm)] if vm.fork is not None else []),
    ]


def base_build_steps(base: DesiredBase, *, agent_source: str | None = None) -> list[Step]:
    """What building a golden base runs: its user, its machine steps, then the
    generalization that makes every clone its own machine."""
    steps = [user_step(base.user), *machine_steps(base.content, agent_source=agent_source)]
    vm_scoped = sorted({"user", "locale", "vm-packages", "home", "secrets", "repos"})
    steps.append(
        Step("generalize", script("generalize.sh", *vm_scoped), True, timeout=300, ledger=NONE)
    )
    return steps


def machine_content(vm: DesiredVM) -> MachineContent:
    """The machine-level content of a VM that is not made from a golden image."""
    return MachineContent(
        user=vm.user, packages=vm.packages, agents=vm.agents, docker=vm.docker, steps=()
    )


def secrets_step(
    vm: DesiredVM, values: Mapping[str, str], broker: BrokerAccess | None = None
) -> Step:
    """Every scoped secret and repo token, in one payload (values only on stdin). A
    brokered secret gets no value: git and the guest's HTTP clients reach it through
    ``broker`` with the VM's own broker credential (docs/credentials.md)."""
    records: list[tuple[str, ...]] = []
    seen: set[tuple[str, str]] = set()
    for s in sorted(vm.secrets, key=lambda s: (s.scope, s.env)):
        scope = guest_path(s.scope, f"scope of secret {s.name!r}")
        if not _ENV.match(s.env):
            raise ProvisionSpecError(f"secret {s.name!r}: {s.env!r} is not an env name")
        if (scope, s.env) in seen:
            raise ProvisionSpecError(f"two secrets set {s.env} at {scope}")
        seen.add((scope, s.env))
        records.append(("env", scope, slug(scope), s.env, values[s.name]))
    brokered = {g.secret for g in vm.brokered}
    for r in vm.repos:
        if not r.token_secret or r.token_secret in brokered:
            continue
        checkout = guest_path(r.path, f"path of repo {r.name!r}")
        token = values[r.token_secret]
        if "\n" in token or "\r" in token:
            raise ProvisionSpecError(f"repo {r.name!r}: its token must be a single line")
        records.append(("git", checkout, slug(checkout), credential_context(r.url, r.name), token))
    if brokered:
        if broker is None:
            raise ProvisionSpecError(f"VM {vm.name!r} uses brokered secrets, but no broker runs")
        hosts = sorted({h for g in vm.brokered for h in g.hosts})
        records.append(("broker", broker.url, " ".join(hosts), broker.reveal()))
    for scope, env in sorted({place for g in vm.brokered for place in g.env}):
        # The broker's URL and the credential's file, set where the VM's ``secrets:``
        # places a brokered secret: no value of it is in the guest's environment.
        directory = guest_path(scope, f"scope of secret {env!r}")
        if not _ENV.match(env):
            raise ProvisionSpecError(f"brokered secret: {env!r} is not an env name")
        for variable in broker_variables(env):
            if (directory, variable) in seen:
                raise ProvisionSpecError(f"two secrets set {variable} at {directory}")
            seen.add((directory, variable))
        records.append(("broker-env", directory, slug(directory), env))
    return Step(
        "secrets", script("secrets.sh"), False, stdin=fields(*records), timeout=120, ledger=TMPFS
    )


def repos_step(vm: DesiredVM) -> Step:
    records = []
    for r in vm.repos:
        if r.branch is not None and (why := branch_problem(r.branch)):
            raise ProvisionSpecError(f"repo {r.name!r}: {r.branch!r} is not a branch name: {why}")
        checkout = guest_path(r.path, f"path of repo {r.name!r}")
        records.append(("repo", checkout, check_url(r.url, r.name), r.branch or ""))
    return Step("repos", script("repos.sh"), False, stdin=fields(*records), timeout=1800)


def fork_step(vm: DesiredVM) -> Step:
    """A fork's checkouts on branch ``fork/<vm>``; logins not in ``from.logins`` removed."""
    branch = f"fork/{vm.name}"
    if why := branch_problem(branch):
        raise ProvisionSpecError(f"VM {vm.name!r}: {branch!r} is not a branch name: {why}")
    records = [("repo", guest_path(r.path, f"path of repo {r.name!r}")) for r in vm.repos]
    argv = script("fork.sh", branch, vm.name, *checked_agents(vm.fork.logins if vm.fork else ()))
    return Step("fork", argv, False, stdin=fields(*records), timeout=300)


def fork_identity_step(vm: DesiredVM) -> Step:
    """A fork's own machine-id, SSH host keys and hostname (bundle/fork-identity.sh)."""
    return Step("fork-identity", script("fork-identity.sh", _hostname(vm)), True)


def pool_identity_step(vm: DesiredVM) -> Step:
    """A pool VM's machine-id and SSH host keys kept where its own, made anew where not,
    and its name as hostname (bundle/pool-identity.sh): a claim makes no host key."""
    return Step("pool-identity", script("pool-identity.sh", _hostname(vm)), True)


def _hostname(vm: DesiredVM) -> str:
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9-]{0,62}", vm.name):
        raise ProvisionSpecError(f"VM {vm.name!r}: not a name a hostname can take")
    return vm.name
