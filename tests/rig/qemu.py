"""QemuGuest: one full Debian VM under ``qemu-system-x86_64 -accel tcg``.

Unlike a NetnsGuest this has its own kernel and boots systemd as PID 1, so it
is the guest to use when a test needs a real machine (services, logind-less
but real systemd, a real block device, a reboot).

The image is built once from a copy of the workbench tree (the cached
debootstrap rootfs with what sand installs in every guest, see
``tests/rig/workbench.py``) plus
Debian's ``linux-image-amd64`` and cached next to it: ``vmlinuz``,
``initrd.img`` and an ext4 ``rootfs.raw`` made with ``mkfs.ext4 -d``.  Each
guest boots the kernel directly (``-kernel/-initrd``) with a throw-away qcow2
overlay over that raw image, so the cache is never modified.

Per-guest identity (login user, its authorized key, a separate root key for
``run_root``, fresh SSH host keys) travels on a small read-only "seed" disk
that a oneshot unit applies before ``ssh.service`` starts -- the same job
cloud-init does on a real cloud image, without cloud-init's boot cost under
TCG.

Networking is QEMU user mode with ``restrict=on``: the guest can reach
nothing except what is explicitly forwarded -- ``hostfwd`` from
127.0.0.1:<port> to the guest's sshd, and optional ``guestfwd`` entries.

CLI::

    python -m tests.rig.qemu build     # build the image if missing
    python -m tests.rig.qemu boot      # boot one guest, print timing, stop
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import hashlib
import json
import os
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from tests.rig._util import (
    RigError,
    cache_dir,
    chroot_sh,
    file_lock,
    log,
    missing_tools,
    pid_alive,
    remove_tree,
    run,
    state_dir,
    write_file,
)
from tests.rig.guest import GuestProcess, _owner_alive, _proc_start_time, _set_pdeathsig
from tests.rig.workbench import ensure_workbench, workbench_dir

# Added on top of the base rootfs.  systemd-sysv makes systemd /sbin/init;
# linux-image-amd64 pulls initramfs-tools (which builds the initrd) and udev.
IMAGE_PACKAGES: tuple[str, ...] = ("linux-image-amd64", "systemd-sysv")
# Bump when _configure_image() changes.
IMAGE_RECIPE_VERSION = 1
IMAGE_SIZE = "3G"  # sparse; the tree is ~700 MB, the rest is room for tests

GUEST_ADDRESS = "10.0.2.15"  # QEMU user-mode network's default guest address
# Where guestfwd entries appear inside the guest (slirp's virtual network).
GUESTFWD_ADDRESS = "10.0.2.100"

REQUIRED_TOOLS = ("qemu-system-x86_64", "qemu-img", "mkfs.ext4", "ssh", "ssh-keygen")

_SEED_UNIT = """\
[Unit]
Description=Apply the sand rig seed disk (user, keys, host keys)
DefaultDependencies=no
Requires=dev-disk-by\\x2dlabel-SANDSEED.device local-fs.target
After=dev-disk-by\\x2dlabel-SANDSEED.device local-fs.target
Before=ssh.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/local/sbin/sand-rig-seed

[Install]
WantedBy=multi-user.target
"""

# Runs in the guest at boot.  Plain sh: it must work before anything else.
_SEED_SH = r"""#!/bin/sh
set -eu
SEED=/run/sand-rig-seed
mkdir -p "$SEED"
mount -o ro LABEL=SANDSEED "$SEED"
USER_=$(cat "$SEED/user")
hostname "$(cat "$SEED/hostname")"
cat "$SEED/hostname" > /etc/hostname
printf '127.0.1.1\t%s\n' "$(cat "$SEED/hostname")" >> /etc/hosts
rm -f /etc/ssh/ssh_host_*
install -m 600 "$SEED/ssh_host_ed25519_key" /etc/ssh/ssh_host_ed25519_key
install -m 644 "$SEED/ssh_host_ed25519_key.pub" /etc/ssh/ssh_host_ed25519_key.pub
install -d -m 700 /root/.ssh
install -m 600 "$SEED/root_authorized_keys" /root/.ssh/authorized_keys
if [ "$USER_" != root ]; then
  id "$USER_" >/dev/null 2>&1 || useradd -m -U -s /bin/bash "$USER_"
  # '*' not '!': with UsePAM no sshd refuses key logins to locked accounts.
  usermod -p '*' "$USER_"
  printf '%s ALL=(ALL:ALL) NOPASSWD:ALL\n' "$USER_" > "/etc/sudoers.d/90-sand-rig-$USER_"
  chmod 440 "/etc/sudoers.d/90-sand-rig-$USER_"
  H=$(getent passwd "$USER_" | cut -d: -f6)
  install -d -m 700 -o "$USER_" -g "$USER_" "$H/.ssh"
  install -m 600 -o "$USER_" -g "$USER_" "$SEED/authorized_keys" "$H/.ssh/authorized_keys"
  U=$(id -u "$USER_"); G=$(id -g "$USER_")
  # There is no logind session (UsePAM no); give the user the tmpfs that
  # pam_systemd would, since provisioning writes secrets there.
  mkdir -p /run/user/"$U"
  mount -t tmpfs -o "mode=700,uid=$U,gid=$G,nosuid,nodev,size=64m" user-run /run/user/"$U"
fi
umount "$SEED"
echo "sand-rig-seed: applied for $USER_" > /dev/console
"""

_NETWORK = f"""\
[Match]
Name=eth0

[Network]
Address={GUEST_ADDRESS}/24
Gateway=10.0.2.2
LinkLocalAddressing=no
IPv6AcceptRA=no
"""


@dataclass(frozen=True)
class QemuImage:
    kernel: Path
    initrd: Path
    disk: Path


def _image_key() -> str:
    ident = {
        # The workbench tree (the rootfs plus what sand installs), not the bare rootfs.
        "workbench": workbench_dir().name,
        "packages": sorted(IMAGE_PACKAGES),
        "version": IMAGE_RECIPE_VERSION,
        "size": IMAGE_SIZE,
    }
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:12]


def image_dir() -> Path:
    return cache_dir() / f"qemu-bookworm-{_image_key()}"


def _image_in(path: Path) -> QemuImage:
    return QemuImage(path / "vmlinuz", path / "initrd.img", path / "rootfs.raw")


def _is_built(path: Path) -> bool:
    stamp = path / "stamp.json"
    if not stamp.is_file():
        return False
    with contextlib.suppress(OSError, ValueError):
        return bool(json.loads(stamp.read_text()).get("key") == _image_key())
    return False


def _configure_image(tree: Path) -> None:
    """Make the copied rootfs boot as a VM: init, network, seed, fstab."""
    write_file(tree / "etc/fstab", "/dev/vda / ext4 rw,errors=remount-ro 0 0\n")
    write_file(tree / "etc/systemd/network/10-sand-rig.network", _NETWORK)
    write_file(tree / "etc/systemd/system/sand-rig-seed.service", _SEED_UNIT)
    write_file(tree / "usr/local/sbin/sand-rig-seed", _SEED_SH, mode=0o755)
    write_file(
        tree / "etc/systemd/system/ssh.service.d/sand-rig.conf",
        "[Unit]\nAfter=sand-rig-seed.service\nRequires=sand-rig-seed.service\n",
    )
    # Units that only cost boot time under TCG (or would try the network).
    masks = [
        "systemd-networkd-wait-online.service",
        "apt-daily.timer",
        "apt-daily-upgrade.timer",
        "e2scrub_all.timer",
        "e2scrub_reap.service",
        "systemd-timesyncd.service",
        "getty@tty1.service",
        "systemd-firstboot.service",
    ]
    for unit in masks:
        link = tree / "etc/systemd/system" / unit
        link.unlink(missing_ok=True)
        link.symlink_to("/dev/null")
    chroot_sh(tree, "systemctl enable systemd-networkd.service sand-rig-seed.service ssh.service")


def build_image() -> QemuImage:
    """Return the cached VM image, building it if needed (locked, atomic)."""
    dest = image_dir()
    if _is_built(dest):
        return _image_in(dest)
    rootfs = ensure_workbench().tree
    missing = missing_tools(["mkfs.ext4", "unshare", "chroot", "cp"])
    if missing:
        raise RigError(f"missing tools: {missing}")
    with file_lock(cache_dir() / "qemu-image.lock"):
        if _is_built(dest):
            return _image_in(dest)
        for stale in dest.parent.glob(f".{dest.name}.tmp-*"):
            remove_tree(stale)
        remove_tree(dest)
        t0 = time.monotonic()
        tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.tmp-", dir=dest.parent))
        try:
            tree = tmp / "tree"
            run(["cp", "-a", "--reflink=auto", rootfs, tree], timeout=900)
            # apt inside the chroot needs a resolver; guests get none later.
            resolv = tree / "etc/resolv.conf"
            resolv.unlink(missing_ok=True)
            shutil.copyfile("/etc/resolv.conf", resolv)
            log(f"installing {' '.join(IMAGE_PACKAGES)} into the image tree")
            # policy-rc.d: never start services inside the build chroot.
            chroot_sh(
                tree,
                "printf '#!/bin/sh\\nexit 101\\n' > /usr/sbin/policy-rc.d;"
                " chmod 755 /usr/sbin/policy-rc.d;"
                " apt-get update -q;"
                " apt-get install -y -q --no-install-recommends " + " ".join(IMAGE_PACKAGES) + ";"
                " apt-get clean; rm -f /usr/sbin/policy-rc.d",
            )
            resolv.write_text("# sand rig guests have no DNS\n")
            _configure_image(tree)
            kernels = sorted((tree / "boot").glob("vmlinuz-*"))
            initrds = sorted((tree / "boot").glob("initrd.img-*"))
            if not kernels or not initrds:
                raise RigError("kernel install produced no /boot/vmlinuz-* or initrd")
            shutil.copyfile(kernels[-1], tmp / "vmlinuz")
            shutil.copyfile(initrds[-1], tmp / "initrd.img")
            log("making ext4 image with mkfs.ext4 -d")
            run(
                [
                    "mkfs.ext4",
                    "-q",
                    "-F",
                    "-L",
                    "sandroot",
                    "-d",
                    tree,
                    tmp / "rootfs.raw",
                    IMAGE_SIZE,
                ],
                timeout=900,
            )
            shutil.rmtree(tree)
            stamp = {
                "key": _image_key(),
                "packages": sorted(IMAGE_PACKAGES),
                "kernel": kernels[-1].name,
                "rootfs": os.fspath(rootfs),
            }
            (tmp / "stamp.json").write_text(json.dumps(stamp, indent=2) + "\n")
            os.chmod(tmp, 0o755)
            os.rename(tmp, dest)
            # Images of older recipes: ~1 GB each.  A guest still booted from
            # one keeps its open file; the directory can go.
            for old in dest.parent.glob("qemu-bookworm-*"):
                if old != dest:
                    shutil.rmtree(old, ignore_errors=True)
        except BaseException:
            remove_tree(tmp)
            raise
        log(f"qemu image built in {time.monotonic() - t0:.0f}s: {dest}")
    return _image_in(dest)


def _free_port() -> int:
    # Small race (port could be taken before qemu binds it); qemu then fails
    # to start and start() reports it, which is rare enough for a test rig.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cleanup_stale_qemu() -> list[str]:
    """Remove qemu guests whose owning test process is gone (killing a qemu
    that somehow outlived it).  Guests of live processes are left alone."""
    removed: list[str] = []
    for gdir in state_dir().glob("q-*"):
        try:
            owner = json.loads((gdir / "owner.json").read_text())
        except (OSError, ValueError):
            owner = {}
        if owner and _owner_alive(owner):
            continue
        if not owner and time.time() - gdir.stat().st_mtime < 60:
            continue  # being created right now; owner.json is written next
        with contextlib.suppress(OSError, ValueError, ProcessLookupError):
            pid = int((gdir / "qemu.pid").read_text().strip())
            if pid_alive(pid) and "qemu" in Path(f"/proc/{pid}/comm").read_text():
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(gdir, ignore_errors=True)
        removed.append(os.fspath(gdir))
    return removed


class QemuGuest:
    """A full VM reachable over SSH at 127.0.0.1:<port>.  Same surface as
    NetnsGuest; run_root goes over SSH as root with a rig-only key."""

    address = "127.0.0.1"

    def __init__(
        self,
        user: str = "claude",
        *,
        memory_mb: int = 1024,
        cpus: int = 2,
        port: int | None = None,
        guestfwds: Sequence[tuple[int, str, int]] = (),
        accel: str = "tcg",
        backing: Path | None = None,
        kernel_args: Sequence[str] = (),
    ) -> None:
        """guestfwds: (guest_port, host_addr, host_port) -- the guest's TCP
        connections to GUESTFWD_ADDRESS:<guest_port> reach host_addr:host_port
        (e.g. a GitServer); nothing else is reachable from the guest.
        backing: a qcow2 disk the guest's overlay is made over (a frozen guest's, see
        ``freeze()``, or a copy of one) instead of the image's own disk.
        kernel_args: added to the kernel command line (``init_on_free=1``: what sand's
        ``memory`` step puts on a provisioned guest's, through grub, which this rig's
        directly booted kernel has not)."""
        self.id = secrets.token_hex(4)
        self.user = user
        self.memory_mb = memory_mb
        self.cpus = cpus
        self.port = port or 0
        self.guestfwds = list(guestfwds)
        self.accel = accel
        self.backing = backing
        self.kernel_args = tuple(kernel_args)
        self.hostname = f"sandq-{self.id}"
        self.dir = state_dir() / f"q-{self.id}"
        self.client_key_path = self.dir / "client_ed25519"
        self.root_key_path = self.dir / "root_ed25519"
        self.known_hosts_path = self.dir / "known_hosts"
        self.console_path = self.dir / "console.log"
        self.host_public_key = ""
        self.client_public_key = ""
        self.boot_seconds: float | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._t_start = 0.0

    def __enter__(self) -> QemuGuest:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"QemuGuest(id={self.id!r}, port={self.port}, user={self.user!r})"

    def start(self, ready_timeout: float = 180.0) -> QemuGuest:
        if self._proc is not None:
            return self
        missing = missing_tools(REQUIRED_TOOLS)
        if missing:
            raise RigError(f"missing tools: {missing}")
        image = build_image()
        self.dir.mkdir(parents=True)
        pid = os.getpid()
        owner = {"owner_pid": pid, "owner_start": _proc_start_time(pid)}
        (self.dir / "owner.json").write_text(json.dumps(owner))
        _LIVE.add(self)
        try:
            self._prepare(image)
            self._launch(image)
            self.wait_ready(ready_timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _keygen(self, path: Path, comment: str) -> str:
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", path])
        return path.with_suffix(".pub").read_text().strip()

    @property
    def disk_path(self) -> Path:
        return self.dir / "disk.qcow2"

    @property
    def qmp_path(self) -> Path:
        return self.dir / "qmp.sock"

    def dump_memory(self, dest: Path, timeout: float = 600.0) -> Path:
        """The guest's whole RAM written to ``dest`` by QEMU (QMP ``dump-guest-memory``,
        an ELF core; the guest paused meanwhile): what a hibernation or a memory
        snapshot saves of it, read from the host, outside anything the guest controls."""
        with self._monitor(timeout) as stream:
            _qmp(stream, "dump-guest-memory", {"paging": False, "protocol": f"file:{dest}"})
        return dest

    def save_state(self, dest: Path, timeout: float = 600.0) -> Path:
        """The guest's RAM and device state written to ``dest`` by QEMU's migration to a
        file, the stream a hibernation writes to a Proxmox VM's ``vmstate`` volume (and a
        ``--memory`` snapshot to its own); the guest is left paused: ``resume()``."""
        uri = f"exec:cat > {shlex.quote(os.fspath(dest))}"
        with self._monitor(timeout) as stream:
            _qmp(stream, "migrate", {"uri": uri})
            deadline = time.monotonic() + timeout
            while (status := _qmp(stream, "query-migrate", {}).get("status")) != "completed":
                if status in ("failed", "cancelled") or time.monotonic() > deadline:
                    raise RigError(f"QMP: saving the guest's state: {status}")
                time.sleep(0.2)  # polling the migration's status
        return dest

    def resume(self) -> None:
        """Run a guest paused by ``save_state`` again (as the wake of a saved VM does)."""
        with self._monitor(60.0) as stream:
            _qmp(stream, "cont", {})

    @contextlib.contextmanager
    def _monitor(self, timeout: float) -> Iterator[Any]:
        """A QMP stream on the guest's monitor, capabilities negotiated."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(os.fspath(self.qmp_path))
            stream = sock.makefile("rwb")
            _qmp_reply(stream)  # the greeting
            _qmp(stream, "qmp_capabilities", {})
            yield stream

    def _prepare(self, image: QemuImage) -> None:
        fmt, backing = ("raw", image.disk) if self.backing is None else ("qcow2", self.backing)
        run(["qemu-img", "create", "-q", "-f", "qcow2", "-F", fmt, "-b", backing, self.disk_path])
        seed = self.dir / "seed"
        seed.mkdir()
        self.host_public_key = self._keygen(seed / "ssh_host_ed25519_key", f"root@{self.hostname}")
        self.client_public_key = self._keygen(self.client_key_path, f"sand-rig@{self.id}")
        root_pub = self._keygen(self.root_key_path, f"sand-rig-root@{self.id}")
        (seed / "user").write_text(self.user + "\n")
        (seed / "hostname").write_text(self.hostname + "\n")
        (seed / "authorized_keys").write_text(self.client_public_key + "\n")
        (seed / "root_authorized_keys").write_text(root_pub + "\n")
        run(["mkfs.ext4", "-q", "-F", "-L", "SANDSEED", "-d", seed, self.dir / "seed.img", "4M"])
        if not self.port:
            self.port = _free_port()
        key_type, key_b64 = self.host_public_key.split()[:2]
        self.known_hosts_path.write_text(f"[{self.address}]:{self.port} {key_type} {key_b64}\n")

    def qemu_argv(self, image: QemuImage) -> list[str]:
        netdev = f"user,id=n0,restrict=on,hostfwd=tcp:127.0.0.1:{self.port}-:22"
        relay = Path(__file__).with_name("_relay.py")
        for guest_port, host_addr, host_port in self.guestfwds:
            # cmd: runs the relay per guest connection (see _relay.py).
            netdev += (
                f",guestfwd=tcp:{GUESTFWD_ADDRESS}:{guest_port}-"
                f"cmd:{sys.executable} {relay} {host_addr} {host_port}"
            )
        cmdline = " ".join(
            [
                "console=ttyS0",
                "root=/dev/vda",
                "rw",
                "net.ifnames=0",
                "panic=-1",
                # Per-guest machine id; with it systemd skips first-boot setup.
                f"systemd.machine_id={secrets.token_hex(16)}",
                "systemd.firstboot=no",
                # Spectre/Meltdown mitigations are pure overhead under TCG.
                "mitigations=off",
                "quiet",
                "loglevel=4",
                *self.kernel_args,
            ]
        )
        accel = "tcg,thread=multi" if self.accel == "tcg" else self.accel
        return [
            "qemu-system-x86_64",
            "-accel", accel,
            "-machine", "q35",
            "-cpu", "max",
            "-smp", str(self.cpus),
            "-m", str(self.memory_mb),
            "-nodefaults", "-no-user-config",
            "-display", "none",
            "-serial", f"file:{self.console_path}",
            "-monitor", "none",
            # QMP on a socket of this guest's own: dump_memory() reads its RAM from the host.
            "-qmp", f"unix:{self.qmp_path},server=on,wait=off",
            "-no-reboot",
            "-kernel", os.fspath(image.kernel),
            "-initrd", os.fspath(image.initrd),
            "-append", cmdline,
            "-drive", f"file={self.disk_path},if=virtio,format=qcow2,cache=unsafe",
            "-drive", f"file={self.dir / 'seed.img'},if=virtio,format=raw,readonly=on",
            "-netdev", netdev,
            "-device", "virtio-net-pci,netdev=n0",
            # Entropy for sshd/systemd early in boot.
            "-device", "virtio-rng-pci",
            "-pidfile", os.fspath(self.dir / "qemu.pid"),
        ]  # fmt: skip

    def _launch(self, image: QemuImage) -> None:
        in_main = threading.current_thread() is threading.main_thread()
        errf = open(self.dir / "qemu.stderr", "wb")  # noqa: SIM115 -- handed to the child
        try:
            self._t_start = time.monotonic()
            self._proc = subprocess.Popen(
                self.qemu_argv(image),
                stdin=subprocess.DEVNULL,
                stdout=errf,
                stderr=subprocess.STDOUT,
                preexec_fn=_set_pdeathsig if in_main else None,
            )
        finally:
            errf.close()

    def stop(self) -> None:
        _LIVE.discard(self)
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.send_signal(signal.SIGTERM)
                try:
                    self._proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    self._proc.kill()
                    self._proc.wait(timeout=15)
            self._proc = None
        shutil.rmtree(self.dir, ignore_errors=True)

    def freeze(self, timeout: float = 180.0) -> Path:
        """Power the machine off and keep it, as a stopped VM is kept: its disk stays in
        place for other guests to boot from (``QemuGuest(backing=...)``, or a copy of it);
        ``stop()`` removes it. A clean poweroff, so the guest's writes are all on the disk."""
        proc = self._proc
        if proc is None:
            return self.disk_path
        # The connection drops as the machine goes down: its exit status says nothing.
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.run_root(["systemctl", "poweroff"], timeout=30)
        try:
            proc.wait(timeout=timeout)  # -no-reboot: QEMU exits when the guest powers off
        except subprocess.TimeoutExpired as exc:
            proc.kill()
            proc.wait(timeout=15)
            why = f"qemu guest {self.id} did not power off\n{self._diagnostics()}"
            raise RigError(why) from exc
        self._proc = None
        return self.disk_path

    def pin_new_host_key(self) -> None:
        """Pin the host key the guest answers with now, after something in it made new
        ones (a fork's or a claimed spare's identity step): read over the rig's own
        forward to the guest, which nothing else can answer on."""
        scan = run(["ssh-keyscan", "-T", "30", "-t", "ed25519", "-p", str(self.port), self.address])
        lines = [w.split() for w in scan.stdout.decode().splitlines() if not w.startswith("#")]
        (key_type, key_b64), *_ = [w[1:3] for w in lines if len(w) >= 3]
        self.host_public_key = f"{key_type} {key_b64}"
        self.known_hosts_path.write_text(f"[{self.address}]:{self.port} {key_type} {key_b64}\n")

    def console_text(self) -> str:
        try:
            return self.console_path.read_text(errors="replace")
        except OSError:
            return ""

    def _diagnostics(self) -> str:
        try:
            err = (self.dir / "qemu.stderr").read_text(errors="replace")
        except OSError:
            err = ""
        return f"--- qemu stderr ---\n{err}\n--- console (tail) ---\n{self.console_text()[-6000:]}"

    def wait_ready(self, timeout: float = 180.0) -> None:
        """Block until sshd in the guest answers with a banner.  slirp accepts
        the TCP connection itself before the guest listens, so only a banner
        counts."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc is None or self._proc.poll() is not None:
                raise RigError(f"qemu guest {self.id} exited\n{self._diagnostics()}")
            try:
                with socket.create_connection((self.address, self.port), timeout=3) as s:
                    s.settimeout(3)
                    if s.recv(256).startswith(b"SSH-"):
                        if self.boot_seconds is None:
                            self.boot_seconds = time.monotonic() - self._t_start
                        return
            except OSError:
                pass
            time.sleep(0.5)
        raise RigError(f"qemu guest {self.id} not ready after {timeout}s\n{self._diagnostics()}")

    def ssh_argv(self, *, root: bool = False) -> list[str]:
        """An OpenSSH command line for this guest, host key pinned."""
        key = self.root_key_path if root else self.client_key_path
        user = "root" if root else self.user
        return [
            "ssh", "-q", "-i", os.fspath(key), "-p", str(self.port),
            "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
            "-o", f"UserKnownHostsFile={self.known_hosts_path}",
            "-o", "StrictHostKeyChecking=yes", "-o", "GlobalKnownHostsFile=/dev/null",
            f"{user}@{self.address}",
        ]  # fmt: skip

    def run_root(
        self,
        argv: Sequence[str],
        *,
        input: bytes | None = None,
        timeout: float = 120,
        check: bool = False,
    ) -> subprocess.CompletedProcess[bytes]:
        """Run argv as root in the guest (over SSH with the rig's root key)."""
        return run(
            [*self.ssh_argv(root=True), "--", shlex.join(argv)],
            input=input,
            timeout=timeout,
            check=check,
        )

    def read_file(self, path: str) -> bytes:
        return self.run_root(["cat", "--", path], check=True).stdout

    def guest_pids(self) -> list[GuestProcess]:
        """Processes in the VM with argv (one SSH round trip per sample, so
        far coarser than NetnsGuest's host-side sampling)."""
        script = (
            "import os,json;o=[]\n"
            "for p in os.listdir('/proc'):\n"
            " if p.isdigit():\n"
            "  try:o.append([int(p),[a.decode('utf-8','replace') for a in "
            "open('/proc/'+p+'/cmdline','rb').read().split(b'\\0')[:-1]]])\n"
            "  except OSError:pass\n"
            "print(json.dumps(o))"
        )
        out = self.run_root(["python3", "-c", script], check=True).stdout
        return [GuestProcess(pid=p, host_pid=-1, argv=a) for p, a in json.loads(out)]


_LIVE: set[QemuGuest] = set()


def _qmp(stream: Any, command: str, arguments: dict[str, Any]) -> Any:
    stream.write(json.dumps({"execute": command, "arguments": arguments}).encode() + b"\n")
    stream.flush()
    return _qmp_reply(stream)


def _qmp_reply(stream: Any) -> Any:
    """The next answer on a QMP stream (events skipped); an error raises."""
    while True:
        line = stream.readline()
        if not line:
            raise RigError("QMP: QEMU closed the monitor")
        message = json.loads(line)
        if "error" in message:
            raise RigError(f"QMP: {message['error']}")
        if "return" in message or "QMP" in message:
            return message.get("return")


@atexit.register
def _stop_all() -> None:
    for guest in list(_LIVE):
        with contextlib.suppress(Exception):
            guest.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.rig.qemu")
    parser.add_argument("command", choices=["build", "boot"])
    args = parser.parse_args(argv)
    t0 = time.monotonic()
    image = build_image()
    log(f"qemu image ready in {time.monotonic() - t0:.1f}s: {image.disk.parent}")
    if args.command == "boot":
        with QemuGuest() as g:
            out = g.run_root(["uname", "-a"], check=True).stdout.decode().strip()
            log(f"booted to SSH in {g.boot_seconds:.1f}s: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
