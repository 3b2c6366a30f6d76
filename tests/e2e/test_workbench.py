"""A workbench guest (netns rig): the toolchain, the clock and language, the agents.

Two kinds of guest, and what each can prove:

* a **bare** Debian guest (the plain debootstrap rootfs) whose apt knows only
  the rig's mirror (:mod:`tests.rig.workbench`): everything it has afterwards
  came from sand's own apt-get runs, and the mirror's log shows the downloads.
  NodeSource and cli.github.com are out of reach here (no DNS, no route), so
  this proves the Debian fallback; the vendor path can only be shown in the
  step's script (``toolchain.sh``), never run, on this rig.
* a **workbench** guest (the rig's default tree, which has the workbench
  installed like a prepared image): fast, for what does not need installing.

Agents are the rig's stand-in executables (SAND_AGENT_SOURCE): there is no
npm registry here either. Their settings files are sand's real ones.
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo

import pytest

from sand.desired.spec import build_desired
from sand.errors import GuestCommandError
from sand.manifest import parse_manifest
from sand.provision import bundle_digest, provision
from tests.provision.e2e_helpers import as_user, endpoint, out, root, stand_in_agents
from tests.provision.helpers import make_vm
from tests.rig.fixtures import guest_uses_mirror

if TYPE_CHECKING:
    from tests.rig.fixtures import MakeGuest
    from tests.rig.guest import NetnsGuest
    from tests.rig.workbench import AptMirror

pytestmark = pytest.mark.e2e

HOME = "/home/claude"
TOOLS = ("git", "tmux", "gh", "gcc", "g++", "make", "curl", "node", "npm")
OPENCODE = f"{HOME}/.config/opencode/opencode.json"
PI = f"{HOME}/.pi/agent/settings.json"


@pytest.fixture(autouse=True)
def _stand_ins(tmp_path, monkeypatch):
    monkeypatch.setenv("SAND_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("SAND_AGENT_SOURCE", str(stand_in_agents(tmp_path / "agents")))


def _installed(guest: NetnsGuest, package: str) -> bool:
    status = guest.run_root(["dpkg-query", "-W", "-f=${db:Status-Abbrev}", package])
    return status.stdout.decode().startswith("ii")


def _groups(guest: NetnsGuest) -> list[str]:
    return out(guest, "id -nG").split()


def _utc_offset(tz: str) -> str:
    return datetime.now(ZoneInfo(tz)).strftime("%z")


# A curl for which NodeSource answers with its key while nothing else answers:
# the vendor that seems reachable until apt asks for its index (no DNS here).
HALF_REACHABLE_CURL = """#!/bin/sh
prev=""
for arg do [ "$prev" != -o ] || out=$arg; prev=$arg; done
echo "$prev" >>/var/tmp/curl-asked
case $prev in https://deb.nodesource.com/*) echo "not really a key" >"$out"; exit 0 ;; esac
exit 6
"""


async def test_a_bare_debian_guest_becomes_a_workbench_from_its_mirror(
    netns_guest: MakeGuest, apt_mirror: AptMirror
) -> None:
    guest = netns_guest(bare=True)
    guest_uses_mirror(guest, apt_mirror)
    guest.run_root(
        ["sh", "-c", "cat > /usr/local/bin/curl && chmod 755 /usr/local/bin/curl"],
        input=HALF_REACHABLE_CURL.encode(),
        check=True,
    )
    # tmux is in the bare rootfs itself (the rig's `sand shell` tests need it).
    for tool in ("gh", "gcc", "node", "docker"):
        assert as_user(guest, f"command -v {tool}").returncode != 0, f"{tool} before provisioning"
    tz, locale = "America/Argentina/Buenos_Aires", "de_DE.UTF-8"
    vm = make_vm(
        agents=("claude", "opencode", "pi"),
        docker=True,
        timezone=tz,
        locale=locale,
        bundle_digest=bundle_digest(),
    )

    first = await provision(endpoint(guest), vm, {})
    root(guest, "rm", "/usr/local/bin/curl")
    took = {s.name: round(s.seconds, 1) for s in first.steps}
    print(f"\nbare guest to workbench: {first.seconds:.1f}s ({took})")

    # The toolchain, on the user's PATH in a login shell; every piece from the mirror.
    paths = out(guest, "command -v " + " ".join(TOOLS)).split()
    assert len(paths) == len(TOOLS), paths
    assert out(guest, "node --version").startswith("v18.")  # Debian's bookworm line
    compiled = "echo 'int main(void){return 7;}' | gcc -x c -o /tmp/t - && /tmp/t; echo $?"
    assert out(guest, compiled) == "7\n"
    fetched = " ".join(apt_mirror.requests)
    for deb in ("gh_", "nodejs_", "npm_", "build-essential_", "docker.io_"):
        assert f"/{deb}" in fetched, f"{deb} was not fetched from the mirror"
    # NodeSource and cli.github.com were out of reach: Debian's, said so, and recorded.
    assert "toolchain: node v18" in "\n".join(first.changes)
    assert any("from Debian (deb.nodesource.com out of reach)" in c for c in first.changes)
    assert "toolchain: gh from Debian (cli.github.com out of reach)" in first.changes
    assert root(guest, "cat", "/var/lib/sand/toolchain/node") == "debian\n"
    # NodeSource's source went in with its key, then out again when apt could not
    # reach it; gh's never did. Nothing of either is left behind.
    assert root(guest, "cat", "/var/tmp/curl-asked").split() == [
        "https://deb.nodesource.com/gpgkey/nodesource-repo.gpg.key",
        "https://cli.github.com/packages/githubcli-archive-keyring.gpg",
    ]
    assert root(guest, "ls", "/etc/apt/sources.list.d", "/etc/apt/keyrings") == (
        "/etc/apt/keyrings:\n\n/etc/apt/sources.list.d:\n"
    )

    # Docker, opted in: installed, and the user may use its socket.
    assert _installed(guest, "docker.io")
    assert out(guest, "command -v docker").strip() == "/usr/bin/docker"
    assert "docker" in _groups(guest)

    # Timezone and locale as declared.
    assert root(guest, "cat", "/etc/timezone") == f"{tz}\n"
    assert root(guest, "readlink", "/etc/localtime") == f"/usr/share/zoneinfo/{tz}\n"
    assert out(guest, "date +%z").strip() == _utc_offset(tz)
    assert root(guest, "cat", "/etc/default/locale") == f"LANG={locale}\n"
    assert "de_DE.utf8" in root(guest, "locale", "-a").split()
    charmap = as_user(guest, f"LC_ALL={locale} locale charmap")
    assert (charmap.stdout, charmap.stderr) == (b"UTF-8\n", b"")  # no "cannot set locale"

    # OpenCode and Pi, opted in: installed, with sand's settings and no credential.
    assert out(guest, "opencode --version").startswith("stand-in opencode")
    assert out(guest, "pi --version").startswith("stand-in pi")
    assert json.loads(root(guest, "cat", OPENCODE)) == {
        "$schema": "https://opencode.ai/config.json",
        "permission": "allow",
    }
    assert json.loads(root(guest, "cat", PI)) == {"defaultProjectTrust": "always"}
    assert root(guest, "stat", "-c", "%a %U", OPENCODE, PI) == "600 claude\n600 claude\n"
    assert as_user(guest, "test -e ~/.local/share/opencode/auth.json").returncode != 0
    assert as_user(guest, "test -e ~/.pi/agent/auth.json").returncode != 0

    # Again: nothing to do, nothing fetched.
    asked = len(apt_mirror.requests)
    second = await provision(endpoint(guest), vm, {})
    assert second.changed == 0, second.changes
    assert len(apt_mirror.requests) == asked

    # Opting out again takes away what sand put there, and only that.
    leaner = replace(vm, agents=("claude",), docker=False)
    third = await provision(endpoint(guest), leaner, {})
    assert "toolchain: docker removed" in third.changes
    assert not _installed(guest, "docker.io")
    assert as_user(guest, "command -v docker").returncode != 0
    assert "docker" not in _groups(guest)
    assert guest.run_root(["test", "-e", OPENCODE]).returncode != 0
    assert guest.run_root(["test", "-e", PI]).returncode != 0
    assert guest.run_root(["test", "-e", "/usr/local/bin/opencode"]).returncode != 0
    assert len(out(guest, "command -v " + " ".join(TOOLS)).split()) == len(TOOLS)  # stays
    assert (await provision(endpoint(guest), leaner, {})).changed == 0


MANIFEST = """\
apiVersion: sand/v1
project: e2e
backends:
  laptop: {type: lima}
defaults:
  image: debian-12
vms:
  - name: dev
    agents: [claude]
"""


async def test_without_a_declared_zone_or_locale_the_guest_gets_the_hosts(
    netns_guest: MakeGuest, monkeypatch
) -> None:
    monkeypatch.setenv("TZ", "Asia/Kolkata")
    monkeypatch.delenv("LC_ALL", raising=False)
    monkeypatch.setenv("LANG", "fr_FR.UTF-8")
    (vm,) = build_desired(parse_manifest(MANIFEST), bundle_digest()).vms
    assert (vm.timezone, vm.locale, vm.docker) == ("Asia/Kolkata", "fr_FR.UTF-8", False)
    guest = netns_guest()

    first = await provision(endpoint(guest), vm, {})
    assert "locale: timezone Asia/Kolkata" in first.changes
    assert "locale: locale fr_FR.UTF-8 generated" in first.changes
    assert root(guest, "cat", "/etc/timezone") == "Asia/Kolkata\n"
    assert out(guest, "date +%z").strip() == "+0530"
    assert root(guest, "cat", "/etc/default/locale") == "LANG=fr_FR.UTF-8\n"
    assert "fr_FR.utf8" in root(guest, "locale", "-a").split()

    # The workbench this image came with is the workbench sand wants: nothing installed.
    assert not any(c.startswith(("packages:", "toolchain:")) for c in first.changes)
    assert len(out(guest, "command -v " + " ".join(TOOLS)).split()) == len(TOOLS)
    # Not opted in: no Docker, no OpenCode or Pi, and none of their settings.
    assert as_user(guest, "command -v docker").returncode != 0
    assert "docker" not in _groups(guest)
    for path in (OPENCODE, PI, "/usr/local/bin/opencode", "/usr/local/bin/pi"):
        assert guest.run_root(["test", "-e", path]).returncode != 0, path
    assert (await provision(endpoint(guest), vm, {})).changed == 0


async def test_a_zone_or_locale_the_guest_lacks_fails_the_locale_step_by_name(
    netns_guest: MakeGuest,
) -> None:
    guest = netns_guest()
    # The host knows this zone; this guest's tz database has lost it.
    root(guest, "rm", "/usr/share/zoneinfo/Pacific/Chatham")
    before = root(guest, "readlink", "/etc/localtime")
    vm = make_vm(timezone="Pacific/Chatham", bundle_digest=bundle_digest())
    with pytest.raises(GuestCommandError) as err:
        await provision(endpoint(guest), vm, {})
    assert err.value.step == "locale"
    assert "timezone Pacific/Chatham is not in this guest's tz database" in str(err.value)
    assert root(guest, "readlink", "/etc/localtime") == before  # left as it was

    # A well-formed name glibc has never heard of.
    vm = replace(vm, timezone="Etc/UTC", locale="xx_YY.UTF-8")
    with pytest.raises(GuestCommandError) as err:
        await provision(endpoint(guest), vm, {})
    assert err.value.step == "locale"
    assert "locale xx_YY.UTF-8 is not one this guest's glibc supports" in str(err.value)
    assert guest.run_root(["grep", "-q", "xx_YY", "/etc/locale.gen"]).returncode != 0
