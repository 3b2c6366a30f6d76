"""The limactl stand-in checked against the real limactl: one scripted sequence (no
boot: create from a local image, list, edit, clone, rename, protect, delete, and
what Lima refuses) run against both, comparing exit codes, the shape of
``list --json`` and the class of each error. The stand-in stays for fault injection;
this keeps it honest about everything that needs no running VM."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import pytest

from sand.backends.lima import limayaml
from tests.limactl_standin import StandIn
from tests.required import missing
from tests.rig import lima as lima_rig
from tests.rig._util import RigError

# What an error is about, whichever words either side uses around it.
ERROR_CLASSES = {
    "port 22": re.compile(r"must not be 22"),
    "protected": re.compile(r"protected"),
    "exists": re.compile(r"already exists"),
}


@dataclass(frozen=True)
class Outcome:
    rc: int
    out: str
    err: str

    def listed(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.out.splitlines() if line.strip()]

    def error_class(self) -> str | None:
        return next((k for k, rx in ERROR_CLASSES.items() if rx.search(self.err)), None)


class Limactl(Protocol):
    home: Path

    def __call__(self, *args: str, stdin: str | None = None) -> Outcome: ...


@pytest.fixture(scope="module")
def work() -> Iterator[Path]:
    where = Path(tempfile.mkdtemp(prefix="sand-limactl-contract-"))
    where.chmod(0o755)
    image = where / "image.qcow2"
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", image, "64M"], check=True)
    image.chmod(0o644)
    yield where
    shutil.rmtree(where)


def real_limactl(work: Path) -> Limactl:
    try:
        rig = lima_rig.rig()
    except RigError as exc:
        missing(f"the real limactl: {exc}")
    home = work / "real-home"
    home.mkdir()
    os.chown(home, rig.uid, rig.gid)

    def call(*args: str, stdin: str | None = None) -> Outcome:
        argv = ["env", f"LIMA_HOME={home}", "limactl", "--tty=false", *args]
        done = subprocess.run(
            rig.argv(argv), input=stdin, capture_output=True, text=True, timeout=120, cwd="/"
        )
        return Outcome(done.returncode, done.stdout, done.stderr)

    call.home = home  # type: ignore[attr-defined]
    return call  # type: ignore[return-value]


def standin_limactl(work: Path) -> Limactl:
    standin = StandIn.create(work / "standin", lima_home=work / "standin-home")

    def call(*args: str, stdin: str | None = None) -> Outcome:
        done = subprocess.run(
            [str(standin.executable), "--tty=false", *args],
            input=stdin,
            env=standin.env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
        return Outcome(done.returncode, done.stdout, done.stderr)

    call.home = standin.lima_home  # type: ignore[attr-defined]
    return call  # type: ignore[return-value]


def script(limactl: Limactl, image: Path) -> dict[str, Any]:
    """The sequence; returns what is compared (exit codes, shapes, error classes)."""
    doc = limayaml.instance_config(
        image=str(image),
        user="claude",
        cpus=1,
        memory=1 << 30,
        disk=10 << 30,
        ports=[],
        project="demo",
        instance="vm1",
    )
    body = limayaml.to_yaml(doc)
    port22 = {**doc, "portForwards": [{"guestPort": 22, "hostPort": 2222, "hostIP": "127.0.0.1"}]}
    seen: dict[str, Any] = {}

    def step(label: str, *args: str, stdin: str | None = None) -> Outcome:
        got = limactl(*args, stdin=stdin)
        seen[label] = (got.rc, got.error_class())
        return got

    step("list-empty", "list", "--json")
    step("create", "create", "--name=vm1", "-", stdin=body)
    (listed,) = step("list-one", "list", "--json", "vm1").listed()
    seen["list-keys"] = sorted(listed)
    seen["list-values"] = {k: listed[k] for k in ("name", "status", "cpus", "memory", "disk")}
    seen["list-param"] = listed["config"].get("param")
    step("create-again", "create", "--name=vm1", "-", stdin=body)
    step("create-port-22", "create", "--name=vm22", "-", stdin=limayaml.to_yaml(port22))
    step("edit", "edit", "--set", ".cpus = 3", "vm1")
    step("edit-port-22", "edit", "--set", '.portForwards = [{"guestPort": 22}]', "vm1")
    (edited,) = limactl("list", "--json", "vm1").listed()
    seen["edited-cpus"] = edited["cpus"]
    step("clone", "clone", "vm1", "vm2", "--set", f'.param.{limayaml.PARAM_INSTANCE} = "vm2"')
    step("rename", "rename", "vm2", "vm3", "--set", f'.param.{limayaml.PARAM_INSTANCE} = "vm3"')
    step("protect", "protect", "vm1")
    step("delete-protected", "delete", "vm1")
    step("unprotect", "unprotect", "vm1")
    step("delete", "delete", "vm1")
    step("delete-missing", "delete", "nosuch")
    seen["names"] = [i["name"] for i in limactl("list", "--json").listed()]
    (renamed,) = limactl("list", "--json", "vm3").listed()
    seen["renamed-param"] = renamed["config"].get("param")
    step("delete-renamed", "delete", "vm3")
    # A create killed as it wrote lima.yaml leaves the file empty: listed with no config
    # (sand's recovery reads that as half-made and removes it).
    cut = limactl.home / "cut1"
    cut.mkdir(mode=0o755)
    (cut / "lima.yaml").touch(mode=0o644)
    (listed,) = step("list-cut", "list", "--json", "cut1").listed()
    seen["cut-keys"] = sorted(listed)
    seen["cut-values"] = {k: listed[k] for k in ("name", "status", "errors")}
    shutil.rmtree(cut)
    return seen


def test_the_standin_answers_as_the_real_limactl_does(work: Path) -> None:
    image = work / "image.qcow2"
    real = script(real_limactl(work), image)
    standin = script(standin_limactl(work), image)
    assert standin == real
    # And the sequence proves something: failures happened, of the expected classes.
    assert real["create-port-22"] == (1, "port 22")
    assert real["delete-protected"] == (1, "protected")
