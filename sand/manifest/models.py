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
    REBUILD_DESCRIPTION,
    Agent,
    Branch,
    DiskSize,
    EnvName,
    Expires,
    ForwardedPort,
    HomePath,
    Identifier,
    Image,
    Locale,
    LocalPath,
    MemorySize,
    PackageName,
    PowerState,
    PveNode,
    Rebuild,
    RepoUrl,
    Strict,
    Timezone,
    UserName,
    rule,
)
from sand.manifest.notify import Notify

API_VERSION = "sand/v1"

# --- secrets and repos ------------------------------------------------------------


def _argv_problem(argv: list[str]) -> str | None:
    if not argv or not argv[0]:
        return "the command is an argv: a non-empty list whose first item names the program"
    if any("\x00" in arg for arg in argv):
        return "the command holds a NUL character"
    return None


def _script_problem(text: str) -> str | None:
    # bash stops reading a script at a NUL: what follows it would silently never run.
    return "the script holds a NUL character" if "\x00" in text else None


class SecretSource(Strict):
    """Where a secret's value comes from on the host. Values never live in the manifest."""

    file: LocalPath | None = Field(
        default=None,
        description="A file on this machine holding the value (mode 0600 or stricter); "
        "relative to the manifest's directory.",
        examples=["~/.config/sand/npm.token"],
    )
    env: EnvName | None = Field(
        default=None,
        description="An environment variable of the process running sand.",
        examples=["SAND_GITHUB_TOKEN"],
    )
    command: Annotated[list[str], rule(_argv_problem)] | None = Field(
        default=None,
        min_length=1,
        description="An argv run on this machine (no shell); its stdout is the value.",
        examples=[["pass", "show", "github/token"]],
    )

    @model_validator(mode="after")
    def _exactly_one(self) -> SecretSource:
        if sum(x is not None for x in (self.file, self.env, self.command)) != 1:
            raise ValueError("a secret comes from exactly one of 'file', 'env' or 'command'")
        return self


class Secret(Strict):
    source: SecretSource | None = Field(
        default=None,
        alias="from",
        description="Exactly one of file, env or command. Left out (`NAME: {}`), the host "
        "maps the name to a source in its secrets.yaml: beside the manifest, or in "
        "`sand sync`'s --host-dir. A manifest `sand sync` follows names secrets only.",
        examples=[{"env": "SAND_GITHUB_TOKEN"}],
    )


class Repo(Strict):
    url: RepoUrl = Field(
        description=f"Clone URL: {v.ALLOWED_URLS}; no credentials in it.",
        examples=["https://github.com/acme/webapp.git"],
    )
    branch: Branch | None = Field(
        default=None,
        description="Branch to check out (default: the remote's default branch).",
        examples=["main"],
    )
    path: HomePath | None = Field(
        default=None,
        description="Checkout path in the guest (default: ~/src/<repo name>).",
        examples=["~/src/webapp"],
    )
    token: str | None = Field(
        default=None,
        description="Name of a secret git uses for this checkout only.",
        examples=["GITHUB_TOKEN"],
    )


# --- golden images ----------------------------------------------------------------

IMAGE_STEP_NAME = r"^[a-z][a-z0-9-]{0,39}$"


class ImageStep(Strict):
    """A step of your own a golden image runs once, when its base is built."""

    name: Annotated[str, Field(pattern=IMAGE_STEP_NAME)] = Field(
        description="The step's name, unique in its image: lower-case letters, digits and "
        "'-', starting with a letter.",
        examples=["rust"],
    )
    run: Annotated[str, rule(_script_problem)] = Field(
        min_length=1,
        description="Shell text bash runs as root on the base (errexit and pipefail on, in "
        "/root). It reaches the guest on stdin, never in a command line; a change to it "
        "rebuilds the base.",
        examples=["curl -fsSL https://sh.rustup.rs | sh -s -- -y"],
    )
    timeout: int = Field(
        default=1800,
        ge=1,
        le=86400,
        description="Seconds it may take before it is stopped and the build fails (default 1800).",
        examples=[600],
    )


class GoldenImage(Strict):
    """A golden image: provisioned once into a base that VMs are created from."""

    source: Image | None = Field(
        default=None,
        alias="from",
        description="What the base starts from, as a VM's `image` would name it on the "
        "backend that builds it: a Lima template or image URL, a Proxmox template's name or "
        "vmid (default: the backend's own, Lima's 'default' template or the Proxmox "
        "backend's `template`).",
        examples=["debian-12"],
    )
    packages: list[PackageName] = Field(
        default_factory=list,
        description="Debian packages the base holds beyond the workbench's own.",
        examples=[["postgresql-client", "jq"]],
    )
    agents: list[Agent] | None = Field(
        default=None,
        description="Coding agents installed in the base (default: claude). A VM made from "
        "the image lists a subset of them, or takes them all.",
        examples=[["claude", "codex"]],
    )
    docker: bool = Field(
        default=False,
        description="Docker in the base, and the login user in its group (default false).",
        examples=[True],
    )
    steps: list[ImageStep] = Field(
        default_factory=list,
        description="Steps of your own, run in order after the packages, the toolchain "
        "and the agents.",
        examples=[[{"name": "rust", "run": "curl -fsSL https://sh.rustup.rs | sh -s -- -y"}]],
    )

    @model_validator(mode="after")
    def _unique_steps(self) -> GoldenImage:
        names = [s.name for s in self.steps]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"image step names must be unique: {', '.join(twice)}")
        return self


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
        description="A secret named under the top-level `secrets`.", examples=["GITHUB_TOKEN"]
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
        default_factory=list,
        description="Names under the top-level `repos` to clone into this VM.",
        examples=[["webapp"]],
    )
    secrets: list[SecretUse] = Field(
        default_factory=list,
        description="Secrets placed at guest directories.",
        examples=[[{"name": "GITHUB_TOKEN", "scope": "~/src/webapp"}]],
    )
    ports: list[Port] = Field(
        default_factory=list,
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
        default_factory=Defaults,
        description="Values every VM takes unless it sets its own.",
        examples=[{"cpus": 2, "memory": "8GiB"}],
    )
    secrets: dict[EnvName, Secret] = Field(
        default_factory=dict,
        description="Named secrets (the name is an environment variable name); values stay "
        "on the host.",
        examples=[{"GITHUB_TOKEN": {"from": {"env": "SAND_GITHUB_TOKEN"}}}],
    )
    images: dict[Identifier, GoldenImage] = Field(
        default_factory=dict,
        description="Golden images, by a name of your choosing: each is provisioned once "
        "into a base per backend (a Proxmox template, a Lima instance) that the VMs naming "
        "it as their `image` are created from; each VM then runs only its own steps "
        "(user, clock and language, home, secrets, repos).",
        examples=[{"workbench": {"packages": ["jq"], "agents": ["claude", "codex"]}}],
    )
    repos: dict[str, Repo] = Field(
        default_factory=dict,
        description="Repositories VMs may clone, by name.",
        examples=[{"webapp": {"url": "https://github.com/acme/webapp.git"}}],
    )
    vms: list[VM] = Field(
        default_factory=list,
        description="The VMs; a VM left out is deleted on the next apply.",
        examples=[[{"name": "agent-1"}]],
    )
    notify: Notify | None = Field(
        default=None,
        description="Who hears of an agent that needs input, is done or failed (docs/agents.md).",
        examples=[{"webhook": {"secret": "NTFY_URL"}, "desktop": True}],
    )
