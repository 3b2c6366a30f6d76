"""The fidelity layer itself (tests/fakepve_rig/fidelity.py): it refuses what PVE refuses.

Raw HTTP against the rig, so each rule is seen without sand in between; the tests that
show sand meeting the rules are in test_refusals.py and test_pve_versions.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.fakepve_rig.rig import FakePveRig


class Api:
    def __init__(self, rig: FakePveRig, token_file: Path | None = None) -> None:
        token = (token_file or rig.token_file).read_text(encoding="utf-8").strip()
        self.headers = {"Authorization": f"PVEAPIToken={token}"}
        self.base = rig.url + "/api2/json/"
        self.ca = rig.ca_file

    def call(self, method: str, path: str, **data: Any) -> tuple[int, Any]:
        kw: dict[str, Any] = {"params": data} if method == "GET" else {"data": data}
        r = requests.request(
            method, self.base + path, headers=self.headers, verify=self.ca, timeout=10, **kw
        )
        body = r.json()
        return r.status_code, body.get("data") if r.ok else body.get("message", "")


@pytest.mark.parametrize("major", [8, 9])
def test_version_and_privileges_follow_the_profile(fakepve_factory: Any, major: int) -> None:
    rig = fakepve_factory(pve_version=major)
    status, data = Api(rig).call("GET", "version")
    assert status == 200 and data["version"].startswith(f"{major}.")
    other = "VM.GuestAgent.Audit" if major == 8 else "VM.Monitor"
    with pytest.raises(ValueError, match=f"invalid privilege '{other}'"):
        rig.grant(rig.token_id, "/pool/sand", other)


@pytest.mark.parametrize("major", [8, 9])
def test_sev_snp_and_s3_s4_are_taken_on_8_4_as_on_9(fakepve_factory: Any, major: int) -> None:
    """qemu-server 8.3.10, which PVE 8.4 ships, added AMD SEV-SNP and the machine's
    enable-s3/enable-s4 (its changelog; $confdesc at "bump version to 8.3.10")."""
    rig = fakepve_factory(pve_version=major, acl="root")
    rig.seed_vm(100, "a", status="stopped")
    api = Api(rig)
    sev = {"amd-sev": "type=snp"}
    assert api.call("PUT", "nodes/pve1/qemu/100/config", **sev)[0] == 200
    machine = "q35,enable-s3=1,enable-s4=0"
    assert api.call("PUT", "nodes/pve1/qemu/100/config", machine=machine)[0] == 200
    config = rig.vm(100).config
    assert (config["amd-sev"], config["machine"]) == ("type=snp", machine)
    status, _ = api.call("POST", "nodes/pve1/qemu", vmid=101, **sev, machine=machine)
    assert status == 200


def test_digest_covers_pending(fakepve_server: FakePveRig) -> None:
    rig, api = fakepve_server, Api(fakepve_server)
    rig.seed_vm(100, "a", status="running")
    before = api.call("GET", "nodes/pve1/qemu/100/config")[1]["digest"]
    assert api.call("PUT", "nodes/pve1/qemu/100/config", cpu="host")[0] == 200
    assert rig.vm(100).pending == {"cpu": "host"}
    status, message = api.call("PUT", "nodes/pve1/qemu/100/config", cores=3, digest=before)
    assert status == 500 and "checksum mismatch" in message
    assert rig.vm(100).config["cores"] == 2


def test_pending_answers_the_digest_of_the_whole_file(fakepve_server: FakePveRig) -> None:
    """P16: the pending answer carries the digest the config answer does (both are the
    loaded config's), so a write against it is refused once the file changed."""
    rig, api = fakepve_server, Api(fakepve_server)
    rig.seed_vm(100, "a", status="running")
    items = api.call("GET", "nodes/pve1/qemu/100/pending")[1]
    digest = {i["key"]: i.get("value") for i in items}["digest"]
    assert digest == api.call("GET", "nodes/pve1/qemu/100/config")[1]["digest"]
    assert api.call("PUT", "nodes/pve1/qemu/100/config", cpu="host", digest=digest)[0] == 200
    status, message = api.call("PUT", "nodes/pve1/qemu/100/config", cores=3, digest=digest)
    assert status == 500 and "checksum mismatch" in message


def test_pending_applied_unless_current(fakepve_server: FakePveRig) -> None:
    rig, api = fakepve_server, Api(fakepve_server)
    rig.seed_vm(100, "a", status="running", config={"cpu": "kvm64"})
    api.call("PUT", "nodes/pve1/qemu/100/config", cpu="host", cores=2)
    assert rig.vm(100).pending == {"cpu": "host"}  # cores=2 equals the current: dropped
    assert api.call("GET", "nodes/pve1/qemu/100/config")[1]["cpu"] == "host"
    assert api.call("GET", "nodes/pve1/qemu/100/config", current=1)[1]["cpu"] == "kvm64"


def test_tags_normalised(fakepve_server: FakePveRig) -> None:
    rig, api = fakepve_server, Api(fakepve_server)
    rig.seed_vm(100, "a", status="stopped")
    api.call("PUT", "nodes/pve1/qemu/100/config", tags="b;A,a c")
    assert rig.vm(100).config["tags"] == "a;b;c"


def test_cluster_options_without_sys_audit_show_allowed_tags_only(
    fakepve_server: FakePveRig,
) -> None:
    rig = fakepve_server
    rig.set_user_tag_access("list", "team-a")
    status, data = Api(rig).call("GET", "cluster/options")
    assert status == 200
    assert data == {"allowed-tags": ["team-a"]}
    rig.grant(rig.token_id, "/", "Sys.Audit")
    data = Api(rig).call("GET", "cluster/options")[1]
    assert data["user-tag-access"]["user-allow"] == "list"


@pytest.mark.fakepve_rig(time_scale=1.0)
def test_fast_forward_ends_the_tasks_under_way_and_not_later_ones(
    fakepve_server: FakePveRig,
) -> None:
    rig, api = fakepve_server, Api(fakepve_server)
    rig.seed_vm(100, "a", status="stopped")
    rig.set_task_secs("qmstart", 600.0)  # ten minutes of real time, unless cut short
    status, upid = api.call("POST", "nodes/pve1/qemu/100/status/start")
    assert status == 200

    def task_status(upid: str) -> str:
        return str(api.call("GET", f"nodes/pve1/tasks/{upid}/status")[1]["status"])

    assert task_status(upid) == "running"
    rig.fast_forward()
    deadline = time.monotonic() + 30
    while task_status(upid) == "running":
        assert time.monotonic() < deadline, "the task was not cut short"
        time.sleep(0.01)
    assert rig.vm(100).status == "running"
    api.call("POST", "nodes/pve1/qemu/100/status/stop", forceStop=1)  # untimed: at once
    rig.set_task_secs("qmstart", 600.0)
    status, later = api.call("POST", "nodes/pve1/qemu/100/status/start")
    time.sleep(0.2)
    assert task_status(later) == "running"  # a task started afterwards takes its time


def test_serve_writes_the_ready_file(tmp_path: Path) -> None:
    ready = tmp_path / "ready.json"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    cmd = [sys.executable, "-m", "tests.fakepve_rig", "serve", "--pve-version", "8"]
    proc = subprocess.Popen([*cmd, "--nodes", "2", "--ready-file", str(ready)], env=env)
    try:
        for _ in range(300):
            if ready.exists() or proc.poll() is not None:
                break
            time.sleep(0.1)
        info = json.loads(ready.read_text(encoding="utf-8"))
        assert ready.stat().st_mode & 0o077 == 0
        assert info["pid"] == proc.pid
        headers = {"Authorization": f"PVEAPIToken={info['token_id']}={info['token_secret']}"}
        r = requests.get(info["url"] + "/api2/json/nodes", headers=headers, verify=info["cafile"])
        assert sorted(n["node"] for n in r.json()["data"]) == ["pve1", "pve2"]
        version = requests.get(
            info["url"] + "/api2/json/version", headers=headers, verify=info["cafile"]
        ).json()["data"]["version"]
        assert version.startswith("8.")
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
