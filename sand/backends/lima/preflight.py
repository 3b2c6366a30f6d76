"""Preflight for Lima: what ``limactl create`` would refuse, checked before planning it.

One fixed script on the Lima host (this machine, or the remote host over the
backend's one SSH connection) answers everything at once: Lima's template names
(``limactl create --list-templates``), whether each image path is readable and each
image URL answers, and the host's memory and CPUs. So a plan with changes costs one
more call per backend, however many VMs change; a no-op plan makes none.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from sand.backends.lima import limayaml, scripts
from sand.backends.lima.context import Ctx
from sand.backends.lima.listing import ListingError, iter_frames
from sand.backends.protocol import PreflightItem, PreflightProblem, PreflightReport
from sand.manifest.sizes import format_size

TIMEOUT = 60.0
SIZED = frozenset({"memory", "cpus"})


@dataclass
class HostFacts:
    memory: int | None = None
    cpus: int | None = None
    templates: set[str] | None = None  # None: not asked, or limactl could not list them
    images: dict[str, str] = field(default_factory=dict)  # location -> "0" | "1" | "-"


def template_name(image: str) -> str | None:
    """The Lima template an image names (``template:debian-12``, ``debian-12``), or None."""
    base = limayaml.image_source(image).get("base")
    if not base:
        return None
    return str(base[0]).split(":", 1)[1].lstrip("/")


def parse_facts(stdout: bytes) -> HostFacts:
    facts = HostFacts()
    for kind, key, body in iter_frames(stdout, "the preflight script"):
        text = body.decode(errors="replace").strip()
        if kind == "memory" and text.isdigit():
            facts.memory = int(text)
        elif kind == "cpus" and text.isdigit():
            facts.cpus = int(text)
        elif kind == "templates" and key == "0":
            facts.templates = {line.strip() for line in text.splitlines() if line.strip()}
        elif kind == "image":
            facts.images[text] = key
    return facts


async def preflight(ctx: Ctx, items: Sequence[PreflightItem]) -> PreflightReport:
    todo = [i for i in items if i.action in ("create", "replace") or SIZED & set(i.fields)]
    if not todo:
        return PreflightReport()
    # A fork is copied from its source's disk: it names no image to look for.
    made = [i for i in todo if i.action in ("create", "replace") and i.vm.fork is None]
    images = sorted({i.vm.image for i in made})
    templated = any(template_name(img) for img in images)
    locations = [img for img in images if template_name(img) is None]
    argv = scripts.preflight_argv(ctx.limactl, templates=templated, images=locations)
    res = await ctx.runner.run(argv, env={"LC_ALL": "C"}, timeout=TIMEOUT)
    where = ctx.runner.where
    if not res.ok:
        return PreflightReport(
            warnings=(f"preflight could not run on {where}: {res.err_tail()}",), requests=1
        )
    try:
        facts = parse_facts(res.stdout)
    except ListingError as exc:
        return PreflightReport(warnings=(f"preflight on {where}: {exc}",), requests=1)
    warnings: list[str] = []
    if templated and facts.templates is None:
        warnings.append(f"preflight could not list Lima's templates on {where}")
    problems: list[PreflightProblem] = []
    destroy_first: dict[str, str] = {}
    for item in todo:
        problems += _problems(item, facts, where, warnings)
        if item.action == "replace" and item.current is not None and facts.memory:
            both = item.vm.memory + (item.current.memory or 0)
            if both > facts.memory:
                destroy_first[item.vm.name] = (
                    f"{where} has {format_size(facts.memory)} of memory; the old and the new "
                    f"VM together need {format_size(both)}"
                )
    return PreflightReport(
        problems=tuple(problems),
        destroy_first=destroy_first,
        warnings=tuple(dict.fromkeys(warnings)),
        requests=1,
    )


def _problems(
    item: PreflightItem, facts: HostFacts, where: str, warnings: list[str]
) -> list[PreflightProblem]:
    vm = item.vm
    out: list[PreflightProblem] = []
    if item.action in ("create", "replace") and vm.fork is None:
        name = template_name(vm.image)
        if name is not None:
            if facts.templates is not None and name not in facts.templates:
                out.append(
                    PreflightProblem(
                        vm.name,
                        "image",
                        f"Lima on {where} has no template {name!r} "
                        "(see `limactl create --list-templates`)",
                    )
                )
        else:
            state = facts.images.get(vm.image, "-")
            if state == "1":
                kind = "URL does not answer" if "://" in vm.image else "file is not readable"
                out.append(
                    PreflightProblem(vm.name, "image", f"image {vm.image!r}: {kind} on {where}")
                )
            elif state == "-":
                warnings.append(f"could not check image {vm.image} on {where} (no curl there)")
    if item.action in ("create", "replace") and vm.golden and vm.disk < limayaml.BASE_DISK:
        out.append(
            PreflightProblem(
                vm.name,
                "disk",
                f"a VM made from golden image {vm.base.name if vm.base else '?'!r} is cloned "
                f"from its base, whose disk is {format_size(limayaml.BASE_DISK)}: a clone's "
                "disk only grows, so ask for at least that much",
            )
        )
    sized = item.action != "update"
    if (sized or "memory" in item.fields) and facts.memory and vm.memory > facts.memory:
        out.append(
            PreflightProblem(
                vm.name,
                "memory",
                f"{format_size(vm.memory)} is more than {where} has ({format_size(facts.memory)})",
            )
        )
    if (sized or "cpus" in item.fields) and facts.cpus and vm.cpus > facts.cpus:
        # QEMU runs more vCPUs than the host has (slowly); only vz refuses. Say so.
        warnings.append(f"{vm.name}: {vm.cpus} CPUs is more than {where} has ({facts.cpus})")
    return out
