"""What `sand status --deep` asks of a guest, and how many guests it asks at once.

The guest side runs in tests/e2e/test_status_deep.py; here, the pure parts: the
checks a VM's declaration turns into (the tmpfs files are the very ones the
secrets step writes) and the bound on parallel probes.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace

import pytest

from sand.cli.main import main
from sand.desired import DesiredVM
from sand.provision.secretcheck import secret_files
from sand.survey.health import Target, check_health, guest_checks
from tests.plan.helpers import desired, observed_from

MANIFEST = """\
apiVersion: sand/v1
project: demo
backends:
  laptop: {type: lima}
defaults: {backend: laptop, image: debian-12}
secrets:
  NPM_TOKEN: {from: {env: X}}
  GH: {from: {env: Y}}
repos:
  app: {url: "https://example.test/acme/app.git", token: GH}
vms:
  - name: a
    agents: [codex, claude]
    secrets: [{name: NPM_TOKEN, scope: ~/src}, {name: GH, scope: ~/src, env: GH_TOKEN}]
    repos: [app]
  - name: b
    provision: false
"""


def vm(name: str) -> DesiredVM:
    return next(v for v in desired(MANIFEST).vms if v.name == name)


def test_a_vm_declares_its_agents_and_every_secret_by_name() -> None:
    a = vm("a")
    checks = guest_checks(a)
    assert [c.words[:2] for c in checks][:2] == [("agent", "claude"), ("agent", "codex")]
    assert [c.missing for c in checks] == [
        "agent claude missing",
        "agent codex missing",
        "secret GH missing (not on the guest's tmpfs for ~/src)",
        "secret NPM_TOKEN missing (not on the guest's tmpfs for ~/src)",
        "secret GH missing (the git token for ~/src/app)",
    ]
    env = [c.words for c in checks if c.words[0] == "env"]
    assert [w[2] for w in env] == ["GH_TOKEN", "NPM_TOKEN"]
    # The files looked for are exactly the ones the secrets step writes.
    files = {c.words[1] for c in checks if c.words[0] in ("env", "file")}
    assert files == set(secret_files(a))


def test_a_vm_sand_does_not_provision_is_only_asked_for_ssh() -> None:
    assert guest_checks(vm("b")) == []


def test_probes_run_together_but_never_more_than_the_bound() -> None:
    a = vm("a")
    todo = [
        Target(vm=replace(a, name=f"vm{i}"), observed=observed_from(a),
               backend=None)  # type: ignore[arg-type]  # the probe asks no backend
        for i in range(20)
    ]  # fmt: skip
    running, peak, timeouts = 0, 0, []

    async def probe(target: Target, timeout: float) -> list[str]:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        timeouts.append(timeout)
        await asyncio.sleep(0.05)
        running -= 1
        return [] if target.vm.name != "vm7" else ["ssh unreachable: no answer within 3s"]

    start = time.monotonic()
    found = asyncio.run(check_health(todo, timeout=3.0, parallelism=8, probe=probe))
    took = time.monotonic() - start
    assert peak == 8
    assert set(timeouts) == {3.0}
    assert found["vm7"] == ["ssh unreachable: no answer within 3s"]
    assert all(found[f"vm{i}"] == [] for i in range(20) if i != 7)
    assert took < 20 * 0.05  # three rounds of eight, not twenty in a row


def test_timeout_is_for_deep_and_must_be_positive(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "nope.yaml", "--timeout", "3"]) == 1
    assert "--timeout is for --deep" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        main(["status", "nope.yaml", "--deep", "--timeout", "0"])
    assert info.value.code == 1  # a usage error: 2 is "changes pending"
    assert "'0' is not a number of seconds above 0" in capsys.readouterr().err


BROKERED = MANIFEST.replace(
    "  GH: {from: {env: Y}}\n",
    "  GH: {from: {env: Y}}\n"
    "  API: {from: {env: Z}, deliver: broker, broker: {hosts: [api.example.test]}}\n",
).replace(
    "    repos: [app]\n", "    repos: [app]\n  - name: c\n    secrets: [{name: API, scope: ~/w}]\n"
)


def test_a_vm_granted_a_brokered_secret_by_its_secrets_is_checked_for_its_variables() -> None:
    c = next(v for v in desired(BROKERED).vms if v.name == "c")
    checks = guest_checks(c)
    assert [(c.words, c.missing) for c in checks if c.words[0] != "agent"] == [
        (("file", "git/broker"), "broker credential missing (for API)"),
        (
            ("env", checks[-1].words[1], "API_BROKER_URL"),
            "broker variables of API missing (not on the guest's tmpfs for ~/w)",
        ),
    ]
    files = {c.words[1] for c in checks if c.words[0] in ("env", "file")}
    assert files == set(secret_files(c))  # the very files the secrets step writes
