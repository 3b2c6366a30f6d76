"""Provisioning a real guest (netns rig): what the guest has afterwards, and
what never leaves the channels it is meant for.

Every assertion is made inside the guest (as its user, through a login shell
and direnv) or on the host's real files and process table, never on what
sand believes it did.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import secrets
import shutil
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import asyncssh
import pytest

from sand.desired.spec import DesiredVM, build_desired
from sand.errors import GuestCommandError
from sand.logs import configure
from sand.manifest import load_manifest
from sand.provision import bundle_digest, deliver_secrets, provision
from sand.provision.bundle import Bundle
from sand.secrets import resolve_secrets, secret_names
from tests.provision.e2e_helpers import (
    as_user,
    endpoint,
    files_under,
    home_snapshot,
    out,
    root,
    scoped_env,
    stand_in_agents,
)
from tests.provision.helpers import make_vm, secret
from tests.rig.argv import ArgvWatch
from tests.rig.ssh import connect_options

if TYPE_CHECKING:
    from tests.rig.fixtures import MakeGuest
    from tests.rig.gitserver import GitServer
    from tests.rig.guest import NetnsGuest


pytestmark = pytest.mark.e2e

HOME = "/home/claude"
# A value with everything a naive quoting would break on.
DB_PASSWORD = "db 'single' \"double\" $HOME `id` \\ back\nsecond line"


@dataclass
class World:
    guest: NetnsGuest
    server: GitServer
    vm: DesiredVM
    values: dict[str, str]
    canary: str
    state: Path
    logs: io.StringIO
    manifest_dir: Path

    def endpoint(self):  # type: ignore[no-untyped-def]
        return endpoint(self.guest)


MANIFEST = """\
apiVersion: sand/v1
project: e2e
backends:
  laptop: {{type: lima}}
defaults:
  image: debian-12
secrets:
  API_KEY:
    from: {{command: [cat, {canary_file}]}}
  DB_PASSWORD:
    from: {{file: db.secret}}
  GIT_TOKEN:
    from: {{file: git.token}}
  UNUSED:
    from: {{command: [/bin/false]}}
repos:
  app:
    url: {url}
    path: ~/src/app
    token: GIT_TOKEN
vms:
  - name: dev
    user: claude
    agents: [claude]
    packages: [procps]
    repos: [app]
    secrets:
      - {{name: API_KEY, scope: ~/work}}
      - {{name: DB_PASSWORD, scope: ~/work/inner, env: DB_PASS}}
      - {{name: DB_PASSWORD, scope: ~/src/app, env: APP_DB_PASS}}
"""


def _private(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(0o600)


@pytest.fixture
def world(tmp_path, monkeypatch, netns_guest: MakeGuest, git_server: GitServer) -> World:
    state = tmp_path / "state"
    monkeypatch.setenv("SAND_STATE_DIR", str(state))
    monkeypatch.setenv("SAND_AGENT_SOURCE", str(stand_in_agents(tmp_path / "agents")))
    canary = f"canary-{secrets.token_hex(12)}"
    work = tmp_path / "manifest"
    work.mkdir()
    _private(work / "canary", canary + "\n")
    _private(work / "db.secret", DB_PASSWORD + "\n")
    _private(work / "git.token", git_server.token + "\n")
    url = git_server.create_repo("app", {"README.md": "# app\n"})
    (work / "sand.yaml").write_text(MANIFEST.format(canary_file=work / "canary", url=url))
    logs = io.StringIO()
    configure("json", "debug", stream=logs)
    loaded = load_manifest(work / "sand.yaml")
    (vm,) = build_desired(loaded, bundle_digest()).vms
    guest = netns_guest()
    return World(guest, git_server, vm, {}, canary, state, logs, work)


def _resolve(world: World) -> dict[str, str]:
    loaded = load_manifest(world.manifest_dir / "sand.yaml")
    resolved = resolve_secrets(loaded.manifest, loaded.directory, secret_names([world.vm]))
    return {name: value.reveal() for name, value in resolved.items()}


def _disk_files_holding(root_dir: Path, needles: list[str]) -> list[str]:
    hits = []
    for dirpath, _dirs, names in os.walk(root_dir):
        for name in names:
            path = Path(dirpath, name)
            if path.is_symlink() or not path.is_file():
                continue
            data = path.read_bytes()
            if any(n.encode() in data for n in needles):
                hits.append(str(path))
    return hits


def _guest_disk(guest: NetnsGuest) -> Path:
    # Everything the guest wrote to its disk is in the overlay's upper layer.
    assert guest.copy_mode == "overlay", "the leak scan needs the overlay rig"
    return guest.dir / "upper"


async def test_provision_delivers_scoped_secrets_and_a_checkout_token_and_leaks_neither(
    world: World,
) -> None:
    guest, token = world.guest, world.server.token
    with ArgvWatch(guest) as watch:
        values = _resolve(world)  # the canary comes from a command's stdout
        report = await provision(world.endpoint(), world.vm, values)
    assert values["API_KEY"] == world.canary
    assert "UNUSED" not in values  # never resolved: its command would fail
    assert report.changed > 0
    print(f"\nprovision (netns guest): {report.seconds:.2f}s, {len(report.changes)} changes")

    # Scoped secrets: present under the scope (nested scopes inherit), absent outside.
    assert scoped_env(guest, "~/work", "API_KEY") == world.canary
    assert scoped_env(guest, "~/work/inner", "API_KEY") == world.canary
    assert scoped_env(guest, "~/work/inner", "DB_PASS") == DB_PASSWORD
    assert scoped_env(guest, "~/work", "DB_PASS") is None
    assert scoped_env(guest, "~", "API_KEY") is None
    assert scoped_env(guest, "/tmp", "API_KEY") is None
    # On disk under the scopes: only the .envrc files, which hold no value.
    assert files_under(guest, f"{HOME}/work") == [".envrc", "inner/.envrc"]
    assert world.canary not in root(guest, "cat", f"{HOME}/work/.envrc")

    # The values live on the user's tmpfs, 0600 in a 0700 dir, owned by the user.
    env_dir = f"/run/user/{guest.uid}/sand/env"
    assert root(guest, "stat", "-f", "-c", "%T", env_dir).strip() == "tmpfs"
    listing = root(guest, "stat", "-c", "%a %U %n", env_dir, *_glob(guest, env_dir))
    modes = [line.split()[:2] for line in listing.splitlines()]
    assert modes[0] == ["700", "claude"]
    assert modes[1:] and all(m == ["600", "claude"] for m in modes[1:])

    # The repo: cloned with the token, which only its own checkout can use.
    assert out(guest, "git -C ~/src/app log --format=%s") == "initial\n"
    # A scope may be a checkout: its .envrc works there and stays out of git.
    assert scoped_env(guest, "~/src/app", "APP_DB_PASS") == DB_PASSWORD
    assert files_under(guest, f"{HOME}/src/app", "-not", "-path", "*/.git/*") == [
        ".envrc",
        "README.md",
    ]
    assert out(guest, "git -C ~/src/app status --porcelain --ignored=no") == ""
    assert as_user(guest, "git -C ~/src/app ls-remote origin").returncode == 0
    elsewhere = as_user(
        guest,
        f"mkdir -p ~/elsewhere && cd ~/elsewhere && git init -q && "
        f"git remote add origin {world.server.url_for('app')} && git ls-remote origin",
    )
    assert elsewhere.returncode != 0
    assert as_user(guest, f"cd /tmp && git ls-remote {world.server.url_for('app')}").returncode
    assert token not in root(guest, "cat", f"{HOME}/src/app/.git/config", f"{HOME}/.gitconfig")
    assert (
        out(guest, "git -C ~/src/app remote get-url origin") == world.server.url_for("app") + "\n"
    )
    assert any(ok for _path, ok in world.server.request_log)

    # Agents: Claude Code with prompts skipped and remote control on; no credential.
    settings = json.loads(root(guest, "cat", f"{HOME}/.claude/settings.json"))
    assert settings["skipDangerousModePermissionPrompt"] is True
    assert settings["remoteControlAtStartup"] is True
    bashrc = root(guest, "cat", f"{HOME}/.bashrc")
    assert "alias claude='claude --dangerously-skip-permissions'" in bashrc
    assert 'eval "$(direnv hook bash)"' in bashrc
    assert out(guest, "claude --version").startswith("stand-in claude")
    assert as_user(guest, "test -e ~/.claude/.credentials.json").returncode != 0
    assert as_user(guest, "test -e ~/.codex").returncode != 0  # not listed: not installed
    assert as_user(guest, "sudo -n true").returncode == 0

    # Never in argv (host or guest), logs, host state, or the guest's disk.
    assert watch.samples > 20
    for needle in (world.canary, token, "second line"):
        assert watch.containing(needle) == []
        assert needle not in world.logs.getvalue()
    assert "provision.step" in world.logs.getvalue()
    assert _disk_files_holding(world.state, [world.canary, token]) == []
    assert _disk_files_holding(_guest_disk(guest), [world.canary, token, "second line"]) == []


def _init_pid(guest: NetnsGuest) -> int:
    return next(p.host_pid for p in guest.guest_pids() if p.pid == 1)


def _glob(guest: NetnsGuest, directory: str) -> list[str]:
    return [f"{directory}/{name}" for name in root(guest, "ls", directory).split()]


async def test_second_provision_changes_nothing(world: World) -> None:
    values = _resolve(world)
    first = await provision(world.endpoint(), world.vm, values)
    watched = (HOME, "/usr/local/lib/sand", "/etc/sudoers.d", f"/run/user/{world.guest.uid}")
    before = home_snapshot(world.guest, *watched)
    second = await provision(world.endpoint(), world.vm, values)
    assert second.changed == 0, second.changes
    assert home_snapshot(world.guest, *watched) == before
    print(
        f"\nnetns provision: first {first.seconds:.2f}s ({first.changed} steps changed), "
        f"second {second.seconds:.2f}s ({second.changed} changed)"
    )


async def test_rotation_and_removal_reach_a_running_guest_without_a_restart(world: World) -> None:
    guest = world.guest
    values = _resolve(world)
    await provision(world.endpoint(), world.vm, values)
    init = _init_pid(guest)
    rotated = f"{world.canary}-rotated"

    # A shell that stays in the scope across the rotation, as an agent's does:
    # direnv's prompt hook re-runs `direnv export`, which sees the new value.
    async with asyncssh.connect(**connect_options(guest)) as conn:
        shell = await conn.create_process("bash --norc --noprofile")
        reload = 'eval "$(direnv export bash 2>/dev/null)"; echo "value=$API_KEY"\n'
        shell.stdin.write("cd ~/work && " + reload)
        assert await shell.stdout.readline() == f"value={world.canary}\n"
        # direnv compares watched files' mtimes in whole seconds: the rotation must land
        # in a later second than the delivery the shell has seen.
        seen = int(time.time())
        while int(time.time()) <= seen:
            await asyncio.sleep(0.01)

        with ArgvWatch(guest) as watch:
            report = await deliver_secrets(
                world.endpoint(), world.vm, {**values, "API_KEY": rotated}
            )
        shell.stdin.write(reload)
        assert await shell.stdout.readline() == f"value={rotated}\n"
        shell.stdin.write_eof()
    assert report.ran == ["secrets"]  # nothing else, not even the bundle (it is current)
    assert report.changes == [f"secrets: secrets for {HOME}/work"]
    assert scoped_env(guest, "~/work", "API_KEY") == rotated
    assert scoped_env(guest, "~/work/inner", "API_KEY") == rotated
    assert watch.containing(rotated) == []
    assert _init_pid(guest) == init  # the same running guest: nothing restarted

    # Removing API_KEY from the VM removes it from the guest: tmpfs file and .envrc.
    without = replace(world.vm, secrets=tuple(s for s in world.vm.secrets if s.name != "API_KEY"))
    report = await deliver_secrets(world.endpoint(), without, values)
    assert scoped_env(guest, "~/work", "API_KEY") is None
    assert scoped_env(guest, "~/work/inner", "API_KEY") is None
    assert scoped_env(guest, "~/work/inner", "DB_PASS") == DB_PASSWORD
    assert files_under(guest, f"{HOME}/work") == ["inner/.envrc"]
    tmpfs = root(guest, "cat", *_glob(guest, f"/run/user/{guest.uid}/sand/env"))
    assert world.canary not in tmpfs and rotated not in tmpfs
    assert (await deliver_secrets(world.endpoint(), without, values)).changed == 0


async def test_a_bundle_edit_reprovisions_the_same_guest_in_place(world: World, tmp_path) -> None:
    guest = world.guest
    values = _resolve(world)
    await provision(world.endpoint(), world.vm, values)
    as_user(guest, "echo work in progress > ~/src/app/notes.txt")
    inode = root(guest, "stat", "-c", "%i", f"{HOME}/src/app/.git")

    edited = tmp_path / "bundle"
    shutil.copytree(Bundle().root, edited)
    home_sh = edited / "home.sh"
    text = home_sh.read_text()
    assert "export IS_SANDBOX=1" in text
    home_sh.write_text(text.replace("export IS_SANDBOX=1", "export IS_SANDBOX=1 SAND_EDITED=1"))
    new = Bundle(edited)
    assert new.digest != Bundle().digest

    report = await provision(world.endpoint(), world.vm, values, bundle=new)
    assert {s.name for s in report.steps if s.changes} == {"bundle", "home"}
    assert root(guest, "cat", "/usr/local/lib/sand/bundle/DIGEST").strip() == new.digest
    assert "SAND_EDITED=1" in root(guest, "cat", f"{HOME}/.bashrc")
    # The same machine: the agent's work and the checkout are untouched.
    assert out(guest, "cat ~/src/app/notes.txt") == "work in progress\n"
    assert root(guest, "stat", "-c", "%i", f"{HOME}/src/app/.git") == inode
    assert (await provision(world.endpoint(), world.vm, values, bundle=new)).changed == 0


async def test_a_failed_step_names_itself_its_status_and_output_without_values(
    world: World,
) -> None:
    values = _resolve(world)
    # The guest has no route to a package mirror: installing a package fails.
    with pytest.raises(GuestCommandError) as err:
        await provision(world.endpoint(), replace(world.vm, packages=("sand-e2e-nope",)), values)
    assert err.value.step == "packages"
    assert err.value.exit_status == 1
    assert "apt-get update failed" in err.value.output_tail

    # A scope holding an .envrc sand did not write fails the secrets step,
    # with the value it was carrying nowhere in the error.
    await provision(world.endpoint(), world.vm, values)
    as_user(world.guest, "mkdir -p ~/theirs && echo 'export MINE=1' > ~/theirs/.envrc")
    vm = replace(world.vm, secrets=(replace(world.vm.secrets[0], scope="~/theirs"),))
    with pytest.raises(GuestCommandError) as err:
        await deliver_secrets(world.endpoint(), vm, values)
    assert err.value.step == "secrets"
    assert err.value.exit_status == 1
    assert "was not written by sand" in str(err.value)
    assert world.canary not in str(err.value)
    assert world.canary not in world.logs.getvalue()


async def test_a_step_that_prints_a_value_has_it_redacted_from_the_error(
    world: World, tmp_path
) -> None:
    # A broken bundle whose secrets step echoes its whole payload, values and
    # all, then fails: the error still carries none of them.
    broken = tmp_path / "bundle"
    shutil.copytree(Bundle().root, broken)
    (broken / "secrets.sh").write_text("#!/bin/bash\ntr '\\0' '\\n'; exit 3\n")
    values = _resolve(world)
    await provision(world.endpoint(), world.vm, values)
    with pytest.raises(GuestCommandError) as err:
        await deliver_secrets(world.endpoint(), world.vm, values, bundle=Bundle(broken))
    assert err.value.step == "secrets"
    assert err.value.exit_status == 3
    assert "API_KEY" in err.value.output_tail  # the names are there...
    assert "[redacted]" in err.value.output_tail  # ...the values are not
    for value in (world.canary, world.server.token, "second line"):
        assert value not in str(err.value)


async def test_the_login_user_may_differ_from_the_provisioned_user(
    netns_guest: MakeGuest, tmp_path, monkeypatch
) -> None:
    # Lima logs in as the host's user name; the VM's user is created for the agents.
    monkeypatch.setenv("SAND_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("SAND_AGENT_SOURCE", str(stand_in_agents(tmp_path / "agents")))
    guest = netns_guest(user="lima")
    vm = make_vm(user="agent", secrets=(secret("TOKEN", "~/proj"),), agents=("claude", "codex"))
    start = time.monotonic()
    await provision(endpoint(guest), vm, {"TOKEN": "value-for-agent"})
    assert time.monotonic() - start < 30
    assert scoped_env(guest, "~/proj", "TOKEN") is None  # lima has no such scope
    assert as_user(guest, "sudo -n true", user="agent").returncode == 0
    agent_env = as_user(
        guest,
        "bash -lc 'cd ~/proj && eval \"$(direnv export bash 2>/dev/null)\" && printenv TOKEN'",
        user="agent",
    )
    assert agent_env.stdout.decode() == "value-for-agent\n"
    config = root(guest, "cat", "/home/agent/.codex/config.toml")
    assert 'approval_policy = "never"' in config
    assert 'sandbox_mode = "danger-full-access"' in config
    # No credential for either agent: Codex's auth.json and Claude's credentials are absent.
    for credential in ("~/.codex/auth.json", "~/.claude/.credentials.json"):
        assert as_user(guest, f"test -e {credential}", user="agent").returncode != 0
    # Dropping codex from the VM removes what sand installed for it.
    await provision(endpoint(guest), replace(vm, agents=("claude",)), {"TOKEN": "value-for-agent"})
    assert as_user(guest, "test -e ~/.codex/config.toml", user="agent").returncode != 0
    assert as_user(guest, "command -v codex", user="agent").returncode != 0
