"""``sand reset`` and ``expires:`` on real guests behind fakepve VMs (the rig of
test_safe_replace_guests: the first VM made answers as guest ``old``, the next as ``new``).

``sand reset VM`` is the replacement path itself: refused while the old guest holds
work its ``preserve:`` paths do not cover, and with them the new VM is made from the
template, provisioned, the preserved paths carried over and verified, and only then
the old VM deleted. An expired VM whose checkout holds unpushed work is not deleted.
"""

from __future__ import annotations

import pytest

from tests.e2e.test_safe_replace_guests import Answers, files_digest, world  # noqa: F401
from tests.provision.e2e_helpers import out

pytestmark = pytest.mark.e2e

COMMIT = "git -c user.name=Agent -c user.email=a@example.test commit -qm 'agent work'"


def test_reset_keeps_the_preserved_paths_and_nothing_else_of_the_old_vm(world):  # noqa: F811
    rig, sand, manifest, env, old, new = world
    manifest()
    with Answers(rig, old, new):
        first = sand.run("apply", "--auto-approve", env=env)
        assert first.returncode == 0, first.stdout + first.stderr
        (before,) = rig.vms_named("agent-1")
        out(old, f"cd ~/src/app && echo 'y = 2' >> lib.py && git add lib.py && {COMMIT}")
        out(old, "cd ~/src/app && echo draft > notes.md")
        work = files_digest(old, "~/src/app")

        # Not preserved: the reset is refused like any replacement, nothing is made.
        rig.clear_log()
        refused = sand.run("reset", "agent-1", "--auto-approve", env=env)
        assert refused.returncode == 1, refused.stdout + refused.stderr
        assert "holds work that exists nowhere else" in refused.stdout
        assert not [r for r in rig.log if r.method == "POST" and "/clone" in r.path]
        assert [v.vmid for v in rig.vms()] == [before.vmid]

        manifest(preserve=["~/src"])
        done = sand.run("reset", "agent-1", "--auto-approve", env=env)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "replacement requested with --replace" in done.stdout
        assert "unpushed work kept by preserve: ~/src/app" in done.stdout

    (after,) = rig.vms_named("agent-1")
    assert after.vmid != before.vmid and rig.vm(before.vmid) is None
    # A new VM, with its own creation time (an expires: duration starts again).
    assert "sand-created-" in after.config["tags"]
    assert files_digest(new, "~/src/app") == work
    assert "agent work" in out(new, "cd ~/src/app && git log --format=%s -1")
    assert sand.run("plan", "--detailed-exitcode", env=env).returncode == 0


def test_an_expired_vm_holding_unpushed_work_is_not_deleted(world):  # noqa: F811
    rig, sand, manifest, env, old, new = world
    manifest()
    with Answers(rig, old, new):
        assert sand.run("apply", "--auto-approve", env=env).returncode == 0
        (before,) = rig.vms_named("agent-1")
        out(old, f"cd ~/src/app && echo 'z = 3' >> lib.py && git add lib.py && {COMMIT}")
        work = files_digest(old, "~/src/app")

        # Its preserve: paths keep nothing on a delete: the work would be lost.
        manifest(expires="2020-01-01", preserve=["~/src"])
        plan = sand.run("plan", env=env)
        assert plan.returncode == 1, plan.stdout + plan.stderr
        assert "expired at 2020-01-01T00:00:00Z" in plan.stdout
        assert "is blocked: it would be destroyed" in plan.stdout
        assert "~/src/app (branch main: 1 commit(s) on no remote)" in plan.stdout
        refused = sand.run("apply", "--auto-approve", env=env)
        assert refused.returncode == 1
        assert [v.vmid for v in rig.vms()] == [before.vmid]
        assert files_digest(old, "~/src/app") == work

        # Pushed, it holds nothing sand could lose: the expiry goes through.
        out(old, "cd ~/src/app && git push -q origin HEAD:main")
        done = sand.run("apply", "--auto-approve", env=env)
        assert done.returncode == 0, done.stdout + done.stderr
    assert rig.vms() == []
