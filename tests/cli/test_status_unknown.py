"""`sand status` when a backend cannot be observed: its VMs are unknown, never absent.

Real `python -m sand` subprocesses; the VMs exist for real (fakepve's state, the limactl
stand-in's instances) while sand cannot see them, and must say so and exit 1.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import yaml

from tests.cli.helpers import Sand
from tests.limactl_standin import StandIn


def closed_port() -> int:
    """A port nothing listens on (bound, read, released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def assert_unknown_text(out: str, vms: list[str], backend: str, reason: str) -> None:
    rows = {line.split()[0]: line for line in out.splitlines()[1:] if line.split()}
    for vm in vms:
        assert "unknown (" in rows[vm], out
        assert "absent" not in rows[vm].split("unknown (")[1], out  # OBSERVED is not absent
        assert "Unknown" in rows[vm] and "False" not in rows[vm], out
    assert f"Backend {backend!r} could not be observed" in out, out
    assert reason in out, out


def assert_unknown_json(text: str, vms: list[str], backend: str, reason: str) -> None:
    report = json.loads(text)
    assert [b["backend"] for b in report["unknown_backends"]] == [backend]
    assert reason in report["unknown_backends"][0]["reason"]
    rows = {r["vm"]: r for r in report["vms"]}
    assert sorted(rows) == sorted(vms)
    for vm in vms:
        observed = rows[vm]["observed"]
        assert observed["power"] == "unknown" and reason in observed["reason"]
        assert rows[vm]["conditions"]["Synced"] == "Unknown"
        assert rows[vm]["conditions"]["Healthy"] == "Unknown"
    assert "absent" not in text


# --- Proxmox: the API is down --------------------------------------------------------------


def test_pve_down_makes_every_vm_unknown_text_and_json(tmp_path: Path, fakepve_server) -> None:
    rig = fakepve_server
    sand = Sand(tmp_path)
    sand.write(rig.manifest([{"name": "web-1"}, {"name": "web-2"}]))
    done = sand.run("apply", "--auto-approve")
    assert done.returncode == 0, done.stdout + done.stderr
    # web-2 leaves the manifest (not applied): sand still knows it made it. web-1 now
    # wants provisioning, which nobody can check either.
    sand.write(rig.manifest([{"name": "web-1", "provision": True}], port=closed_port()))

    proc = sand.run("status")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert_unknown_text(proc.stdout, ["web-1", "web-2"], "pve", "connection refused by 127.0.0.1")

    proc = sand.run("status", "--json")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert_unknown_json(proc.stdout, ["web-1", "web-2"], "pve", "connection refused by 127.0.0.1")
    rows = {r["vm"]: r for r in json.loads(proc.stdout)["vms"]}
    assert rows["web-1"]["conditions"]["Provisioned"] == "Unknown"
    assert rows["web-2"]["desired"] is None and rows["web-2"]["identity"] is None
    # Both machines are still there: "absent" would have been a lie.
    assert sorted(v.name for v in rig.vms()) == ["web-1", "web-2"]


def test_a_reachable_pve_still_reports_status_with_exit_0(tmp_path: Path, fakepve_server) -> None:
    sand = Sand(tmp_path)
    sand.write(fakepve_server.manifest([{"name": "web-1"}]))
    assert sand.run("apply", "--auto-approve").returncode == 0
    proc = sand.run("status")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "unknown" not in proc.stdout and "could not be observed" not in proc.stdout
    assert "running" in proc.stdout


# --- Lima: limactl is missing --------------------------------------------------------------


def lima_manifest(limactl: str | None = None) -> dict[str, object]:
    backend: dict[str, object] = {"type": "lima", "lima_home": "./lima"}
    if limactl is not None:
        backend["limactl"] = limactl
    return {
        "apiVersion": "sand/v1",
        "project": "statuslima",
        "backends": {"laptop": backend},
        "defaults": {"image": "debian-12", "provision": False, "disk": "20GiB", "memory": "2GiB"},
        "vms": [{"name": "a"}, {"name": "b", "state": "stopped"}],
    }


def test_missing_limactl_makes_every_vm_unknown_text_and_json(tmp_path: Path) -> None:
    standin = StandIn.create(tmp_path, lima_home=tmp_path / "lima")
    standin.configure(require_tty_false=True, host_user="claude")
    sand = Sand(tmp_path)
    sand.manifest.write_text(yaml.safe_dump(lima_manifest(str(standin.executable))))
    done = sand.run("apply", "--auto-approve")
    assert done.returncode == 0, done.stdout + done.stderr
    assert {"a", "b"} <= set(standin.instances())

    missing = tmp_path / "bin" / "no-such-limactl"
    sand.manifest.write_text(yaml.safe_dump(lima_manifest(str(missing))))
    proc = sand.run("status")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert_unknown_text(proc.stdout, ["a", "b"], "laptop", "not found")
    assert str(missing) in proc.stdout

    proc = sand.run("status", "--json")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert_unknown_json(proc.stdout, ["a", "b"], "laptop", "not found")
    assert {"a", "b"} <= set(standin.instances())  # they exist; sand only could not look

    doctor = sand.run("doctor")
    assert doctor.returncode == 1, doctor.stdout + doctor.stderr
    assert f"laptop: error: limactl {missing} (the backend's `limactl:`) does not exist" in (
        doctor.stdout
    )
    assert "laptop: ok" not in doctor.stdout


def test_one_unknown_backend_does_not_hide_the_other(tmp_path: Path, fakepve_server) -> None:
    standin = StandIn.create(tmp_path, lima_home=tmp_path / "lima")
    standin.configure(require_tty_false=True, host_user="claude")
    data = fakepve_server.manifest([{"name": "web-1", "backend": "pve"}])
    data["backends"]["laptop"] = {
        "type": "lima",
        "lima_home": "./lima",
        "limactl": str(tmp_path / "gone" / "limactl"),
    }
    data["vms"].append({"name": "a", "backend": "laptop", "image": "debian-12"})
    sand = Sand(tmp_path)
    sand.write(data)
    proc = sand.run("status", "--json")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert [b["backend"] for b in report["unknown_backends"]] == ["laptop"]
    rows = {r["vm"]: r for r in report["vms"]}
    assert rows["a"]["observed"]["power"] == "unknown"
    assert rows["web-1"]["observed"] is None  # really not there: pve was observed
    assert rows["web-1"]["conditions"]["Synced"] is False

    doctor = sand.run("doctor")
    assert doctor.returncode == 1, doctor.stdout + doctor.stderr
    lines = doctor.stdout.splitlines()
    assert lines[-1] == "pve: ok", lines  # ok lines last, only for the healthy backend
    assert any(line.startswith("laptop: error: limactl ") for line in lines[:-1]), lines
