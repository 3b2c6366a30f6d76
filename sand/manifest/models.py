"""The manifest's shape, as strict pydantic models.

Strict means: unknown keys are errors (a typo such as ``memroy`` must not be
silently ignored in a file applied from CI), strings are not coerced to
numbers, and every size is parsed to exact bytes. Cross-references (a VM's
backend, repos and secrets) are checked in ``references.py`` so that every
broken reference is reported with its own line, not just the first.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    WithJsonSchema,
    model_validator,
)

from sand.manifest import values as v
from sand.manifest.names import ENV_NAME, IDENTIFIER
from sand.manifest.sizes import DISK_RANGE, MEMORY_RANGE, SIZE_PATTERN, bounded, format_size
from sand.refname import branch_problem

API_VERSION = "sand/v1"


def _rule(check: Callable[[Any], str | None], prefix: str = "") -> AfterValidator:
    """A pydantic validator from one of the ``values`` rules (None: the value is fine)."""

    def validate(value: Any) -> Any:
        problem = check(value)
        if problem:
            raise ValueError(prefix + problem)
        return value

    return AfterValidator(validate)


def _size_schema(bounds: tuple[int, int]) -> dict[str, Any]:
    low, high = bounds
    return {
        "type": "string",
        "pattern": SIZE_PATTERN,
        "examples": ["8GiB", "512MiB"],
        "description": f"A size with its unit (binary: 8G = 8GiB), {format_size(low)} to "
        f"{format_size(high)}; a bare number is refused as ambiguous.",
    }


MemorySize = Annotated[
    int,
    BeforeValidator(bounded("memory", *MEMORY_RANGE)),
    WithJsonSchema(_size_schema(MEMORY_RANGE)),
]
DiskSize = Annotated[
    int,
    BeforeValidator(bounded("disk", *DISK_RANGE)),
    WithJsonSchema(_size_schema(DISK_RANGE)),
]
PortNumber = Annotated[int, Field(ge=1, le=65535)]
Identifier = Annotated[str, Field(pattern=IDENTIFIER.pattern)]
# A Linux user name that is also an identifier: what provisioning can create.
UserName = Annotated[str, Field(pattern=r"^[a-z]([a-z0-9-]{0,30}[a-z0-9])?$")]
EnvName = Annotated[str, Field(pattern=ENV_NAME.pattern)]
Agent = Literal["claude", "codex"]
PowerState = Literal["running", "stopped"]


def _not_null(value: Any) -> Any:
    if value is None:
        raise ValueError("a bare ~ is YAML's null: write '~' in quotes")
    return value


HomePath = Annotated[
    str,
    BeforeValidator(_not_null),
    _rule(v.home_path_problem),
    Field(
        json_schema_extra={"pattern": r"^~(/[^/]+)*/?$"},
        description="A guest path under the login user's home: '~' or '~/…' (no '..').",
    ),
]


def _pattern(regex: str) -> Any:
    """Advertise a rule's regex to editors; the rule itself says what is wrong."""
    return Field(json_schema_extra={"pattern": regex})


HostName = Annotated[str, _rule(v.hostname_problem)]
SshUser = Annotated[str, _rule(v.ssh_user_problem), _pattern(v.SSH_USER.pattern)]
LocalPath = Annotated[str, _rule(v.local_path_problem)]
Executable = Annotated[str, _rule(v.executable_problem), _pattern(r"^[^-]")]
RepoUrl = Annotated[str, _rule(v.repo_url_problem), _pattern(r"^[^-\s]\S*$")]
Branch = Annotated[str, _rule(branch_problem, "not a valid git branch name: "), _pattern(r"^[^-]")]
PackageName = Annotated[str, _rule(v.package_problem), _pattern(v.PACKAGE.pattern)]
PveNode = Annotated[str, _rule(v.pve_node_problem), _pattern(v.PVE_NODE.pattern)]
PveStorage = Annotated[str, _rule(v.pve_storage_problem), _pattern(v.PVE_STORAGE.pattern)]
PvePool = Annotated[str, _rule(v.pve_pool_problem), _pattern(v.PVE_POOL.pattern)]
PveBridge = Annotated[str, _rule(v.pve_bridge_problem), _pattern(v.PVE_BRIDGE.pattern)]
Template = Annotated[int | str, _rule(v.template_problem)]
Image = Annotated[str, Field(min_length=1), _rule(v.control_problem)]
MEMORY_DESCRIPTION = (
    f"With its unit ('8GiB', '512MiB'), {format_size(MEMORY_RANGE[0])} to "
    f"{format_size(MEMORY_RANGE[1])}; default 8GiB. A bare number is refused as ambiguous."
)
DISK_DESCRIPTION = (
    f"With its unit ('40GiB', '1TiB'), {format_size(DISK_RANGE[0])} to "
    f"{format_size(DISK_RANGE[1])}; default 100GiB. A bare number is refused as ambiguous."
)
PRESERVE_DESCRIPTION = (
    "Guest paths kept across replace and reprovision (copied out of the old guest and "
    "restored into the new one, verified by digest); each '~' or under '~/'."
)


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True, frozen=True)


# --- backends -----------------------------------------------------------------


class SshTarget(Strict):
    """A remote Lima host reached over SSH. Its host key is pinned (known_hosts)."""

    host: HostName = Field(description="Host name or IP address (no user, scheme or port).")
    user: SshUser | None = None
    port: PortNumber = 22
    identity: LocalPath | None = Field(
        default=None,
        description="Private key to offer; without it the SSH agent and ssh_config identities "
        "are used (this host is yours, so sand does not restrict them).",
    )
    lima_home: LocalPath = Field(default=".lima", description="LIMA_HOME on the remote host.")
    known_hosts: LocalPath | None = Field(
        default=None,
        description="known_hosts file pinning the host's key (default: ~/.ssh/known_hosts).",
    )


class LimaConfig(Strict):
    """Lima on this machine, or on a remote host when ``ssh`` is set."""

    type: Literal["lima"]
    ssh: SshTarget | None = None
    lima_home: LocalPath | None = Field(
        default=None,
        description="LIMA_HOME for a local backend (default: Lima's own, ~/.lima); relative to "
        "the manifest's directory. Two backends on one Lima home are refused.",
    )
    limactl: Executable = Field(default="limactl", description="The limactl executable.")
    clone_parallelism: int = Field(default=2, ge=1, le=32)


class ProxmoxConfig(Strict):
    """A Proxmox VE cluster driven through its REST API with a pool-scoped token."""

    type: Literal["proxmox"]
    host: HostName = Field(
        description="The cluster's host name or IP address (no scheme, port or credentials)."
    )
    port: PortNumber = 8006
    node: PveNode | None = None
    nodes: list[PveNode] | None = Field(default=None, min_length=1)
    pool: PvePool = Field(
        description="The pool sand's VMs live in; two backends on one host, port and pool are "
        "refused (each would see the other's VMs as its own)."
    )
    storage: PveStorage
    bridge: PveBridge = "vmbr0"
    template: Template = Field(
        description="Template VM to clone: its vmid (100 to 999999999) or its name."
    )
    token_file: LocalPath = Field(
        description="File holding 'user@realm!tokenid=secret'; refused unless mode is 0600 or "
        "stricter."
    )
    verify_tls: bool = True
    ca_file: LocalPath | None = None
    identity: LocalPath = Field(
        description="SSH private key for guests; its .pub goes to cloud-init."
    )
    clone_parallelism: int = Field(default=2, ge=1, le=32)

    @model_validator(mode="after")
    def _one_placement(self) -> ProxmoxConfig:
        if (self.node is None) == (self.nodes is None):
            raise ValueError("set exactly one of 'node' (one node) or 'nodes' (placement)")
        return self

    @property
    def placement_nodes(self) -> list[str]:
        return [self.node] if self.node else list(self.nodes or [])


BackendConfig = Annotated[LimaConfig | ProxmoxConfig, Field(discriminator="type")]

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
    command: Annotated[list[str], _rule(_argv_problem)] | None = Field(
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


class Defaults(Strict):
    backend: str | None = None
    image: Image | None = None
    cpus: int | None = Field(default=None, ge=1, le=512)
    memory: MemorySize | None = Field(default=None, description=MEMORY_DESCRIPTION)
    disk: DiskSize | None = Field(default=None, description=DISK_DESCRIPTION)
    agents: list[Agent] | None = None
    packages: list[PackageName] | None = None
    user: UserName | None = None
    state: PowerState | None = None
    provision: bool | None = Field(
        default=None,
        description="Provision guests over SSH (default true). False: sand manages only the "
        "machine, for fleets provisioned by other means.",
    )
    preserve: list[HomePath] | None = Field(default=None, description=PRESERVE_DESCRIPTION)


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
    provision: bool | None = None
    preserve: list[HomePath] | None = Field(
        default=None, description=PRESERVE_DESCRIPTION + " Replaces the default list."
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
