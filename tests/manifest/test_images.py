"""Golden images in the manifest: their located errors, and what a VM made from one is."""

from __future__ import annotations

import pytest

from sand.errors import ManifestError
from sand.manifest import parse_manifest
from tests.plan.helpers import MANIFEST, desired

IMAGES = """\
images:
  wb:
    packages: [jq]
    agents: [claude, codex]
    steps:
      - {name: rust, run: "echo rust"}
"""


def with_images(text: str = MANIFEST, images: str = IMAGES) -> str:
    return text.replace("defaults:\n", images + "defaults:\n")


def errors_of(text: str) -> list[str]:
    with pytest.raises(ManifestError) as info:
        parse_manifest(text, "m.yaml")
    return [str(p) for p in info.value.problems]


def on_a(text: str, lines: str) -> str:
    return text.replace("  - name: a\n", "  - name: a\n" + lines)


def test_a_vm_naming_an_image_is_made_from_its_base_and_keeps_its_own_steps():
    text = on_a(with_images(), "    image: wb\n    agents: [claude]\n    packages: [ripgrep]\n")
    vms = {vm.name: vm for vm in desired(text).vms}
    a = vms["a"]
    assert a.image == "golden:wb" and a.golden and a.base is not None
    assert a.base.declared and a.base.name == "wb" and a.base.backend == "pve"
    assert a.base.source == "template:9000@local-lvm"  # the backend's own template
    assert a.base.content.agents == ("claude", "codex") and a.base.content.packages == ("jq",)
    assert a.agents == ("claude",) and a.packages == ("ripgrep",)
    # The VMs that are not made from it: a derived base of their own content.
    assert vms["b"].base is not None and not vms["b"].base.declared
    assert vms["b"].image == "template:9000@local-lvm"


def test_the_image_decides_the_base_fingerprint_and_never_the_vms():
    text = on_a(with_images(), "    image: wb\n")
    before = next(vm for vm in desired(text).vms if vm.name == "a")
    changed = next(
        vm
        for vm in desired(text.replace("packages: [jq]", "packages: [jq, tmux]")).vms
        if vm.name == "a"
    )
    assert before.base is not None and changed.base is not None
    assert before.base.fingerprint != changed.base.fingerprint
    # The VM itself is as it was: it changes with its image only when it is rebuilt.
    assert (before.fingerprint, before.guest_fingerprint) == (
        changed.fingerprint,
        changed.guest_fingerprint,
    )
    step = text.replace('run: "echo rust"', 'run: "echo rust 2"')
    stepped = next(vm for vm in desired(step).vms if vm.name == "a")
    assert stepped.base is not None and stepped.base.fingerprint != before.base.fingerprint


def test_vms_sharing_machine_content_share_one_derived_base():
    vms = {vm.name: vm for vm in desired().vms}
    assert vms["a"].base is not None and vms["b"].base is not None
    assert vms["a"].base.fingerprint == vms["b"].base.fingerprint  # only memory differs
    other = desired(MANIFEST.replace("    memory: 16GiB\n", "    packages: [jq]\n"))
    b = next(vm for vm in other.vms if vm.name == "b")
    assert b.base is not None and b.base.fingerprint != vms["a"].base.fingerprint
    # A VM sand does not provision has nothing a base could hold.
    off = desired(MANIFEST.replace("  cpus: 2\n", "  cpus: 2\n  provision: false\n"))
    assert all(vm.base is None for vm in off.vms)


def test_defaults_image_may_name_a_golden_image_for_every_backend():
    text = with_images().replace("  cpus: 2\n", "  cpus: 2\n  image: wb\n")
    text = text.replace("    image: debian-12\n", "")
    vms = {vm.name: vm for vm in desired(text).vms}
    assert {vm.image for vm in vms.values()} == {"golden:wb"}
    assert vms["c"].base is not None and vms["c"].base.source == "default"  # Lima's own
    assert vms["a"].base is not None and vms["a"].base.backend == "pve"
    assert vms["c"].base.backend == "laptop"
    assert vms["a"].base.fingerprint != vms["c"].base.fingerprint  # made from other sources


def test_rebuild_is_taken_from_the_vm_or_its_defaults():
    text = on_a(with_images(), "    image: wb\n    rebuild: onBaseChange\n")
    text = text.replace("  - name: b\n", "  - name: b\n    image: wb\n")
    vms = {vm.name: vm for vm in desired(text).vms}
    assert vms["a"].rebuild == "onBaseChange" and vms["b"].rebuild == "manual"
    everyone = text.replace("  cpus: 2\n", "  cpus: 2\n  rebuild: onBaseChange\n")
    assert next(v for v in desired(everyone).vms if v.name == "b").rebuild == "onBaseChange"


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (
            lambda t: on_a(t, "    image: wb\n    agents: [claude, pi]\n"),
            "m.yaml:27:13: VM 'a' is made from image 'wb', which does not install pi: add it "
            "to the image's agents (it has claude, codex)",
        ),
        (
            lambda t: on_a(t, "    image: wb\n    docker: true\n"),
            "m.yaml:27:13: VM 'a' is made from image 'wb', whose docker is false: set docker on "
            "the image, not on the VM",
        ),
        (
            lambda t: on_a(t, "    rebuild: onBaseChange\n"),
            "m.yaml:26:14: VM 'a': 'rebuild' applies only to a VM made from an image under "
            "`images`; this VM's image is not one",
        ),
        (
            lambda t: on_a(
                t.replace("  wb:\n", "  wb:\n    from: 'not a name'\n"), "    image: wb\n"
            ),
            "m.yaml:17:11: image 'wb' is used by Proxmox VMs, so 'from' names a template: "
            "'not a name' is neither a template's vmid nor a Proxmox VM name (letters, digits, "
            "'-' and '.')",
        ),
        (
            lambda t: on_a(
                t.replace(
                    '      - {name: rust, run: "echo rust"}\n',
                    "      - {name: rust, run: a}\n      - {name: rust, run: b}\n",
                ),
                "    image: wb\n",
            ),
            "m.yaml:17:5: images.wb: image step names must be unique: rust",
        ),
    ],
)
def test_what_a_golden_image_forbids_is_a_located_error(edit, expected):
    assert expected in errors_of(edit(with_images()))


def test_defaults_docker_contradicting_an_image_points_at_defaults():
    text = on_a(with_images(), "    image: wb\n").replace(
        "  cpus: 2\n", "  cpus: 2\n  docker: true\n"
    )
    found = errors_of(text)
    assert any(
        e.startswith("m.yaml:") and ":26:" not in e and "whose docker is false" in e for e in found
    ), found
    # A Lima VM made from a golden image needs no image of its own either.
    lima = with_images().replace("    image: debian-12\n", "    image: wb\n")
    parse_manifest(lima, "m.yaml")
