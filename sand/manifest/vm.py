"""One VM of the manifest (``vms:``), as a strict pydantic model, with the parts it is
made of (ports, secret uses, the VM it is forked from) and the descriptions ``defaults``
shares with it. Apart from ``sand.manifest.models`` so that a generator's VM template
(``sand.manifest.generators``) can be a VM too, and the manifest hold both."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from sand.manifest.backends.proxmox_cpu import PveCpuType
from sand.manifest.egress import DESCRIPTION as EGRESS_DESCRIPTION
from sand.manifest.egress import Egress
from sand.manifest.expiry import DESCRIPTION as EXPIRES_DESCRIPTION
from sand.manifest.fields import (
    DISK_DESCRIPTION,
    MEMORY_DESCRIPTION,
    PRESERVE_DESCRIPTION,
    REBUILD_DESCRIPTION,
    Agent,
    DiskSize,
    EnvName,
    Expires,
    ForwardedPort,
    HomePath,
    Image,
    Locale,
    MemorySize,
    PackageName,
    PowerState,
    PveNode,
    Rebuild,
    Strict,
    Timezone,
    UserName,
    empty_list,
)
from sand.manifest.idle import IdleSetting
from sand.manifest.pools import POOL_DESCRIPTION

# --- VMs ------------------------------------------------------------------------


class Port(Strict):
    guest: ForwardedPort = Field(
        description="The port inside the guest (not 22: Lima keeps it).", examples=[3000]
    )
    host: ForwardedPort = Field(
        description="The port on the host's 127.0.0.1 (not 22: Lima keeps it).", examples=[3000]
    )


class SecretUse(Strict):
    """A secret placed at a guest directory: visible to processes working under it."""

    name: str = Field(
        description="A secret named under the top-level `secrets`. A brokered one "
        "(`deliver: broker`) is granted, never placed: ENV_BROKER_URL and "
        "ENV_BROKER_CREDENTIAL_FILE (the broker's URL, the file of the VM's broker "
        "credential) are set at the scope instead (docs/credentials.md).",
        examples=["GITHUB_TOKEN"],
    )
    scope: HomePath = Field(examples=["~/src/webapp"])
    env: EnvName | None = Field(
        default=None,
        description="Environment variable name (default: the secret's name).",
        examples=["GH_TOKEN"],
    )


DOCKER_DESCRIPTION = (
    "Install Docker (Debian's docker.io) and put the user in the docker group (default false)."
)
LOCALE_DESCRIPTION = (
    "The guest's locale, e.g. 'en_US.UTF-8' (default: this machine's LC_ALL or LANG, "
    "else 'C.UTF-8')."
)
IDLE_DESCRIPTION = (
    "What sand does with this VM once nobody has used it for a while: no agent working, "
    "no shell attached, no SSH session (never CPU alone); 'never' turns it off "
    "(docs/agents.md#idle-vms-sleep)."
)
IMAGE_DEFAULT_DESCRIPTION = (
    "The image of VMs that name none: a golden image under `images` (for VMs of any "
    "backend), or a Lima template or image URL. Proxmox VMs otherwise clone their "
    "backend's `template`: a Proxmox VM that would take a Lima image is refused; give it "
    "its own `image` (a template) or move `image` to the Lima VMs."
)
IMAGE_DESCRIPTION = (
    "What the VM is made from: the name of a golden image under `images` (the VM is "
    "created from its base and runs only its own steps), or on Lima a template or image "
    "URL (default: defaults.image), on Proxmox another template's vmid or name (default: "
    "the backend's `template`). A change replaces the VM."
)
CPUS_DESCRIPTION = "Virtual CPUs, 1 to 512 (default 2)."
PACKAGES_DESCRIPTION = "Debian packages installed in the guest beyond the workbench's own."
USER_DESCRIPTION = "The login user sand creates in the guest (default claude)."
STATE_DESCRIPTION = "Whether the VM is running or stopped (default running)."
TIMEZONE_DESCRIPTION = (
    "The guest's IANA timezone, e.g. 'Europe/Berlin' (default: this machine's TZ, "
    "/etc/timezone or /etc/localtime, else 'Etc/UTC')."
)

FORK_DESCRIPTION = (
    "Make this VM a fork of another VM of this manifest, on the same backend: it is "
    "created once from the source's disk as it is at that apply (each repo checkout on "
    "a branch `fork/<name>` carrying uncommitted work), then lives its own life; a "
    "later change of the source never replaces it. Fields it leaves out are the "
    "source's (not `protect`). docs/fork-and-pools.md."
)


class ForkSource(Strict):
    """The VM a fork is made from (``from: {vm: agent-1}``)."""

    vm: str = Field(
        min_length=1, description="The source VM's name, in this manifest.", examples=["agent-1"]
    )
    snapshot: Literal["disk", "memory"] = Field(
        default="disk",
        description="Proxmox only: 'memory' also snapshots the source's RAM (the fork's "
        "snapshot is taken with vmstate); default 'disk'.",
        examples=["memory"],
    )
    force: bool = Field(
        default=False,
        description="Fork even while the source's agent is working or waits for input. "
        "Lima stops the source for the copy (limactl clone copies a stopped instance), "
        "which ends its running agent and a question it waits on; without this, such a "
        "fork is blocked in the plan and refused at apply time.",
        examples=[True],
    )
    logins: list[Agent] = Field(
        default_factory=empty_list,
        description="The agents whose login this fork keeps from its source's disk "
        "(default none: each agent's login file in the copy is overwritten and removed, "
        "and you log in inside the fork; its secrets are its own entry's, delivered to "
        "it). docs/security.md.",
        examples=[["claude"]],
    )


class VM(Strict):
    name: str = Field(
        min_length=1,
        description="The VM's name, unique in the manifest (case-insensitively); each "
        "backend type adds its own rule.",
        examples=["agent-1"],
    )
    backend: str | None = Field(
        default=None,
        description="A name under `backends` (default: defaults.backend).",
        examples=["laptop"],
    )
    image: Image | None = Field(
        default=None, description=IMAGE_DESCRIPTION, examples=["template://ubuntu-24.04"]
    )
    cpus: int | None = Field(default=None, ge=1, le=512, description=CPUS_DESCRIPTION, examples=[4])
    memory: MemorySize | None = Field(
        default=None, description=MEMORY_DESCRIPTION, examples=["16GiB"]
    )
    disk: DiskSize | None = Field(default=None, description=DISK_DESCRIPTION, examples=["60GiB"])
    agents: list[Agent] | None = Field(
        default=None,
        description="Coding agents to install (default: defaults.agents, else claude).",
        examples=[["claude", "codex", "opencode", "pi"]],
    )
    packages: list[PackageName] | None = Field(
        default=None, description=PACKAGES_DESCRIPTION, examples=[["ripgrep"]]
    )
    user: UserName | None = Field(default=None, description=USER_DESCRIPTION, examples=["claude"])
    repos: list[str] = Field(
        default_factory=empty_list,
        description="Names under the top-level `repos` to clone into this VM.",
        examples=[["webapp"]],
    )
    secrets: list[SecretUse] = Field(
        default_factory=empty_list,
        description="Secrets placed at guest directories.",
        examples=[[{"name": "GITHUB_TOKEN", "scope": "~/src/webapp"}]],
    )
    ports: list[Port] = Field(
        default_factory=empty_list,
        description="Lima only: forwards from the guest to the host's 127.0.0.1.",
        examples=[[{"guest": 3000, "host": 3000}]],
    )
    state: PowerState | None = Field(
        default=None, description=STATE_DESCRIPTION, examples=["running"]
    )
    protect: bool = Field(
        default=False,
        description="Never delete or replace this VM; a plan that would is blocked.",
        examples=[True],
    )
    node: PveNode | None = Field(
        default=None, description="Proxmox only: pin to this node.", examples=["pve1"]
    )
    cpu: PveCpuType | None = Field(
        default=None,
        description="Proxmox only: the CPU type ('host', 'x86-64-v2-AES', ... or "
        "'custom-<name>'); default the backend's cpu (host). A change restarts the VM.",
        examples=["x86-64-v2-AES"],
    )
    provision: bool | None = Field(
        default=None,
        description="Provision this guest over SSH (default: defaults.provision, else true).",
        examples=[False],
    )
    preserve: list[HomePath] | None = Field(
        default=None,
        description=PRESERVE_DESCRIPTION + " Replaces the default list.",
        examples=[["~/src"]],
    )
    docker: bool | None = Field(default=None, description=DOCKER_DESCRIPTION, examples=[True])
    locale: Locale | None = Field(
        default=None, description=LOCALE_DESCRIPTION, examples=["de_DE.UTF-8"]
    )
    timezone: Timezone | None = Field(
        default=None, description=TIMEZONE_DESCRIPTION, examples=["America/New_York"]
    )
    expires: Expires | None = Field(
        default=None,
        description=EXPIRES_DESCRIPTION + " Replaces the default one.",
        examples=["3d", "never"],
    )
    rebuild: Rebuild | None = Field(
        default=None,
        description=REBUILD_DESCRIPTION + " Replaces the default one.",
        examples=["onBaseChange"],
    )
    idle: IdleSetting | None = Field(
        default=None,
        description=IDLE_DESCRIPTION + " Replaces the default one whole.",
        examples=[{"after": "45m", "then": "stop", "stopWaiting": True}, "never"],
    )
    egress: Egress | None = Field(
        default=None,
        description=EGRESS_DESCRIPTION + " Replaces the default one whole.",
        examples=[{"policy": "allow"}, {"domains": ["pypi.org"], "ports": [443]}],
    )
    fork: ForkSource | None = Field(
        default=None, alias="from", description=FORK_DESCRIPTION, examples=[{"vm": "agent-1"}]
    )
    pool: str | None = Field(
        default=None, min_length=1, description=POOL_DESCRIPTION, examples=["agents"]
    )
