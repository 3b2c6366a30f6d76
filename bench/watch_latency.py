"""Watch mode: time from a manifest save to the start of the run it triggers,
and to the printed plan, with the default 0.5 s debounce.

    python bench/watch_latency.py [--saves 5]

A `sand apply --watch` process runs against fakepve; each save renames a new
manifest over the old one (as editors do) and the clock stops when the watch
process reports the run and, later, the end of the plan it printed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.fakepve_rig.rig import FakePveRig  # noqa: E402


def measure(saves: int) -> tuple[list[float], list[float]]:
    from fakepve.certs import make_cert

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        pki = make_cert(tmp, hosts=("127.0.0.1",))[:2]
        rig = FakePveRig(pki, work / "pve")
        manifest = work / "sand.yaml"

        def save(n: int) -> None:
            data = rig.manifest([{"name": "w-1", "cpus": 1 + n % 2}])
            staged = work / "sand.yaml.tmp"
            staged.write_text(yaml.safe_dump(data))
            os.replace(staged, manifest)

        save(0)
        env = {**os.environ, "SAND_STATE_DIR": str(work / "state"), "NO_COLOR": "1"}
        proc = subprocess.Popen(
            [sys.executable, "-m", "sand", "apply", "--watch", "--interval", "3600"],
            cwd=work,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        events: list[tuple[float, str]] = []

        def pump(stream: object) -> None:
            for line in stream:  # type: ignore[attr-defined]
                events.append((time.perf_counter(), line))

        for stream in (proc.stdout, proc.stderr):
            threading.Thread(target=pump, args=(stream,), daemon=True).start()

        def wait(marker: str, after: float) -> float:
            deadline = time.perf_counter() + 60
            while time.perf_counter() < deadline:
                for stamp, line in list(events):
                    if stamp >= after and marker in line:
                        return stamp
                time.sleep(0.005)
            raise RuntimeError(f"no {marker!r} in watch output")

        try:
            wait("Apply complete", 0.0)
            time.sleep(1.0)
            to_run, to_plan = [], []
            for n in range(1, saves + 1):
                saved = time.perf_counter()
                save(n)
                run_started = wait("(manifest saved)", saved)
                planned = wait("Plan: ", saved)
                wait("Apply complete", saved)
                to_run.append(run_started - saved)
                to_plan.append(planned - saved)
                time.sleep(0.8)
            return to_run, to_plan
        finally:
            proc.terminate()
            proc.wait(timeout=10)
            rig.stop()


def rows(saves: int = 5) -> list[tuple[str, str]]:
    to_run, to_plan = measure(saves)
    return [
        (
            "save → run starts (median)",
            f"{statistics.median(to_run) * 1000:.0f} ms (debounce 500 ms; target ≤ 1 s)",
        ),
        ("save → plan printed (median)", f"{statistics.median(to_plan) * 1000:.0f} ms"),
        ("save → plan printed (worst)", f"{max(to_plan) * 1000:.0f} ms over {saves} saves"),
    ]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--saves", type=int, default=5)
    args = parser.parse_args()
    for key, value in rows(args.saves):
        print(f"{key:32} {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
