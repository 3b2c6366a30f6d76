"""``sand fork VM --count N``: prints the entries of N forks, writes nothing, refuses
what the manifest would refuse (issue 29, item 1)."""

from __future__ import annotations

import yaml

from sand.manifest import parse_manifest
from tests.cli.helpers import Sand
from tests.cli.test_completion import MANIFEST, bash_complete, shell_env  # noqa: F401


def test_fork_prints_entries_that_join_the_manifest_and_writes_nothing(tmp_path):
    sand = Sand(tmp_path)
    sand.write({**MANIFEST, "vms": [*MANIFEST["vms"], {"name": "try-1", "from": {"vm": "web"}}]})
    before = sand.manifest.read_bytes()
    proc = sand.run("fork", "web", "--count", "2", "--prefix", "try-")
    assert proc.returncode == 0, proc.stderr
    # Indented as the manifest's own items (written flush left here).
    assert proc.stdout == "- name: try-2\n  from: {vm: web}\n- name: try-3\n  from: {vm: web}\n"
    assert "nothing was written" in proc.stderr
    assert sand.manifest.read_bytes() == before
    # Appended under vms: (the last section), they make a valid manifest of forks.
    manifest = parse_manifest(before.decode() + proc.stdout)
    forks = {v.name: v.fork for v in manifest.vms if v.fork is not None}
    assert sorted(forks) == ["try-1", "try-2", "try-3"]
    assert {f.vm for f in forks.values()} == {"web"}


def test_fork_names_its_forks_after_the_source_by_default(tmp_path):
    sand = Sand(tmp_path)
    sand.write(MANIFEST)
    proc = sand.run("fork", "agent-1")
    assert proc.returncode == 0, proc.stderr
    assert yaml.safe_load(proc.stdout) == [{"name": "agent-1-fork-1", "from": {"vm": "agent-1"}}]


def test_fork_refuses_what_the_manifest_would_refuse(tmp_path):
    sand = Sand(tmp_path)
    sand.write(MANIFEST)
    before = sand.manifest.read_bytes()
    memory = sand.run("fork", "web", "--memory")
    assert memory.returncode == 1 and memory.stdout == ""
    assert "Lima cannot fork a running VM's memory" in memory.stderr
    assert "Traceback" not in memory.stderr
    unknown = sand.run("fork", "nope")
    assert unknown.returncode == 1 and "declares no VM 'nope'" in unknown.stderr
    none = sand.run("fork", "web", "--count", "0")
    assert (
        none.returncode == 1
        and "argument --count: '0' is not a whole number from 1 to 64" in none.stderr
    )
    assert sand.manifest.read_bytes() == before


def test_fork_is_completed_and_explained(shell_env):  # noqa: F811
    sand, bin_dir = shell_env
    assert bash_complete(sand, bin_dir, ["sand", "fork", "ag"]) == ["agent-1", "agent-2"]
    assert "--count" in bash_complete(sand, bin_dir, ["sand", "fork", "--c"])
    helped = sand.run("fork", "--help")
    assert helped.returncode == 0 and "writes nothing" not in helped.stderr
    assert "--prefix P" in helped.stdout and "fork/<name>" in helped.stdout


def test_fork_apply_adds_the_entries_in_memory_at_the_end_of_vms(tmp_path):
    """Also when `vms:` is not the file's last section; lines before it keep their
    numbers (what is located in the manifest stays located right)."""
    from sand.cli.fork_entries import overlay

    path = tmp_path / "sand.yaml"
    text = (
        "apiVersion: sand/v1\nproject: demo\nbackends:\n  laptop: {type: lima}\n"
        "defaults: {image: debian-12}\nvms:\n  - name: agent-1\n    repos: [app]\n"
        "# the repos\nrepos:\n  app: {url: https://example.test/app.git}\n"
    )
    path.write_text(text)
    loaded = overlay(str(path), [{"name": "try-1", "from": {"vm": "agent-1"}}])
    assert path.read_text() == text
    assert [v.name for v in loaded.manifest.vms] == ["agent-1", "try-1"]
    assert loaded.text.splitlines()[:8] == text.splitlines()[:8]
    (fork,) = [v for v in loaded.manifest.vms if v.fork is not None]
    assert fork.fork is not None and fork.fork.vm == "agent-1"
