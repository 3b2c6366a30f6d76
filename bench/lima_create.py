"""Cold creates on Lima, ``limactl`` call by call: N VMs created as ``sand apply``
creates them (its observation first, then the engine), the limactl stand-in's
invocation log (``tests/limactl_standin``) grouped by subcommand, per VM.

    python bench/lima_create.py [--sizes 1,10,50]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.summary import record  # noqa: E402
from sand.apply.engine import execute  # noqa: E402
from sand.backends.lima import LimaBackend, make_lima_backend  # noqa: E402
from sand.desired import build_desired  # noqa: E402
from sand.manifest import parse_manifest  # noqa: E402
from sand.manifest.backends import LimaConfig  # noqa: E402
from sand.plan import make_plan  # noqa: E402
from sand.state.journal import Journal  # noqa: E402
from tests.limactl_standin import StandIn  # noqa: E402

MANIFEST = """\
apiVersion: sand/v1
project: bench
backends:
  laptop: {type: lima}
defaults: {image: debian-12, cpus: 1, memory: 1GiB, disk: 10GiB, provision: false}
vms:
"""


async def _no_provisioning(*_args: object) -> None:
    raise AssertionError("benchmark runs with provision: false")


@contextlib.contextmanager
def _environ(**changes: str) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in changes}
    os.environ.update(changes)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def measure(vms: int) -> Counter[str]:
    """The limactl calls of one cold apply of ``vms`` creates, by subcommand (the
    plan's observation not counted: it is the one listing every plan makes)."""
    with tempfile.TemporaryDirectory() as tmp:
        standin = StandIn.create(Path(tmp) / "standin")
        standin.configure(require_tty_false=True, host_user="claude")
        env = {"PATH": standin.path, "LIMA_HOME": str(standin.lima_home)}
        env["LIMACTL_STANDIN_ALLOW_ROOT"] = "1"  # Lima refuses root; the bench may run as it
        with _environ(**env, SAND_STATE_DIR=str(Path(tmp) / "state")):
            text = MANIFEST + "".join(f"  - name: c-{i:03d}\n" for i in range(vms))
            state = build_desired(parse_manifest(text))
            config = parse_manifest(text).backends["laptop"]
            assert isinstance(config, LimaConfig)
            backend = make_lima_backend("laptop", config, project="bench", manifest_dir=Path(tmp))
            assert isinstance(backend, LimaBackend)
            journal = Journal(Path(tmp) / "journal.jsonl")

            async def run() -> bool:
                try:
                    obs = await backend.observe(state.vms)
                    plan = make_plan(state, {"laptop": obs}, {"laptop": backend.capabilities})
                    standin.clear_log()
                    result = await execute(plan, {"laptop": backend}, journal, _no_provisioning)
                    return result.ok
                finally:
                    await backend.close()

            ok = asyncio.run(run())
            assert ok and len([i for i in standin.instances() if i.startswith("c-")]) == vms
            return Counter(c or "--version" for c in standin.commands())


def rows(sizes: tuple[int, ...] = (1, 10, 50)) -> list[tuple[str, str]]:
    out = []
    for n in sizes:
        calls = measure(n)
        total = sum(calls.values())
        out.append((f"N={n} cold create: limactl calls per VM", f"{total / n:.2f} ({total})"))
        out += [(f"  limactl {k}", f"{v / n:.2f}") for k, v in calls.most_common()]
        record(f"Lima cold create, N={n}", total / n, "calls/VM", goal="no redundant call")
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="1,10,50")
    args = parser.parse_args()
    for key, value in rows(tuple(int(s) for s in args.sizes.split(",") if s)):
        print(f"{key:42} {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
