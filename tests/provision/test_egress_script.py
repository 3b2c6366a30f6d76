"""The guest's egress step, run for real as root in a mount namespace whose /etc is the
test's (a tmpfs: this machine's own is never touched): a Lima VM with a deny policy has
its software told the egress proxy (``/etc/environment`` for every session, apt's own
config), its broker's forward reached directly; without the policy it is all removed
again, the rest of ``/etc/environment`` kept."""

from __future__ import annotations

import os
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from sand.manifest.egress import EgressPolicy
from sand.provision.bundle import Bundle
from sand.provision.steps import Step, egress_step, provision_steps
from tests.provision.helpers import make_vm
from tests.provision.identity_sandbox import require_namespaces

SCRIPT = Bundle().root / "egress.sh"
SANDBOX = """
set -e
mount -t tmpfs tmpfs /etc
mkdir -p /etc/apt/apt.conf.d
cp -a "$GUEST/." /etc/
set +e
/bin/bash "$SCRIPT" "$@"
rc=$?
rm -rf "$GUEST" && cp -a /etc "$GUEST"
exit $rc
"""
CLOSED = EgressPolicy("deny", ("github.com",), (), (443,))
APT = "apt/apt.conf.d/80sand-egress-proxy"


@pytest.fixture(autouse=True)
def _root_and_namespaces() -> None:
    require_namespaces()


def run(guest: Path, step: Step) -> list[str]:
    """The step in the sandbox; what it said it changed."""
    argv = ["unshare", "--mount", "--propagation", "private", "bash", "-c", SANDBOX, "-"]
    env = {**os.environ, "GUEST": str(guest), "SCRIPT": str(SCRIPT)}
    proc = subprocess.run(
        [*argv, *step.argv[2:]],
        env=env,
        input=step.stdin.decode(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return [line for line in proc.stdout.splitlines() if line.startswith("sand:changed")]


def test_a_closed_vm_is_told_the_proxy_and_an_opened_one_forgets_it(tmp_path: Path) -> None:
    guest = tmp_path / "etc"
    guest.mkdir()
    (guest / "environment").write_text('PATH="/usr/bin:/bin"\nLANG=C.UTF-8\n')
    (closed,) = egress_step(make_vm(egress=CLOSED))
    assert run(guest, closed) == ["sand:changed /etc/environment", f"sand:changed /etc/{APT}"]
    url = "http://192.168.5.4:3128"
    assert (guest / "environment").read_text().splitlines() == [
        'PATH="/usr/bin:/bin"',
        "LANG=C.UTF-8",
        *(f"{key}={url}" for key in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY")),
        "no_proxy=192.168.5.5",
        "NO_PROXY=192.168.5.5",
    ]
    assert url in (guest / APT).read_text()
    assert run(guest, closed) == []  # nothing changed: nothing said
    (opened,) = egress_step(make_vm())
    assert run(guest, opened) == ["sand:changed /etc/environment", f"sand:changed /etc/{APT}"]
    assert (guest / "environment").read_text() == 'PATH="/usr/bin:/bin"\nLANG=C.UTF-8\n'
    assert not (guest / APT).exists()
    assert run(guest, opened) == []


def test_the_step_comes_before_anything_the_guest_fetches_and_on_lima_only() -> None:
    names = [s.name for s in provision_steps(make_vm(egress=CLOSED), {})]
    assert names.index("egress") == 1 and names.index("egress") < names.index("packages")
    assert egress_step(replace(make_vm(), backend_type="proxmox")) == []


def test_a_proxmox_vm_is_told_its_proxy_with_its_credential_kept_out_of_the_argv(
    tmp_path: Path,
) -> None:
    guest = tmp_path / "etc"
    guest.mkdir()
    (guest / "environment").write_text("LANG=C.UTF-8\n")
    vm = replace(make_vm(egress=CLOSED), backend_type="proxmox", egress_proxy="192.0.2.1:3128")
    url = "http://agent-1:c2VjcmV0LWNyZWQ@192.0.2.1:3128"
    (told,) = egress_step(vm, url, "192.0.2.1")
    assert "c2VjcmV0LWNyZWQ" not in " ".join(told.argv)
    assert run(guest, told) == ["sand:changed /etc/environment", f"sand:changed /etc/{APT}"]
    lines = (guest / "environment").read_text().splitlines()
    assert f"https_proxy={url}" in lines and "no_proxy=192.0.2.1" in lines
    assert f'Acquire::https::Proxy "{url}";' in (guest / APT).read_text()
    # The policy gone (or its domains): the step takes back what it wrote.
    (untold,) = egress_step(replace(vm, egress=EgressPolicy("deny", (), ("10.0.0.0/8",), (443,))))
    assert run(guest, untold) == ["sand:changed /etc/environment", f"sand:changed /etc/{APT}"]
    assert (guest / "environment").read_text() == "LANG=C.UTF-8\n"
