"""The journal file is opened once per run, not once per record, and a record still
reaches the file a reader (or the next run) sees: after a kill -9, after this run's own
compaction, and after another process replaced the file."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

from sand.state.journal import Journal

# A cold apply's worth of records (200 creates, each its intent, task, steps and
# outcome; the last left open), counting how often the process opens the journal file
# (Python's audit events: every os.open and open() raises one), then killed.
COLD_APPLY = """
import asyncio, os, signal, sys
from pathlib import Path
from sand.state.journal import Journal
path = Path(sys.argv[1])
opens = []
def hook(event, args):
    if event == "open" and args and str(args[0]) == str(path):
        opens.append(args[0])
sys.addaudithook(hook)
journal = Journal(path)
async def create(i):
    entry = await journal.begin_async("create", backend="pve", vm=f"vm-{i}", identity=str(i))
    journal.task(entry, f"UPID:pve1:{i}")
    journal.step(entry, "cloned")
    journal.step(entry, "started")
    if i != 199:
        journal.finish(entry)
async def main():
    await asyncio.gather(*(create(i) for i in range(200)))
asyncio.run(main())
print(len(opens), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_cold_apply_opens_the_journal_once_and_a_kill_loses_no_record(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    done = subprocess.run(
        [sys.executable, "-c", COLD_APPLY, str(path)], capture_output=True, text=True, check=False
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert done.stdout.split() == ["1"]  # one open for 999 records
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(records) == 200 * 4 + 199
    [pending] = Journal(path).pending()
    assert pending.vm == "vm-199" and pending.steps == ("cloned", "started")
    assert pending.tasks == ("UPID:pve1:199",)


def test_records_after_a_compaction_go_into_the_compacted_file(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    journal = Journal(path)
    journal.finish(journal.begin("create", backend="pve", vm="a", identity="100"))
    journal.compact()  # replaces the file it held open
    entry = journal.begin("delete", backend="pve", vm="b", identity="101")
    assert [p.vm for p in Journal(path).pending()] == ["b"]
    journal.close()
    journal.step(entry, "stopped")  # after close, the next record opens the file again
    assert Journal(path).pending()[0].steps == ("stopped",)


def test_records_after_another_process_replaced_the_file_are_not_lost(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    mine = Journal(path)  # `sand sleep` while an apply runs: neither takes the other's lock
    entry = mine.begin("power", backend="pve", vm="a", identity="100")
    theirs = Journal(path)
    theirs.finish(theirs.begin("create", backend="pve", vm="b", identity="101"))
    theirs.compact()  # the apply's compaction: a new file keeping only open entries
    mine.step(entry, "suspended")
    mine.finish(entry)
    ids = [json.loads(line)["id"] for line in path.read_text().splitlines()]
    assert ids == [entry.id] * 3  # its intent (kept, open), its step, its outcome
    assert Journal(path).pending() == []
