"""A fleet that always looks the same, for the board's SVG snapshots: the real planner
and ``sand status``'s real rows over fixed observations (a converged VM, one to
resize, one to create, one drifted, and a backend that could not be observed), so a
picture changes only when the drawing does. What the board does to real backends is
proven in test_ui_board.py; here only how it looks."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

from sand.agentstate import AgentReport, report_from_json
from sand.apply.reconcile import ApplyOutcome
from sand.backends.abilities import capabilities_of
from sand.backends.lima.backend import LimaBackend
from sand.cli.ui.fleet import Ask, Fleet, Snapshot
from sand.desired import build_desired
from sand.manifest import load_manifest
from sand.observed import Marker, Observation, ObservedVM, Ownership
from sand.plan import make_plan
from sand.plan.model import Plan
from sand.plan.pools import with_pools
from sand.survey.status import status_from
from sand.verbs.compare import Attempt, ForkView

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
# Forks and a warm pool: agent-1 with two forks, two spares, and a new VM that claims
# one of them (the plan refills its slot).
FORKS = """\
apiVersion: sand/v1
project: fleet
backends:
  laptop: {type: lima, lima_home: /srv/sand/laptop}
defaults: {image: debian-12, cpus: 2, memory: 4GiB, disk: 20GiB, provision: false}
pools:
  agents: {warm: 2}
vms:
  - {name: agent-1}
  - {name: try-1, from: {vm: agent-1}}
  - {name: try-2, from: {vm: agent-1}}
  - {name: review}
  - {name: agent-4, pool: agents}
"""
GIB = 1 << 30
HOUR = 3600


class FixedFleet(Fleet):
    manifest_text = MANIFEST

    def __init__(self, directory: Path) -> None:
        path = directory / "sand.yaml"
        path.write_text(self.manifest_text)
        super().__init__(Path("sand.yaml") if Path.cwd() == directory else path)
        self.path = path
        self.now = time.time()

    def seen(self, want: Any, port: int, fingerprint: str = "", **changes: object) -> ObservedVM:
        """``want`` (a desired VM) as the listing shows it, converged three hours ago."""
        vm = ObservedVM(
            backend="laptop",
            name=want.name,
            identity=want.name,
            ownership=Ownership.MANAGED,
            power="running",
            cpus=want.cpus,
            memory=want.memory,
            disk=want.disk,
            marker=Marker(
                "fleet",
                want.name,
                want.name,
                fingerprint or want.fingerprint,
                want.guest_fingerprint,
                want.infra()["image"],
                created_at=int(self.now - 3 * HOUR),
                pool=want.spare_of,
            ),
            deep=True,
            address=f"127.0.0.1:{port}",
        )
        return replace(vm, **changes)  # type: ignore[arg-type]

    def observations(self, want: dict[str, Any]) -> dict[str, Observation]:
        return {
            "laptop": Observation(
                backend="laptop",
                vms=(
                    self.seen(want["agent-1"], 60022),
                    # Resized by sand's older manifest: its fingerprint is not the one wanted.
                    self.seen(want["agent-2"], 60023, memory=4 * GIB, fingerprint="older"),
                    self.seen(want["review"], 60025, cpus=6),
                ),
            ),
            "lab": Observation(
                backend="lab",
                vms=(),
                unknown_reason="limactl list failed: exit 1",
            ),
        }

    # What the guests' agents reported (the board reads it on each refresh).
    said: ClassVar[dict[str, list[tuple[str, str, str, int]]]] = {
        "agent-1": [("claude", "c-1", "needs-input", 3 * 60)],
        "review": [("claude", "c-7", "working", 12 * 60), ("codex", "x-2", "done", HOUR)],
    }
    failed = "review"  # the VM whose last apply failed

    def fixed_plan(self) -> Plan:
        desired = build_desired(load_manifest(self.path))
        want = {vm.name: vm for vm in desired.vms}
        backends = {name: capabilities_of(LimaBackend) for name in self.observations(want)}
        # Which new VM claims which spare, as sand plan decides it after planning.
        return with_pools(make_plan(desired, self.observations(want), backends, now=self.now),
                          desired, backends)  # fmt: skip

    def observe(self) -> Snapshot:
        plan = self.fixed_plan()
        at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.now - 300))
        records = {
            "agent-1": {"backend": "laptop", "action": "create", "ok": True, "at": at},
            self.failed: {
                "backend": "laptop",
                "action": "update",
                "ok": False,
                "error": "ssh: guest did not answer",
                "at": at,
            },
        }
        report = status_from(plan, records)
        for row in report.rows:
            known = row.backend == "laptop"
            row.agents = _agents(self.said.get(row.vm, []), self.now) if known else None
        return Snapshot(plan, report, taken=time.time(), seconds=0.1)

    def plan(self) -> Plan:
        return self.fixed_plan()

    async def apply(self, ask: Ask, hooks: object, note: object) -> ApplyOutcome | None:
        plan = self.fixed_plan()
        await ask(plan, None)
        return None


class ForkFleet(FixedFleet):
    """agent-1 and its two forks, a warm pool of two spares, and agent-4 that claims
    one (its slot refilled in the same plan)."""

    manifest_text = FORKS
    said: ClassVar[dict[str, list[tuple[str, str, str, int]]]] = {
        "agent-1": [("claude", "c-1", "idle", 20 * 60)],
        "try-1": [("claude", "c-2", "working", 2 * 60)],
        "try-2": [("claude", "c-3", "idle", 5 * 60)],
    }

    def observations(self, want: dict[str, Any]) -> dict[str, Observation]:
        names = ("agent-1", "try-1", "try-2", "review", "agents-spare-1", "agents-spare-2")
        seen = tuple(self.seen(want[n], 60022 + i) for i, n in enumerate(names))
        return {"laptop": Observation(backend="laptop", vms=seen)}

    def compare(self, forks: Sequence[str]) -> list[ForkView]:
        """Two attempts as their guests would report them (the reading itself is proven
        against real guests in tests/e2e/test_ui_compare.py)."""
        views = {
            "try-1": ForkView("try-1", (Attempt("~/app", "fork/try-1", "a" * 40, 2, 2, 4, 0, 1),),
                              _agents(self.said["try-1"], self.now)),
            "try-2": ForkView("try-2", (Attempt("~/app", "fork/try-2", "b" * 40, 0, 1, 1, 0),),
                              _agents(self.said["try-2"], self.now)),
        }  # fmt: skip
        return [views.get(vm, ForkView(vm, problem="the VM is stopped")) for vm in forks]


def _agents(said: list[tuple[str, str, str, int]], now: float) -> AgentReport | None:
    return report_from_json({
        "sessions": [
            {"agent": a, "session": s, "state": st, "since": int(now - ago),
             "cwd": "/home/claude/src/app"}
            for a, s, st, ago in said
        ],
        "problem": None,
    })  # fmt: skip
