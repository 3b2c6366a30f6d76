"""`sand ui`: how soon the board draws, and whether a big refresh holds a key.

    python bench/ui_board.py [--first-frame-vms 200] [--refresh-vms 1000] [--runs 3]

First frame: the real `python -m sand ui` on an 80x24 pseudo-terminal against a
converged fakepve fleet; the clock runs from spawning the process to the first
frame (the board's title on the terminal) and, beside it, to the first row of the
first observation. Target: first frame within 1 s on 200 VMs.

Key latency: the board (Textual's headless pilot, in a process of its own) over a converged
fakepve fleet, with a key sent every 20 ms from another thread (j, k, ...; as a
terminal sends them) through the first observation (whose thousand rows are all new
to the table) and then five refreshes back to back, each key timed from being sent
until its handler ran; the two periods are reported apart. The refresh runs in the
board's observer process (as in sand ui); the UI thread only draws its rows, a chunk
at a time. Target: no key waits on a refresh.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import select
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
REFRESHES = 5  # refreshes after the first, back to back, while keys are sent
sys.path.insert(0, str(ROOT))

from tests.fakepve_rig.rig import FakePveRig  # noqa: E402


def fleet(work: Path, vms: int) -> tuple[FakePveRig, Path]:
    from fakepve.certs import make_cert

    pki = make_cert(str(work), hosts=("127.0.0.1",))[:2]
    rig = FakePveRig(pki, work / "pve")
    entries = [{"name": f"vm-{i:04d}"} for i in range(vms)]
    for i, vm in enumerate(rig.desired(entries)):
        rig.seed_managed(vm, 1000 + i)
    manifest = work / "sand.yaml"
    manifest.write_text(yaml.safe_dump(rig.manifest(entries)))
    return rig, manifest


def first_frame(vms: int, runs: int) -> dict[str, float]:
    import fcntl
    import struct
    import subprocess
    import termios

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        rig, manifest = fleet(work, vms)
        env = {**os.environ, "SAND_STATE_DIR": str(work / "state"), "TERM": "xterm-256color"}
        frames, rows = [], []
        try:
            for _ in range(runs):
                master, slave = os.openpty()
                fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
                started = time.perf_counter()
                proc = subprocess.Popen(
                    [sys.executable, "-m", "sand", "ui", "-f", str(manifest)],
                    stdin=slave, stdout=slave, stderr=slave, env=env, cwd=work,
                    start_new_session=True,
                )  # fmt: skip
                os.close(slave)
                seen, frame, row = bytearray(), None, None
                while row is None and time.perf_counter() - started < 60:
                    if select.select([master], [], [], 0.05)[0]:
                        seen += os.read(master, 65536)
                    now = time.perf_counter() - started
                    if frame is None and "sand ui ·".encode() in seen:
                        frame = now
                    if b"vm-0000" in seen:
                        row = now
                os.write(master, b"q")
                proc.wait(timeout=30)
                os.close(master)
                assert frame is not None and row is not None, bytes(seen[-400:])
                frames.append(frame)
                rows.append(row)
        finally:
            rig.stop()
    return {"frame": statistics.median(frames), "rows": statistics.median(rows)}


def key_latency(vms: int) -> dict[str, Any]:
    """The board runs in a child process (fakepve stays here, as a PVE host is
    elsewhere: its server threads must not share the board's interpreter)."""
    import json
    import subprocess

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        rig, manifest = fleet(work, vms)
        env = {**os.environ, "SAND_STATE_DIR": str(work / "state")}
        try:
            child = subprocess.run(
                [sys.executable, __file__, "--keys-child", str(manifest)],
                env=env, capture_output=True, text=True, timeout=600, check=True,
            )  # fmt: skip
        finally:
            rig.stop()
    result: dict[str, Any] = json.loads(child.stdout.strip().splitlines()[-1])
    return result


async def _press_during_refreshes(manifest: Path) -> dict[str, Any]:
    """Keys sent from another thread every 20 ms (as a terminal would send them), each
    timed until its handler ran, for as long as three refreshes take to be drawn."""
    import threading

    from textual import events

    from sand.cli.ui.app import Board
    from sand.cli.ui.fleet import Fleet
    from sand.cli.ui.observer import Observer

    observer = Observer(manifest)  # as sand ui observes: in a child process
    app = Board(Fleet(manifest, observer=observer), interval=3600)
    sent: list[float] = []
    handled: list[float] = []
    refresh_seconds: list[float] = []
    draws: list[float] = []
    show, down, up = app.show_snapshot, app.action_cursor_down, app.action_cursor_up

    def timed_show(snapshot: Any) -> None:
        started = time.perf_counter()
        show(snapshot)
        draws.append(time.perf_counter() - started)
        refresh_seconds.append(snapshot.seconds)

    def on_down() -> None:
        handled.append(time.perf_counter())
        down()

    def on_up() -> None:
        handled.append(time.perf_counter())
        up()

    app.show_snapshot = timed_show  # type: ignore[method-assign]
    app.action_cursor_down = on_down  # type: ignore[method-assign]
    app.action_cursor_up = on_up  # type: ignore[method-assign]
    stop = threading.Event()
    async with app.run_test(size=(80, 24)) as pilot:
        driver = app._driver
        assert driver is not None

        def typist() -> None:
            while not stop.is_set():
                key = "j" if len(sent) % 2 == 0 else "k"
                sent.append(time.perf_counter())
                driver.send_message(events.Key(key, key))
                time.sleep(0.02)

        thread = threading.Thread(target=typist, daemon=True)
        thread.start()
        table = app.query_one("#table")
        while app.state.snapshot is None or table.row_count < len(app.state.rows):  # type: ignore[attr-defined]
            await asyncio.sleep(0.01)
        first_done = time.perf_counter()  # the first observation drawn, all its rows
        for n in range(2, REFRESHES + 2):
            app.action_refresh()
            while len(draws) < n or app.jobs.refreshing:
                await asyncio.sleep(0.01)
        await pilot.pause(0.3)
        stop.set()
        thread.join()
        await pilot.pause(0.3)
        rows = table.row_count  # type: ignore[attr-defined]
    observer.close()
    pairs = list(zip(sent, handled, strict=False))
    first = sorted(h - s for s, h in pairs if s < first_done)
    later = sorted(h - s for s, h in pairs if s >= first_done)
    return {
        "first": _stats(first),
        "later": _stats(later),
        "refresh": statistics.median(refresh_seconds[1:] or refresh_seconds),
        "draw": max(draws),
        "rows": rows,
    }


def _stats(latencies: list[float]) -> dict[str, float]:
    return {
        "presses": len(latencies),
        "median": statistics.median(latencies),
        "p99": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
        "max": latencies[-1],
    }


def _said(stats: dict[str, float]) -> str:
    return (
        f"{stats['presses']:.0f} keys: median {stats['median'] * 1000:.0f} ms, "
        f"p99 {stats['p99'] * 1000:.0f} ms, max {stats['max'] * 1000:.0f} ms"
    )


def rows(
    first_frame_vms: int = 200, refresh_vms: int = 1000, runs: int = 3
) -> list[tuple[str, str]]:
    f = first_frame(first_frame_vms, runs)
    k = key_latency(refresh_vms)
    return [
        (
            f"first frame, {first_frame_vms} VMs (pty, 80x24)",
            f"{f['frame'] * 1000:.0f} ms after launch (median of {runs}; target < 1000 ms)",
        ),
        ("  first rows drawn", f"{f['rows'] * 1000:.0f} ms (the first observation done)"),
        (
            f"keys during {REFRESHES} refreshes of {refresh_vms} VMs",
            _said(k["later"]),
        ),
        ("  ... during the first observation and its rows", _said(k["first"])),
        ("  one refresh (observer process)", f"{k['refresh'] * 1000:.0f} ms"),
        (f"  handing {k['rows']} rows to the table", f"{k['draw'] * 1000:.0f} ms at most"),
    ]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--first-frame-vms", type=int, default=200)
    parser.add_argument("--refresh-vms", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--keys-child", metavar="MANIFEST", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.keys_child:
        import json

        print(json.dumps(asyncio.run(_press_during_refreshes(Path(args.keys_child)))))
        return 0
    for key, value in rows(args.first_frame_vms, args.refresh_vms, args.runs):
        print(f"{key:48} {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
