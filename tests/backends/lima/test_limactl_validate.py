"""Every lima.yaml sand writes passes the real ``limactl validate`` (Lima's own
``limayaml.Validate``): create, a base, clone ``--set``, edit ``--set``, rename, over
the port, image, mount and user shapes the manifest allows. No VM boots: only the
limactl the rig builds (``tests/rig/limabuild.py``), run as the rig's user since
limactl refuses root. The ``--set`` expressions are applied by Lima's own yq
(``limactl yq``), joined with `` | `` as limactl joins repeated ``--set``."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from sand.backends.lima import limayaml
from sand.desired import DesiredVM
from tests.backends.lima.conftest import PROJECT, one
from tests.required import missing
from tests.rig import lima as lima_rig
from tests.rig._util import RigError

SHAPES = {
    "plain": "  - name: vm1\n",
    "ports": "  - name: vm1\n    ports: [{guest: 3000, host: 13000}, {guest: 1, host: 65535},"
    " {guest: 65535, host: 1}, {guest: 21, host: 23}]\n",
    "template-uri": "  - name: vm1\n    image: template://debian-12\n",
    "template": "  - name: vm1\n    image: template:ubuntu-24.04\n",
    "url": "  - name: vm1\n    image: https://cloud.debian.org/images/debian-12-generic-amd64.qcow2\n",
    "user": "  - name: vm1\n    user: dev-9\n    cpus: 1\n    memory: 1GiB\n    disk: 10GiB\n",
    "big": "  - name: vm1\n    cpus: 64\n    memory: 256GiB\n    disk: 2TiB\n",
}


@pytest.fixture(scope="module")
def real() -> Iterator[tuple[lima_rig.LimaRig, Path]]:
    try:
        rig = lima_rig.rig()
    except RigError as exc:
        missing(f"the real limactl: {exc}")
    work = Path(tempfile.mkdtemp(prefix="sand-limactl-validate-"))
    work.chmod(0o755)  # the rig's user reads the files
    (work / "bundle").mkdir(mode=0o755)
    yield rig, work
    shutil.rmtree(work)


def _validate(
    real: tuple[lima_rig.LimaRig, Path], docs: Mapping[str, tuple[dict[str, Any], Sequence[str]]]
) -> None:
    rig, work = real
    files = []
    for label, (doc, sets) in docs.items():
        path = work / f"{label}.yaml"
        path.write_text(limayaml.to_yaml(doc, header=f"sand test: {label}"))
        os.chown(path, rig.uid, rig.gid)  # `limactl yq -i` writes it back
        if sets:
            done = rig.run(["limactl", "yq", "-i", " | ".join(sets), str(path)])
            assert done.returncode == 0, f"{label}: limactl yq: {done.stderr}"
        files.append(str(path))
    done = rig.run(["limactl", "--tty=false", "validate", *files])
    assert done.returncode == 0, done.stderr


def test_port_22_is_what_lima_refuses_and_sand_validate_refuses_first(real) -> None:
    """The harness reaches Lima's own rules: the forward sand's manifest refuses
    (tests/manifest/test_lima_limits.py) is refused by limactl too."""
    with pytest.raises(AssertionError, match="must not be 22"):
        rule = {"guestPort": 22, "hostPort": 2222, "hostIP": "127.0.0.1"}
        sets = limayaml.set_expressions({"portForwards": [rule]})
        _validate(real, {"port-22": (limayaml.vm_config(_vm("plain")), sets)})


def _vm(shape: str) -> DesiredVM:
    return one(SHAPES[shape])


def _bundle(work: Path) -> limayaml.BundleMount:
    return limayaml.BundleMount(location=str(work / "bundle"))


def _security(vm: DesiredVM, bundle: limayaml.BundleMount | None) -> list[str]:
    return limayaml.set_expressions(limayaml.security_settings(vm.ports, bundle))


def test_what_sand_creates_passes_limactl_validate(real) -> None:
    bundle = _bundle(real[1])
    docs: dict[str, tuple[dict[str, Any], Sequence[str]]] = {}
    for shape in SHAPES:
        vm = _vm(shape)
        docs[f"create-{shape}"] = (limayaml.vm_config(vm), _security(vm, None))
        docs[f"create-{shape}-bundle"] = (limayaml.vm_config(vm, bundle), _security(vm, bundle))
    _validate(real, docs)


def test_bases_and_the_clones_made_from_them_pass_limactl_validate(real) -> None:
    bundle = _bundle(real[1])
    docs: dict[str, tuple[dict[str, Any], Sequence[str]]] = {}
    for shape in SHAPES:
        vm = _vm(shape)
        name = f"sand-base-{PROJECT}-0123456789ab"  # a golden base's name
        base = limayaml.base_config(image=vm.image, user=vm.user, project=PROJECT, name=name)
        docs[f"base-{shape}"] = (base, _security(vm, None)[:-1] + _no_ports())
        clone = {
            **limayaml.vm_edit_settings(vm, bundle),
            f"param.{limayaml.PARAM_INSTANCE}": "vm1-sandnew-1a2b",
        }
        docs[f"clone-{shape}"] = (base, limayaml.set_expressions(clone))
    _validate(real, docs)


def test_edits_and_renames_pass_limactl_validate(real) -> None:
    docs: dict[str, tuple[dict[str, Any], Sequence[str]]] = {}
    before = _vm("plain")
    for shape in SHAPES:
        after = _vm(shape)
        edit = limayaml.vm_edit_settings(after, None)
        docs[f"edit-to-{shape}"] = (limayaml.vm_config(before), limayaml.set_expressions(edit))
    rename = {f"param.{limayaml.PARAM_INSTANCE}": "vm2"}
    docs["rename"] = (limayaml.vm_config(before), limayaml.set_expressions(rename))
    _validate(real, docs)


def _no_ports() -> list[str]:
    return limayaml.set_expressions({"portForwards": limayaml.forward_rules(())})
