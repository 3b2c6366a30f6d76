"""The real Lima (tests/rig/lima.py): the sand CLI, run as the rig's unprivileged user,
against the real ``limactl`` and a Debian 12 guest booted under TCG.

The first test, three boots (each 2-4 min under TCG, one vCPU: docs/backends/lima.md):
``sand apply`` creates, boots and provisions one VM; a ``limactl stop``/``start`` done
behind sand's back is the second, after which the guest has new SSH host keys (issue 23
L1) and sand must still reach it; a memory update is the third, sand's own restart,
with a rotated secret delivered after it. The security claims are checked on what Lima
really runs: the resolved config ``limactl list --json`` reports, the qemu and
hostagent processes, and the host sockets the hostagent listens on. The second, four
boots, builds a golden base, clones a VM from it and replaces that VM.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from sand.backends.lima.limayaml import security_findings
from tests.provision.e2e_helpers import stand_in_agents
from tests.required import missing
from tests.rig import limaimage, limapy, limareap
from tests.rig._util import RigError
from tests.rig.gitserver import GitServer
from tests.rig.lima import LimaRig
from tests.rig.tlscert import self_signed

# e2e too: `-m "not e2e"` (the fast suite) must not boot it.
pytestmark = [pytest.mark.e2e, pytest.mark.real_lima, pytest.mark.timeout(1800)]

TEMPLATE = "sand-rig-bookworm"
# What a failing step shows of each instance (Lima's own logs: the guest's serial
# console, the hostagent's JSON lines), so a boot that stalled says where.
LOGS = ("serial.log", "serialp.log", "serialv.log", "ha.stderr.log")
LOG_TAIL = 6000
SECRET = "real-lima-canary-5e1d-secret"
ROTATED = "real-lima-canary-9a7c-rotated"
READ_SECRET = 'cd ~/src && eval "$(direnv export bash 2>/dev/null)" && printenv NPM_TOKEN'
# A checkout in the guest for `sand land` to find: a branch with a commit no remote has.
CHECKOUT = (
    "set -e; git config --global user.name Agent; git config --global user.email a@x.test;"
    " git init -q -b main ~/src/widget && cd ~/src/widget && echo hi > README"
    " && git add README && git commit -qm init"
    " && git remote add origin https://github.com/acme/widget.git"
    " && git checkout -qb feature-x && echo x > f && git add f && git commit -qm work"
)
GUEST_PORT = 3000
MANIFEST = """\
apiVersion: sand/v1
project: reallima
backends:
  laptop: {{type: lima, lima_home: ./lima}}
defaults: {{image: "template:{template}", cpus: 1, memory: {memory}, disk: 8GiB}}
secrets:
  NPM_TOKEN:
    from: {{env: SAND_TEST_NPM}}
vms:
  - name: dev-1
    ports: [{{guest: {guest}, host: {host}}}]
    secrets: [{{name: NPM_TOKEN, scope: ~/src}}]
"""
# With a git server: a brokered token (docs/credentials.md) for one repository, which
# the VM clones through the broker on the host (192.168.5.2 from the guest).
BROKERED = """\
  GH_TOKEN:
    from: {{env: SAND_TEST_GH}}
    deliver: broker
    broker: {{repositories: ["{repo}"], push: ["agent/*"]}}
repos:
  project: {{url: "{repo}", token: GH_TOKEN}}
"""
PUSH = (
    "set -e; cd ~/src/project && git checkout -qB {branch} && date > pushed.txt"
    " && git add pushed.txt && git -c user.name=a -c user.email=a@b commit -qm push"
    " && GIT_TERMINAL_PROMPT=0 git push -q origin {branch}"
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Tier:
    """A project directory in the Lima user's home, and sand run there as that user."""

    def __init__(self, lima: LimaRig, image: Path, site: Path) -> None:
        self.lima = lima
        self.root = Path(tempfile.mkdtemp(prefix="t-", dir=lima.home))
        limareap.mark_owner(self.root)  # so a run cut short is reaped by the next
        self.host_port = _free_port()
        templates = self.root / "templates"
        templates.mkdir()
        # A template of the rig's own: Lima finds it through LIMA_TEMPLATES_PATH, so the
        # manifest names it as it would name one of Lima's (`template:NAME`).
        template = {"images": limaimage.lima_images(image), "firmware": {"legacyBIOS": True}}
        (templates / f"{TEMPLATE}.yaml").write_text(yaml.safe_dump(template))
        self.repo = ""  # a brokered repository's URL, once a test serves one
        self.write_manifest(memory="2GiB")
        stand_in_agents(self.root / "agents")
        # sand's own code, copied where the Lima user reads it: a checkout under /root
        # (mode 0700, as a CI clone may be) is not.
        shutil.copytree(
            limapy.REPO / "sand",
            self.root / "py" / "sand",
            ignore=shutil.ignore_patterns("__pycache__"),
        )
        shutil.chown(self.root, lima.uid, lima.gid)
        for path in self.root.rglob("*"):
            shutil.chown(path, lima.uid, lima.gid)
        self.env = {
            "PYTHONPATH": f"{self.root / 'py'}:{site}",
            "LIMA_TEMPLATES_PATH": f"{templates}:{lima.prefix / 'share/lima/templates'}",
            "LIMA_HOME": str(self.root / "lima"),
            "SAND_STATE_DIR": str(self.root / "state"),
            "SAND_TEST_NPM": SECRET,
            "SAND_AGENT_SOURCE": str(self.root / "agents"),
            "NO_COLOR": "1",
        }
        self.timings: dict[str, float] = {}

    def write_manifest(self, *, memory: str) -> None:
        text = MANIFEST.format(
            template=TEMPLATE, guest=GUEST_PORT, host=self.host_port, memory=memory
        )
        if self.repo:
            text = text.replace("vms:\n", BROKERED.format(repo=self.repo) + "vms:\n")
            text = text.replace("scope: ~/src}]\n", "scope: ~/src}]\n    repos: [project]\n")
        self.write("sand.yaml", text)

    def serve_git(self) -> GitServer:
        """The rig's token-protected git server over HTTPS on this host's loopback, its
        certificate trusted by sand's broker (``SSL_CERT_FILE``), and the manifest
        cloning one repository of it through the broker."""
        cert, key = self_signed(self.root, "127.0.0.1")
        for path in (cert, key):
            shutil.chown(path, self.lima.uid, self.lima.gid)
        server = GitServer(f"real-lima-{secrets.token_hex(12)}", host="127.0.0.1", tls=(cert, key))
        server.start()
        self.repo = server.create_repo("project", {"README.md": "brokered\n"})
        self.env |= {"SAND_TEST_GH": server.token, "SSL_CERT_FILE": cert}
        self.write_manifest(memory="2GiB")
        return server

    def write(self, name: str, text: str) -> Path:
        """A file of the Lima user's in the project directory."""
        path = self.root / name
        path.write_text(text)
        shutil.chown(path, self.lima.uid, self.lima.gid)
        return path

    def run(
        self, *argv: str, timeout: float = 300, step: str = ""
    ) -> subprocess.CompletedProcess[str]:
        started = time.monotonic()
        proc = self.lima.run(argv, cwd=self.root, timeout=timeout, extra=self.env)
        if step:
            self.timings[step] = round(time.monotonic() - started, 1)
        return proc

    def ok(self, *args: str, timeout: float = 300, step: str = "") -> str:
        """``sand ARGS``'s output; a failure (or no end in ``timeout``) shows Lima's logs."""
        return self.checked(limapy.SYSTEM_PYTHON, "-m", "sand", *args, timeout=timeout, step=step)

    def limactl(self, *args: str, timeout: float = 300, step: str = "") -> str:
        return self.checked("limactl", *args, timeout=timeout, step=step)

    def checked(self, *argv: str, timeout: float, step: str) -> str:
        shown = " ".join(argv)
        try:
            proc = self.run(*argv, timeout=timeout, step=step)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{shown}: no end in {timeout:.0f}s{self.logs()}")
        if proc.returncode != 0:
            pytest.fail(f"{shown}:\n{proc.stdout}\n{proc.stderr}{self.logs()}")
        return proc.stdout

    def logs(self) -> str:
        """The tail of each instance's Lima logs, for a failure message."""
        shown = []
        for inst in sorted(p for p in (self.root / "lima").glob("*") if p.is_dir()):
            for name in LOGS:
                path = inst / name
                if path.is_file():
                    text = path.read_text(errors="replace")[-LOG_TAIL:]
                    shown.append(f"\n--- {inst.name}/{name} (tail) ---\n{text}")
        return "".join(shown)

    def instances(self) -> list[dict[str, object]]:
        proc = self.run("limactl", "list", "--json")
        assert proc.returncode == 0, proc.stderr
        return [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]

    def cleanup(self) -> None:
        for inst in self.instances() if (self.root / "lima").is_dir() else []:
            self.run("limactl", "delete", "--force", str(inst["name"]), timeout=120)
        # A broker a failed run left (a destroy stops it): the one this tier started.
        for run in (self.root / "state" / "projects").glob("*/broker/run.json"):
            with contextlib.suppress(OSError, ValueError, KeyError):
                os.kill(int(json.loads(run.read_text())["pid"]), signal.SIGTERM)
        shutil.rmtree(self.root, ignore_errors=True)


def new_tier(lima: LimaRig) -> Tier:
    """A tier on the rig; the test is skipped (or fails, where the rig is required) when
    the rig or its image is not there."""
    try:
        site = limapy.site_dir()
    except RigError as exc:
        missing(f"the real Lima rig: {exc}")
    image = limaimage.built()
    if image is None:
        missing("the Lima image is not built: python -m tests.rig.limaimage build")
    return Tier(lima, image, site)


@pytest.fixture
def tier(lima_reaped: LimaRig) -> Iterator[Tier]:
    t = new_tier(lima_reaped)
    try:
        yield t
    finally:
        print(f"real_lima timings (s): {t.timings}")
        t.cleanup()


def _processes(uid: int) -> list[tuple[int, str]]:
    """(pid, full command line) of every process of ``uid`` (ps would truncate them)."""
    rows = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if proc.stat().st_uid != uid:
                continue
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue  # gone meanwhile
        rows.append((int(proc.name), " ".join(a.decode(errors="replace") for a in argv)))
    return rows


def _listeners(pids: set[int]) -> list[str]:
    """Local addresses of the TCP sockets these processes listen on."""
    out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout
    found = []
    for line in out.splitlines():
        if any(f"pid={p}," in line for p in pids):
            found.append(line.split()[3])
    return found


def _assert_runs_isolated(tier: Tier, name: str) -> None:
    (inst,) = [i for i in tier.instances() if i["name"] == name]
    config = inst["config"]
    assert isinstance(config, dict)
    assert security_findings(config) == ()
    assert config.get("mounts") in (None, [])
    for rule in config.get("portForwards") or []:
        assert rule.get("ignore") or rule.get("hostIP") == "127.0.0.1", rule

    mine = _processes(tier.lima.uid)
    # This tier's instance only: another run of the tier may be booting its own.
    here = f"{tier.env['LIMA_HOME']}/{name}/"
    qemu = [(pid, a) for pid, a in mine if "qemu-system" in a and here in a]
    agent = [(pid, a) for pid, a in mine if "limactl hostagent" in a and here in a]
    assert len(qemu) == 1, mine
    assert len(agent) == 1, mine
    qemu_args = qemu[0][1]
    for shared in ("-virtfs", "-fsdev", "vhost-user-fs", "virtiofs"):
        assert shared not in qemu_args, qemu_args
    assert str(tier.lima.home) + " " not in qemu_args + " "
    # reverse-sshfs mounts run a host sftp-server for the guest; there must be none.
    assert not [a for _, a in mine if "sftp-server" in a], mine

    # Every socket the hostagent listens on (SSH, forwarded guest ports) is loopback only.
    addrs = _listeners({agent[0][0]})
    assert addrs, "the hostagent listens on nothing"
    assert all(a.startswith("127.0.0.1:") for a in addrs), addrs


def _guest_listener_reached_on_loopback_only(tier: Tier) -> None:
    start = (
        f"setsid -f python3 -m http.server {GUEST_PORT} --bind 0.0.0.0 >/dev/null 2>&1 </dev/null"
    )
    tier.ok("shell", "dev-1", "--", "sh", "-c", start)
    deadline = time.monotonic() + 90  # the guest agent reports new listeners every few s
    while True:
        try:
            with socket.create_connection(("127.0.0.1", tier.host_port), timeout=5) as s:
                s.sendall(b"GET / HTTP/1.0\r\n\r\n")
                assert s.recv(64).startswith(b"HTTP/1.0")
            break
        except (OSError, AssertionError):
            if time.monotonic() > deadline:
                raise
            time.sleep(2)
    listening = [
        line.split()[3]
        for line in subprocess.run(
            ["ss", "-ltnH"], capture_output=True, text=True, check=True
        ).stdout.splitlines()
        if line.split()[3].endswith(f":{tier.host_port}")
    ]
    assert listening == [f"127.0.0.1:{tier.host_port}"], listening
    # ...and the same port on the host's other addresses reaches nothing.
    for address in _host_addresses():
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((address, tier.host_port), timeout=5).close()


def _host_addresses() -> list[str]:
    """The host's IPv4 addresses other than loopback (at least one: else nothing is shown)."""
    argv = ["ip", "-4", "-o", "addr", "show", "scope", "global"]
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    found = [line.split()[3].split("/")[0] for line in out.splitlines()]
    assert found, "the host has no non-loopback address to try the forward on"
    return found


def _copy_both_ways(tier: Tier) -> None:
    """``sand cp`` through the guest's own SFTP server: a host file up, a guest file down."""
    tier.write("up.txt", "from the host\n")
    tier.ok("cp", "up.txt", "dev-1:~/src/up.txt", step="cp")
    assert tier.ok("shell", "dev-1", "--", "sh", "-c", "cat ~/src/up.txt") == "from the host\n"
    tier.ok("shell", "dev-1", "--", "sh", "-c", "echo from the guest > ~/src/down.txt")
    tier.ok("cp", "dev-1:~/src/down.txt", "down.txt")
    assert (tier.root / "down.txt").read_text() == "from the guest\n"


def _land_finds_the_checkout(tier: Tier) -> None:
    tier.ok("shell", "dev-1", "--", "bash", "-c", CHECKOUT)
    out = tier.ok("land", "dev-1", step="land")
    (line,) = [line for line in out.splitlines() if "widget" in line]
    assert "feature-x" in line, out


def _brokered_push(tier: Tier, server: GitServer) -> None:
    """From the real guest, through the broker on the host (Lima's user-mode network
    gateway): a push to an allowed branch lands, one to the default branch is refused."""
    tier.ok("shell", "dev-1", "--", "bash", "-c", PUSH.format(branch="agent/lima"), step="push")
    assert "agent/lima" in server.branches("project")
    main = server.branches("project")["main"]
    argv = ("shell", "dev-1", "--", "bash", "-c", PUSH.format(branch="main"))
    refused = tier.run(limapy.SYSTEM_PYTHON, "-m", "sand", *argv)
    assert refused.returncode != 0, refused.stdout
    assert "sand broker: main is the default branch" in refused.stdout + refused.stderr
    assert server.branches("project")["main"] == main


def test_sand_drives_the_real_lima(tier: Tier) -> None:
    server = tier.serve_git()
    # Create, boot (the first boot), provision.
    try:
        out = tier.ok("apply", "--auto-approve", timeout=1200, step="apply-create")
        assert SECRET not in out and server.token not in out
        _brokered_push(tier, server)
    finally:
        server.stop()
    (inst,) = tier.instances()
    name = str(inst["name"])
    assert inst["status"] == "Running"

    out = tier.ok("apply", "--auto-approve", timeout=600, step="apply-again")
    assert "No changes." in out

    hostname = tier.ok("shell", "dev-1", "--", "cat", "/etc/hostname", step="shell").strip()
    assert hostname
    assert tier.ok("shell", "dev-1", "--", "bash", "-lc", READ_SECRET).strip() == SECRET

    _assert_runs_isolated(tier, name)
    _guest_listener_reached_on_loopback_only(tier)
    _copy_both_ways(tier)
    _land_finds_the_checkout(tier)

    # A restart behind sand's back (the second boot): new host keys, a new SSH port.
    keys = "cat /etc/ssh/ssh_host_ed25519_key.pub"
    first_key = tier.ok("shell", "dev-1", "--", "sh", "-c", keys)
    tier.limactl("stop", name, timeout=600, step="limactl-stop")
    # Lima waits up to its own 10 min for the guest's boot scripts; the call's bound is
    # above that, so Lima's message (and the logs) say what stalled.
    tier.limactl("start", name, timeout=900, step="limactl-start")
    assert tier.ok("shell", "dev-1", "--", "cat", "/etc/hostname").strip() == hostname
    assert tier.ok("shell", "dev-1", "--", "sh", "-c", keys) != first_key

    # The next apply reaches the restarted guest too, and the secret is still served.
    out = tier.ok("apply", "--auto-approve", timeout=600, step="apply-after-restart")
    assert SECRET not in out
    assert tier.ok("shell", "dev-1", "--", "bash", "-lc", READ_SECRET).strip() == SECRET

    # A memory update restarts the VM (the third boot: new host keys again), and the
    # rotated secret is delivered to the guest after that restart.
    tier.write_manifest(memory="1536MiB")
    tier.env["SAND_TEST_NPM"] = ROTATED
    out = tier.ok("apply", "--auto-approve", timeout=1200, step="apply-memory-rotate")
    assert ROTATED not in out
    (inst,) = tier.instances()
    assert inst["memory"] == 1536 * 2**20, inst["memory"]
    assert tier.ok("shell", "dev-1", "--", "bash", "-lc", READ_SECRET).strip() == ROTATED

    (row,) = json.loads(tier.ok("status", "--json", step="status"))["vms"]
    assert (row["vm"], row["observed"]["power"]) == ("dev-1", "running"), row
    assert row["conditions"]["Synced"] is True, row
    assert row["conditions"]["Provisioned"] is True, row
    assert "dev-1" in tier.ok("status")
    _assert_runs_isolated(tier, name)

    # The checkout `sand land` found holds commits on no remote: destroy refuses...
    blocked = tier.run(limapy.SYSTEM_PYTHON, "-m", "sand", "destroy", "--auto-approve")
    assert blocked.returncode != 0, blocked.stdout
    assert "~/src/widget (branch feature-x: 2 commit(s) on no remote)" in blocked.stdout
    assert [i["name"] for i in tier.instances()] == [name]
    # ...until told that the loss is meant.
    tier.ok("destroy", "--auto-approve", "--allow-data-loss", timeout=600, step="destroy")
    assert tier.instances() == []


GOLDEN_MANIFEST = """\
apiVersion: sand/v1
project: reallimagold
backends:
  laptop: {{type: lima, lima_home: ./lima}}
images:
  bench:
    from: "template:{template}"
    steps:
      - {{name: mark, run: "umask 022; echo made-in-the-base > /etc/sand-golden-mark"}}
defaults: {{image: bench, cpus: 1, memory: 2GiB, disk: {disk}}}
vms:
  - name: dev-1
    preserve: [~/keep]
"""
IDENTITY = "cat /etc/machine-id /etc/ssh/ssh_host_ed25519_key.pub"


class _Listings:
    """``limactl list`` every few seconds while an apply runs: what existed at once."""

    def __init__(self, tier: Tier) -> None:
        self.tier = tier
        self.seen: list[dict[str, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        while not self._stop.wait(3):
            proc = self.tier.run("limactl", "list", "--json", timeout=60)
            if proc.returncode == 0:
                rows = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
                self.seen.append({str(r["name"]): str(r["status"]) for r in rows})

    def __enter__(self) -> _Listings:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=120)


def _sidecar(tier: Tier, instance: str) -> dict[str, object]:
    data = json.loads((tier.root / "lima" / instance / "sand-marker.json").read_text())
    assert isinstance(data, dict)
    return data


def test_golden_base_clone_and_replacement_on_the_real_lima(tier: Tier) -> None:
    """A golden base and a VM cloned from it, then that VM replaced, on the real Lima.

    Four boots (each 2-4 min under TCG at low load, more under load): the base's
    build (booted, provisioned with its own step, stopped, stamped); the VM's, a
    ``limactl clone`` of it; the replacement's, a second clone under a temporary name
    (create-before-destroy: the old VM runs until the new one is provisioned and
    ``preserve:`` is carried over); and the restart the real ``limactl rename`` to the
    VM's name needs.
    """
    tier.write("sand.yaml", GOLDEN_MANIFEST.format(template=TEMPLATE, disk="12GiB"))
    tier.ok("apply", "--auto-approve", timeout=1800, step="apply-golden")
    states = {str(i["name"]): str(i["status"]) for i in tier.instances()}
    (base,) = [n for n in states if n.startswith("sand-base-reallimagold-")]
    assert states == {base: "Stopped", "dev-1": "Running"}, states
    stamp = json.loads((tier.root / "lima" / base / "sand-base.json").read_text())
    assert stamp["golden"], stamp
    # Cloned from the stamped base: the marker names it, the base's own step is there,
    # and the clone is a machine of its own (the base's machine-id was emptied).
    first = _sidecar(tier, "dev-1")
    assert first["base"] == stamp["golden"], first
    mark = tier.ok("shell", "dev-1", "--", "cat", "/etc/sand-golden-mark")
    assert mark == "made-in-the-base\n"
    machine_id, host_key = tier.ok("shell", "dev-1", "--", "sh", "-c", IDENTITY).splitlines()
    assert machine_id.strip() and host_key.startswith("ssh-ed25519 ")
    (dev,) = [i for i in tier.instances() if i["name"] == "dev-1"]
    assert dev["disk"] == 12 << 30, dev["disk"]
    assert "No changes." in tier.ok("apply", "--auto-approve", timeout=600)

    keep = "mkdir -p ~/keep && echo kept > ~/keep/note && echo lost > ~/scratch"
    tier.ok("shell", "dev-1", "--", "sh", "-c", keep)

    # A smaller disk forces replacement (Lima grows disks only): a new clone of the base.
    tier.write("sand.yaml", GOLDEN_MANIFEST.format(template=TEMPLATE, disk="11GiB"))
    plan = tier.ok("plan", step="plan-replace")
    assert "replace" in plan.lower(), plan
    with _Listings(tier) as listings:
        tier.ok("apply", "--auto-approve", timeout=2400, step="apply-replace")
    # Create-before-destroy: at some point the old VM ran beside its replacement.
    both = [
        s
        for s in listings.seen
        if s.get("dev-1") == "Running"
        and any(n.startswith("dev-1-sandnew") and v == "Running" for n, v in s.items())
    ]
    assert both, listings.seen
    states = {str(i["name"]): str(i["status"]) for i in tier.instances()}
    assert states == {base: "Stopped", "dev-1": "Running"}, states
    (dev,) = [i for i in tier.instances() if i["name"] == "dev-1"]
    assert dev["disk"] == 11 << 30, dev["disk"]
    second = _sidecar(tier, "dev-1")
    assert second["base"] == stamp["golden"] and second["uid"] != first["uid"], second
    # The new machine: its own identity, the base's content, the preserved path only.
    new_id, new_key = tier.ok("shell", "dev-1", "--", "sh", "-c", IDENTITY).splitlines()
    assert new_id.strip() and new_id != machine_id
    assert new_key.startswith("ssh-ed25519 ") and new_key != host_key
    assert tier.ok("shell", "dev-1", "--", "cat", "/etc/sand-golden-mark") == mark
    assert tier.ok("shell", "dev-1", "--", "sh", "-c", "cat ~/keep/note") == "kept\n"
    gone = tier.run(
        limapy.SYSTEM_PYTHON, "-m", "sand", "shell", "dev-1", "--", "sh", "-c", "cat ~/scratch"
    )
    assert gone.returncode != 0, gone.stdout
    assert "No changes." in tier.ok("apply", "--auto-approve", timeout=600, step="apply-again")

    tier.ok("destroy", "--auto-approve", timeout=600, step="destroy")
    assert "dev-1" not in {str(i["name"]) for i in tier.instances()}
