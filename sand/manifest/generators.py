"""Generators (``generators:``): a VM template expanded once per work item.

A work item is a branch of a git repository matching a pattern (``branches``), or a
GitHub issue or pull request carrying a label (``github``). Each item becomes one VM
of the template, named from the item, given the item's repository (a name under
``repos``) on the item's branch; when the item goes, so does its VM, through the same
plan and guards as any VM. ``max`` caps how many VMs a generator makes: a flood of
items is held there. The items are read at plan time (``sand.workitems``); what is
checked here is only the manifest's own text.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator
from pydantic.json_schema import SkipJsonSchema

from sand.manifest.fields import Strict, all_defaults
from sand.manifest.rawdata import Finding, as_dict, as_list, as_str
from sand.manifest.vm import VM

# A generator's name and a VM name's prefix: lower-case and short, since a generated
# VM's name is ``<prefix>-<item>`` and must stay a valid name on every backend.
GeneratorName = Annotated[str, Field(pattern=r"^[a-z]([a-z0-9-]{0,18}[a-z0-9])?$")]
MAX_ITEMS = 200
# A glob of branch names (fnmatch): printable, no space.
BranchPattern = Annotated[str, Field(min_length=1, max_length=255, pattern=r"^[!-~]+$")]
GitHubName = Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]{1,100}/[A-Za-z0-9_.-]{1,100}$")]
GitHubLabel = Annotated[str, Field(min_length=1, max_length=50, pattern=r"^[^\x00-\x1f\x7f]+$")]
DEFAULT_API = "https://api.github.com"
# Fields of a VM that are each generated VM's own, never the template's.
NOT_IN_TEMPLATE = ("name", "from")

GENERATORS_DESCRIPTION = (
    "Generators, by a name of your choosing: each expands its `vm` template once per work "
    "item (a branch matching a pattern, or a GitHub issue or pull request carrying a "
    "label), up to `max`; a VM whose item is gone is deleted through the same guards as "
    "any VM. docs/generators.md."
)


class BranchSource(Strict):
    """The branches of one repository under ``repos`` whose names match ``match``."""

    repo: str = Field(
        min_length=1,
        description="A name under the top-level `repos`: whose branches are listed, and "
        "what each VM clones, on its branch.",
        examples=["webapp"],
    )
    match: BranchPattern = Field(
        default="*",
        description="A glob of branch names (fnmatch: `*` matches '/' too); default '*'.",
        examples=["feature/*"],
    )


class GitHubSource(Strict):
    """The issues or pull requests of a GitHub repository carrying ``label``."""

    repo: str = Field(
        min_length=1,
        description="A name under the top-level `repos`: what each VM clones (a pull "
        "request's VM on its head branch when the branch is in this repository).",
        examples=["webapp"],
    )
    github: GitHubName = Field(
        description="The repository on GitHub, OWNER/NAME.", examples=["acme/webapp"]
    )
    label: GitHubLabel = Field(description="The label that makes an item a VM.", examples=["sand"])
    kind: Literal["issues", "pulls"] = Field(
        default="issues",
        description="Issues or pull requests (default issues).",
        examples=["pulls"],
    )
    token: str | None = Field(
        default=None,
        description="Name of a secret holding a GitHub token the listing is read with "
        "(never given to a VM by this; list it under the VM's `secrets` for that).",
        examples=["GITHUB_TOKEN"],
    )
    api: Annotated[str, Field(pattern=r"^https?://[A-Za-z0-9.:\[\]-]+(/[A-Za-z0-9._/-]*)?$")] = (
        Field(
            default=DEFAULT_API,
            description="The REST API's root (GitHub Enterprise: https://HOST/api/v3).",
            examples=["https://github.example.com/api/v3"],
        )
    )


class VMTemplate(VM):
    """A VM entry without its name: each generated VM's name is made from its item."""

    # Refused where it is written (check_generators), with a message that says why;
    # not in the schema, so an editor flags it too.
    name: SkipJsonSchema[str] = ""


class Generator(Strict):
    """One generator: where its items come from, how many at most, the VM of each."""

    max: int = Field(
        ge=1,
        le=MAX_ITEMS,
        description=f"The most VMs it makes (1-{MAX_ITEMS}); items past it wait, said once "
        "in the plan.",
        examples=[10],
    )
    prefix: GeneratorName | None = Field(
        default=None,
        description="What each VM's name starts with (default: the generator's name).",
        examples=["issue"],
    )
    branches: BranchSource | None = Field(
        default=None,
        description="Work items from the branches of a git repository.",
        examples=[{"repo": "webapp", "match": "feature/*"}],
    )
    github: GitHubSource | None = Field(
        default=None,
        description="Work items from labelled GitHub issues or pull requests; only those "
        "whose author or labeller has write access to the repository.",
        examples=[{"repo": "webapp", "github": "acme/webapp", "label": "sand"}],
    )
    item_file: bool = Field(
        default=False,
        alias="itemFile",
        description="Give each VM its item as ~/.sand/item.json (key, number, title, body, "
        "URL) for its agent: sent on the provisioning's stdin, never a command line, "
        "written 0600 as data. Default false.",
        examples=[True],
    )
    vm: VMTemplate = Field(
        default_factory=all_defaults(VMTemplate),
        description="The template of each VM: a VM entry without `name` and `from`.",
        examples=[{"pool": "agents", "secrets": [{"name": "GITHUB_TOKEN", "scope": "~/src"}]}],
    )

    @model_validator(mode="after")
    def _one_source(self) -> Generator:
        if (self.branches is None) == (self.github is None):
            raise ValueError("a generator reads exactly one of 'branches' or 'github'")
        return self

    @property
    def source_repo(self) -> str:
        source = self.branches or self.github
        assert source is not None
        return source.repo


def check_generators(data: Mapping[str, Any]) -> Iterator[Finding]:
    """Each generator's repository and token are declared, its template leaves out what
    is each VM's own, and no declared VM's name is shaped like a generated one."""
    repos = as_dict(data.get("repos"))
    secrets = as_dict(data.get("secrets"))
    prefixes: dict[str, str] = {}
    for name, raw in as_dict(data.get("generators")).items():
        gen = as_dict(raw)
        for kind in ("branches", "github"):
            source = as_dict(gen.get(kind))
            repo = as_str(source.get("repo"))
            if repo is not None and repo not in repos:
                known = ", ".join(sorted(repos)) or "none defined"
                yield (
                    ("generators", name, kind, "repo"),
                    f"unknown repo {repo!r} (defined: {known})",
                )
            token = as_str(source.get("token"))
            if token is not None and token not in secrets:
                known = ", ".join(sorted(secrets)) or "none defined"
                yield (
                    ("generators", name, kind, "token"),
                    f"unknown secret {token!r} (defined: {known})",
                )
        for key in NOT_IN_TEMPLATE:
            if key in as_dict(gen.get("vm")):
                yield (
                    ("generators", name, "vm", key),
                    f"generator {name!r}: a generated VM's {key} is its item's; leave it out",
                )
        prefix = as_str(gen.get("prefix")) or name
        if prefix in as_dict(data.get("pools")):
            yield (
                ("generators", name),
                f"generator {name!r} names its VMs {prefix}-… as pool {prefix!r} names its "
                "spares: give it a `prefix` of its own",
            )
        elif prefix in prefixes:
            yield (
                ("generators", name),
                f"generator {name!r} names its VMs {prefix}-… as generator "
                f"{prefixes[prefix]!r} does: give one a `prefix` of its own",
            )
        prefixes.setdefault(prefix, name)
    for i, raw_vm in enumerate(as_list(data.get("vms"))):
        vm_name = as_str(as_dict(raw_vm).get("name")) or ""
        owner = next((g for p, g in prefixes.items() if vm_name.startswith(p + "-")), None)
        if owner is not None:
            yield (
                ("vms", i, "name"),
                f"VM name {vm_name!r} is shaped like a VM generator {owner!r} makes: "
                "choose another",
            )
