"""A VM that only looks like a golden base is not sand's, on fakepve.

A person's full clone of a base copies the base's tags and description (PVE does),
so it carries the golden tags while its golden block names the base it was copied
from. sand must not plan what apply refuses: the copy is left alone and said so
once, every run succeeds, and a real half-made base is still cleaned up.
"""

from __future__ import annotations

from sand.backends.proxmox import description as desc
from sand.backends.proxmox import marker as mk
from tests.cli.helpers import Sand

FP = "0123456789abcdef"


def golden_description(vmid: int, state: str = "building") -> str:
    block = desc.render_golden_block("demo", "pve", vmid, "wb", FP, "template:9000", state, "op1")
    return f"Golden base of image 'wb'.\n\n{block}"


def test_a_copy_of_a_base_is_left_alone_and_every_run_succeeds(tmp_path, fakepve_server):
    rig = fakepve_server
    # The person cloned base 150 (since deleted) into their own VM 160: tags and
    # description came along; it is no template.
    copy = rig.seed_vm(
        160, "my-experiment", status="running",
        tags=";".join(mk.golden_tags("demo", "pve", FP)),
        description=golden_description(150),
    )  # fmt: skip
    config = dict(copy.config)
    sand = Sand(tmp_path)
    sand.write(rig.manifest([{"name": "agent-1"}]))
    plan = sand.run("plan")
    assert plan.returncode == 0, plan.stdout + plan.stderr
    text = plan.stdout + plan.stderr
    assert "will be deleted" not in text and "half-made" not in text, text
    assert text.count("VM 160 (my-experiment) carries the golden-base tags") == 1, text
    assert "left alone" in text
    for _ in range(2):  # every run, not only the first
        rig.clear_log()
        done = sand.run("apply", "--auto-approve")
        assert done.returncode == 0, done.stdout + done.stderr
        assert not [r for r in rig.log if r.method != "GET" and "/160" in r.path]
    kept = rig.vm(160)
    assert kept is not None and kept.config == config and kept.status == "running"


def test_a_half_made_base_of_this_project_is_still_deleted(tmp_path, fakepve_server):
    rig = fakepve_server
    rig.seed_vm(
        170, "sand-golden-wb-01234567", status="stopped",
        tags=";".join(mk.golden_tags("demo", "pve", None)),
        description=golden_description(170),
    )  # fmt: skip
    sand = Sand(tmp_path)
    sand.write(rig.manifest([{"name": "agent-1"}]))
    plan = sand.run("plan")
    assert "half-made" in plan.stdout, plan.stdout + plan.stderr
    done = sand.run("apply", "--auto-approve")
    assert done.returncode == 0, done.stdout + done.stderr
    assert rig.vm(170) is None
