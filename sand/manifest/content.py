"""What a VM holds besides its machine, as strict pydantic models: its secrets (and
where their values come from), its repositories, and the golden images it may be made
from. Part of the manifest's shape (``sand.manifest.models``)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, model_validator

from sand.manifest import values as v
from sand.manifest.broker import BrokerRules, Delivery
from sand.manifest.fields import (
    Agent,
    Branch,
    EnvName,
    HomePath,
    Image,
    LocalPath,
    PackageName,
    RepoUrl,
    Strict,
    empty_list,
    rule,
)

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
    deliver: Delivery = Field(
        default="tmpfs",
        description="Where the value goes: 'tmpfs' (default), into the guest's tmpfs; "
        "'broker', nowhere in the guest: a broker on this machine attaches it to the "
        "guest's git and HTTP requests that its 'broker' rules allow (docs/credentials.md).",
        examples=["broker"],
    )
    broker: BrokerRules | None = Field(
        default=None,
        description="What a brokered secret may be used for (with 'deliver: broker').",
        examples=[{"repositories": ["https://github.com/acme/webapp.git"], "push": ["agent/*"]}],
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
        "/root, umask 022 as in a root shell). It reaches the guest on stdin, never in a "
        "command line; a change to it rebuilds the base.",
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
        default_factory=empty_list,
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
        default_factory=empty_list,
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
