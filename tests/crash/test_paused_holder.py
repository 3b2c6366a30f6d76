"""A holder paused past its lease sends nothing once it wakes: a real ``sand apply`` is
SIGSTOPped while a slow clone (fakepve) or create (the limactl stand-in) is under way,
another ``sand apply`` (another host: its own state, its own API token or invocation
log) waits for the lease, takes it and starts writing, then the first is SIGCONTed.
The far side's own record (fakepve's request log by token, the stand-in's invocations
by log) shows what the first sent after it was resumed: nothing. It stops naming the
lease layer, and the next apply of its host settles what it left: every VM once.

Before the fence, on fakepve the first sent writes after it was resumed in 13 of 20
runs (a config PUT; once a resize and a start too). On Lima its overdue renewal
happened to stop it first in 20 of 20 (it ended "lost the lease", naming no pause): the
fence's own check there is proven request by request in
``tests/backends/lima/test_lease_fence.py``, local and over SSH."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.cli.helpers import Sand
from tests.crash.killer import env_for, sand_argv
from tests.limactl_standin import StandIn

pytestmark = [pytest.mark.e2e, pytest.mark.real_clock]

RUNS = 20
TTL = "3"  # seconds (SAND_LEASE_TTL): the first holder is paused past it in each run
EXPIRED = (
    "lease on {backend} expired while this run was paused; nothing more was written; "
    "the next apply settles it"
)
NAMES = ["w-1", "w-2", "w-3"]
# limactl's subcommands that change an instance (``list`` and ``--version`` only read).
LIMA_WRITES = {
    "create",
    "start",
    "stop",
    "delete",
    "clone",
    "rename",
    "edit",
    "protect",
    "unprotect",
}


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened: {what}")
        time.sleep(0.01)


class Applier:
    """One ``sand apply`` process of its own host (its own workdir and state)."""

    def __init__(self, root: Path, env: dict[str, str]) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.sand = Sand(root)
        self.env = {**env_for(self.sand.state_dir), "SAND_LEASE_TTL": TTL, **env}
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, *args: str) -> None:
        out, err = (open(self.sand.workdir / n, "wb") for n in ("stdout", "stderr"))  # noqa: SIM115
        with out, err:
            self.proc = subprocess.Popen(
                sand_argv("apply", "--auto-approve", *args),
                cwd=self.sand.workdir,
                env=self.env,
                stdout=out,
                stderr=err,
            )

    def send(self, sig: signal.Signals) -> float:
        """Send ``sig``; when it was sent (the far side's clock: ``time.time()``)."""
        assert self.proc is not None
        os.kill(self.proc.pid, sig)
        return time.time()

    def done(self) -> bool:
        return self.proc is not None and self.proc.poll() is not None

    def wait(self) -> tuple[int, str]:
        assert self.proc is not None
        code = self.proc.wait(120)
        return code, (self.sand.workdir / "stderr").read_text()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait()


def settled(first: Applier) -> None:
    """The paused host's next apply settles what it left; a plan after is empty."""
    proc = first.sand.run("apply", "--auto-approve", env=first.env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    plan = first.sand.run("plan", "--detailed-exitcode", env=first.env)
    assert plan.returncode == 0 and "No changes." in plan.stdout, plan.stdout + plan.stderr


@pytest.mark.parametrize("run", range(RUNS))
def test_a_proxmox_holder_paused_past_its_lease_sends_nothing_when_resumed(
    run: int, tmp_path: Path, fakepve_factory: Any
) -> None:
    rig = fakepve_factory(time_scale=1.0)
    rig.set_task_secs("qmclone", 1.0)  # the clone the first holder is paused in
    other_token = "sand@pve!other-host"
    first = Applier(tmp_path / "first", {})
    second = Applier(tmp_path / "second", {})
    first.sand.write(rig.manifest([{"name": n} for n in NAMES]))
    second.sand.write(
        rig.manifest([{"name": n} for n in NAMES], token_file=str(rig.add_token(other_token)))
    )
    try:
        first.start("--parallelism", "1")
        wait_for(
            lambda: any(r.token == rig.token_id and r.path.endswith("/clone") for r in rig.log),
            "the first apply's clone",
        )
        first.send(signal.SIGSTOP)
        rig.set_task_secs("qmclone", 0)  # the second's clones: not the subject
        second.start("--lease-wait", "60")
        (lease,) = rig.lease_vms()

        def second_writes() -> bool:
            return second.done() or any(
                r.token == other_token and r.method != "GET" and f"/{lease.vmid}/" not in r.path
                for r in rig.log
            )

        wait_for(second_writes, "the second apply taking the lease and writing")
        resumed = first.send(signal.SIGCONT)
        code, stderr = first.wait()
        assert second.wait()[0] == 0
        after = [str(r) for r in rig.log if r.token == rig.token_id and r.at - r.took >= resumed]
        writes = [r for r in after if not r.startswith("GET ")]
        assert writes == [], f"the paused holder wrote after it was resumed: {after}"
        assert code == 1 and EXPIRED.format(backend="pve") in stderr, stderr
    finally:
        first.kill()
        second.kill()
    settled(first)
    assert sorted(vm.name for vm in rig.vms()) == NAMES  # none lost, none twice


def lima_manifest(lima_home: Path) -> str:
    vms = "".join(f"  - name: {n}\n" for n in NAMES)
    return (
        "apiVersion: sand/v1\nproject: paused\n"
        f"backends:\n  laptop: {{type: lima, lima_home: {lima_home}}}\n"
        "defaults: {image: debian-12, provision: false, disk: 20GiB, memory: 2GiB}\n"
        f"vms:\n{vms}"
    )


def invocations(log: Path) -> list[dict[str, Any]]:
    try:
        return [json.loads(line) for line in log.read_text().splitlines()]
    except FileNotFoundError:
        return []


def writes(argv: list[str]) -> bool:
    words = [a for a in argv if not a.startswith("-")]
    return bool(words) and words[0] in LIMA_WRITES and "--list-templates" not in argv


def lima_writes(log: Path) -> list[list[str]]:
    return [i["argv"] for i in invocations(log) if writes(i["argv"])]


@pytest.mark.parametrize("run", range(RUNS))
def test_a_lima_holder_paused_past_its_lease_sends_nothing_when_resumed(
    run: int, tmp_path: Path
) -> None:
    standin = StandIn.create(tmp_path / "standin", lima_home=tmp_path / "lima")
    standin.configure(create_delay=1.0)  # the create the first holder is paused in

    def applier(name: str) -> Applier:
        env = {**standin.env(), "LIMACTL_STANDIN_LOG": str(tmp_path / f"{name}.jsonl")}
        made = Applier(tmp_path / name, env)
        made.env.pop("LIMA_HOME", None)  # the manifest names it
        made.sand.manifest.write_text(lima_manifest(standin.lima_home))
        return made

    first, second = applier("first"), applier("second")
    first_log, second_log = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    try:
        first.start("--parallelism", "1")
        wait_for(lambda: bool(lima_writes(first_log)), "the first apply's create")
        first.send(signal.SIGSTOP)
        standin.configure(create_delay=0)  # the second's creates: not the subject
        second.start("--lease-wait", "60")
        wait_for(
            lambda: second.done() or bool(lima_writes(second_log)),
            "the second apply taking the lease and writing",
        )
        resumed = first.send(signal.SIGCONT)
        code, stderr = first.wait()
        # It may find the instance the first was creating unfinished, unmarked: blocked.
        assert second.wait()[0] in (0, 1)
        after = [i["argv"] for i in invocations(first_log) if i["time"] >= resumed]
        assert [a for a in after if writes(a)] == [], f"the paused holder wrote: {after}"
        assert code == 1 and EXPIRED.format(backend="laptop") in stderr, stderr
    finally:
        first.kill()
        second.kill()
    settled(first)
    assert standin.instances() == NAMES  # none lost, none half-made
