"""A cold apply's host-side bookkeeping: the journal records and the progress lines of
N creates, without a backend (its requests are ``bench/create_throughput.py``'s).

    python bench/cold_bookkeeping.py [--sizes 200,1000] [--runs 5]

Each VM begins an intent, records a task and a step for each of four steps with a
progress line each, and finishes, as the engine does, its creates interleaved on one
event loop; the lines go to a file, as ``sand apply`` to a log. Measured in a process
of the tree's own: the CPU time of the work (imports left out), how often the journal
file was opened (Python's audit events) and how often the progress stream was flushed
(each a write to the file).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.core import before_tree, installed_env  # noqa: E402
from bench.summary import record  # noqa: E402

PROBE = """
import asyncio, json, sys, tempfile, time
from pathlib import Path
from sand.apply.events import Phase, StepEvent
from sand.cli.progress import progress_view
from sand.state.journal import Journal

vms = int(sys.argv[1])
work = Path(sys.argv[2])
path = work / "journal.jsonl"
opens = []
sys.addaudithook(lambda event, args: opens.append(1)
                 if event == "open" and args and str(args[0]) == str(path) else None)

class Counted:
    def __init__(self, out):
        self.out, self.flushes = out, 0
    def write(self, text):
        return self.out.write(text)
    def flush(self):
        self.flushes += 1
        self.out.flush()
    def isatty(self):
        return False

async def main(journal, view):
    async def create(i):
        entry = await journal.begin_async("create", backend="pve", vm=f"vm-{i}", identity=str(i))
        for step in ("clone", "configure", "resize", "start"):
            view.on_step(StepEvent(f"vm-{i}", Phase.CREATING, f"{step} of template 9000"))
            journal.task(entry, f"UPID:pve1:{i}:{step}")
            journal.step(entry, step)
            await asyncio.sleep(0)
        journal.finish(entry)
        view.on_step(StepEvent(f"vm-{i}", Phase.DONE))
    await asyncio.gather(*(create(i) for i in range(vms)))

with open(work / "progress.log", "w") as log:
    out = Counted(log)
    started = time.process_time()
    with progress_view("lines", out) as view:
        asyncio.run(main(Journal(path), view))
    cpu = time.process_time() - started
print(json.dumps({"cpu": cpu, "opens": len(opens), "flushes": out.flushes}))
"""


def _once(tree: Path | str, vms: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run(
            [sys.executable, "-c", PROBE, str(vms), tmp],
            env=installed_env(tree),
            cwd=tree,  # -c puts the working directory first on sys.path: the tree's sand
            capture_output=True,
            text=True,
            check=True,
        )
    result: dict[str, float] = json.loads(out.stdout)
    return result


def measure(vms: int, runs: int, before: str | None) -> dict[str, dict[str, float]]:
    """Medians of ``runs`` per tree (the trees in turn, run after run)."""
    trees: dict[str, Path | str] = {"now": ROOT, **({"before": before} if before else {})}
    for tree in trees.values():
        _once(tree, 1)  # compiles the tree's bytecode: not counted
    seen: dict[str, list[dict[str, float]]] = {key: [] for key in trees}
    for _ in range(runs):
        for key, tree in trees.items():
            seen[key].append(_once(tree, vms))
    return {
        key: {name: statistics.median(r[name] for r in results) for name in results[0]}
        for key, results in seen.items()
    }


def rows(
    sizes: tuple[int, ...] = (200, 1000), runs: int = 5, before: str | None = None
) -> list[tuple[str, str]]:
    before = before or before_tree()
    out = []
    for vms in sizes:
        m = measure(vms, runs, before)
        now, then = m["now"], m.get("before")
        records = vms * 10  # intent, 4 tasks, 4 steps, outcome
        name = f"cold apply bookkeeping, N={vms} ({records} journal records, {vms * 5} lines)"
        record(name, now["cpu"] * 1000, "ms", before=then["cpu"] * 1000 if then else None)
        for what, unit, goal in (
            ("opens", "journal opens", "1 a run (issue 41)"),
            ("flushes", "progress flushes", "batched (issue 41)"),
        ):
            said_before = then[what] if then else None
            record(f"  {unit}, N={vms}", now[what], what, before=said_before, goal=goal)
        said = (
            f"CPU {now['cpu'] * 1000:.0f} ms, {now['opens']:.0f} journal opens, "
            f"{now['flushes']:.0f} progress flushes"
        )
        if then:
            said += (
                f"; before: CPU {then['cpu'] * 1000:.0f} ms, {then['opens']:.0f} opens, "
                f"{then['flushes']:.0f} flushes"
            )
        out.append((f"N={vms} creates", said))
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="200,1000")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--before", help="another checkout's root, to compare with")
    args = parser.parse_args()
    sizes = tuple(int(n) for n in args.sizes.split(",") if n)
    for key, value in rows(sizes, args.runs, args.before):
        print(f"{key:20} {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
