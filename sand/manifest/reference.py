"""Generate docs/manifest.md from the models, so the reference cannot drift.

Run ``python -m sand.manifest.reference > docs/manifest.md``; a test fails when
the checked-in file differs.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

from sand.manifest import content as c
from sand.manifest import generators as g
from sand.manifest import models as m
from sand.manifest.backends import CONFIGS, SshTarget
from sand.manifest.broker import BrokerRules
from sand.manifest.egress import Egress
from sand.manifest.idle import Idle
from sand.manifest.notify import Notify, Webhook
from sand.manifest.pools import Pool
from sand.manifest.schema import schema
from sand.manifest.sizes import SIZE_PATTERN

SECTIONS: list[tuple[str, type[BaseModel], str]] = [
    ("Top level", m.Manifest, "The whole `sand.yaml`."),
    *(
        (f"`backends.<name>` with `type: {kind}`", config, config.TITLE)
        for kind, config in CONFIGS.items()
    ),
    ("`backends.<name>.ssh`", SshTarget, "A remote Lima host."),
    ("`defaults`", m.Defaults, "Values every VM takes unless it sets its own."),
    ("`secrets.<NAME>`", c.Secret, "A named secret; the name is its default variable name."),
    ("`secrets.<NAME>.from`", c.SecretSource, "Exactly one source; values never live here."),
    (
        "`secrets.<NAME>.broker`",
        BrokerRules,
        "What a brokered secret (`deliver: broker`) may be used for; everything else is "
        "refused ([brokered credentials](credentials.md)).",
    ),
    ("`repos.<name>`", c.Repo, "A repository cloned into VMs that list it."),
    (
        "`images.<name>`",
        c.GoldenImage,
        "A golden image: provisioned once into a base per backend that uses it; VMs "
        "naming it as their `image` are created from that base ([golden images]"
        "(provisioning.md#golden-images)).",
    ),
    ("`images.<name>.steps[]`", c.ImageStep, "A step of your own the base runs."),
    (
        "`pools.<name>`",
        Pool,
        "A warm pool: spares a VM naming `pool:` claims ([warm pools](fork-and-pools.md)).",
    ),
    (
        "`generators.<name>`",
        g.Generator,
        "A VM template expanded once per work item ([generators](generators.md)); its `vm` "
        "is a `vms[]` entry without `name` and `from`.",
    ),
    ("`generators.<name>.branches`", g.BranchSource, "Branches of a repository as items."),
    ("`generators.<name>.github`", g.GitHubSource, "Labelled GitHub issues or PRs as items."),
    ("`vms[]`", m.VM, "One VM. Unset fields come from `defaults`."),
    (
        "`defaults.idle`, `vms[].idle`",
        Idle,
        "When a VM nobody uses sleeps, and how ([idle VMs sleep](agents.md#idle-vms-sleep)); "
        "`idle: never` turns a default off for one VM.",
    ),
    (
        "`defaults.egress`, `vms[].egress`",
        Egress,
        "Where the VM may send packets, enforced outside the guest; a backend that cannot "
        "enforce it refuses the VM in the plan (`!`) ([egress](egress.md)).",
    ),
    ("`vms[].secrets[]`", m.SecretUse, "A secret placed at a guest directory."),
    ("`vms[].ports[]`", m.Port, "A forward from the guest to 127.0.0.1 on the host (Lima)."),
    ("`vms[].from`", m.ForkSource, "The VM a fork is made from (docs/fork-and-pools.md)."),
    ("`notify`", Notify, "Who hears of an agent's state ([agents](agents.md))."),
    ("`notify.webhook`", Webhook, "A JSON POST that ntfy and Slack both read."),
]

INTRO = """\
# Manifest reference (`sand.yaml`, `apiVersion: sand/v1`)

Generated from the models in `sand/manifest/models.py` by
`python -m sand.manifest.reference`; a test keeps it in step.
Unknown keys are errors; sizes carry a unit: `8GiB`, `512MiB`, `40G` (binary; a bare
number is refused as ambiguous). Guest paths are `~` or under `~/`.
Editors validate against `sand/schemas/sand.schema.json`, a JSON Schema in draft-07
(start the file with `# yaml-language-server: $schema=<path>/sand.schema.json`); it
carries each field's description, default and an example, and the rules a schema
can state: size units, secret names, exactly one secret source, `node` xor `nodes`.
The default of a field a VM inherits is what it gets when neither the VM nor
`defaults` sets it. `defaults.image` is for Lima VMs, or names a golden image under
`images`: a Proxmox VM that would take a Lima image from it (one without its own
`image`) is refused, as it clones its backend's `template`.

`sand validate` refuses, each at its `FILE:LINE:COL`: repo URLs that start
with `-`, use git's `<transport>::` syntax (`ext::` runs a command), carry
credentials (`https://user:pw@…`, `https://token@…`; an ssh user is fine), or
are not `https://`, `http://`, `ssh://`, `git://`, `file:///` or
`user@host:path`; hosts that are not a host name or IP address; branches git
would refuse; guest paths outside `~/` or with `..`; package names that are
not Debian's; Proxmox ids that PVE would refuse and vmids outside
100..999999999; control characters in any path; two VM names that differ only
in case; two repos of one VM on one checkout path; an `expires:` that is
neither an ISO 8601 date or date-time nor a duration (`90m`, `8h`, `3d`); and
two backends that would see each other's VMs as their own (one PVE host, port
and pool; one Lima home). YAML merge keys (`<<: *base` then overrides) are fine.

A VM made from a golden image (its `image`, or `defaults.image`, names an entry of
`images`) takes its packages' base, agents and Docker from the image: `sand
validate` refuses such a VM listing an agent the image does not install, or a
`docker` (its own, or one `defaults` gives it) that contradicts the image's; a
`rebuild` on a VM whose image is not a golden one; two steps of one image with one
name; and, for an image Proxmox VMs use, a `from` that is not a template's name or
vmid.

`expires:` (a VM's, or every VM's in `defaults`): an absolute time is its
instant (`2026-12-01` is that day's midnight, UTC; a date-time without a zone
is UTC); a duration counts from when sand made the VM, which the VM records
(a VM made by an older sand does not: the plan warns and deletes nothing). A
VM past its time is planned for deletion (`expired at ...`) behind the same
guards as any delete, and is not created again while its `expires:` says it
has passed; change or remove `expires:` to have it back. The rules:
[safety](safety.md#expiry).
"""


def _type(prop: dict[str, Any]) -> str:
    """A short type name from the field's JSON Schema (what editors also show)."""
    if "allOf" in prop and len(prop["allOf"]) == 1:
        return _type(prop["allOf"][0])
    if "$ref" in prop:
        return str(prop["$ref"]).rsplit("/", 1)[-1]
    if "const" in prop:
        return repr(prop["const"])
    if "enum" in prop and len(prop["enum"]) <= 8:  # a long list (CPU types) is its type
        return " \\| ".join(repr(v) for v in prop["enum"])
    if "anyOf" in prop or "oneOf" in prop:
        parts = [_type(p) for p in prop.get("anyOf", prop.get("oneOf", []))]
        return " \\| ".join(dict.fromkeys(parts))
    kind = prop.get("type")
    if kind == "array":
        return f"list of {_type(prop.get('items', {}))}"
    if kind == "object":
        values = prop.get("additionalProperties")
        return f"map of {_type(values)}" if isinstance(values, dict) else "map"
    return str(kind or "any")


def _default(prop: dict[str, Any], required: bool) -> str:
    """The schema's default: for a field a VM inherits, what it gets when neither it nor
    `defaults` sets one (the same table the desired state applies)."""
    if required:
        return "required"
    value = prop.get("default")
    if value is None:
        return "—"
    if value in ({}, []):
        return "empty"
    return f"`{_yaml(value)}`"


def _yaml(value: Any) -> str:
    """A value as it is written in the manifest (YAML flow style)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    return json.dumps(value).replace('"', "")


def _example(prop: dict[str, Any]) -> str:
    examples = prop.get("examples") or []
    return f"`{_yaml(examples[0])}`" if examples else ""


def _is_size(prop: dict[str, Any]) -> bool:
    if prop.get("pattern") == SIZE_PATTERN:
        return True
    return any(_is_size(v) for v in prop.get("anyOf", []))


def render() -> str:
    doc = schema()
    out = [INTRO]
    for title, model, blurb in SECTIONS:
        node = doc if model is m.Manifest else doc["definitions"][model.__name__]
        out.append(f"\n## {title}\n\n{blurb}\n")
        out.append("| key | type | default | example | meaning |")
        out.append("|---|---|---|---|---|")
        props, required = node["properties"], set(node.get("required", ()))
        for name, info in model.model_fields.items():
            key = info.alias or name
            prop = props[key]
            meaning = (prop.get("description") or "").replace("\n", " ").replace("|", "\\|")
            kind = "size" if _is_size(prop) else _type(prop)
            out.append(
                f"| `{key}` | {kind} | {_default(prop, key in required)} | {_example(prop)} "
                f"| {meaning} |"
            )
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    print(render(), end="")
