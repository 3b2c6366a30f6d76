"""Clone-source bases an earlier sand made (``sand-base-<project>-<8 hex>``, stamped
without a golden fingerprint): sand makes none any more (``sand/backends/lima/create.py``
says why), lists what is left of this project's as a base nothing needs, and the plan
deletes it; an instance that only looks like one is never listed nor deleted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sand.backends.lima import LimaBackend, limayaml
from sand.backends.lima.golden_marks import RETIRED_WHY
from sand.backends.lima.marker import BaseStamp
from sand.errors import BackendError
from sand.observed import ObservedBase
from sand.state.journal import Journal
from tests.backends.lima.conftest import PROJECT, desired
from tests.backends.lima.test_cli import Cli
from tests.limactl_standin import StandIn

RETIRED = f"sand-base-{PROJECT}-1a2b3c4d"


def plant_retired_base(standin: StandIn, name: str, project: str, *, stamp: bool = True) -> None:
    """What an earlier sand left: ``limactl create`` of the base config, then its stamp."""
    doc = limayaml.base_config(image="debian-12", user="claude", project=project, name=name)
    standin.make_instance(name, doc)
    if stamp:
        old = BaseStamp(project, name, "0f1e2d3c4b5a6978", "debian-12", "claude")
        (standin.instance_dir(name) / "sand-base.json").write_bytes(old.to_bytes())


async def test_a_retired_base_is_listed_as_a_base_nothing_needs_and_deleted(
    standin: StandIn, backend: LimaBackend, journal: Journal
) -> None:
    plant_retired_base(standin, RETIRED, PROJECT)
    plant_retired_base(standin, f"sand-base-{PROJECT}-5e6f7a8b", PROJECT, stamp=False)
    obs = await backend.observe(desired().vms)
    assert obs.vms == ()  # never a VM
    assert [(b.identity, b.fingerprint, b.ready, b.retired) for b in obs.bases] == [
        (RETIRED, "", False, RETIRED_WHY),
        (f"sand-base-{PROJECT}-5e6f7a8b", "", False, RETIRED_WHY),  # a build cut short
    ]
    for base in obs.bases:
        assert await backend.delete_base(base, journal) == "deleted"
    assert standin.instances() == []
    assert journal.pending() == []


async def test_what_only_looks_like_a_retired_base_is_never_listed_nor_deleted(
    standin: StandIn, backend: LimaBackend, journal: Journal
) -> None:
    plant_retired_base(standin, "sand-base-other-1a2b3c4d", "other")  # another project's
    standin.make_instance(RETIRED, {"cpus": 1})  # a person's, under the reserved name
    obs = await backend.observe(desired().vms)
    assert obs.bases == () and obs.vms == ()
    for name in ("sand-base-other-1a2b3c4d", RETIRED):
        base = ObservedBase("laptop", name, name, "", False, retired=RETIRED_WHY)
        with pytest.raises(BackendError, match="refusing to delete"):
            await backend.delete_base(base, journal)
    assert standin.instances() == [RETIRED, "sand-base-other-1a2b3c4d"]
    assert standin.read_yaml(RETIRED) == {"cpus": 1}


def test_the_plan_deletes_a_retired_base_and_apply_removes_it(cli: Cli) -> None:
    cli.write("  - name: a\n")
    name = "sand-base-clitest-1a2b3c4d"
    plant_retired_base(cli.standin, name, "clitest")
    plan = cli.sand("plan", "--json")
    assert plan.returncode == 0, plan.stdout + plan.stderr
    (base,) = json.loads(plan.stdout)["bases"]
    assert (base["action"], base["identity"], base["reasons"]) == ("delete", name, [RETIRED_WHY])
    text = cli.sand("plan").stdout
    assert f'# retired base "{name}" (laptop, {name}) will be deleted' in text
    assert "Golden bases: 0 to build, 1 to delete." in text
    res = cli.sand("apply", "--auto-approve")
    assert res.returncode == 0, res.stdout + res.stderr
    assert cli.standin.instances() == ["a"]  # made from its image, the old base gone


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    return Cli(tmp_path)
