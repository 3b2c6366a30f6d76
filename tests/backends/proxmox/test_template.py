"""``build_template()`` against fakepve: a template in the pool from a cloud image, with
sand's marker; a second run that changes nothing; a token without a privilege refused by
name before anything is made; what is not sand's left alone.

Assertions read fakepve's own state (VMs, configs, storage volumes, pools) and its
request log.
"""

from __future__ import annotations

import json

import pytest

from sand.backends.proxmox import description as desc
from sand.backends.proxmox import marker as mk
from sand.backends.proxmox.errors import ErrorKind, ProxmoxError
from sand.backends.proxmox.template_request import DEFAULT_IMAGE_URL
from sand.state.journal import Journal
from tests.backends.proxmox.helpers import apply, state_of
from tests.fakepve_rig.rig import FakePveRig

NAME = "debian-13-sand"
IMAGE = DEFAULT_IMAGE_URL.rsplit("/", 1)[1]
SHA512 = "sha512:" + "ab" * 64


def templates_named(rig: FakePveRig, name: str) -> list:
    return rig.run(lambda: [vm for vm in rig.pve.vms if vm.name == name])


def writes(rig: FakePveRig) -> list:
    return [r for r in rig.log if r.method != "GET"]


@pytest.fixture
def build_rig(rig: FakePveRig) -> FakePveRig:
    rig.allow_image_import()
    rig.grant_template_build(rig.token_id)
    return rig


async def test_build_imports_the_image_and_leaves_a_marked_template_in_the_pool(build_rig):
    rig = build_rig
    backend = rig.make_backend()
    result = await backend.build_template(name=NAME, checksum=SHA512)
    await backend.close()

    assert result.made
    [vm] = templates_named(rig, NAME)
    assert result.vmid == vm.vmid and vm.node == rig.nodes[0]
    assert vm.template and str(vm.config["template"]) == "1"
    assert vm.vmid in rig.run(lambda: set(rig.pve.pools[rig.pool]))
    assert vm.status == "stopped"  # never booted: cloud-init first runs in each clone
    config = vm.config
    assert str(config["agent"]) == "1"
    assert config["serial0"] == "socket" and config["vga"] == "serial0"
    # The cloud-init drive: a 4 MiB CD-ROM volume on the disk storage (fakepve names it
    # vm-<id>-disk-<n>, PVE vm-<id>-cloudinit).
    volume, _, options = config["ide2"].partition(",")
    assert volume.startswith(f"{rig.storage}:") and "media=cdrom" in options
    volumes = rig.run(lambda: dict(rig.pve.storages[rig.storage]["volumes"]))
    assert volumes[volume.split(":", 1)[1]]["size"] == 4 << 20
    assert config["scsi0"].startswith(f"{rig.storage}:base-{vm.vmid}-disk-")
    assert config["cpu"] == "host" and config["boot"] == "order=scsi0"
    assert config["net0"].startswith("virtio=") and f"bridge={rig.bridge}" in config["net0"]
    assert config["ipconfig0"] == "ip=dhcp"
    # sand's marker: the tag, and a block naming the template's own vmid and its source.
    assert config["tags"] == mk.TEMPLATE_TAG
    block = desc.parse_template_block(config["description"])
    assert block == {
        "tool": "sand",
        "kind": "template",
        "template": NAME,
        "vmid": vm.vmid,
        "source": DEFAULT_IMAGE_URL,
    }
    # PVE downloaded the image itself, onto the image storage, as content 'import'.
    assert rig.images() == [f"import/{IMAGE}"]
    [download] = rig.requests("POST", f"/nodes/{rig.nodes[0]}/storage/local/download-url")
    assert download.status == 200
    assert rig.count("POST", f"/nodes/{rig.nodes[0]}/qemu/{vm.vmid}/template") == 1
    assert any("sha512 verified" in line for line in result.lines())


async def test_a_second_build_finds_the_template_and_changes_nothing(build_rig):
    rig = build_rig
    backend = rig.make_backend()
    first = await backend.build_template(name=NAME)
    rig.clear_log()
    again = await backend.build_template(name=NAME)
    await backend.close()
    assert not again.made and again.vmid == first.vmid
    assert "nothing to do" in again.lines()[0]
    assert writes(rig) == []
    assert rig.count("GET") == 2  # the listing, and the config of the VM of that name
    assert len(templates_named(rig, NAME)) == 1


async def test_sand_clones_the_built_template_and_observing_it_costs_nothing(build_rig, tmp_path):
    rig = build_rig
    backend = rig.make_backend()
    await backend.build_template(name=NAME)
    state = state_of(rig, [{"name": "dev-1", "disk": "8GiB"}], template=NAME)
    await apply(backend, state, Journal(tmp_path / "journal.jsonl"))
    [dev] = rig.vms_named("dev-1")
    assert dev.config["cpu"] == "host"
    assert mk.TEMPLATE_TAG not in mk.split_tags(dev.config.get("tags"))  # not inherited
    assert desc.parse_template_block(dev.config.get("description")) is None
    rig.clear_log()
    observation = await backend.observe(state.vms)
    await backend.close()
    assert observation.requests == 1  # the template in the pool sends nothing to a deep read
    assert [vm.name for vm in observation.managed()] == ["dev-1"]


async def test_an_image_on_the_storage_is_used_and_needs_no_download_rights(rig):
    rig.allow_image_import()
    rig.grant_template_build(rig.token_id, download=False)
    rig.store_image(IMAGE)
    backend = rig.make_backend()
    result = await backend.build_template(name=NAME)
    await backend.close()
    assert result.made and templates_named(rig, NAME)[0].template
    assert rig.count(contains="/download-url") == 0
    assert any("on the storage already" in line for line in result.lines())


async def test_a_token_without_download_rights_is_refused_by_name_and_nothing_is_made(rig):
    rig.allow_image_import()
    rig.grant_template_build(rig.token_id, download=False)
    backend = rig.make_backend()
    before = [vm.vmid for vm in rig.vms()]
    with pytest.raises(ProxmoxError) as info:
        await backend.build_template(name=NAME)
    await backend.close()
    error = info.value
    assert error.kind is ErrorKind.FORBIDDEN
    assert "nothing was created" in str(error)
    assert "Datastore.AllocateTemplate on /storage/local (to download the image)" in str(error)
    assert "Sys.AccessNetwork on /nodes/pve1 (to download the image)" in str(error)
    assert writes(rig) == []
    assert [vm.vmid for vm in rig.vms()] == before and templates_named(rig, NAME) == []
    assert rig.images() == []


async def test_sands_own_role_alone_lacks_the_image_storage(rig):
    rig.allow_image_import()  # the token holds sand's role, nothing on the image storage
    backend = rig.make_backend()
    with pytest.raises(ProxmoxError) as info:
        await backend.build_template(name=NAME)
    await backend.close()
    message = str(info.value)
    assert "Datastore.Audit or Datastore.AllocateSpace on /storage/local" in message
    assert "Datastore.AllocateTemplate on /storage/local" in message
    assert writes(rig) == [] and templates_named(rig, NAME) == []


async def test_a_missing_vm_privilege_on_the_pool_is_named(rig):
    token = rig.add_token("sand@pve!tmpl", acl="none")
    rig.run(rig.grant_sand_privileges, "sand@pve!tmpl", without=["VM.Config.HWType"])
    rig.allow_image_import()
    rig.grant_template_build("sand@pve!tmpl")
    backend = rig.make_backend(token_file=str(token))
    with pytest.raises(ProxmoxError) as info:
        await backend.build_template(name=NAME)
    await backend.close()
    assert "VM.Config.HWType on /pool/sand (scsihw, serial0, vga)" in str(info.value)
    assert writes(rig) == [] and rig.images() == []


async def test_a_vm_of_that_name_sand_did_not_build_is_left_alone(build_rig):
    rig = build_rig
    backend = rig.make_backend()
    with pytest.raises(ProxmoxError) as info:
        await backend.build_template()  # the backend's template: the seeded debian-13
    await backend.close()
    assert "sand did not build" in str(info.value) and "VM 9000" in str(info.value)
    assert writes(rig) == []
    assert rig.vm(rig.template_vmid).config["tags"] == "golden"


async def test_an_interrupted_build_is_converted_on_the_next_run(build_rig):
    rig = build_rig
    vmid = 700
    block = desc.render_template_block(NAME, vmid, DEFAULT_IMAGE_URL)
    rig.seed_vm(vmid, NAME, status="stopped", tags=mk.TEMPLATE_TAG, description=block)
    backend = rig.make_backend()
    result = await backend.build_template(name=NAME)
    await backend.close()
    assert result.made and result.vmid == vmid
    assert rig.vm(vmid).template
    assert rig.count(contains="/download-url") == 0 and rig.count("POST", contains="/qemu") == 1
    assert "interrupted" in result.lines()[0]


async def test_a_copy_of_sands_template_is_not_taken_for_it(build_rig):
    rig = build_rig
    block = desc.render_template_block(NAME, 700, DEFAULT_IMAGE_URL)  # names VM 700, not 701
    rig.seed_vm(701, NAME, status="stopped", template=True, description=block)
    backend = rig.make_backend()
    with pytest.raises(ProxmoxError, match="sand did not build"):
        await backend.build_template(name=NAME)
    await backend.close()
    assert writes(rig) == []


async def test_a_storage_without_import_content_is_refused_with_the_fix(rig):
    rig.grant_template_build(rig.token_id)  # 'local' holds iso,vztmpl,backup only
    backend = rig.make_backend()
    with pytest.raises(ProxmoxError) as info:
        await backend.build_template(name=NAME)
    await backend.close()
    assert "pvesm set local --content iso,vztmpl,backup,import" in str(info.value)
    assert writes(rig) == []


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"url": "https://user:pw@example.org/x.qcow2"}, "credentials"),
        ({"url": "https://example.org/debian.tar.xz"}, "disk image's file name"),
        ({"url": "ftp://example.org/x.qcow2"}, "http(s)://"),
        ({"checksum": "sha256:abc"}, "ALGORITHM:HEX"),
        ({"name": "9000"}, "not a PVE VM name"),
        ({"name": "bad_name"}, "not a PVE VM name"),
        ({"image_storage": "../etc"}, "storage"),
    ],
)
async def test_bad_requests_are_refused_before_any_request(build_rig, options, words):
    rig = build_rig
    rig.clear_log()
    backend = rig.make_backend()
    with pytest.raises(ProxmoxError, match="template build") as info:
        await backend.build_template(**{"name": NAME, **options})
    await backend.close()
    assert words in str(info.value)
    assert rig.log == []


async def test_a_backend_whose_template_is_a_vmid_needs_a_name(build_rig):
    backend = build_rig.make_backend(template=9000)
    with pytest.raises(ProxmoxError, match="give --name"):
        await backend.build_template()
    await backend.close()


def test_the_template_block_is_no_ownership_claim():
    block = desc.render_template_block(NAME, 700, DEFAULT_IMAGE_URL)
    assert desc.parse_description(block) is None
    assert json.loads(block.split("\n")[1])["kind"] == "template"
    assert not mk.parse_tags(mk.TEMPLATE_TAG).present
    assert mk.merge_tags(f"golden;{mk.TEMPLATE_TAG}", _marker()).startswith("golden;")
    assert mk.TEMPLATE_TAG not in mk.split_tags(mk.merge_tags(mk.TEMPLATE_TAG, _marker()))


def _marker():
    from sand.observed import Marker

    return Marker("demo", "dev-1", "101", "", "", "template:x@local-lvm")
