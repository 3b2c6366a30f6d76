"""The value types of the manifest's fields, shared by every block of it.

Strict base model, sizes with units and bounds, names, paths, URLs: each type
carries its rule (``values.py``) and the pattern editors see in the schema.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    WithJsonSchema,
)

from sand.manifest import values as v
from sand.manifest.expiry import DESCRIPTION as EXPIRES_DESCRIPTION
from sand.manifest.expiry import canonical as canonical_expiry
from sand.manifest.locales import LOCALE, TIMEZONE, locale_problem, timezone_problem
from sand.manifest.names import ENV_NAME, IDENTIFIER
from sand.manifest.sizes import DISK_RANGE, MEMORY_RANGE, SIZE_PATTERN, bounded, format_size
from sand.refname import branch_problem

_M = TypeVar("_M", bound=BaseModel)


def rule(check: Callable[[Any], str | None], prefix: str = "") -> AfterValidator:
    """A pydantic validator from one of the ``values`` rules (None: the value is fine)."""

    def validate(value: Any) -> Any:
        problem = check(value)
        if problem:
            raise ValueError(prefix + problem)
        return value

    return AfterValidator(validate)


# A field that defaults to an empty list or dict takes one of these factories, not the
# builtin ``list`` or ``dict``: pydantic asks each factory's signature, and a builtin's
# is parsed from its text by tokenize's regular expressions (~4 ms of the first check
# of a manifest, compiled for nothing else).
def empty_list() -> list[Any]:
    return []


def empty_dict() -> dict[Any, Any]:
    return {}


def all_defaults(model: type[_M]) -> Callable[[], _M]:
    """The default factory of a block left out (``defaults:``, a generator's ``vm:``):
    ``model`` with every field at its default, made without validating it (there is
    nothing to check). ``model()`` would build a validator of its own for it alone,
    though the manifest's holds the block's already: ~3 ms of the check of a manifest
    without the block."""

    def make() -> _M:
        return model.model_construct()

    return make


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
# What canonical_expiry takes, as far as a regex can say it (not a day past the month's
# end, nor the ten-year bound): 'never', a duration, an ISO 8601 date or date-time.
EXPIRES_PATTERN = (
    r"^(never|0*[1-9][0-9]{0,8}[mhd]"
    r"|[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"
    r"([T ]([01][0-9]|2[0-3])(:[0-5][0-9](:[0-5][0-9](\.[0-9]+)?)?)?"
    r"(Z|[+-]([01][0-9]|2[0-3])(:?[0-5][0-9])?)?)?)$"
)
Expires = Annotated[
    str,
    BeforeValidator(canonical_expiry),
    WithJsonSchema(
        {
            "type": "string",
            "examples": ["2026-12-01", "2026-12-01T18:00:00Z", "8h", "3d", "never"],
            "pattern": EXPIRES_PATTERN,
            "description": EXPIRES_DESCRIPTION,
        }
    ),
]
PortNumber = Annotated[int, Field(ge=1, le=65535)]


def _not_lima_ssh(port: int) -> str | None:
    # Lima's limayaml.Validate refuses 22 as a guest or host port of any forward
    # (its own SSH forward owns it), so `limactl create` would fail after a clean plan.
    if port == 22:
        return "port 22 is SSH's, which Lima keeps for itself and refuses to forward"
    return None


ForwardedPort = Annotated[
    int, Field(ge=1, le=65535, json_schema_extra={"not": {"const": 22}}), rule(_not_lima_ssh)
]
Identifier = Annotated[str, Field(pattern=IDENTIFIER.pattern)]
# A Linux user name that is also an identifier: what provisioning can create.
UserName = Annotated[str, Field(pattern=r"^[a-z]([a-z0-9-]{0,30}[a-z0-9])?$")]
EnvName = Annotated[str, Field(pattern=ENV_NAME.pattern)]
Agent = Literal["claude", "codex", "opencode", "pi"]
PowerState = Literal["running", "stopped"]


def _not_null(value: Any) -> Any:
    if value is None:
        raise ValueError("a bare ~ is YAML's null: write '~' in quotes")
    return value


HomePath = Annotated[
    str,
    BeforeValidator(_not_null),
    rule(v.home_path_problem),
    Field(
        json_schema_extra={"pattern": r"^~(/[^/]+)*/?$"},
        description="A guest path under the login user's home: '~' or '~/…' (no '..').",
    ),
]


def advertise(regex: str) -> Any:
    """Advertise a rule's regex to editors; the rule itself says what is wrong."""
    return Field(json_schema_extra={"pattern": regex})


HostName = Annotated[str, rule(v.hostname_problem)]
SshUser = Annotated[str, rule(v.ssh_user_problem), advertise(v.SSH_USER.pattern)]
LocalPath = Annotated[str, rule(v.local_path_problem)]
Executable = Annotated[str, rule(v.executable_problem), advertise(r"^[^-]")]
RepoUrl = Annotated[str, rule(v.repo_url_problem), advertise(r"^[^-\s]\S*$")]
Branch = Annotated[str, rule(branch_problem, "not a valid git branch name: "), advertise(r"^[^-]")]
PackageName = Annotated[str, rule(v.package_problem), advertise(v.PACKAGE.pattern)]
PveNode = Annotated[str, rule(v.pve_node_problem), advertise(v.PVE_NODE.pattern)]
PveStorage = Annotated[str, rule(v.pve_storage_problem), advertise(v.PVE_STORAGE.pattern)]
PvePool = Annotated[str, rule(v.pve_pool_problem), advertise(v.PVE_POOL.pattern)]
PveBridge = Annotated[str, rule(v.pve_bridge_problem), advertise(v.PVE_BRIDGE.pattern)]
Template = Annotated[int | str, rule(v.template_problem)]
Image = Annotated[str, Field(min_length=1), rule(v.image_problem)]
Timezone = Annotated[str, rule(timezone_problem), advertise(TIMEZONE.pattern)]
Locale = Annotated[str, rule(locale_problem), advertise(LOCALE.pattern)]
# When a VM made from a golden image is replaced by one from its rebuilt base.
Rebuild = Literal["manual", "onBaseChange"]
REBUILD_DESCRIPTION = (
    "For a VM made from an image under `images`: what happens when the image changes and "
    "its base is rebuilt. 'manual' (the default): the VM stays as it is and `sand plan` "
    "shows it out of date (`sand reset VM` replaces it); 'onBaseChange': it is replaced "
    "by a VM made from the new base, behind the same guards as any replacement."
)
DERIVE_BASES_DESCRIPTION = (
    "Build a golden base by itself when two or more VMs this backend is about to create "
    "share their machine-level provisioning (image, user, packages, agents, docker), and "
    "create them from it (default true). False: only the images under `images` get one."
)
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
    model_config = ConfigDict(
        extra="forbid", strict=True, populate_by_name=True, frozen=True, defer_build=True
    )
