"""The manifest's shape, as strict pydantic models.

Strict means: unknown keys are errors (a typo such as ``memroy`` must not be
silently ignored in a file applied from CI), strings are not coerced to
numbers, and every size is parsed to exact bytes. Cross-references (a VM's
backend, repos and secrets) are checked in ``references.py`` so that every
broken reference is reported with its own line, not just the first.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    WithJsonSchema,
    model_validator,
)

from sand.manifest.names import ENV_NAME, IDENTIFIER
from sand.manifest.sizes import SIZE_PATTERN, parse_size

API_VERSION = "sand/v1"

Size = Annotated[
    int,
    BeforeValidator(parse_size),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "integer", "minimum": 1, "description": "bytes"},
                {"type": "string", "pattern": SIZE_PATTERN, "examples": ["8GiB", "512MiB"]},
            ]
        }
    ),
]
PortNumber = Annotated[int, Field(ge=1, le=65535)]
Identifier = Annotated[str, Field(pattern=IDENTIFIER.pattern)]
EnvName = Annotated[str, Field(pattern=ENV_NAME.pattern)]
Agent = Literal["claude", "codex"]
PowerState = Literal["running", "stopped"]
GuestPath = Annotated[
    str,
    Field(
        pattern=r"^(/|~/|~$)[^\x00]*$",
        description="An absolute guest path, or one under the login user's home ('~/…').",
    ),
]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True, frozen=True)


# --- backends -----------------------------------------------------------------


class SshTarget(Strict):
    """A remote Lima host reached over SSH. Its host key is pinned (known_hosts)."""

    host: str = Field(min_length=1)
    user: str | None = None
    port: PortNumber = 22
    identity: str | None = Field(
        default=None,
        description="Private key to offer; without it the SSH agent and ssh_config identities "
        "are used (this host is yours, so sand does not restrict them).",
    )
    lima_home: str = Field(default=".lima", description="LIMA_HOME on the remote host.")
    known_hosts: str | None = Field(
        default=None,
        description="known_hosts file pinning the host's key (default: ~/.ssh/known_hosts).",
    )


class LimaBackend(Strict):
    """Lima on this machine, or on a remote host when ``ssh`` is set."""

    type: Literal["lima"]
    ssh: SshTarget | None = None
    lima_home: str | None = Field(
        default=None, description="LIMA_HOME for a local backend (default: Lima's own, ~/.lima)."
    )
    limactl: str = Field(default="limactl", description="The limactl executable.")
    clone_parallelism: int = Field(default=2, ge=1, le=32)


class ProxmoxBackend(Strict):
    """A Proxmox VE cluster driven through its REST API with a pool-scoped token."""

    type: Literal["proxmox"]
    host: str = Field(min_length=1)
    port: PortNumber = 8006
    node: str | None = None
    nodes: list[str] | None = Field(default=None, min_length=1)
    pool: str = Field(min_length=1)
    storage: str = Field(min_length=1)
    bridge: str = "vmbr0"
    template: int | str = Field(description="Template VM to clone: its vmid or its name.")
    token_file: str = Field(
        description="File holding 'user@realm!tokenid=secret'; refused unless mode is 0600 or "
        "stricter."
    )
    verify_tls: bool = True
    ca_file: str | None = None
    identity: str = Field(description="SSH private key for guests; its .pub goes to cloud-init.")
    clone_parallelism: int = Field(default=2, ge=1, le=32)

    @model_validator(mode="after")
    def _one_placement(self) -> ProxmoxBackend:
        if (self.node is None) == (self.nodes is None):
            raise ValueError("set exactly one of 'node' (one node) or 'nodes' (placement)")
        return self

    @property
    def placement_nodes(self) -> list[str]:
        return [self.node] if self.node else list(self.nodes or [])


Backend = Annotated[LimaBackend | ProxmoxBackend, Field(discriminator="type")]

# --- secrets and repos ------------------------------------------------------------


class SecretSource(Strict):
    """Where a secret's value comes from on the host. Values never live in the manifest."""

    file: str | None = None
    env: EnvName | None = None
    command: list[str] | None = Field(default=None, min_length=1)

    @model_validator(mode="after")
    def _exactly_one(self) -> SecretSource:
        if sum(x is not None for x in (self.file, self.env, self.command)) != 1:
            raise ValueError("a secret comes from exactly one of 'file', 'env' or 'command'")
        return self


class Secret(Strict):
    source: SecretSource = Field(alias="from")


class Repo(Strict):
    url: str = Field(min_length=1)
    branch: str | None = None
    path: GuestPath | None = Field(
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
    scope: GuestPath
    env: EnvName | None = Field(
        default=None, description="Environment variable name (default: the secret's name)."
    )


class Defaults(Strict):
    backend: str | None = None
    image: str | None = None
    cpus: int | None = Field(default=None, ge=1, le=512)
    memory: Size | None = None
    disk: Size | None = None
    agents: list[Agent] | None = None
    packages: list[str] | None = None
    user: Identifier | None = None
    state: PowerState | None = None
    provision: bool | None = Field(
        default=None,
        description="Provision guests over SSH (default true). False: sand manages only the "
        "machine, for fleets provisioned by other means.",
    )


class VM(Strict):
    name: str = Field(min_length=1)
    backend: str | None = None
    image: str | None = None
    cpus: int | None = Field(default=None, ge=1, le=512)
    memory: Size | None = None
    disk: Size | None = None
    agents: list[Agent] | None = None
    packages: list[str] | None = None
    user: Identifier | None = None
    repos: list[str] = Field(default_factory=list)
    secrets: list[SecretUse] = Field(default_factory=list)
    ports: list[Port] = Field(default_factory=list)
    state: PowerState | None = None
    protect: bool = False
    node: str | None = Field(default=None, description="Proxmox only: pin to this node.")
    provision: bool | None = None


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
    backends: dict[str, Backend] = Field(min_length=1)
    defaults: Defaults = Field(default_factory=Defaults)
    secrets: dict[EnvName, Secret] = Field(default_factory=dict)
    repos: dict[str, Repo] = Field(default_factory=dict)
    vms: list[VM] = Field(default_factory=list)
