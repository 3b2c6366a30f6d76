"""``sand sync --metrics ADDR``: what a sync did, as Prometheus text on ``/metrics``.

prometheus-client is imported here only, by ``sand sync``: no other command pays for
it. Its own registry (not the library's global one), served by the library's small
HTTP server on a thread of its own.

    sand_sync_last_applied_revision_info{revision}   1 for the revision last applied
    sand_sync_last_applied_timestamp_seconds         when it was applied
    sand_sync_runs_total{result}                     runs by result (ok, failed)
    sand_vm_sync_status{backend,vm,status}           1 for the VM's status now
                                                     (Synced, OutOfSync, Unknown)
    sand_drift_vms                                   VMs changed outside of sand, last run
    sand_apply_duration_seconds                      histogram of applies that changed VMs
    sand_sync_errors_total{layer}                    failures by the layer that failed
                                                     (git, manifest, lease, backend, ...)
    sand_agent_sessions{vm,agent,state}              sessions by state, as the guests'
                                                     agent hooks reported after the run
    sand_agent_idle_seconds{vm}                      since when no session has been
                                                     working (VMs with one working: 0)
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from sand.agentstate import AgentReport, counts
from sand.loops.gitmirror import Revision
from sand.loops.sync import vm_status
from sand.loops.unattended import RunResult

if TYPE_CHECKING:
    import threading
    from wsgiref.simple_server import WSGIServer

STATUSES = ("Synced", "OutOfSync", "Unknown")
# Seconds: a no-op apply is under a second; a clone and provisioning take minutes.
DURATION_BUCKETS = (0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1200, 1800, 3600)


class PrometheusMetrics:
    """A :class:`sand.loops.sync.SyncMetrics` that Prometheus scrapes."""

    def __init__(self) -> None:
        # here, not at the top: importing it loads prometheus_client
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.revision = Gauge(
            "sand_sync_last_applied_revision_info",
            "The git revision sand sync last applied (1 for it).",
            ["revision"],
            registry=r,
        )
        self.applied_at = Gauge(
            "sand_sync_last_applied_timestamp_seconds",
            "When sand sync last applied a new revision (Unix time).",
            registry=r,
        )
        self.runs = Counter(
            "sand_sync_runs", "Reconcile runs of sand sync, by result.", ["result"], registry=r
        )
        self.vms = Gauge(
            "sand_vm_sync_status",
            "Each VM's sync status after the last run: 1 for the status it has.",
            ["backend", "vm", "status"],
            registry=r,
        )
        self.drift = Gauge(
            "sand_drift_vms", "VMs changed outside of sand, as the last run found.", registry=r
        )
        self.duration = Histogram(
            "sand_apply_duration_seconds",
            "How long an apply that changed VMs took.",
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.errors = Counter(
            "sand_sync_errors",
            "Failures of sand sync, by the layer that failed.",
            ["layer"],
            registry=r,
        )
        self.agent_sessions = Gauge(
            "sand_agent_sessions",
            "Agent sessions on each VM by state, as its guest's hooks reported them.",
            ["vm", "agent", "state"],
            registry=r,
        )
        self.agent_idle = Gauge(
            "sand_agent_idle_seconds",
            "Seconds since no agent session on the VM has been working (0: one is).",
            ["vm"],
            registry=r,
        )
        for layer in ("git", "manifest", "lease", "backend"):
            self.errors.labels(layer=layer)  # present at 0 before the first failure
        self._last_revision = ""
        self._server: tuple[WSGIServer, threading.Thread] | None = None

    def run_done(self, revision: Revision, result: RunResult, seconds: float) -> None:
        self.runs.labels(result="ok" if result.ok else "failed").inc()
        if revision.sha != self._last_revision:
            self.revision.clear()
            self.revision.labels(revision=revision.sha).set(1)
            self.applied_at.set(time.time())
            self._last_revision = revision.sha
        if result.outcome is not None and result.outcome.result is not None:
            self.duration.observe(result.outcome.seconds)
        if result.plan is not None:
            self.drift.set(len(result.plan.drifted()))
            self.vms.clear()
            for (backend, vm), status in sorted(vm_status(result).items()):
                for s in STATUSES:
                    self.vms.labels(backend=backend, vm=vm, status=s).set(int(s == status))

        if result.agents is not None:
            self._agents(result.agents)

    def _agents(self, reports: dict[str, AgentReport]) -> None:
        self.agent_sessions.clear()
        self.agent_idle.clear()
        now = time.time()
        for vm, agent, state, n in counts(reports):
            self.agent_sessions.labels(vm=vm, agent=agent, state=state).set(n)
        for vm, report in sorted(reports.items()):
            if not report.sessions:
                continue  # no session ever reported: idle since it is not known
            since = report.idle_since()
            self.agent_idle.labels(vm=vm).set(0 if since is None else max(0.0, now - since))

    def failed(self, layer: str) -> None:
        self.errors.labels(layer=layer).inc()

    def serve(self, host: str, port: int) -> None:
        # here, not at the top: importing it loads prometheus_client
        from prometheus_client import start_http_server

        self._server = start_http_server(port, addr=host, registry=self.registry)

    def stop(self) -> None:
        if self._server is not None:
            server, thread = self._server
            server.shutdown()
            server.server_close()
            thread.join(5)
            self._server = None
