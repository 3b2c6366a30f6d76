"""Paths and methods as pveproxy takes them (tests/fakepve_rig/paths.py), through
proxmoxer, on both profiles: an empty fragment is skipped (PVE::RESTHandler::find_handler),
a path or method PVE has not is 501 with pveproxy's own line (PVE::HTTPServer::rest_handler,
PVE::APIServer::AnyEvent::process_header)."""

from __future__ import annotations

from typing import Any

import proxmoxer
import pytest
import requests

from tests.fakepve_rig.rig import FakePveRig

BOTH = pytest.mark.parametrize("major", [8, 9])


def wait_gone(rig: FakePveRig, pve: proxmoxer.ProxmoxAPI, upid: str) -> str:
    while (status := pve.nodes("pve1").tasks(upid).status.get())["status"] != "stopped":
        pass  # time scale 0: the task has ended by the first read
    return str(status["exitstatus"])


@BOTH
def test_a_trailing_slash_is_the_same_method(fakepve_factory: Any, major: int) -> None:
    rig = fakepve_factory(pve_version=major)
    rig.seed_vm(100, "a", status="stopped")
    pve = rig.proxmoxer()
    assert pve.nodes("pve1").qemu("100/").config.get()["name"] == "a"
    assert pve("nodes//pve1/qemu/100/status/current/").get()["status"] == "stopped"
    upid = pve.nodes("pve1").qemu("100/").delete()
    assert wait_gone(rig, pve, upid) == "OK"
    assert rig.vm(100) is None
    assert [(r.method, r.path) for r in rig.log if r.method == "DELETE"] == [
        ("DELETE", "/nodes/pve1/qemu/100/")
    ]


@BOTH
def test_a_path_pve_has_not_is_501_and_does_nothing(fakepve_factory: Any, major: int) -> None:
    rig = fakepve_factory(pve_version=major)
    rig.seed_vm(100, "a", status="stopped")
    pve = rig.proxmoxer()
    calls = [
        (pve.nodes("pve1").qemu(100).destroy.delete, "DELETE /nodes/pve1/qemu/100/destroy"),
        (pve.nodes("pve1").qemu(100).status.sleep.post, "POST /nodes/pve1/qemu/100/status/sleep"),
        (pve.nodes("pve1").qemu(100).config.delete, "DELETE /nodes/pve1/qemu/100/config"),
        (pve.cluster.nope.get, "GET /cluster/nope"),
    ]
    for call, line in calls:
        with pytest.raises(proxmoxer.ResourceException) as raised:
            call()
        assert raised.value.status_code == 501, line
        assert raised.value.content == f"Method '{line}' not implemented"
    assert rig.vm(100) is not None and rig.run(lambda: dict(rig.pve.tasks)) == {}


def test_the_login_is_checked_before_the_path(fakepve_server: FakePveRig) -> None:
    r = requests.get(
        fakepve_server.url + "/api2/json/cluster/nope",
        headers={"Authorization": "PVEAPIToken=sand@pve!ci=wrong"},
        verify=fakepve_server.ca_file,
        timeout=10,
    )
    assert r.status_code == 401


def test_a_method_pveproxy_does_not_know_is_501_before_the_login(fakepve_server: FakePveRig):
    rig = fakepve_server
    rig.seed_vm(100, "a", status="stopped")
    for method in ("PATCH", "HEAD", "OPTIONS"):
        r = requests.request(
            method, rig.url + "/api2/json/nodes/pve1/qemu/100", verify=rig.ca_file, timeout=10
        )
        assert (r.status_code, r.reason) == (501, f"method '{method}' not available")
    assert rig.vm(100) is not None
