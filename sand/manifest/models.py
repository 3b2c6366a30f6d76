"""The manifest's shape, as strict pydantic models.

Strict means: unknown keys are errors (a typo such as ``memroy`` must not be
silently ignored in a file applied from CI), strings are not coerced to
numbers, and every size is parsed to exact bytes. Cross-references (a VM's
backend, repos and secrets) are checked in ``references.py`` so that every
broken reference is reported with its own line, not just the first. A VM's own
model is ``sand.manifest.vm``'s (re-exported here).
"""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field

from sand.manifest.backends import BackendConfig
from sand.manifest.content import GoldenImage, Repo, Secret
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
    HomePath,
    Identifier,
    Image,
    Locale,
    MemorySize,
    PackageName,
    PowerState,
    Rebuild,
    Strict,
    Timezone,
    UserName,
    all_defaults,
    empty_dict,
    empty_list,
)
from sand.manifest.generators import GENERATORS_DESCRIPTION, Generator, GeneratorName
from sand.manifest.idle import IdleSetting
from sand.manifest.notify import Notify
from sand.manifest.pools import POOLS_DESCRIPTION, Pool, PoolName
from sand.manifest.vm import (
    CPUS_DESCRIPTION,
    DOCKER_DESCRIPTION,
    IDLE_DESCRIPTION,
    IMAGE_DEFAULT_DESCRIPTION,
    LOCALE_DESCRIPTION,
    PACKAGES_DESCRIPTION,
    STATE_DESCRIPTION,
    TIMEZONE_DESCRIPTION,
    USER_DESCRIPTION,
)
from sand.manifest.vm import VM as VM  # re-exported: imported from here
from sand.manifest.vm import ForkSource as ForkSource
from sand.manifest.vm import Port as Port
from sand.manifest.vm import SecretUse as SecretUse

API_VERSION = "sand/v1"


class Defaults(Strict):
    backend: str | None = Field(
        default=None,
        description="The backend of VMs that name none (default: the first under `backends`).",
        examples=["pve"],
    )
    image: Image | None = Field(
        default=None,
        description=IMAGE_DEFAULT_DESCRIPTION,
        examples=["template://debian-12"],
    )
    cpus: int | None = Field(default=None, ge=1, le=512, description=CPUS_DESCRIPTION, examples=[4])
    memory: MemorySize | None = Field(
        default=None, description=MEMORY_DESCRIPTION, examples=["8GiB"]
    )
    disk: DiskSize | None = Field(default=None, description=DISK_DESCRIPTION, examples=["40GiB"])
    agents: list[Agent] | None = Field(
        default=None,
        description="Coding agents to install: claude (the default), codex, opencode, pi.",
        examples=[["claude", "codex"]],
    )
    packages: list[PackageName] | None = Field(
        default=None,
        description=PACKAGES_DESCRIPTION,
        examples=[["postgresql-client", "jq"]],
    )
    user: UserName | None = Field(default=None, description=USER_DESCRIPTION, examples=["claude"])
    state: PowerState | None = Field(
        default=None, description=STATE_DESCRIPTION, examples=["stopped"]
    )
    provision: bool | None = Field(
        default=None,
        description="Provision guests over SSH (default true). False: sand manages only the "
        "machine, for fleets provisioned by other means.",
        examples=[False],
    )
    preserve: list[HomePath] | None = Field(
        default=None, description=PRESERVE_DESCRIPTION, examples=[["~/src", "~/.claude"]]
    )
    docker: bool | None = Field(default=None, description=DOCKER_DESCRIPTION, examples=[True])
    locale: Locale | None = Field(
        default=None, description=LOCALE_DESCRIPTION, examples=["en_US.UTF-8"]
    )
    timezone: Timezone | None = Field(
        default=None, description=TIMEZONE_DESCRIPTION, examples=["Europe/Berlin"]
    )
    expires: Expires | None = Field(
        default=None, description=EXPIRES_DESCRIPTION, examples=["8h", "2026-12-31"]
    )
    rebuild: Rebuild | None = Field(
        default=None, description=REBUILD_DESCRIPTION, examples=["onBaseChange"]
    )
    idle: IdleSetting | None = Field(
        default=None,
        description=IDLE_DESCRIPTION,
        examples=[{"after": "2h", "then": "suspend"}],
    )
    egress: Egress | None = Field(
        default=None,
        description=EGRESS_DESCRIPTION,
        examples=[{"policy": "deny", "domains": ["github.com", "*.npmjs.org"]}],
    )


class Manifest(Strict):
    """A sand manifest (``sand.yaml``)."""

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        populate_by_name=True,
        frozen=True,
        json_schema_extra={"$schema": "http://json-schema.org/draft-07/schema#"},
        title="sand manifest",
    )

    api_version: Literal["sand/v1"] = Field(
        alias="apiVersion", description="The manifest format: sand/v1.", examples=["sand/v1"]
    )
    project: Identifier = Field(
        description="Ownership id: sand only touches VMs it created for this project.",
        examples=["acme-agents"],
    )
    self_heal: bool = Field(
        default=False,
        alias="selfHeal",
        description="In watch mode, correct out-of-band changes instead of only reporting them.",
        examples=[True],
    )
    backends: dict[str, BackendConfig] = Field(
        min_length=1,
        description="Where VMs live, by a name of your choosing; each has a `type`.",
        examples=[{"laptop": {"type": "lima"}}],
    )
    defaults: Defaults = Field(
        default_factory=all_defaults(Defaults),
        description="Values every VM takes unless it sets its own.",
        examples=[{"cpus": 2, "memory": "8GiB"}],
    )
    secrets: dict[EnvName, Secret] = Field(
        default_factory=empty_dict,
        description="Named secrets (the name is an environment variable name); values stay "
        "on the host.",
        examples=[{"GITHUB_TOKEN": {"from": {"env": "SAND_GITHUB_TOKEN"}}}],
    )
    images: dict[Identifier, GoldenImage] = Field(
        default_factory=empty_dict,
        description="Golden images, by a name of your choosing: each is provisioned once "
        "into a base per backend (a Proxmox template, a Lima instance) that the VMs naming "
        "it as their `image` are created from; each VM then runs only its own steps "
        "(user, clock and language, home, secrets, repos).",
        examples=[{"workbench": {"packages": ["jq"], "agents": ["claude", "codex"]}}],
    )
    pools: dict[PoolName, Pool] = Field(
        default_factory=empty_dict,
        description=POOLS_DESCRIPTION,
        examples=[{"agents": {"image": "workbench", "warm": 3}}],
    )
    repos: dict[str, Repo] = Field(
        default_factory=empty_dict,
        description="Repositories VMs may clone, by name.",
        examples=[{"webapp": {"url": "https://github.com/acme/webapp.git"}}],
    )
    generators: dict[GeneratorName, Generator] = Field(
        default_factory=empty_dict,
        description=GENERATORS_DESCRIPTION,
        examples=[
            {
                "triage": {
                    "max": 10,
                    "prefix": "issue",
                    "github": {"repo": "webapp", "github": "acme/webapp", "label": "sand"},
                    "vm": {"pool": "agents"},
                }
            }
        ],
    )
    vms: list[VM] = Field(
        default_factory=empty_list,
        description="The VMs; a VM left out is deleted on the next apply.",
        examples=[[{"name": "agent-1"}]],
    )
    notify: Notify | None = Field(
        default=None,
        description="Who hears of an agent that needs input, is done or failed (docs/agents.md).",
        examples=[{"webhook": {"secret": "NTFY_URL"}, "desktop": True}],
    )
