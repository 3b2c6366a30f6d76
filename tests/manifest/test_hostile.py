"""Hostile manifests: every one is refused at validate time, at the offending value.

Each case edits one spot of a valid manifest; the expected location is where
the inserted text puts the offending value (or key), computed from the text
itself, so the test pins the exact ``FILE:LINE:COL`` the user is sent to.
A selection runs through the real ``python -m sand validate`` (exit 1, no
traceback); the whole table runs through ``load_manifest``.
"""

from __future__ import annotations

import getpass
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from sand.errors import ManifestError
from sand.manifest import load_manifest

BASE = """\
apiVersion: sand/v1
project: demo
backends:
  pve:
    type: proxmox
    host: pve.test
    node: pve1
    pool: sand
    storage: local-lvm
    template: 9000
    token_file: pve.token
    identity: id_ed25519
  laptop:
    type: lima
  remote:
    type: lima
    ssh:
      host: build.lan
      user: me
defaults:
  backend: pve
  memory: 4GiB
  disk: 40GiB
  packages: [jq]
secrets:
  TOKEN:
    from: {file: token.txt}
  CMD:
    from: {command: [pass, show, x]}
repos:
  app:
    url: https://github.com/acme/app.git
    branch: main
    token: TOKEN
vms:
  - name: dev
    backend: laptop
    image: debian-12
    repos: [app]
    secrets:
      - {name: TOKEN, scope: ~/src/app}
    preserve: [~/src]
  - name: agent
    memory: 8GiB
"""

URL = "    url: https://github.com/acme/app.git\n"
BRANCH = "    branch: main\n"
PVE_HOST = "    host: pve.test\n"
SSH = "      host: build.lan\n      user: me\n"
TEMPLATE = "    template: 9000\n"
AGENT = "  - name: agent\n    memory: 8GiB\n"
DEV_REPOS = "    repos: [app]\n"
SCOPE = "      - {name: TOKEN, scope: ~/src/app}\n"
PRESERVE = "    preserve: [~/src]\n"
DEFAULTS_MEMORY = "  memory: 4GiB\n"
DEFAULTS_DISK = "  disk: 40GiB\n"
PACKAGES = "  packages: [jq]\n"
LAPTOP = "  laptop:\n    type: lima\n"
SECRET_FILE = "    from: {file: token.txt}\n"
SECRET_COMMAND = "    from: {command: [pass, show, x]}\n"
REPOS = "repos:\n"


@dataclass(frozen=True)
class Case:
    id: str
    old: str  # a unique piece of BASE
    new: str  # what replaces it; the error is in here
    at: str  # where in `new` the error must point
    says: str  # a fragment of the message
    first: tuple[str, str] | None = None  # an edit made before, elsewhere

    def _base(self) -> str:
        if self.first is None:
            return BASE
        assert BASE.count(self.first[0]) == 1, self.first
        return BASE.replace(*self.first)

    def text(self) -> str:
        base = self._base()
        assert base.count(self.old) == 1, self.old
        return base.replace(self.old, self.new)

    def location(self) -> tuple[int, int]:
        offset = self._base().index(self.old) + self.new.index(self.at)
        text = self.text()  # the same up to `old`, then `new`
        line = text.count("\n", 0, offset) + 1
        return line, offset - (text.rfind("\n", 0, offset) + 1) + 1


def url(value: str, says: str, id: str) -> Case:
    return Case(id, URL, f"    url: {value}\n", value, says)


def at_agent(extra: str, at: str, says: str, id: str) -> Case:
    return Case(id, AGENT, AGENT + extra, at, says)


CASES = [
    # --- repo URLs: option and command injection, credentials, odd forms
    url('"--upload-pack=touch /tmp/pwned"', "starts with '-'", "url-option"),
    url("'-oProxyCommand=touch /tmp/pwned'", "starts with '-'", "url-option-ssh"),
    url('"ext::sh -c touch% /tmp/pwned"', "'ext::' transport", "url-ext"),
    url("fd::17", "'fd::' transport", "url-fd"),
    url("https::github.com/acme/app", "'https::' transport", "url-any-transport"),
    url("https://me:hunter2@github.com/acme/app.git", "password", "url-password"),
    url("https://ghp_abc123@github.com/acme/app.git", "credentials", "url-token"),
    url("http://me@git.lan/app.git", "credentials", "url-http-user"),
    url("ssh://git:hunter2@github.com/acme/app.git", "password", "url-ssh-password"),
    url("me:hunter2@github.com:acme/app.git", "credentials", "url-scp-password"),
    url('"https://github.com/acme/app\\n.git"', "control character", "url-newline"),
    url('"https://github.com/acme/\\e[2Japp"', "control character", "url-escape"),
    url('"https://github.com/acme/app .git"', "whitespace", "url-space"),
    url("ftp://github.com/acme/app.git", "not allowed", "url-ftp"),
    url("git+ssh://github.com/acme/app.git", "not allowed", "url-git-ssh"),
    url("/srv/git/app.git", "not a repository URL", "url-plain-path"),
    url("file://otherhost/srv/app.git", "file:///", "url-file-remote"),
    url("git@-oProxyCommand=x:app.git", "starts with '-'", "url-scp-host-option"),
    url("ssh://-oProxyCommand=x/app.git", "starts with '-'", "url-ssh-host-option"),
    url("ssh://-x@github.com/app.git", "'-'", "url-ssh-user-option"),
    url("ssh://github.com/%0aapp.git", "percent-encoded control", "url-encoded-newline"),
    url("https://github.com:99999/acme/app.git", "cannot be read", "url-bad-port"),
    # --- Proxmox host: a host name or address only
    Case("pve-host-url", PVE_HOST, "    host: https://pve.test:8006/\n", "https", "no scheme"),
    Case("pve-host-cred", PVE_HOST, "    host: root:pw@pve.test\n", "root", "credentials"),
    Case("pve-host-path", PVE_HOST, "    host: pve.test/api2\n", "pve.test", "no path"),
    Case("pve-host-option", PVE_HOST, "    host: -pve.test\n", "-pve", "starts with '-'"),
    Case("pve-host-port", PVE_HOST, "    host: pve.test:8006\n", "pve.test", "'port'"),
    Case("pve-host-space", PVE_HOST, '    host: "pve test"\n', '"pve', "not a host name"),
    # --- remote Lima: ssh option injection through host or user
    Case("ssh-host-option", SSH, "      host: -oProxyCommand=x\n      user: me\n", "-o", "'-'"),
    Case("ssh-host-user", SSH, "      host: me@build.lan\n      user: me\n", "me@", "'@'"),
    Case("ssh-user-option", SSH, "      host: build.lan\n      user: -oX=y\n", "-oX", "'-'"),
    Case("ssh-user-cred", SSH, "      host: build.lan\n      user: me:pw\n", "me:pw", "user name"),
    # --- branches: git's rules, never an option
    Case("branch-option", BRANCH, '    branch: "--force"\n', '"--', "starts with '-'"),
    Case("branch-dots", BRANCH, "    branch: a..b\n", "a..b", "'..'"),
    Case("branch-head", BRANCH, "    branch: HEAD\n", "HEAD", "HEAD"),
    Case("branch-space", BRANCH, '    branch: "a b"\n', '"a b', "space"),
    Case("branch-lock", BRANCH, "    branch: x.lock\n", "x.lock", ".lock"),
    Case("branch-newline", BRANCH, '    branch: "a\\nb"\n', '"a', "control"),
    # --- guest paths: under ~/ only
    Case("path-dotdot", BRANCH, BRANCH + "    path: ~/../etc\n", "~/../", "'..'"),
    Case("path-deep", BRANCH, BRANCH + "    path: ~/src/../../etc\n", "~/src/..", "'..'"),
    Case("path-absolute", BRANCH, BRANCH + "    path: /etc\n", "/etc", "write it under ~/"),
    Case("path-relative", BRANCH, BRANCH + "    path: src/app\n", "src/app", "under ~/"),
    Case("path-other-home", BRANCH, BRANCH + "    path: ~root/x\n", "~root", "under ~/"),
    Case("path-newline", BRANCH, BRANCH + '    path: "~/src\\n/x"\n', '"~', "control"),
    Case("path-quote", BRANCH, BRANCH + "    path: ~/it's\n", "~/it", "each path segment"),
    Case("scope-dotdot", SCOPE, "      - {name: TOKEN, scope: ~/..}\n", "~/..", "'..'"),
    Case("scope-tmp", SCOPE, "      - {name: TOKEN, scope: /tmp}\n", "/tmp", "under ~/"),
    Case("scope-escape", SCOPE, '      - {name: TOKEN, scope: "~/\\e]0;x"}\n', '"~', "control"),
    Case("preserve-etc", PRESERVE, "    preserve: [/etc]\n", "/etc", "under ~/"),
    Case("preserve-dotdot", PRESERVE, "    preserve: [~/a/../..]\n", "~/a", "'..'"),
    Case("preserve-twice", PRESERVE, "    preserve: [~/src, ~/src/]\n", "~/src/]", "already"),
    Case(
        "preserve-defaults-twice",
        PACKAGES,
        PACKAGES + "  preserve: [~/.claude, ~/x, ~/.claude/]\n",
        "~/.claude/]",
        "already preserved",
    ),
    # --- names one DNS name / one case-insensitive directory cannot tell apart
    at_agent(
        "  - name: Dev\n    backend: laptop\n    image: debian-12\n",
        "Dev",
        "only in case",
        "name-case",
    ),
    at_agent("  - name: DEV\n", "DEV", "vms[0]'s 'dev'", "name-case-other-backend"),
    # --- two repos, one checkout
    Case(
        "checkout-twice",
        DEV_REPOS,
        "    repos: [app, lib]\n",
        "lib]",
        "repo 'lib' checks out at ~/src/app, where repo 'app' already does",
        first=(
            REPOS,
            REPOS + "  lib:\n    url: https://github.com/acme/lib.git\n    path: ~/src/app/\n",
        ),
    ),
    Case("repo-listed-twice", DEV_REPOS, "    repos: [app, app]\n", "app]", "listed twice"),
    # --- sizes: units, and a sane range
    Case(
        "memory-bare", AGENT, "  - name: agent\n    memory: 512\n", "512", "write 512MiB or 512MB"
    ),
    Case("memory-bare-str", AGENT, '  - name: agent\n    memory: "512"\n', '"512', "512MiB"),
    Case("memory-bare-float", AGENT, "  - name: agent\n    memory: 1.5\n", "1.5", "ambiguous"),
    Case("memory-1-byte", AGENT, "  - name: agent\n    memory: 1B\n", "1B", "between 64MiB"),
    Case("memory-107-bytes", AGENT, "  - name: agent\n    memory: 107B\n", "107B", "too small"),
    Case("memory-exabytes", AGENT, "  - name: agent\n    memory: 8EiB\n", "8EiB", "too large"),
    Case("disk-bare", DEFAULTS_DISK, "  disk: 40\n", "40", "write 40GiB or 40GB"),
    Case("disk-exabytes", DEFAULTS_DISK, "  disk: 2EiB\n", "2EiB", "and 64TiB"),
    Case("disk-tiny", DEFAULTS_DISK, "  disk: 107B\n", "107B", "between 1GiB"),
    Case("defaults-memory-bare", DEFAULTS_MEMORY, "  memory: 4096\n", "4096", "4096MiB"),
    Case("memory-bytes-bare", DEFAULTS_MEMORY, "  memory: 8589934592\n", "85", "write 8GiB"),
    # --- template vmids: 100..999999999, or a VM name
    Case("template-negative", TEMPLATE, "    template: -5\n", "-5", "out of range"),
    Case("template-zero", TEMPLATE, "    template: 0\n", "0", "100 to 999999999"),
    Case("template-low", TEMPLATE, "    template: 99\n", "99", "out of range"),
    Case("template-huge", TEMPLATE, "    template: 1000000000\n", "1000000000", "out of range"),
    Case("template-negative-str", TEMPLATE, '    template: "-5"\n', '"-5', "out of range"),
    Case("template-shell", TEMPLATE, '    template: "t;reboot"\n', '"t', "neither"),
    Case("clones-zero", TEMPLATE, "    clone_parallelism: 0\n" + TEMPLATE, "0\n", "equal to 1"),
    Case("clones-many", TEMPLATE, TEMPLATE + "    clone_parallelism: 33\n", "33", "equal to 32"),
    Case("clones-word", TEMPLATE, TEMPLATE + "    clone_parallelism: auto\n", "auto", "integer"),
    at_agent("    image: '-1'\n", "'-1'", "out of range", "image-negative"),
    at_agent("    image: '50'\n", "'50'", "out of range", "image-low"),
    at_agent("    image: 'a/../b'\n", "'a/", "neither", "image-path"),
    # --- packages: Debian names, never an apt option
    Case("package-option", PACKAGES, '  packages: ["--allow-unauthenticated"]\n', '"--', "'-'"),
    Case("package-shell", PACKAGES, '  packages: [jq, "jq; reboot"]\n', '"jq;', "not a Debian"),
    Case("package-upper", PACKAGES, "  packages: [Jq]\n", "Jq", "not a Debian"),
    # --- timezone and locale: names a guest script sets, never a path or a word more
    Case("tz-traversal", PACKAGES, PACKAGES + "  timezone: ../../etc/shadow\n", "../", "timezone"),
    Case("tz-unknown", PACKAGES, PACKAGES + "  timezone: Mars/Olympus\n", "Mars", "tz database"),
    Case("tz-loop", PACKAGES, PACKAGES + "  timezone: localtime\n", "localtime", "IANA name"),
    Case("tz-posix-rule", PACKAGES, PACKAGES + "  timezone: CET-1CEST\n", "CET-1", "tz database"),
    Case("tz-shell", PACKAGES, PACKAGES + '  timezone: "UTC; reboot"\n', '"UTC', "timezone"),
    at_agent("    timezone: Europe/Nowhere\n", "Europe/Nowhere", "tz database", "vm-tz-unknown"),
    Case("locale-space", PACKAGES, PACKAGES + '  locale: "de DE.UTF-8"\n', '"de', "locale name"),
    Case("locale-option", PACKAGES, PACKAGES + '  locale: "-de_DE"\n', '"-de', "locale name"),
    at_agent("    locale: de_DE.UTF-8 UTF-8\n", "de_DE", "'en_US.UTF-8'", "vm-locale-words"),
    at_agent("    docker: 'yes'\n", "'yes'", "boolean", "docker-string"),
    at_agent("    agents: [claude, gemini]\n", "gemini", "'opencode' or 'pi'", "agent-unknown"),
    # --- Proxmox identifiers (they end up in REST paths)
    Case("node-traversal", "    node: pve1\n", "    node: pve1/../..\n", "pve1/", "node name"),
    Case(
        "nodes-option",
        "    node: pve1\n",
        '    nodes: [pve1, "-x"]\n',
        '"-x',
        "node name",
    ),
    Case("pool-traversal", "    pool: sand\n", "    pool: ../x\n", "../x", "pool id"),
    Case("pool-deep", "    pool: sand\n", "    pool: a/b/c/d\n", "a/b", "three"),
    Case(
        "storage-space", "    storage: local-lvm\n", '    storage: "local lvm"\n', '"l', "storage"
    ),
    Case(
        "bridge-shell",
        "    storage: local-lvm\n",
        '    storage: local-lvm\n    bridge: "vmbr0;reboot"\n',
        '"vmbr0',
        "bridge",
    ),
    at_agent("    node: ../x\n", "../x", "node name", "vm-node-traversal"),
    # --- local paths: no control characters; limactl never an option
    Case(
        "identity-newline",
        "    identity: id_ed25519\n",
        '    identity: "id\\n"\n',
        '"id',
        "control",
    ),
    Case(
        "token-file-escape",
        "    token_file: pve.token\n",
        '    token_file: "\\e[8m"\n',
        '"',
        "control",
    ),
    Case("lima-home-nul", LAPTOP, LAPTOP + '    lima_home: "a\\0b"\n', '"a', "control"),
    Case("limactl-option", LAPTOP, LAPTOP + "    limactl: -x\n", "-x", "starts with '-'"),
    Case("limactl-newline", LAPTOP, LAPTOP + '    limactl: "lima\\nctl"\n', '"lima', "control"),
    Case(
        "known-hosts-control",
        SSH,
        SSH + '      known_hosts: "kh\\r"\n',
        '"kh',
        "control",
    ),
    Case(
        "ca-file-control",
        "    identity: id_ed25519\n",
        '    identity: id_ed25519\n    ca_file: "\\x07"\n',
        '"\\x07',
        "control",
    ),
    Case("secret-file-control", SECRET_FILE, '    from: {file: "t\\tx"}\n', '"t', "control"),
    # --- secret commands: free argv, but an argv
    Case("command-empty-program", SECRET_COMMAND, '    from: {command: [""]}\n', '[""', "argv"),
    Case("command-nul", SECRET_COMMAND, '    from: {command: [cat, "a\\0"]}\n', "[cat", "NUL"),
    Case("command-number", SECRET_COMMAND, "    from: {command: [cat, 7]}\n", "7]", "string"),
    Case("command-empty", SECRET_COMMAND, "    from: {command: []}\n", "[]", "non-empty"),
    # --- backends that would see each other's VMs as their own
    Case(
        "pve-same-pool",
        LAPTOP,
        LAPTOP + "  pve2:\n    type: proxmox\n    host: PVE.test\n    node: pve2\n    pool: sand\n"
        "    storage: local-lvm\n    template: 9000\n    token_file: pve.token\n"
        "    identity: id_ed25519\n",
        "pve2:",
        "backend 'pve2' would see backend 'pve''s VMs as its own",
    ),
    Case(
        "lima-same-default-home",
        LAPTOP,
        LAPTOP + "  laptop2:\n    type: lima\n    lima_home: ~/.lima/\n",
        "laptop2:",
        "backend 'laptop''s VMs",
    ),
    Case(
        "remote-lima-same-home",
        SSH,
        SSH
        + "  remote2:\n    type: lima\n    ssh: {host: BUILD.lan, user: me, lima_home: ~/.lima}\n",
        "remote2:",
        "backend 'remote''s VMs",
    ),
    # --- names of entries
    Case(
        "backend-name",
        LAPTOP,
        LAPTOP + '  "lap top":\n    type: lima\n    lima_home: x\n',
        '"lap',
        "name",
    ),
    Case(
        "repo-name-traversal",
        REPOS,
        REPOS + '  "../../etc":\n    url: https://x.org/r\n',
        '"../',
        "repo name",
    ),
    Case("user-shell", AGENT, AGENT + "    user: root;id\n", "root;", "pattern"),
    # --- what was refused only later, or never
    Case(
        "pve-same-pool-loopback-spellings",
        LAPTOP,
        LAPTOP + "  pve2:\n    type: proxmox\n    host: localhost\n    node: pve2\n"
        "    pool: sand\n    storage: local-lvm\n    template: 9000\n"
        "    token_file: pve.token\n    identity: id_ed25519\n",
        "pve2:",
        "backend 'pve2' would see backend 'pve''s VMs as its own",
        first=(PVE_HOST, "    host: 127.0.0.1\n"),
    ),
    Case("image-from-itself", REPOS, "images:\n  wb: {from: wb}\n" + REPOS, "wb}", "from itself"),
    Case(
        "image-from-an-image",
        REPOS,
        "images:\n  base: {packages: [jq]}\n  wb: {from: base}\n" + REPOS,
        "base}",
        "built from golden image 'base'",
    ),
    Case(
        "image-step-nul",
        REPOS,
        'images:\n  wb:\n    steps:\n      - {name: a, run: "true\\0rm -rf ~"}\n' + REPOS,
        '"true',
        "NUL",
    ),
    Case(
        "vm-name-temporary",
        AGENT,
        "  - name: agent-sandnew1f2e\n    memory: 8GiB\n",
        "agent-sandnew",
        "temporary name",
    ),
    Case("vm-name-lease", AGENT, "  - name: sand-lease-demo\n", "sand-lease", "reserved"),
    Case("vm-name-golden", AGENT, "  - name: sand-golden-wb-0123abcd\n", "sand-golden", "reserved"),
    # --- notify: a webhook URL may carry a token; no message ever repeats it
    Case(
        "notify-unknown-secret",
        REPOS,
        "notify:\n  webhook: {secret: HOOK}\n" + REPOS,
        "HOOK",
        "unknown secret 'HOOK'",
    ),
    Case(
        "notify-url-scheme",
        REPOS,
        "notify:\n  webhook: {url: 'file:///etc/hunter2'}\n" + REPOS,
        "'file",
        "http:// or https://",
    ),
    Case(
        "notify-url-space",
        REPOS,
        "notify:\n  webhook: {url: 'https://h.test/ hunter2'}\n" + REPOS,
        "'https",
        "a space or a control character",
    ),
    Case(
        "notify-url-and-secret",
        REPOS,
        "notify:\n  webhook: {url: 'https://h.test/x', secret: TOKEN}\n" + REPOS,
        "{url",
        "exactly one of 'url' or 'secret'",
    ),
    Case(
        "notify-state",
        REPOS,
        "notify:\n  states: [working]\n" + REPOS,
        "working",
        "'needs-input', 'done' or 'failed'",
    ),
    Case("notify-debounce", REPOS, "notify:\n  debounce: -1\n" + REPOS, "-1", "0"),
    # YAML 1.1 reads `on` as true: the message says so, not "not a number".
    Case(
        "notify-on",
        REPOS,
        "notify:\n  on: [failed]\n" + REPOS,
        "on:",
        "YAML reads it as a boolean (on, off, yes and no are YAML 1.1 booleans): quote it",
    ),
    Case("key-number", REPOS, "notify:\n  2: [failed]\n" + REPOS, "2:", "reads it as a number"),
    at_agent("    idle: {after: 2x}\n", "2x", "is not a duration", "idle-after-unit"),
    at_agent("    idle: {after: 120}\n", "120", "has no unit", "idle-after-bare-number"),
    at_agent("    idle: {after: 1m}\n", "1m", "out of range", "idle-after-too-short"),
    at_agent("    idle: {then: hibernate}\n", "hibernate", "'suspend' or 'stop'", "idle-then"),
    at_agent("    idle: {stopWaiting: 'yes'}\n", "'yes'", "boolean", "idle-stop-waiting"),
    at_agent("    idle: {aftr: 2h}\n", "aftr", "did you mean 'after'", "idle-typo"),
    at_agent("    idle: sometimes\n", "sometimes", "'never'", "idle-word"),
    Case(
        "idle-defaults",
        PACKAGES,
        PACKAGES + "  idle: {after: 40d}\n",
        "40d",
        "out of range",
    ),
]


def test_the_base_manifest_is_valid(tmp_path: Path) -> None:
    path = tmp_path / "sand.yaml"
    path.write_text(BASE)
    load_manifest(path)


def test_case_ids_are_unique() -> None:
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids))
    assert len(CASES) >= 100


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_hostile_manifest_is_refused_at_the_value(case: Case, tmp_path: Path) -> None:
    path = tmp_path / "sand.yaml"
    path.write_text(case.text())
    with pytest.raises(ManifestError) as info:
        load_manifest(path)
    problems = [str(p) for p in info.value.problems]
    line, column = case.location()
    here = [p for p in problems if p.startswith(f"{path}:{line}:{column}: ")]
    assert here, (f"expected {line}:{column}", problems)
    assert any(case.says in p for p in here), problems
    # One mistake, one message: nothing else in the file is blamed.
    assert len(problems) == len(here), problems


def test_no_message_repeats_a_credential(tmp_path: Path) -> None:
    for case in CASES:
        if "hunter2" not in case.new and "ghp_abc123" not in case.new:
            continue
        path = tmp_path / f"{case.id}.yaml"
        path.write_text(case.text())
        with pytest.raises(ManifestError) as info:
            load_manifest(path)
        assert "hunter2" not in str(info.value) and "ghp_abc123" not in str(info.value)


# One of each kind through the real command line: exit 1, located, no traceback.
CLI_CASES = [
    "url-option",
    "url-ext",
    "url-password",
    "pve-host-cred",
    "ssh-user-option",
    "branch-option",
    "path-dotdot",
    "scope-dotdot",
    "name-case",
    "memory-bare",
    "memory-1-byte",
    "disk-exabytes",
    "template-negative",
    "package-option",
    "pve-same-pool",
    "limactl-option",
    "checkout-twice",
    "pve-same-pool-loopback-spellings",
    "image-from-itself",
    "vm-name-temporary",
    "notify-unknown-secret",
]


def test_sand_validate_exits_1_at_the_value_without_a_traceback(tmp_path: Path) -> None:
    by_id = {c.id: c for c in CASES}

    def run(case: Case) -> tuple[Case, Path, subprocess.CompletedProcess[str]]:
        path = tmp_path / f"{case.id}.yaml"
        path.write_text(case.text())
        proc = subprocess.run(
            [sys.executable, "-m", "sand", "validate", str(path)],
            capture_output=True,
            text=True,
            check=False,
            env={**os.environ, "NO_COLOR": "1"},
            timeout=60,
        )
        return case, path, proc

    with ThreadPoolExecutor(max_workers=3) as pool:
        results = list(pool.map(run, [by_id[i] for i in CLI_CASES]))
    for case, path, proc in results:
        line, column = case.location()
        assert proc.returncode == 1, (case.id, proc.stdout, proc.stderr)
        assert f"{path}:{line}:{column}: " in proc.stderr, (case.id, proc.stderr)
        assert case.says in proc.stderr, (case.id, proc.stderr)
        assert "Traceback" not in proc.stderr + proc.stdout, case.id


def test_login_name_stands_for_an_unset_remote_user(tmp_path: Path) -> None:
    """A remote Lima backend without 'user' logs in as the local user: the same home."""
    text = BASE.replace(
        SSH,
        f"      host: build.lan\n      user: {getpass.getuser()}\n"
        "  remote2:\n    type: lima\n    ssh: {host: build.lan}\n",
    )
    path = tmp_path / "sand.yaml"
    path.write_text(text)
    with pytest.raises(ManifestError) as info:
        load_manifest(path)
    assert "backend 'remote2' would see backend 'remote''s VMs" in str(info.value)
