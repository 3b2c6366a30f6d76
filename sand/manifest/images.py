"""The rules of golden images (``images:``) that need the whole manifest.

A VM names a golden image as its ``image`` (or takes one from ``defaults.image``). Its
machine-level content then comes from the image, so a VM may narrow it but never
contradict it: its agents are some of the image's, its ``docker`` is the image's. Its
``rebuild`` only means something for such a VM. On Proxmox the image's ``from`` names
a template, checked like a VM's ``image``. Each finding points at the field to fix.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from sand.manifest.builtin import DEFAULT_AGENTS
from sand.manifest.rawdata import Finding, as_dict, as_list, as_str
from sand.manifest.values import template_problem
from sand.manifest.yamlmarks import Path


def golden_name(
    vm: Mapping[str, Any], defaults: Mapping[str, Any], images: Mapping[str, Any]
) -> str | None:
    """The golden image a raw VM entry is made from, or None."""
    image = as_str(vm.get("image"))
    if image is None:
        image = as_str(defaults.get("image"))
    return image if image is not None and image in images else None


def check_vm_image(
    at: Path,
    vm: Mapping[str, Any],
    defaults: Mapping[str, Any],
    images: Mapping[str, Any],
) -> Iterator[Finding]:
    """The golden-image rules for one VM entry."""
    name = as_str(vm.get("name")) or ""
    golden = golden_name(vm, defaults, images)
    if golden is None:
        if vm.get("rebuild") is not None:
            yield (
                (*at, "rebuild"),
                f"VM {name!r}: 'rebuild' applies only to a VM made from an image under "
                "`images`; this VM's image is not one",
            )
        return
    image = as_dict(images[golden])
    offered = [a for a in as_list(image.get("agents")) if isinstance(a, str)] or list(
        DEFAULT_AGENTS
    )
    own_agents = vm.get("agents")
    where: Path = (*at, "agents") if own_agents is not None else ("defaults", "agents")
    agents = own_agents if own_agents is not None else defaults.get("agents")
    extra = [a for a in as_list(agents) if isinstance(a, str) and a not in offered]
    if extra:
        yield (
            where,
            f"VM {name!r} is made from image {golden!r}, which does not install "
            f"{', '.join(extra)}: add {'it' if len(extra) == 1 else 'them'} to the image's "
            f"agents (it has {', '.join(offered)})",
        )
    image_docker = image.get("docker") is True
    for path, value in (((*at, "docker"), vm.get("docker")), (("defaults", "docker"), None)):
        if path[0] == "defaults":
            if vm.get("docker") is not None:
                continue
            value = defaults.get("docker")
        if isinstance(value, bool) and value != image_docker:
            yield (
                path,
                f"VM {name!r} is made from image {golden!r}, whose docker is "
                f"{str(image_docker).lower()}: set docker on the image, not on the VM",
            )


def check_sources(images: Mapping[str, Any], used_by: Mapping[str, set[str]]) -> Iterator[Finding]:
    """An image is built from a template or a cloud image, never from a golden image (its
    own name included); one that Proxmox VMs use names a template in ``from``
    (``used_by``: image name -> the backend types of the VMs made from it)."""
    for name, image in sorted(images.items()):
        source = as_dict(image).get("from")
        if isinstance(source, str) and source in images:
            what = "itself" if source == name else f"golden image {source!r}"
            yield (
                ("images", name, "from"),
                f"image {name!r} is built from {what}: 'from' names a template or a cloud "
                "image a base starts from, not an image under `images`",
            )
    for name, types in sorted(used_by.items()):
        source = as_dict(images.get(name)).get("from")
        if "proxmox" not in types or isinstance(source, bool):
            continue
        if isinstance(source, str | int):
            why = template_problem(source)
            if why:
                yield (
                    ("images", name, "from"),
                    f"image {name!r} is used by Proxmox VMs, so 'from' names a template: {why}",
                )
