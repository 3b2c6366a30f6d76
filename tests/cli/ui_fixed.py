"""A fleet that always looks the same, for the board's SVG snapshots: the real planner
and ``sand status``'s real rows over fixed observations (a converged VM, one to
resize, one to create, one drifted, and a backend that could not be observed), so a
picture changes only when the drawing does. What the board does to real backends is
proven in test_ui_board.py; here only how it looks."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

from sand.agentstate import report_from_json
from sand.apply.reconcile import ApplyOutcome
from sand.backends.lima.backend import CAPABILITIES
from sand.cli.ui.fleet import Ask, Fleet, Snapshot
from sand.desired import build_desired
from sand.manifest import load_manifest
from sand.observed import Marker, Observation, ObservedVM, Ownership
from sand.plan import make_plan
from sand.plan.model import Plan
from sand.survey.status import status_from

MANIFEST = """\
apiVersion: sand/v1
project: fleet
backends:
  laptop: {type: lima, lima_home: /srv/sand/laptop}
  lab: {type: lima, lima_home: /srv/sand/lab}
defaults: {image: debian-12, cpus: 2, memory: 4GiB, disk: 20GiB, provision: false}
vms:
  - {name: agent-1, backend: laptop}
  - {name: agent-2, backend: laptop, memory: 8GiB}
  - {name: agent-3, backend: laptop}
  - {name: review, backend: laptop}
  - {name: gpu-1, backend: lab}
"""
GIB = 1 << 30
HOUR = 3600


class FixedFleet(Fleet):
    def __init__(self, directory: Path) -> None:
        path = directory / "sand.yaml"
        path.write_text(MANIFEST)
        super().__init__(Path("sand.yaml") if Path.cwd() == directory else path)
        self.path = path
        self.now = time.time()

    def fixed_plan(self) -> Plan:
        desired = build_desired(load_manifest(self.path))
        marker_of = {vm.name: vm for vm in desired.vms}

        def seen(name: str, port: int, fingerprint: str = "", **changes: object) -> ObservedVM:
            want = marker_of[name]
            vm = ObservedVM(
                backend="laptop",
                name=name,
                identity=name,
                ownership=Ownership.MANAGED,
                power="running",
                cpus=want.cpus,
                memory=want.memory,
                disk=want.disk,
                marker=Marker(
                    "fleet",
                    name,
                    name,
                    fingerprint or want.fingerprint,
                    want.guest_fingerprint,
                    want.image,
                    created_at=int(self.now - 3 * HOUR),
                ),
                deep=True,
                address=f"127.0.0.1:{port}",
            )
            return replace(vm, **changes)  # type: ignore[arg-type]

        observations = {
            "laptop": Observation(
                backend="laptop",
                vms=(
                    seen("agent-1", 60022),
                    # Resized by sand's older manifest: its fingerprint is not the one wanted.
                    seen("agent-2", 60023, memory=4 * GIB, fingerprint="older"),
                    seen("review", 60025, cpus=6),
                ),
            ),
            "lab": Observation(
                backend="lab",
                vms=(),
                unknown_reason="limactl list failed: exit 1",
            ),
        }
        lima = {"laptop": CAPABILITIES, "lab": CAPABILITIES}
        return make_plan(desired, observations, lima, now=self.now)

    def observe(self) -> Snapshot:
        plan = self.fixed_plan()
        at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.now - 300))
        records = {
            "agent-1": {"backend": "laptop", "action": "create", "ok": True, "at": at},
            "review": {
                "backend": "laptop",
                "action": "update",
                "ok": False,
                "error": "ssh: guest did not answer",
                "at": at,
            },
        }
        report = status_from(plan, records)
        # What two guests' agents reported (the board reads it on each refresh).
        agents = {
            "agent-1": [("claude", "c-1", "needs-input", 3 * 60)],
            "review": [("claude", "c-7", "working", 12 * 60), ("codex", "x-2", "done", HOUR)],
        }
        for row in report.rows:
            said = agents.get(row.vm, [])
            row.agents = report_from_json({
                "sessions": [
                    {"agent": a, "session": s, "state": st, "since": int(self.now - ago),
                     "cwd": "/home/claude/src/app"}
                    for a, s, st, ago in said
                ],
                "problem": None,
            }) if row.vm != "gpu-1" else None  # fmt: skip
        return Snapshot(plan, report, taken=time.time(), seconds=0.1)

    def plan(self) -> Plan:
        return self.fixed_plan()

    async def apply(self, ask: Ask, hooks: object, note: object) -> ApplyOutcome | None:
        plan = self.fixed_plan()
        await ask(plan, None)
        return None
