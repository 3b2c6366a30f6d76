"""What a clone-source base would save on the real Lima: ``limactl create`` of an image
(through Lima's download cache) against ``limactl clone`` of an unprovisioned base,
timed call by call, no boot (the decision in ``sand/backends/lima/create.py``):

    python bench/lima_base_cost.py [--compressed]   # root; the rig's Lima and image

The rig's Debian image (``tests/rig/limaimage.py``) is converted to qcow2 (with
``--compressed``, a compressed qcow2, the size of a cloud image) and served over HTTP
on 127.0.0.1, so each create goes through Lima's cache as a template image does. Lima
runs as the rig's user with a LIMA_HOME and a cache of its own (deleted afterwards).
"""

from __future__ import annotations

import argparse
import functools
import http.server
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sand.backends.lima import limayaml  # noqa: E402
from tests.rig import limaimage  # noqa: E402
from tests.rig.lima import LimaRig, rig  # noqa: E402

VMS = 3
VM_DISK = 20 << 30


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        del format, args


def _timed(lima: LimaRig, extra: dict[str, str], *args: str) -> float:
    start = time.monotonic()
    res = lima.run(["limactl", "--tty=false", *args], extra=extra, timeout=1800)
    if res.returncode != 0:
        raise SystemExit(f"limactl {args[0]} failed: {res.stderr[-2000:]}")
    return time.monotonic() - start


def _sets(settings: dict[str, object]) -> list[str]:
    return [f"--set={e}" for e in limayaml.set_expressions(settings)]


def measure(compressed: bool) -> dict[str, object]:
    lima = rig()
    image_dir = limaimage.built()
    if image_dir is None:
        raise SystemExit("the rig's image is not built: python3 -m tests.rig.limaimage build")
    work = Path(tempfile.mkdtemp(prefix="base-cost-", dir=lima.home))
    extra = {"LIMA_HOME": str(work / "lh"), "XDG_CACHE_HOME": str(work / "cache")}
    base = "sand-base-bench-00000000"
    try:
        image = work / "image.qcow2"
        flags = ["-c"] if compressed else []
        raw = image_dir / "rootfs.raw"
        subprocess.run(
            ["qemu-img", "convert", *flags, "-O", "qcow2", str(raw), str(image)], check=True
        )
        shutil.chown(work, lima.user)
        handler = functools.partial(_Quiet, directory=str(work))
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{server.server_address[1]}/{image.name}"
        security = limayaml.security_settings((), None)

        def create(name: str, disk: int) -> float:
            doc = limayaml.instance_config(
                image=url,
                user="dev",
                cpus=2,
                memory=2 << 30,
                disk=disk,
                ports=(),
                project="bench",
                instance=name,
            )
            path = work / f"{name}.yaml"
            path.write_text(limayaml.to_yaml(doc))
            path.chmod(0o644)
            return _timed(lima, extra, "create", f"--name={name}", *_sets(security), str(path))

        resources = limayaml.resource_settings(2, 2 << 30, VM_DISK)
        seconds: dict[str, float] = {"first create (fills Lima's cache)": create("c0", VM_DISK)}
        seconds["base create"] = create(base, limayaml.BASE_DISK)
        for i in range(1, VMS + 1):
            seconds[f"create {i}"] = create(f"c{i}", VM_DISK)
        for i in range(1, VMS + 1):
            sets = _sets({**resources, **security})
            seconds[f"clone {i}"] = _timed(lima, extra, "clone", base, f"k{i}", *sets)
        du = ["du", "-sm", str(work / "lh" / base)]
        used = subprocess.run(du, capture_output=True, text=True, check=True).stdout.split()[0]
        server.shutdown()
        return {"image MB": image.stat().st_size >> 20, "base disk MB": int(used), **seconds}
    finally:
        names = ["c0", base, *(f"{p}{i}" for p in "ck" for i in range(1, VMS + 1))]
        lima.run(["limactl", "--tty=false", "delete", "--force", *names], extra=extra)
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--compressed", action="store_true")
    args = parser.parse_args()
    for key, value in measure(args.compressed).items():
        shown = f"{value:.2f} s" if isinstance(value, float) else str(value)
        print(f"{key:36} {shown}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
