"""``sand template build`` end to end: the real command line against fakepve.

Assertions read fakepve's VMs and request log, not sand's output alone.
"""

from __future__ import annotations

import pytest

from tests.cli.helpers import Sand

NAME = "debian-13-sand"


@pytest.fixture
def sand(tmp_path, fakepve_server):
    s = Sand(tmp_path)
    s.write(fakepve_server.manifest([{"name": "dev-1", "disk": "8GiB"}], template=NAME))
    return s


def named(rig, name):
    return rig.run(lambda: [vm for vm in rig.pve.vms if vm.name == name])


def test_build_then_build_again_then_apply_clones_it(sand, fakepve_server):
    rig = fakepve_server
    rig.allow_image_import()
    rig.grant_template_build(rig.token_id)

    proc = sand.run("template", "build")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [template] = named(rig, NAME)
    assert template.template and template.pool == rig.pool
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("pve: downloaded https://cloud.debian.org/")
    assert "(not verified: no --checksum)" in lines[0]
    assert f"converted VM {template.vmid} to template '{NAME}'" in proc.stdout

    rig.clear_log()
    proc = sand.run("template", "build")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == (
        f"pve: template '{NAME}' (VM {template.vmid} on {rig.nodes[0]}) exists and sand built "
        "it: nothing to do\n"
    )
    assert [r for r in rig.log if r.method != "GET"] == []

    proc = sand.run("apply", "--auto-approve")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [dev] = rig.vms_named("dev-1")
    assert dev.config["cpu"] == "host"
    assert len(named(rig, NAME)) == 1
    rig.clear_log()
    assert sand.run("plan", "--detailed-exitcode").returncode == 0
    assert rig.count("GET", "/cluster/resources") == 1 and len(rig.log) == 1


def test_a_token_lacking_a_privilege_is_refused_naming_it(sand, fakepve_server):
    rig = fakepve_server
    rig.allow_image_import()
    rig.clear_log()
    proc = sand.run("template", "build")
    assert proc.returncode == 1
    assert proc.stderr.startswith("Error: proxmox pve: template build of")
    assert "nothing was created" in proc.stderr
    assert "Datastore.AllocateTemplate on /storage/local (to download the image)" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert [r for r in rig.log if r.method != "GET"] == []
    assert named(rig, NAME) == [] and rig.images() == []


def test_the_template_someone_else_made_is_left_alone(sand, fakepve_server):
    rig = fakepve_server
    rig.grant_template_build(rig.token_id)
    proc = sand.run("template", "build", "--name", rig.template_name)
    assert proc.returncode == 1
    assert "sand did not build" in proc.stderr
    assert rig.vm(rig.template_vmid).config["tags"] == "golden"


def test_bad_options_are_refused_before_any_request(sand, fakepve_server):
    rig = fakepve_server
    rig.clear_log()
    proc = sand.run("template", "build", "--checksum", "sha512:nothex")
    assert proc.returncode == 1 and "ALGORITHM:HEX" in proc.stderr
    proc = sand.run("template", "build", "--backend", "nowhere")
    assert proc.returncode == 1 and "no backend 'nowhere'" in proc.stderr
    assert rig.log == []


def test_a_manifest_without_a_proxmox_backend_builds_nothing(tmp_path):
    s = Sand(tmp_path)
    s.write(
        {
            "apiVersion": "sand/v1",
            "project": "demo",
            "backends": {"laptop": {"type": "lima"}},
            "defaults": {"image": "debian-12"},
            "vms": [],
        }
    )
    proc = s.run("template", "build")
    assert proc.returncode == 1
    assert "no backend of this manifest builds templates" in proc.stderr
