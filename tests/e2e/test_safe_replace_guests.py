"""Never lose a machine by surprise, on real guests behind fakepve VMs.

The old VM's guest holds an unpushed commit and an untracked file in a checkout.
A replacement is refused while that work is not preserved (the old VM and its
files stay); with ``preserve: [~/src]`` the replacement is created first, provisioned,
the checkout carried over and verified, and only then is the old VM deleted — the
new guest has the very same files (sha256 per file) and the commit. A replacement
whose provisioning fails leaves the old VM and its files untouched.
"""

from __future__ import annotations

import threading
import time

import pytest

from tests.cli.helpers import Sand
from tests.provision.e2e_helpers import out, stand_in_agents

pytestmark = pytest.mark.e2e

NEXT_TEMPLATE = 9001


class Answers:
    """The guest agents: the first VM made is guest ``old``; the next (its replacement,
    under a temporary name or, destroy-before-create, under its own) is guest ``new``."""

    def __init__(self, rig, old, new) -> None:
        self.rig, self.old, self.new = rig, old, new
        # By VM object, not vmid: PVE hands a deleted VM's id to the next clone.
        self.answered: dict[int, str] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self.stop.is_set():
            for vm in self.rig.vms():
                if id(vm) in self.answered or not vm.config.get("net0"):
                    continue
                guest = self.new if self.answered else self.old
                self.rig.set_agent_ip(vm.vmid, guest.address)
                self.answered[id(vm)] = "new" if guest is self.new else "old"
            time.sleep(0.05)

    def __enter__(self) -> Answers:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


def files_digest(guest, path: str) -> str:
    """sha256 of every file under ``path`` (relative names), as the guest's user sees it."""
    return out(guest, f"cd {path} && find . -type f -not -path './.git/*' -print0 | sort -z | "
                      "xargs -0 sha256sum")  # fmt: skip


@pytest.fixture
def world(tmp_path, fakepve_server, netns_guest, git_server):
    rig = fakepve_server
    rig.seed_vm(
        NEXT_TEMPLATE, "debian-13-next", template=True, status="stopped", disk=4 << 30,
        memory_mib=1024, cores=1,
    )  # fmt: skip
    old, new = netns_guest(), netns_guest()
    key = old.client_public_key
    for guest in (old, new):
        guest.run_root(
            ["sh", "-c", f"cat >> /home/{guest.user}/.ssh/authorized_keys"],
            input=(key + "\n").encode(),
        )
    url = git_server.create_repo("app", {"README.md": "hello\n", "lib.py": "x = 1\n"})
    token = tmp_path / "git.token"
    token.write_text(git_server.token + "\n")
    token.chmod(0o600)
    sand = Sand(tmp_path)

    def manifest(**vm: object) -> None:
        m = rig.manifest(
            [{"name": "agent-1", "memory": "2GiB", "repos": ["app"], **vm}],
            defaults={"provision": True},
            identity=str(old.client_key_path),
        )
        m["secrets"] = {"GIT_TOKEN": {"from": {"file": str(token)}}}
        m["repos"] = {"app": {"url": url, "token": "GIT_TOKEN", "path": "~/src/app"}}
        sand.write(m)

    env = {"SAND_AGENT_SOURCE": str(stand_in_agents(tmp_path / "agents"))}
    return rig, sand, manifest, env, old, new


def test_unpushed_work_blocks_a_replace_until_it_is_preserved(world):
    rig, sand, manifest, env, old, new = world
    manifest()
    with Answers(rig, old, new):
        first = sand.run("apply", "--auto-approve", env=env)
        assert first.returncode == 0, first.stdout + first.stderr
        (before,) = rig.vms_named("agent-1")
        # The agent's work: one commit no remote has, one file never added.
        commit = "git -c user.name=Agent -c user.email=a@example.test commit -qm 'agent work'"
        out(old, f"cd ~/src/app && echo 'y = 2' >> lib.py && git add lib.py && {commit}")
        out(old, "cd ~/src/app && echo draft > notes.md")
        work = files_digest(old, "~/src/app")

        manifest(image="debian-13-next")
        plan = sand.run("plan", env=env)
        assert plan.returncode == 1, plan.stdout + plan.stderr
        assert "~/src/app (branch main: 1 commit(s) on no remote, 1 dirty file(s))" in plan.stdout
        rig.clear_log()
        refused = sand.run("apply", "--auto-approve", env=env)
        assert refused.returncode == 1
        assert not [r for r in rig.log if r.method == "POST" and "/clone" in r.path]
        assert [v.vmid for v in rig.vms()] == [before.vmid]
        assert files_digest(old, "~/src/app") == work

        manifest(image="debian-13-next", preserve=["~/src"])
        plan = sand.run("plan", env=env)
        assert plan.returncode == 0, plan.stdout + plan.stderr
        assert "strategy: create-before-destroy" in plan.stdout
        assert "unpushed work kept by preserve: ~/src/app" in plan.stdout
        done = sand.run("apply", "--auto-approve", env=env)
        assert done.returncode == 0, done.stdout + done.stderr

    (after,) = rig.vms_named("agent-1")
    assert after.vmid != before.vmid and rig.vm(before.vmid) is None
    assert files_digest(new, "~/src/app") == work
    assert "agent work" in out(new, "cd ~/src/app && git log --format=%s -1")
    assert out(new, "cd ~/src/app && git status --porcelain").strip() == "?? notes.md"
    archives = sand.state_dir / "projects" / "demo" / "preserve"
    assert list(archives.iterdir()) == []  # removed once the restore was verified
    assert (archives.stat().st_mode & 0o777) == 0o700

    # The new VM holds the work now: removing it from the manifest is refused too.
    sand.write({**rig.manifest([], identity=str(old.client_key_path))})
    gone = sand.run("apply", "--auto-approve", "--allow-mass-delete", env=env)
    assert gone.returncode == 1 and "holds work that exists nowhere else" in gone.stdout
    assert [v.vmid for v in rig.vms()] == [after.vmid]


def test_a_replacement_that_cannot_be_provisioned_leaves_the_old_vm(world):
    rig, sand, manifest, env, old, new = world
    manifest()
    with Answers(rig, old, new):
        assert sand.run("apply", "--auto-approve", env=env).returncode == 0
        (before,) = rig.vms_named("agent-1")
        out(old, "cd ~/src/app && echo precious > mine.txt")
        work = files_digest(old, "~/src/app")
        # The replacement's guest cannot run provisioning (no sudo for the user).
        new.run_root(["sh", "-c", "rm -f /etc/sudoers.d/*"], check=True)
        manifest(image="debian-13-next", preserve=["~/src"])
        failed = sand.run("apply", "--auto-approve", env=env)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "[guest]" in failed.stdout or "guest" in failed.stderr
    assert [(v.vmid, v.name) for v in rig.vms()] == [(before.vmid, "agent-1")]
    assert rig.vm(before.vmid).status == "running"  # type: ignore[union-attr]
    assert files_digest(old, "~/src/app") == work


def test_destroy_before_create_restores_the_archive_it_kept(world):
    """A node that cannot hold both: the old guest's preserved paths are archived on the
    host first, the old VM deleted, the new one made and the archive restored."""
    rig, sand, manifest, env, old, new = world
    # PVE shows a node's memory only with Sys.Audit on it (pve-manager Nodes.pm index).
    rig.grant(rig.token_id, f"/nodes/{rig.nodes[0]}", "Sys.Audit")
    manifest(memory="7GiB")  # the fake node has 8 GiB, 2 GiB in use
    with Answers(rig, old, new):
        assert sand.run("apply", "--auto-approve", env=env).returncode == 0
        out(old, "cd ~/src/app && echo mine > kept.txt")
        work = files_digest(old, "~/src/app")
        manifest(memory="7GiB", image="debian-13-next", preserve=["~/src"])
        plan = sand.run("plan", env=env)
        assert "strategy: destroy-before-create" in plan.stdout, plan.stdout
        done = sand.run("apply", "--auto-approve", env=env)
        assert done.returncode == 0, done.stdout + done.stderr
    assert [v.name for v in rig.vms()] == ["agent-1"]
    assert files_digest(new, "~/src/app") == work
    assert list((sand.state_dir / "projects" / "demo" / "preserve").iterdir()) == []
