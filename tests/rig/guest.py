"""NetnsGuest: a disposable Debian "machine" with a real sshd, in namespaces.

Each guest gets:

* its own network namespace ``sandg-<id>`` with ``eth0`` on the shared test
  bridge ``sandbr0`` (10.213.0.0/16, host side 10.213.0.1), so every guest has
  a distinct, routable address and no route anywhere else;
* its own PID, mount, UTS and IPC namespaces, so ``/proc`` inside shows only
  the guest's processes (what a "no secret in argv" test must sample) and
  ``/dev/shm``, ``/run`` and ``/run/user/<uid>`` are the guest's own tmpfs;
* a copy-on-write copy of the cached rootfs (overlayfs; ``cp -a`` fallback),
  thrown away on ``stop()``; optionally over *layers* first: the kept disks
  (overlay upper dirs) of frozen guests, which is how the rig models a VM cloned
  from a template -- the clone starts with exactly the disk the template was
  frozen with (see ``freeze()``);
* fresh SSH host keys and a fresh client key for the login user, who has
  passwordless sudo -- the same contract a sand VM offers.

PID 1 in the guest is a ~30-line Python init that runs ``sshd -D -e`` and
reaps orphans; the guest dies with sshd.  Killing PID 1 kills every guest
process (kernel semantics of PID namespaces), which is what makes ``stop()``
and crash cleanup reliable.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import ipaddress
import json
import os
import secrets
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from tests.rig._util import (
    RigError,
    file_lock,
    log,
    missing_tools,
    pid_alive,
    remove_tree,
    run,
    state_dir,
    write_file,
)
from tests.rig.rootfs import ensure_rootfs

BRIDGE = "sandbr0"
NETWORK = ipaddress.ip_network("10.213.0.0/16")
BRIDGE_ADDRESS = "10.213.0.1"
NETNS_PREFIX = "sandg-"
# A guest's sshd answers within a second on a quiet machine; the limit is for a machine
# starved by the suite's workers and TCG guests (it is never what a test is about).
READY_TIMEOUT = 120.0
VETH_PREFIX = "sgh"  # host side; 3 + 8 hex chars stays under IFNAMSIZ (15)

# Ownership records live outside the cache dir so guests from runs with a
# different SAND_RIG_CACHE still see each other's addresses and netns names.
RUNTIME_DIR = Path("/run/sand-rig")
RECORDS_DIR = RUNTIME_DIR / "guests"
NET_LOCK = RUNTIME_DIR / "net.lock"

REQUIRED_TOOLS = ("ip", "unshare", "nsenter", "ssh-keygen", "mount", "umount", "chroot")

GUEST_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# PID 1 inside the guest.  Python is in the rootfs anyway; a shell as PID 1
# would not reliably reap orphans (e.g. daemonised provisioning helpers).
_INIT_PY = r"""
import os, signal, sys
env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}
sshd = os.spawnve(os.P_NOWAIT, "/usr/sbin/sshd", ["/usr/sbin/sshd", "-D", "-e", "-p", "22"], env)
def stop(signum, frame):
    os.kill(sshd, signal.SIGTERM)
signal.signal(signal.SIGTERM, stop)
signal.signal(signal.SIGINT, stop)
while True:
    try:
        pid, status = os.wait()
    except ChildProcessError:
        sys.exit(0)
    except InterruptedError:
        continue
    if pid == sshd:
        print(f"sand-rig-init: sshd exited with status {status}", file=sys.stderr, flush=True)
        sys.exit(1 if status else 0)
"""

# Runs as PID 1 of the new PID namespace, still outside the chroot, with the
# host's tools: builds the guest's private /proc, /dev, /run, then chroots.
# Mounts made here are private to the guest's mount namespace, so nothing can
# leak into the host's mount table and teardown never has to find them.
_SETUP_SH = r"""
set -eu
R=$1; HOST=$2; UID_=$3; GID_=$4
mount -t proc -o nosuid,nodev,noexec proc "$R/proc"
mount -t sysfs -o ro,nosuid,nodev,noexec sysfs "$R/sys"
mount -t tmpfs -o mode=755,nosuid,size=16m devtmp "$R/dev"
mknod -m 666 "$R/dev/null" c 1 3
mknod -m 666 "$R/dev/zero" c 1 5
mknod -m 666 "$R/dev/full" c 1 7
mknod -m 666 "$R/dev/random" c 1 8
mknod -m 666 "$R/dev/urandom" c 1 9
mknod -m 666 "$R/dev/tty" c 5 0
mkdir -m 755 "$R/dev/pts"
mkdir -m 1777 "$R/dev/shm"
mount -t devpts -o newinstance,ptmxmode=0666,mode=0620,gid=5 devpts "$R/dev/pts"
ln -s pts/ptmx "$R/dev/ptmx"
ln -s /proc/self/fd "$R/dev/fd"
ln -s /proc/self/fd/0 "$R/dev/stdin"
ln -s /proc/self/fd/1 "$R/dev/stdout"
ln -s /proc/self/fd/2 "$R/dev/stderr"
mount -t tmpfs -o mode=1777,nosuid,nodev,size=64m shm "$R/dev/shm"
mount -t tmpfs -o mode=755,nosuid,nodev,size=64m run "$R/run"
mkdir -m 755 "$R/run/sshd" "$R/run/lock" "$R/run/user"
if [ "$UID_" != 0 ]; then
  mkdir -m 700 "$R/run/user/$UID_"
  # What pam_systemd/logind would give the user on a real guest.
  mount -t tmpfs -o "mode=700,uid=$UID_,gid=$GID_,nosuid,nodev,size=64m" \
    user-run "$R/run/user/$UID_"
fi
hostname "$HOST"
exec chroot "$R" /usr/bin/python3 -I /usr/local/sbin/sand-rig-init
"""


@dataclass(frozen=True)
class GuestProcess:
    """One process inside a guest, as sampled from the host's /proc."""

    pid: int  # as the guest sees it
    host_pid: int
    argv: list[str]


def _require_root_and_tools(tools: Sequence[str]) -> None:
    if os.geteuid() != 0:
        raise RigError("the rig needs root (network namespaces, mounts, chroot)")
    missing = missing_tools(tools)
    if missing:
        raise RigError(f"missing tools: {missing}")


def _proc_start_time(pid: int) -> int | None:
    """Process start time in clock ticks: tells a live owner from a reused pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # comm may contain spaces/parens; fields after the last ')' are fixed.
    return int(stat.rsplit(")", 1)[1].split()[19])


def _owner_alive(record: dict[str, object]) -> bool:
    pid = int(str(record.get("owner_pid", 0)))
    return pid_alive(pid) and _proc_start_time(pid) == record.get("owner_start")


def _set_pdeathsig() -> None:
    # If the test process dies (even SIGKILL), the kernel kills the guest's
    # `unshare`, whose --kill-child then kills guest PID 1 and so the whole
    # guest.  Only the netns/overlay/dirs are left for cleanup_stale().
    libc = ctypes.CDLL(None, use_errno=True)
    pr_set_pdeathsig = 1
    libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)


def ensure_bridge() -> str:
    """Create the shared test bridge (idempotent); returns the host address."""
    _require_root_and_tools(["ip"])
    with file_lock(NET_LOCK):
        if run(["ip", "link", "show", BRIDGE], check=False).returncode != 0:
            run(["ip", "link", "add", BRIDGE, "type", "bridge"])
        addrs = run(["ip", "-o", "-4", "addr", "show", "dev", BRIDGE]).stdout.decode()
        if f" {BRIDGE_ADDRESS}/" not in addrs:
            run(["ip", "addr", "add", f"{BRIDGE_ADDRESS}/{NETWORK.prefixlen}", "dev", BRIDGE])
        run(["ip", "link", "set", BRIDGE, "up"])
    return BRIDGE_ADDRESS


def _records() -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    if not RECORDS_DIR.is_dir():
        return out
    for path in RECORDS_DIR.glob("*.json"):
        with contextlib.suppress(OSError, ValueError):
            out.append(json.loads(path.read_text()))
    return out


def _teardown(record: dict[str, object]) -> None:
    """Remove everything a guest record names.  Idempotent, never raises for
    things that are already gone."""
    netns = str(record.get("netns", ""))
    veth = str(record.get("veth", ""))
    gdir = Path(str(record["dir"])) if record.get("dir") else None
    init_pid = int(str(record.get("init_pid") or 0))
    if init_pid and _proc_start_time(init_pid) == record.get("init_start"):
        with contextlib.suppress(ProcessLookupError):
            os.kill(init_pid, signal.SIGKILL)
    if netns:
        # Anything else still inside the netns (e.g. a crashed run's helper).
        pids = run(["ip", "netns", "pids", netns], check=False).stdout.split()
        for p in pids:
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(p), signal.SIGKILL)
        run(["ip", "netns", "del", netns], check=False)
    if veth:
        run(["ip", "link", "del", veth], check=False)
    if gdir is not None:
        remove_tree(gdir)
    rec_id = record.get("id")
    if rec_id:
        with contextlib.suppress(FileNotFoundError):
            (RECORDS_DIR / f"{rec_id}.json").unlink()


def cleanup_stale() -> list[str]:
    """Remove guests left behind by crashed runs; returns what was removed.

    Only touches guests whose owning process is gone, so it is safe to call
    while other test runs on this machine have live guests.
    """
    _require_root_and_tools(["ip", "umount"])
    removed: list[str] = []
    with file_lock(NET_LOCK):
        live_netns: set[str] = set()
        live_veth: set[str] = set()
        live_dirs: set[str] = set()
        for rec in _records():
            if _owner_alive(rec):
                live_netns.add(str(rec.get("netns")))
                live_veth.add(str(rec.get("veth")))
                live_dirs.add(str(rec.get("dir")))
                continue
            _teardown(rec)
            removed.append(str(rec.get("netns")))
        # Orphans with no record at all (record lost, or created by hand).
        for line in run(["ip", "netns", "list"], check=False).stdout.decode().splitlines():
            name = line.split()[0] if line.split() else ""
            if name.startswith(NETNS_PREFIX) and name not in live_netns:
                _teardown({"netns": name})
                removed.append(name)
        links = run(["ip", "-o", "link", "show"], check=False).stdout.decode().splitlines()
        for line in links:
            parts = line.split(":")
            if len(parts) < 2:
                continue
            name = parts[1].strip().split("@")[0]
            if name.startswith(VETH_PREFIX) and len(name) == 11 and name not in live_veth:
                run(["ip", "link", "del", name], check=False)
                removed.append(name)
        sdir = state_dir()
        for gdir in sdir.iterdir():
            if gdir.is_dir() and os.fspath(gdir) not in live_dirs and gdir.name.startswith("g-"):
                remove_tree(gdir)
                removed.append(os.fspath(gdir))
    return removed


class NetnsGuest:
    """A disposable SSH guest in its own namespaces.  Use as a context manager
    or call start()/stop(); stop() is idempotent and also runs at exit."""

    port: int = 22

    def __init__(
        self,
        user: str = "claude",
        *,
        rootfs: Path | None = None,
        guest_id: str | None = None,
        layers: Sequence[Path] = (),
    ) -> None:
        self.id = guest_id or secrets.token_hex(4)
        if len(self.id) != 8 or not all(c in "0123456789abcdef" for c in self.id):
            raise ValueError("guest_id must be 8 lowercase hex characters")
        self.user = user
        self.netns = f"{NETNS_PREFIX}{self.id}"
        self.hostname = self.netns
        self.veth = f"{VETH_PREFIX}{self.id}"
        self._rootfs = rootfs
        self.layers = tuple(layers)  # upper dirs of frozen guests, topmost first
        self.frozen = False
        self.dir = state_dir() / f"g-{self.id}"
        self.root = self.dir / "root"  # the guest's "/" as seen from the host
        self.client_key_path = self.dir / "client_ed25519"
        self.known_hosts_path = self.dir / "known_hosts"
        self.log_path = self.dir / "guest.log"
        self.address = ""
        self.uid = -1
        self.gid = -1
        self.host_public_key = ""
        self.client_public_key = ""
        self.copy_mode = ""  # "overlay" or "copy"
        self._proc: subprocess.Popen[bytes] | None = None
        self._init_pid = 0
        self._record: dict[str, object] = {}
        self._started = False

    # -- lifecycle ---------------------------------------------------------

    def __enter__(self) -> NetnsGuest:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"NetnsGuest(id={self.id!r}, address={self.address!r}, user={self.user!r})"

    def start(self, ready_timeout: float = READY_TIMEOUT) -> NetnsGuest:
        if self._started:
            return self
        _require_root_and_tools(REQUIRED_TOOLS)
        rootfs = self._rootfs or ensure_rootfs()
        ensure_bridge()
        self._started = True
        _LIVE.add(self)
        try:
            self._allocate()
            self._make_tree(rootfs)
            self._configure_tree()
            self._make_network()
            self._launch()
            self.wait_ready(ready_timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Kill the guest and remove its netns, veth, mounts and files."""
        if not self._started:
            return
        self._started = False
        _LIVE.discard(self)
        if self._init_pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._init_pid, signal.SIGKILL)
        if self._proc is not None:
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(timeout=10)
        with file_lock(NET_LOCK):
            _teardown(
                self._record
                or {
                    "id": self.id,
                    "netns": self.netns,
                    "veth": self.veth,
                    "dir": os.fspath(self.dir),
                }
            )

    # -- start steps -------------------------------------------------------

    def _allocate(self) -> None:
        """Pick a free address and write the ownership record, under the
        network lock so concurrent runs never share an address."""
        RECORDS_DIR.mkdir(parents=True, exist_ok=True)
        with file_lock(NET_LOCK):
            used = {str(r.get("address")) for r in _records() if _owner_alive(r)}
            used.add(BRIDGE_ADDRESS)
            for host in NETWORK.hosts():
                # Start at 10.213.1.x; 10.213.0.x is for rig services.
                # Skip .0/.255 last octets too: some tools treat them oddly.
                offset = int(host) - int(NETWORK.network_address)
                if offset < 256 or offset % 256 in (0, 255):
                    continue
                if str(host) not in used:
                    self.address = str(host)
                    break
            else:
                raise RigError("test network 10.213.0.0/16 is full")
            pid = os.getpid()
            self._record = {
                "id": self.id,
                "owner_pid": pid,
                "owner_start": _proc_start_time(pid),
                "netns": self.netns,
                "veth": self.veth,
                "address": self.address,
                "dir": os.fspath(self.dir),
                "created": time.time(),
            }
            self._write_record()

    def _write_record(self) -> None:
        path = RECORDS_DIR / f"{self.id}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self._record))
        os.replace(tmp, path)

    def freeze(self) -> Path:
        """Stop the guest as a machine is shut down and kept: every process gone, its
        network removed, its disk (the overlay's upper dir) left in place as a layer
        other guests can start from (``NetnsGuest(layers=[...])``). ``stop()`` removes it."""
        if not self._started or self.frozen:
            return self.dir / "upper"
        if self.copy_mode != "overlay":
            raise RigError("only an overlay guest can be frozen into a layer")
        if self._init_pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._init_pid, signal.SIGKILL)
            self._init_pid = 0
        if self._proc is not None:
            self._proc.wait(timeout=10)
        run(["umount", self.root], check=False)
        with file_lock(NET_LOCK):
            run(["ip", "netns", "del", self.netns], check=False)
            run(["ip", "link", "del", self.veth], check=False)
        self.frozen = True
        return self.dir / "upper"

    def _make_tree(self, rootfs: Path) -> None:
        upper, work = self.dir / "upper", self.dir / "work"
        for d in (upper, work, self.root):
            d.mkdir(parents=True, exist_ok=True)
        lower = ":".join(os.fspath(p) for p in (*self.layers, rootfs))
        opts = f"lowerdir={lower},upperdir={upper},workdir={work}"
        res = run(
            ["mount", "-t", "overlay", f"sandg-{self.id}", "-o", opts, self.root], check=False
        )
        if res.returncode == 0:
            self.copy_mode = "overlay"
            return
        if self.layers:
            raise RigError(f"a layered guest needs overlayfs: {res.stderr.decode().strip()}")
        # e.g. the cache sits on an overlayfs itself (nested containers).
        log(f"overlay mount failed ({res.stderr.decode().strip()}); copying rootfs")
        self.root.rmdir()
        run(["cp", "-a", "--reflink=auto", rootfs, self.root], timeout=900)
        self.copy_mode = "copy"

    def _configure_tree(self) -> None:
        r = self.root
        write_file(r / "etc/hostname", f"{self.hostname}\n")
        hosts = (r / "etc/hosts").read_text() if (r / "etc/hosts").exists() else ""
        write_file(
            r / "etc/hosts",
            hosts + f"127.0.1.1\t{self.hostname}\n{BRIDGE_ADDRESS}\tsand-rig-host\n",
        )
        write_file(r / "usr/local/sbin/sand-rig-init", _INIT_PY, mode=0o755)
        # No init system starts services here (PID 1 runs sshd alone): a package
        # that would start one on install (docker.io) must not try, which is
        # what Debian's container images say the same way.
        write_file(r / "usr/sbin/policy-rc.d", "#!/bin/sh\nexit 101\n", mode=0o755)

        # Fresh host key per guest: tests pin it, so a reused key would hide
        # a host-key-checking bug.
        hk = self.dir / "ssh_host_ed25519_key"
        run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"root@{self.hostname}", "-f", hk]
        )
        write_file(r / "etc/ssh/ssh_host_ed25519_key", hk.read_bytes(), mode=0o600)
        self.host_public_key = hk.with_suffix(".pub").read_text().strip()
        write_file(r / "etc/ssh/ssh_host_ed25519_key.pub", self.host_public_key + "\n")
        key_type, key_b64 = self.host_public_key.split()[:2]
        self.known_hosts_path.write_text(f"{self.address} {key_type} {key_b64}\n")

        run(
            [
                "ssh-keygen",
                "-q",
                "-t",
                "ed25519",
                "-N",
                "",
                "-C",
                f"sand-rig@{self.id}",
                "-f",
                self.client_key_path,
            ]
        )
        self.client_public_key = self.client_key_path.with_suffix(".pub").read_text().strip()

        if self.user == "root":
            self.uid = self.gid = 0
            home = r / "root"
        else:
            # A guest started from a frozen guest's disk has its user already.
            if run(["chroot", r, "id", "-u", self.user], check=False).returncode != 0:
                run(["chroot", r, "useradd", "-m", "-U", "-s", "/bin/bash", self.user])
            # '*' not '!': with UsePAM no, sshd refuses key logins to a locked
            # ('!') account, but '*' still allows no password login.
            run(["chroot", r, "usermod", "-p", "*", self.user])
            ids = run(["chroot", r, "id", "-u", self.user]).stdout.decode().strip()
            gids = run(["chroot", r, "id", "-g", self.user]).stdout.decode().strip()
            self.uid, self.gid = int(ids), int(gids)
            home = r / "home" / self.user
            write_file(
                r / f"etc/sudoers.d/90-sand-rig-{self.user}",
                f"{self.user} ALL=(ALL:ALL) NOPASSWD:ALL\n",
                mode=0o440,
            )
        ssh_dir = home / ".ssh"
        ssh_dir.mkdir(mode=0o700, exist_ok=True)
        os.chown(ssh_dir, self.uid, self.gid)
        os.chmod(ssh_dir, 0o700)
        write_file(
            ssh_dir / "authorized_keys",
            self.client_public_key + "\n",
            mode=0o600,
            uid=self.uid,
            gid=self.gid,
        )

    def _make_network(self) -> None:
        ns = self.netns
        run(["ip", "netns", "add", ns])
        run(["ip", "link", "add", self.veth, "type", "veth", "peer", "name", "eth0", "netns", ns])
        run(["ip", "link", "set", self.veth, "master", BRIDGE, "up"])
        run(["ip", "-n", ns, "link", "set", "lo", "up"])
        run(["ip", "-n", ns, "addr", "add", f"{self.address}/{NETWORK.prefixlen}", "dev", "eth0"])
        run(["ip", "-n", ns, "link", "set", "eth0", "up"])
        # No default route on purpose: guests reach only the test network.

    def _launch(self) -> None:
        logf = open(self.log_path, "ab")  # noqa: SIM115 -- handed to the child
        in_main = threading.current_thread() is threading.main_thread()
        try:
            self._proc = subprocess.Popen(
                [
                    "ip",
                    "netns",
                    "exec",
                    self.netns,
                    "unshare",
                    "--mount",
                    "--uts",
                    "--ipc",
                    "--pid",
                    "--fork",
                    "--kill-child",
                    "--propagation",
                    "private",
                    "/bin/sh",
                    "-c",
                    _SETUP_SH,
                    "sand-rig-setup",
                    os.fspath(self.root),
                    self.hostname,
                    str(self.uid),
                    str(self.gid),
                ],
                stdin=subprocess.DEVNULL,
                stdout=logf,
                stderr=subprocess.STDOUT,
                env={"PATH": GUEST_PATH, "LANG": "C.UTF-8"},
                # PDEATHSIG is tied to the forking thread; a worker thread that
                # exits would take the guest with it, so only use it from main.
                preexec_fn=_set_pdeathsig if in_main else None,
            )
        finally:
            logf.close()
        self._init_pid = self._find_init_pid()
        self._record["init_pid"] = self._init_pid
        self._record["init_start"] = _proc_start_time(self._init_pid)
        with file_lock(NET_LOCK):
            self._write_record()

    def _find_init_pid(self) -> int:
        assert self._proc is not None
        deadline = time.monotonic() + 10
        children = Path(f"/proc/{self._proc.pid}/task/{self._proc.pid}/children")
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                kids = children.read_text().split()
                if kids:
                    return int(kids[0])
            if self._proc.poll() is not None:
                break
            time.sleep(0.01)
        raise RigError(f"guest {self.id} did not start:\n{self.log_text()}")

    # -- inspection --------------------------------------------------------

    def log_text(self) -> str:
        """sshd's and the init's stderr (sshd runs with -e)."""
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def wait_ready(self, timeout: float = READY_TIMEOUT) -> None:
        """Block until port 22 answers with an SSH banner.

        Each look waits longer than the last (2, 4, 8... s): sshd starts a process of
        its own for every connection, and on a starved machine (the suite's workers and
        TCG guests on two cores) that can take more than 2 s each time, so a fixed 2-s
        look, given up and begun again, never saw a banner (16 s at most each)."""
        deadline = time.monotonic() + timeout
        last_err: Exception | None = None
        patience = 2.0
        while time.monotonic() < deadline:
            if self._proc is not None and self._proc.poll() is not None:
                raise RigError(f"guest {self.id} exited:\n{self.log_text()}")
            look = max(0.1, min(patience, deadline - time.monotonic()))
            try:
                with socket.create_connection((self.address, self.port), timeout=look) as s:
                    s.settimeout(look)
                    if s.recv(256).startswith(b"SSH-"):
                        return
            except OSError as e:
                last_err = e
                if isinstance(e, TimeoutError):
                    patience = min(patience * 2, 16.0)
            time.sleep(0.05)
        raise RigError(
            f"guest {self.id} not ready after {timeout}s ({last_err}):\n{self.log_text()}"
        )

    def _nsenter(self) -> list[str]:
        if not self._init_pid:
            raise RigError("guest is not running")
        return [
            "nsenter", "-t", str(self._init_pid),
            "--mount", "--uts", "--ipc", "--net", "--pid", "--root", "--wd",
            "--", "/usr/bin/env", "-i", f"PATH={GUEST_PATH}", "HOME=/root", "LANG=C.UTF-8",
        ]  # fmt: skip

    def run_root(
        self,
        argv: Sequence[str],
        *,
        input: bytes | None = None,
        timeout: float = 120,
        check: bool = False,
    ) -> subprocess.CompletedProcess[bytes]:
        """Run argv as root inside the guest (all its namespaces and root
        dir), bypassing SSH -- for assertions about the guest's state."""
        return run([*self._nsenter(), *argv], input=input, timeout=timeout, check=check)

    def rekey_argv(self) -> list[str]:
        """A command that gives the guest new SSH host keys, as cloud-init does at each
        start of a real Lima guest, and makes its sshd (SIGHUP: re-exec) serve them."""
        script = (
            "set -e; rm -f /etc/ssh/ssh_host_*; "
            "ssh-keygen -q -t ed25519 -N '' -f /etc/ssh/ssh_host_ed25519_key; "
            "kill -HUP $(pgrep -P 1 -x sshd)"
        )
        return [*self._nsenter(), "sh", "-c", script]

    def boot_argv(self) -> list[str]:
        """A command that does to the guest what a stop and a start do to a real one's
        tmpfs: the secrets sand delivered there (``/run/user``, ``/dev/shm``) are gone."""
        script = "rm -rf /run/user/*/sand /dev/shm/sand-*"
        return [*self._nsenter(), "sh", "-c", script]

    def read_file(self, path: str) -> bytes:
        """A file's bytes as the guest sees it (including its tmpfs mounts)."""
        return self.run_root(["cat", "--", path], check=True).stdout

    def guest_pids(self) -> list[GuestProcess]:
        """Every process in the guest's PID namespace with its argv.

        Read from the host's /proc (cheap enough to sample in a tight loop,
        which is how a test catches a short-lived process with a secret in
        argv)."""
        if not self._init_pid:
            return []
        try:
            target = os.readlink(f"/proc/{self._init_pid}/ns/pid")
        except OSError:
            return []
        procs: list[GuestProcess] = []
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                if os.readlink(f"/proc/{entry.name}/ns/pid") != target:
                    continue
                raw = Path(f"/proc/{entry.name}/cmdline").read_bytes()
                status = Path(f"/proc/{entry.name}/status").read_text()
            except OSError:
                continue  # exited while we looked
            nspid = next(
                (ln.split()[-1] for ln in status.splitlines() if ln.startswith("NSpid:")),
                entry.name,
            )
            argv = [a.decode(errors="replace") for a in raw.split(b"\0")[:-1]]
            procs.append(GuestProcess(pid=int(nspid), host_pid=int(entry.name), argv=argv))
        return procs


_LIVE: set[NetnsGuest] = set()


@atexit.register
def _stop_all() -> None:
    for guest in list(_LIVE):
        with contextlib.suppress(Exception):
            guest.stop()
