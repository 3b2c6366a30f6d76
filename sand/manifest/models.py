"""The manifest's shape, as strict pydantic models.

Strict means: unknown keys are errors (a typo such as ``memroy`` must not be
silently ignored in a file applied from CI), strings are not coerced to
numbers, and every size is parsed to exact bytes. Cross-references (a VM's
backend, repos and secrets) are checked in ``references.py`` so that every
broken reference is reported with its own line, not just the first.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field, model_validator

from sand.manifest import values as v
from sand.manifest.backends import BackendConfig
from sand.manifest.backends.proxmox_cpu import PveCpuType
from sand.manifest.expiry import DESCRIPTION as EXPIRES_DESCRIPTION
from sand.manifest.fields import (
    DISK_DESCRIPTION,
    MEMORY_DESCRIPTION,
    PRESERVE_DESCRIPTION,
    Agent,
    Branch,
    DiskSize,
    EnvName,
    Expires,
    HomePath,
    Identifier,
    Image,
    Locale,
    LocalPath,
    MemorySize,
    PackageName,
    PortNumber,
    PowerState,
    PveNode,
    RepoUrl,
    Strict,
    Timezone,
    UserName,
    rule,
)

API_VERSION = "sand/v1"

# --- secrets and repos ------------------------------------------------------------


def _argv_problem(argv: list[str]) -> str | None:
    if not argv or not argv[0]:
        return "the command is an argv: a non-empty list whose first item names the program"
    if any("\x00" in arg for arg in argv):
        return "the command holds a NUL character"
    return None


class SecretSource(Strict):
    """Where a secret's value comes from on the host. Values never live in the manifest."""

    file: LocalPath | None = None
    env: EnvName | None = None
    command: Annotated[list[str], rule(_argv_problem)] | None = Field(
        default=None,
        min_length=1,
        description="An argv run on this machine (no shell); its stdout is the value.",
    )

    @model_validator(mode="after")
    def _exactly_one(self) -> SecretSource:
        if sum(x is not None for x in (self.file, self.env, self.command)) != 1:
            raise ValueError("a secret comes from exactly one of 'file', 'env' or 'command'")
        return self


class Secret(Strict):
    source: SecretSource = Field(alias="from")


class Repo(Strict):
    url: RepoUrl = Field(description=f"Clone URL: {v.ALLOWED_URLS}; no credentials in it.")
    branch: Branch | None = None
    path: HomePath | None = Field(
        default=None, description="Checkout path in the guest (default: ~/src/<repo name>)."
    )
    token: str | None = Field(
        default=None, description="Name of a secret git uses for this checkout only."
    )


# --- VMs ------------------------------------------------------------------------


class Port(Strict):
    guest: PortNumber
    host: PortNumber


class SecretUse(Strict):
    """A secret placed at a guest directory: visible to processes working under it."""

    name: str
    scope: HomePath
    env: EnvName | None = Field(
        default=None, description="Environment variable name (default: the secret's name)."
    )


DOCKER_DESCRIPTION = (
    "Install Docker (Debian's docker.io) and put the user in the docker group (default false)."
)
LOCALE_DESCRIPTION = (
    "The guest's locale, e.g. 'en_US.UTF-8' (default: this machine's LC_ALL or LANG, "
    "else 'C.UTF-8')."
)
TIMEZONE_DESCRIPTION = (
    "The guest's IANA timezone, e.g. 'Europe/Berlin' (default: this machine's TZ, "
    "/etc/timezone or /etc/localtime, else 'Etc/UTC')."
)


class Defaults(Strict):
    backend: str | None = None
    image: Image | None = None
    cpus: int | None = Field(default=None, ge=1, le=512)
    memory: MemorySize | None = Field(default=None, description=MEMORY_DESCRIPTION)
    disk: DiskSize | None = Field(default=None, description=DISK_DESCRIPTION)
    agents: list[Agent] | None = Field(
        default=None,
        description="Coding agents to install: claude (the default), codex, opencode, pi.",
    )
    packages: list[PackageName] | None = None
    user: UserName | None = None
    state: PowerState | None = None
    provision: bool | None = Field(
        default=None,
        description="Provision guests over SSH (default true). False: sand manages only the "
        "machine, for fleets provisioned by other means.",
    )
    preserve: list[HomePath] | None = Field(default=None, description=PRESERVE_DESCRIPTION)
    docker: bool | None = Field(default=None, description=DOCKER_DESCRIPTION)
    locale: Locale | None = Field(default=None, description=LOCALE_DESCRIPTION)
    timezone: Timezone | None = Field(default=None, description=TIMEZONE_DESCRIPTION)
    expires: Expires | None = Field(default=None, description=EXPIRES_DESCRIPTION)


class VM(Strict):
    name: str = Field(min_length=1)
    backend: str | None = None
    image: Image | None = None
    cpus: int | None = Field(default=None, ge=1, le=512)
    memory: MemorySize | None = Field(default=None, description=MEMORY_DESCRIPTION)
    disk: DiskSize | None = Field(default=None, description=DISK_DESCRIPTION)
    agents: list[Agent] | None = None
    packages: list[PackageName] | None = None
    user: UserName | None = None
    repos: list[str] = Field(default_factory=list)
    secrets: list[SecretUse] = Field(default_factory=list)
    ports: list[Port] = Field(default_factory=list)
    state: PowerState | None = None
    protect: bool = False
    node: PveNode | None = Field(default=None, description="Proxmox only: pin to this node.")
    cpu: PveCpuType | None = Field(
        default=None,
        description="Proxmox only: the CPU type ('host', 'x86-64-v2-AES', ... or "
        "'custom-<name>'); default the backend's cpu (host). A change restarts the VM.",
    )
    provision: bool | None = None
    preserve: list[HomePath] | None = Field(
        default=None, description=PRESERVE_DESCRIPTION + " Replaces the default list."
    )
    docker: bool | None = None
    locale: Locale | None = None
    timezone: Timezone | None = None
    expires: Expires | None = Field(
        default=None, description=EXPIRES_DESCRIPTION + " Replaces the default one."
    )


class Manifest(Strict):
    """A sand manifest (``sand.yaml``)."""

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        populate_by_name=True,
        frozen=True,
        json_schema_extra={"$schema": "https://json-schema.org/draft/2020-12/schema"},
        title="sand manifest",
    )

    api_version: Literal["sand/v1"] = Field(alias="apiVersion")
    project: Identifier = Field(
        description="Ownership id: sand only touches VMs it created for this project."
    )
    self_heal: bool = Field(
        default=False,
        alias="selfHeal",
        description="In watch mode, correct out-of-band changes instead of only reporting them.",
    )
    backends: dict[str, BackendConfig] = Field(min_length=1)
    defaults: Defaults = Field(default_factory=Defaults)
    secrets: dict[EnvName, Secret] = Field(default_factory=dict)
    repos: dict[str, Repo] = Field(default_factory=dict)
    vms: list[VM] = Field(default_factory=list)
