"""Step construction: values only in stdin, names validated before any SSH."""

from __future__ import annotations

import re
import shlex

import pytest

from sand.provision.bundle import Bundle
from sand.provision.checks import ProvisionSpecError, guest_path, slug
from sand.provision.secretcheck import CHECK_SECRETS, check_secrets_step
from sand.provision.steps import (
    machine_content,
    machine_steps,
    provision_steps,
    repos_step,
    secrets_step,
)
from tests.provision.helpers import make_vm, repo, secret

CANARY = "canary-steps-0d15ea5e"
TOKEN = "canary-token-8badf00d"


def _vm(**kw):
    defaults = dict(
        secrets=(secret("API", "~/work", "API_KEY"),),
        repos=(repo("app", "https://git.test/org/app.git", "~/src/app", token="GIT"),),
        agents=("claude", "codex"),
        packages=("jq",),
    )
    return make_vm(**{**defaults, **kw})


def _all_steps(vm, tmp_path):
    for agent in ("claude", "codex", "opencode", "pi"):
        (tmp_path / agent).write_text("#!/bin/sh\n")
    return provision_steps(vm, {"API": CANARY, "GIT": TOKEN}, agent_source=str(tmp_path))


def test_no_value_is_ever_in_a_command_line_only_in_stdin(tmp_path):
    steps = _all_steps(_vm(), tmp_path)
    for step in steps:
        for login in ("root", "claude", "debian"):
            command = step.command(login, "claude")
            assert CANARY not in command and TOKEN not in command
    secrets = next(s for s in steps if s.name == "secrets")
    assert CANARY.encode() in secrets.stdin and TOKEN.encode() in secrets.stdin
    assert CANARY not in repr(secrets)


def test_commands_run_fixed_bundle_scripts_as_root_or_as_the_user(tmp_path):
    by_name = {s.name: s for s in _all_steps(_vm(), tmp_path)}
    assert shlex.split(by_name["secrets"].command("debian", "claude")) == [
        "sudo", "-n", "-H", "-u", "claude", "--",
        "/bin/bash", "/usr/local/lib/sand/bundle/secrets.sh",
    ]  # fmt: skip
    assert shlex.split(by_name["user"].command("debian", "claude"))[:3] == [
        "sudo", "-n", "/bin/bash",
    ]  # fmt: skip
    assert shlex.split(by_name["user"].command("root", "claude"))[0] == "/bin/bash"
    assert [s.name for s in _all_steps(_vm(), tmp_path)] == [
        "user", "egress", "packages", "toolchain", "agents", "memory", "locale", "home",
        "secrets", "repos",
    ]  # fmt: skip


def test_the_workbench_packages_are_always_installed(tmp_path):
    packages = next(s for s in _all_steps(_vm(), tmp_path) if s.name == "packages")
    assert packages.stdin.split(b"\0") == [
        b"build-essential", b"ca-certificates", b"curl", b"direnv", b"git", b"jq",
        b"locales", b"tmux", b"tzdata", b"end", b"",
    ]  # fmt: skip


def test_docker_is_installed_only_when_the_vm_opts_in(tmp_path):
    def toolchain(vm):
        step = next(s for s in _all_steps(vm, tmp_path) if s.name == "toolchain")
        return shlex.split(step.command("root", "claude"))

    assert toolchain(_vm())[2:] == ["claude", "no-docker"]
    assert toolchain(_vm(docker=True))[2:] == ["claude", "docker"]


def test_timezone_and_locale_reach_the_guest_as_checked_names(tmp_path):
    vm = _vm(timezone="America/Argentina/Buenos_Aires", locale="de_DE.UTF-8")
    step = next(s for s in _all_steps(vm, tmp_path) if s.name == "locale")
    assert shlex.split(step.command("root", "claude")) == [
        "/bin/bash", "/usr/local/lib/sand/bundle/locale.sh",
        "America/Argentina/Buenos_Aires", "de_DE.UTF-8",
    ]  # fmt: skip
    assert step.as_root and step.stdin == b""


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("timezone", "../../etc/passwd"),
        ("timezone", "Europe/Berlin; id"),
        ("timezone", "localtime"),
        ("timezone", "Mars/Olympus_Mons"),
        ("locale", "de_DE.UTF-8 $(id)"),
        ("locale", "-rf"),
    ],
)
def test_a_timezone_or_locale_outside_the_rules_never_reaches_a_guest(tmp_path, field, value):
    with pytest.raises(ProvisionSpecError):
        _all_steps(_vm(**{field: value}), tmp_path)


def test_the_secrets_check_is_a_fixed_read_only_script_over_validated_names(tmp_path):
    # Path segments may hold '+@=,' (guest_path allows them): the names passed are slugs.
    vm = _vm(secrets=(secret("API", "~/work/a+b@c=d,e", "API_KEY"),))
    step = check_secrets_step(vm)
    # As the VM's user (never root), the one fixed script, its operands file names only.
    argv = shlex.split(step.command("debian", "claude"))
    assert argv[:6] == ["sudo", "-n", "-H", "-u", "claude", "--"]
    assert argv[6:9] == ["/bin/sh", "-c", CHECK_SECRETS]
    names = argv[10:]
    assert names and all(re.fullmatch(r"(env|git)/[A-Za-z0-9._-]+(\.sh)?", n) for n in names)
    assert len(names) == 2  # the scope's env file and the repo token's git file
    assert step.stdin == b""
    # Read-only: it tests for files and exits; it writes, removes and reads no content.
    words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_-]*|>", CHECK_SECRETS))
    assert words.isdisjoint({">", "rm", "mv", "cp", "touch", "mkdir", "cat", "tee", "chmod"})


FILE_SERVERS = ("samba", "smbd", "nmbd", "smb.conf", "[homes]", "nfs-kernel-server", "exportfs")


def test_no_step_installs_or_configures_a_file_server(tmp_path):
    # Samba is off: upstream shares the host home over it; sand mounts no host directory
    # (the Lima tests check the effective lima.yaml) and serves none from the guest.
    # The packages are what the VM lists plus the workbench set (tested above); here, no
    # step's command or input, and no file of the bundle, sets one up.
    steps = _all_steps(_vm(), tmp_path)
    texts = {
        f"step {s.name}": s.command("root", "claude") + s.stdin.decode("latin-1") for s in steps
    }
    root = Bundle().root
    files = [p for p in sorted(root.rglob("*")) if p.is_file()]
    assert {p.name for p in files} >= {"packages.sh", "user.sh", "home.sh", "secrets.sh"}
    texts.update({str(p.relative_to(root)): p.read_text(errors="replace") for p in files})
    found = {where: w for where, text in texts.items() for w in FILE_SERVERS if w in text.lower()}
    assert found == {}


@pytest.mark.parametrize(
    "path",
    [
        "work",
        "~/../etc",
        "~/a/./b",
        "~/a b",
        "~/a'b",
        "/",
        "~/a//b",
        "~/$(id)",
        "~user/x",
        "/srv/app",
        "~/a\nb",
        "~/-rf",
        "~/src/..",
        "~/\x1b[31m",
    ],
)
def test_unsafe_guest_paths_are_refused(path):
    with pytest.raises(ProvisionSpecError):
        guest_path(path, "scope")


def test_guest_paths_are_normalised_and_slugs_unique():
    assert guest_path("~/work/", "scope") == "~/work"
    assert guest_path("~/.claude/", "scope") == "~/.claude"
    assert guest_path("~", "scope") == "~"
    assert slug("~/a/b") != slug("~/a-b")
    assert slug("~/a/b").startswith("a-b-")


def test_a_token_in_the_url_is_refused():
    vm = _vm(repos=(repo("app", "https://x:" + TOKEN + "@git.test/app.git", "~/src/app", "GIT"),))
    with pytest.raises(ProvisionSpecError) as err:
        secrets_step(vm, {"API": CANARY, "GIT": TOKEN})
    assert TOKEN not in str(err.value)
    with pytest.raises(ProvisionSpecError):
        repos_step(vm)


def test_a_token_for_a_non_http_remote_is_refused():
    vm = _vm(repos=(repo("app", "git@git.test:org/app.git", "~/src/app", "GIT"),))
    with pytest.raises(ProvisionSpecError, match="only used over http"):
        secrets_step(vm, {"API": CANARY, "GIT": TOKEN})


def test_two_secrets_for_one_variable_in_one_scope_are_refused():
    vm = _vm(secrets=(secret("A", "~/w", "X"), secret("B", "~/w/", "X")))
    with pytest.raises(ProvisionSpecError, match="two secrets set X"):
        secrets_step(vm, {"A": CANARY, "B": CANARY, "GIT": TOKEN})


def test_unknown_user_names_and_packages_are_refused(tmp_path):
    with pytest.raises(ProvisionSpecError):
        provision_steps(_vm(user="Bad User"), {}, agent_source=str(tmp_path))
    with pytest.raises(ProvisionSpecError):
        machine_steps(machine_content(_vm(packages=("jq; rm -rf /",))), agent_source=str(tmp_path))


def test_a_missing_stand_in_agent_is_reported(tmp_path):
    (tmp_path / "claude").write_text("#!/bin/sh\n")
    with pytest.raises(ProvisionSpecError, match="no codex file"):
        machine_steps(machine_content(_vm()), agent_source=str(tmp_path))
