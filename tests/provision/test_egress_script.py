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
        [*argv, *step.argv[2:]], env=env, capture_output=True, text=True, timeout=60
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
