"""`sand apply` on the limactl stand-in with a real guest behind the instance,
then the per-VM verbs through the backend's own endpoint."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.limactl_standin import StandIn
from tests.provision.e2e_helpers import as_user, home_snapshot, scoped_env, stand_in_agents

pytestmark = pytest.mark.e2e

SECRET = "lima-canary-91c2-secret-value"
REMOTE_TOKEN = "ghp_remoteCanary7f3e2d1c0b9a"
# What a landing ledger record holds (sand/verbs/land.py Row.record): metadata only.
LEDGER_METADATA = ("action", "vm", "path", "branch", "repo", "push", "compare_url", "pr")
MANIFEST = """\
apiVersion: sand/v1
project: limae2e
backends:
  laptop: {type: lima, lima_home: ./lima}
defaults: {image: debian-12, disk: 20GiB, memory: 2GiB}
secrets:
  NPM_TOKEN:
    from: {env: SAND_TEST_NPM}
vms:
  - name: dev-1
    ports: [{guest: 3000, host: 13000}]
    secrets: [{name: NPM_TOKEN, scope: ~/src}]
"""


class Cli:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.standin = StandIn.create(root, lima_home=root / "lima")
        self.manifest = root / "sand.yaml"
        self.manifest.write_text(MANIFEST)
        self.agents = stand_in_agents(root / "agents")

    def sand(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = {
            **os.environ,
            **self.standin.env(),
            "SAND_STATE_DIR": str(self.root / "state"),
            "SAND_TEST_NPM": SECRET,
            "SAND_AGENT_SOURCE": str(self.agents),
            "NO_COLOR": "1",
        }
        env.pop("LIMA_HOME")
        return subprocess.run(
            [sys.executable, "-m", "sand", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            cwd=self.root,
            check=False,
        )


def test_lima_apply_provisions_and_the_verbs_reach_the_guest(tmp_path, netns_guest):
    guest = netns_guest()
    cli = Cli(tmp_path)
    cli.standin.back_with_guest("dev-1", guest)

    proc = cli.sand("apply", "--auto-approve")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert scoped_env(guest, "~/src", "NPM_TOKEN") == SECRET
    assert not scoped_env(guest, "~", "NPM_TOKEN")
    assert SECRET not in proc.stdout + proc.stderr
    config = cli.standin.read_yaml("dev-1")
    assert all(m.get("writable") is not True for m in config.get("mounts") or [])

    proc = cli.sand("plan", "--detailed-exitcode")
    assert proc.returncode == 0, proc.stdout + proc.stderr

    # sand shell -- CMD: the backend's endpoint, the command's own exit status.
    proc = cli.sand("shell", "dev-1", "--", "id", "-un")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == guest.user
    proc = cli.sand("shell", "dev-1", "--", "sh", "-c", "exit 7")
    assert proc.returncode == 7

    # sand cp: an explicit download lands where it was asked to, nowhere else.
    as_user(guest, "mkdir -p ~/notes && echo 'from the guest' > ~/notes/a.txt")
    proc = cli.sand("cp", "-r", "dev-1:notes", str(tmp_path / "fetched"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "fetched" / "a.txt").read_text() == "from the guest\n"

    # sand land: read-only sweep; only branch metadata reaches the host ledger, never the
    # remote URL as the guest wrote it (here carrying a token).
    as_user(
        guest,
        "mkdir -p ~/src/app && cd ~/src/app && git init -q -b feature/x && "
        "git -c user.email=a@b -c user.name=A commit -q --allow-empty -m work && "
        f"git remote add origin https://x-access-token:{REMOTE_TOKEN}@github.com/acme/app.git",
    )
    proc = cli.sand("land", "dev-1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "feature/x" in proc.stdout
    ledger = tmp_path / "state" / "projects" / "limae2e" / "landing.jsonl"
    text = ledger.read_text()  # the sweep is recorded: a missing ledger fails here
    (record,) = [json.loads(line) for line in text.splitlines()]
    assert set(record) == {"v", "ts", *LEDGER_METADATA}
    assert (record["action"], record["vm"], record["branch"], record["repo"]) == (
        "sweep",
        "dev-1",
        "feature/x",
        "acme/app",
    )
    assert record["compare_url"] == "https://github.com/acme/app/pull/new/feature/x"
    assert REMOTE_TOKEN not in text and REMOTE_TOKEN not in proc.stdout + proc.stderr
    assert ledger.stat().st_mode & 0o777 == 0o600


TWO = """\
apiVersion: sand/v1
project: limae2e
backends:
  # Each VM is backed by its own guest, made beforehand: no base derived for them.
  laptop: {type: lima, lima_home: ./lima, derive_bases: false}
defaults: {image: debian-12, disk: 20GiB, memory: 2GiB}
secrets:
  NPM_TOKEN:
    from: {env: SAND_TEST_NPM}
vms:
  - name: dev-1
    secrets: [{name: NPM_TOKEN, scope: ~/src}]
  - name: dev-2
    secrets: [{name: NPM_TOKEN, scope: ~/src}]
"""


def test_lima_secrets_lost_inside_the_guest_are_found_and_delivered_again(tmp_path, netns_guest):
    guests = {"dev-1": netns_guest(), "dev-2": netns_guest()}
    cli = Cli(tmp_path)
    cli.manifest.write_text(TWO)
    for name, guest in guests.items():
        cli.standin.back_with_guest(name, guest)
    proc = cli.sand("apply", "--auto-approve")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = cli.sand("plan", "--detailed-exitcode")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Warning" not in proc.stdout  # both guests were asked, and both answered
    for name in guests:
        marker = (cli.standin.instance_dir(name) / "sand-marker.json").read_text()
        assert '"secrets": "1-' in marker and SECRET not in marker

    # The guest check behind that plan is read-only: nothing on either guest moved.
    watched = ("/home", "/run/user", "/dev/shm", "/usr/local/lib/sand")
    before = {name: home_snapshot(g, *watched) for name, g in guests.items()}
    proc = cli.sand("plan", "--detailed-exitcode")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert {name: home_snapshot(g, *watched) for name, g in guests.items()} == before

    # A reboot inside dev-1 (the host agent lives on, ha.pid untouched) empties its tmpfs.
    proc = guests["dev-1"].run_root(["sh", "-c", "rm -rf /run/user/*/sand /dev/shm/sand-*"])
    assert proc.returncode == 0
    assert not scoped_env(guests["dev-1"], "~/src", "NPM_TOKEN")

    proc = cli.sand("plan", "--detailed-exitcode")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "# dev-1 (laptop" in proc.stdout and "no longer on the guest's tmpfs" in proc.stdout
    assert "# dev-2" not in proc.stdout
    proc = cli.sand("apply", "--auto-approve")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert scoped_env(guests["dev-1"], "~/src", "NPM_TOKEN") == SECRET
    assert scoped_env(guests["dev-2"], "~/src", "NPM_TOKEN") == SECRET
    assert SECRET not in proc.stdout + proc.stderr
    assert cli.sand("plan", "--detailed-exitcode").returncode == 0


def test_lima_replace_carries_preserved_work_to_the_renamed_instance(tmp_path, netns_guest):
    """Create-before-destroy on Lima: the replacement is made under a temporary name (its
    own guest), provisioned, the preserved checkout restored, the old instance deleted and
    the new one renamed with ``limactl rename`` — reached afterwards under the old name."""
    old, new = netns_guest(), netns_guest()
    cli = Cli(tmp_path)
    cli.standin.back_with_guest("dev-1", old)
    cli.standin.back_with_guest("dev-1-sandnew*", new)
    assert cli.sand("apply", "--auto-approve").returncode == 0
    as_user(
        old,
        "mkdir -p ~/src/app && cd ~/src/app && git init -q -b main && echo v1 > f && "
        "git add f && git -c user.email=a@b -c user.name=A commit -qm local-only",
    )
    cli.manifest.write_text(
        MANIFEST.replace("image: debian-12", "image: debian-13").replace(
            "    secrets:", "    preserve: [~/src]\n    secrets:"
        )
    )
    plan = cli.sand("plan")
    assert plan.returncode == 0, plan.stdout + plan.stderr
    assert "unpushed work kept by preserve: ~/src/app" in plan.stdout
    proc = cli.sand("apply", "--auto-approve")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [n for n in cli.standin.instances() if not n.startswith("sand-base")] == ["dev-1"]
    log = as_user(new, "cd ~/src/app && git log --format=%s").stdout.decode()
    assert log.strip() == "local-only"
    assert scoped_env(new, "~/src", "NPM_TOKEN") == SECRET
    proc = cli.sand("shell", "dev-1", "--", "cat", "src/app/f")
    assert proc.returncode == 0 and proc.stdout.strip() == "v1", proc.stdout + proc.stderr
    assert cli.sand("plan", "--detailed-exitcode").returncode == 0


def test_a_fork_gives_its_restarted_source_its_secrets_again(tmp_path, netns_guest):
    """A Lima fork stops its running source for the copy and starts it again, which
    empties the source's tmpfs: the same apply delivers the source's secrets again, and
    records it, so the next plan has nothing to do (issue 36, item 5)."""
    guest = netns_guest()
    cli = Cli(tmp_path)
    cli.standin.back_with_guest("dev-1", guest, boot=guest.boot_argv())
    proc = cli.sand("apply", "--auto-approve")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert scoped_env(guest, "~/src", "NPM_TOKEN") == SECRET

    cli.manifest.write_text(
        MANIFEST + "  - name: try-1\n    from: {vm: dev-1}\n    provision: false\n"
    )
    cli.standin.clear_log()
    proc = cli.sand("apply", "--auto-approve")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "Apply complete!" in out
    calls = [
        " ".join(w for w in inv.argv[1:] if not w.startswith("-"))
        for inv in cli.standin.invocations()
    ]
    assert [c for c in calls if c.split()[:1] in (["stop"], ["start"]) and "dev-1" in c] == [
        "stop dev-1",
        "start dev-1",
    ]
    # The source's tmpfs holds its secret again, after the boot that emptied it.
    uid = guest.uid
    files = guest.run_root(["sh", "-c", f"ls /run/user/{uid}/sand/env /dev/shm/sand-{uid}/env"])
    assert files.stdout.strip(), files
    assert scoped_env(guest, "~/src", "NPM_TOKEN") == SECRET
    assert SECRET not in out
    proc = cli.sand("plan", "--detailed-exitcode")
    assert proc.returncode == 0, proc.stdout + proc.stderr
