"""``sand sync --metrics``: Prometheus text scraped over HTTP from a running sync against
a real git server and fakepve."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator

import pytest

from tests.cli.sync_rig import Repo, free_port, https_git
from tests.cli.test_sync import GIT_TOKEN, start_sync, vm_manifest
from tests.rig.gitserver import GitServer


@pytest.fixture
def git(fakepve_rig_pki, monkeypatch) -> Iterator[GitServer]:
    with https_git(GIT_TOKEN, fakepve_rig_pki, monkeypatch) as server:
        yield server


def test_metrics_tell_revision_status_drift_duration_and_errors(
    tmp_path, fakepve_server, git
) -> None:
    rig = fakepve_server
    repo = Repo(git, "fleet", vm_manifest(rig, [{"name": "s-1"}]))
    port = free_port()
    sync = start_sync(tmp_path, rig, repo, "--interval", "0.5", "--metrics", f"127.0.0.1:{port}")

    def scrape() -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
            return str(answer.read().decode())

    try:
        head = repo.head()
        sync.wait_for(lambda: sync.said("applied (converged)"))
        sync.wait_for(lambda: f'revision="{head}"' in scrape())
        text = scrape()
        assert f'sand_sync_last_applied_revision_info{{revision="{head}"}} 1.0' in text
        assert 'sand_vm_sync_status{backend="pve",status="Synced",vm="s-1"} 1.0' in text
        assert "sand_apply_duration_seconds_count 1.0" in text
        assert "sand_drift_vms 0.0" in text
        (vm,) = rig.vms()
        rig.run(lambda: rig.pve.vm(vm.vmid).config.__setitem__("cores", 6))
        sync.wait_for(lambda: "sand_drift_vms 1.0" in scrape())
        assert 'sand_vm_sync_status{backend="pve",status="OutOfSync",vm="s-1"} 1.0' in scrape()
        repo.push("vms: [\n", "broken")
        sync.wait_for(lambda: 'sand_sync_errors_total{layer="manifest"} 1.0' in scrape())
    finally:
        sync.stop()
