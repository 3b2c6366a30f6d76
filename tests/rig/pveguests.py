"""QemuHypervisor: a real QEMU guest (TCG, 1 vCPU) behind each fakepve VM that starts.

Given to a fakepve rig (``rig.use_hypervisor(hv)``, see ``tests/fakepve_rig/machines.py``),
it does what a PVE node does with the VM's process:

* at ``qmstart`` it writes the VM's NoCloud drive from the VM's stored config as PVE's
  generator does (``tests/fakepve_rig/cloudinit.py``: ``ciuser``, ``sshkeys``,
  ``ipconfig0``, instance-id) when the config has a cloud-init drive, and boots the VM's
  disk with it attached at that drive's key (an IDE CD-ROM; no drive, no seed), its NIC on
  a bridge with the MAC of ``net0``, and a virtio-serial port for qemu-guest-agent;
* the disk: a qcow2 overlay over its source's disk -- the rig's template image
  (``tests/rig/pveimage.py``: the real-Lima tier's Debian 12 image plus qemu-guest-agent) for
  a VM cloned from the plain template, the frozen disk of the VM a template was made from for
  a clone of that template (a golden base);
* DHCP: dnsmasq on the bridge (its lease file is what the tests compare the agent's answer
  with); the bridge has no route out, so guests reach the host and each other only;
* the agent: API calls pass to the guest's qemu-guest-agent over the port's socket
  (``guest-sync-delimited`` first, as PVE's QMP passthrough does); ``qmshutdown`` sends
  ``guest-shutdown`` and waits for QEMU to exit;
* ``firewall=True``: the VM's PVE firewall applied on the host as pve-firewall does
  (``tests/rig/pvefirewall.py``), before QEMU starts and again at each write (``refilter``).

Guests boot with a kernel cmdline that tolerates the RCU stalls TCG causes on a loaded host.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import os
import random
import re
import secrets
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from tests.fakepve_rig import cloudinit
from tests.fakepve_rig.machines import AgentDown
from tests.rig._util import RigError, missing_tools, pid_alive, run, state_dir
from tests.rig.guest import _owner_alive, _proc_start_time
from tests.rig.pvefirewall import HostFirewall

REQUIRED_TOOLS = ("qemu-system-x86_64", "qemu-img", "genisoimage", "dnsmasq", "ip")
CMDLINE = (
    "root=/dev/vda rw console=ttyS0 net.ifnames=0 panic=-1 mitigations=off"
    # TCG on a busy 2-core host: a vCPU starved for seconds is normal, not a hang.
    " rcupdate.rcu_cpu_stall_suppress=1 rcupdate.rcu_cpu_stall_suppress_at_boot=1"
    " rcupdate.rcu_cpu_stall_timeout=300 nowatchdog nmi_watchdog=0 tsc=reliable"
)
MAX_MEMORY_MIB = 1536
# A guest's boot to an address through its agent with the host lightly loaded (load ~7
# on 2 cores: 70-76 s), and the agent's socket waits that go with it: a busier host
# slows the guest's agent as much as its boot, so they grow with the boots measured.
REFERENCE_BOOT = 75.0
AGENT_WAITS = {"connect": 3.0, "sync": 5.0, "reply": 30.0}
_ACK = re.compile(r"DHCPACK\(\S+\) (\S+) (\S+)")


@dataclass
class Machine:
    vmid: int
    dir: Path
    tap: str
    mac: str
    seed: dict[str, str]
    proc: subprocess.Popen[bytes]
    launched: float = field(default_factory=time.monotonic)
    addressed: float | None = None  # when the agent first reported an IPv4 address
    address: str | None = None  # the one it reported
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def console(self) -> str:
        try:
            return (self.dir / "console.log").read_text(errors="replace")
        except OSError:
            return ""


def cloudinit_cdrom(key: str | None, iso: Path) -> list[str]:
    """QEMU's arguments for the cloud-init drive at its config key (``ide<N>``: the q35
    AHCI port N, as ide2 is PVE's usual one), none without one."""
    if key is None:
        return []
    if not key.startswith("ide"):
        raise RigError(f"the rig attaches IDE cloud-init drives only, not {key}")
    return [
        "-drive", f"file={iso},if=none,id={key},media=cdrom,readonly=on",
        "-device", f"ide-cd,drive={key},bus=ide.{key[3:]}",
    ]  # fmt: skip


class QemuHypervisor:
    def __init__(self, image: Path, *, firewall: bool = False) -> None:
        missing = missing_tools(REQUIRED_TOOLS)
        if missing:
            raise RigError(f"missing tools: {missing} (run .ci/rig-setup.sh)")
        self.image = image
        self.id = secrets.token_hex(2)
        self.dir = state_dir() / f"pve-{self.id}"
        self.bridge = f"spvbr{self.id}"
        self.machines: dict[int, Machine] = {}
        self.past: list[Machine] = []  # machines that ran and stopped, oldest first
        self.sources: dict[int, int] = {}  # vmid -> the VM it was cloned from
        self.network = ipaddress.ip_network("10.214.0.0/24")
        self._dnsmasq: subprocess.Popen[bytes] | None = None
        self.errors: list[str] = []
        self.firewall = HostFirewall(self.id, self.bridge, self.dir) if firewall else None

    # --- the network -----------------------------------------------------------------

    def __enter__(self) -> QemuHypervisor:
        self.dir.mkdir(parents=True)
        pid = os.getpid()
        owner = {"owner_pid": pid, "owner_start": _proc_start_time(pid)}
        (self.dir / "owner.json").write_text(json.dumps(owner))
        used = run(["ip", "-o", "-4", "addr"]).stdout.decode()
        free = [n for n in range(1, 250) if f" 10.214.{n}." not in used]
        self.network = ipaddress.ip_network(f"10.214.{random.choice(free)}.0/24")
        hosts = list(self.network.hosts())
        run(["ip", "link", "add", self.bridge, "type", "bridge"])
        run(["ip", "addr", "add", f"{hosts[0]}/24", "dev", self.bridge])
        run(["ip", "link", "set", self.bridge, "up"])
        if self.firewall is not None:
            self.firewall.__enter__()
        log = self.dir / "dnsmasq.log"
        self._dnsmasq = subprocess.Popen(
            ["dnsmasq", "--keep-in-foreground", "--conf-file=/dev/null", "--no-hosts",
             "--no-resolv", "--port=0", "--bind-interfaces", f"--interface={self.bridge}",
             "--except-interface=lo", "--user=root", "--dhcp-authoritative", "--log-dhcp",
             f"--dhcp-range={hosts[99]},{hosts[198]},255.255.255.0,12h",
             f"--dhcp-leasefile={self.dir / 'leases'}",
             # No router, no DNS server: the guests reach the host and nothing beyond.
             "--dhcp-option=3", "--dhcp-option=6", f"--log-facility={log}"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        (self.dir / "dnsmasq.pid").write_text(str(self._dnsmasq.pid))
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc: BaseException | None = None,
        tb: TracebackType | None = None,
    ) -> None:
        for vmid in list(self.machines):
            self.kill(vmid)
        if self._dnsmasq is not None:
            self._dnsmasq.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._dnsmasq.wait(10)
            self._dnsmasq.kill()
            self._dnsmasq = None
        run(["ip", "link", "del", self.bridge], check=False)
        if self.firewall is not None:
            self.firewall.__exit__()
        shutil.rmtree(self.dir, ignore_errors=True)

    def leases(self) -> dict[str, str]:
        """dnsmasq's leases: MAC (lower case) -> IPv4 address."""
        try:
            lines = (self.dir / "leases").read_text().splitlines()
        except OSError:
            return {}
        return {w[1].lower(): w[2] for w in (line.split() for line in lines) if len(w) >= 3}

    def acks(self) -> list[tuple[str, str]]:
        """Every address dnsmasq gave, as (MAC, IPv4), oldest first (released ones too)."""
        try:
            text = (self.dir / "dnsmasq.log").read_text(errors="replace")
        except OSError:
            return []
        return [(mac.lower(), ip) for ip, mac in _ACK.findall(text)]

    # --- the machines (called on fakepve's loop) ------------------------------------------

    def cloned(self, source: int, vmid: int) -> None:
        self.sources[vmid] = source

    def disk(self, vmid: int) -> Path:
        return self.dir / f"vm-{vmid}-disk-0.qcow2"

    def _backing(self, vmid: int) -> tuple[Path, str]:
        source = self.sources.get(vmid)
        while source is not None:
            if self.disk(source).exists():
                return self.disk(source), "qcow2"
            source = self.sources.get(source)
        return self.image / "rootfs.raw", "raw"

    def start(self, vmid: int, config: dict[str, Any], firewall: dict[str, Any]) -> None:
        try:
            self._start(vmid, config, firewall)
        except Exception as exc:  # on fakepve's loop: nobody else would see it
            self.errors.append(f"VM {vmid} did not start: {exc}")
            raise

    def _start(self, vmid: int, config: dict[str, Any], firewall: dict[str, Any]) -> None:
        if self.runs(vmid):
            return
        disk = self.disk(vmid)
        if not disk.exists():
            backing, fmt = self._backing(vmid)
            run(["qemu-img", "create", "-q", "-f", "qcow2", "-F", fmt, "-b", backing, disk])
        vdir = self.dir / f"vm-{vmid}"
        shutil.rmtree(vdir, ignore_errors=True)
        vdir.mkdir()
        # vm_start → apply_cloudinit_config: only a VM with a cloud-init drive gets one.
        drive = cloudinit.cloudinit_drive(config)
        seed = cloudinit.seed_files(config, vmid) if drive else {}
        if drive:
            cloudinit.write_iso(seed, vdir / "cloudinit.iso")
        mac = cloudinit.net_mac(config.get("net0"))
        tap = f"spt{self.id}{vmid}"[:15]
        run(["ip", "tuntap", "add", "dev", tap, "mode", "tap"])
        run(["ip", "link", "set", tap, "master", self.bridge, "up"])
        if self.firewall is not None:  # before QEMU: its first packet meets the rules
            self.firewall.plug(vmid, config, tap, mac, firewall)
        memory = min(int(config.get("memory") or 1024), MAX_MEMORY_MIB)
        argv = [
            "qemu-system-x86_64", "-accel", "tcg", "-machine", "q35", "-cpu", "max",
            "-smp", "1", "-m", str(memory), "-nodefaults", "-no-user-config",
            "-display", "none", "-monitor", "none",
            "-serial", f"file:{vdir / 'console.log'}",
            "-qmp", f"unix:{vdir / 'qmp.sock'},server=on,wait=off",
            "-kernel", str(self.image / "vmlinuz"), "-initrd", str(self.image / "initrd.img"),
            "-append", CMDLINE,
            "-drive", f"file={disk},if=virtio,format=qcow2,cache=unsafe",
            *cloudinit_cdrom(drive, vdir / "cloudinit.iso"),
            "-netdev", f"tap,id=net0,ifname={tap},script=no,downscript=no",
            "-device", f"virtio-net-pci,netdev=net0,mac={mac}",
            "-chardev", f"socket,id=qga0,path={vdir / 'qga.sock'},server=on,wait=off",
            "-device", "virtio-serial-pci",
            "-device", "virtserialport,chardev=qga0,name=org.qemu.guest_agent.0",
            "-device", "virtio-rng-pci",
            "-pidfile", str(vdir / "qemu.pid"),
        ]  # fmt: skip
        err = open(vdir / "qemu.stderr", "wb")  # noqa: SIM115 -- handed to the child
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=err, stderr=err)
        finally:
            err.close()
        self.machines[vmid] = Machine(vmid, vdir, tap, mac, seed, proc)

    def refilter(self, vmid: int, config: dict[str, Any], firewall: dict[str, Any]) -> None:
        """The VM's firewall changed through the API: its rules again, if it runs."""
        if self.firewall is not None and (m := self.machines.get(vmid)) is not None:
            self.firewall.plug(vmid, config, m.tap, m.mac, firewall)

    def boots(self) -> list[float]:
        """Seconds from launch to the agent's first address, of each machine that got one."""
        machines = [*self.past, *self.machines.values()]
        return [m.addressed - m.launched for m in machines if m.addressed is not None]

    def slowness(self) -> float:
        """How much slower than a lightly loaded host the slowest boot measured was (1 at
        least, and before any boot)."""
        return max([1.0, *(b / REFERENCE_BOOT for b in self.boots())])

    def wait(self, name: str) -> float:
        """An agent socket wait (``AGENT_WAITS``) scaled to the boots measured."""
        return AGENT_WAITS[name] * self.slowness()

    def runs(self, vmid: int) -> bool:
        m = self.machines.get(vmid)
        return m is not None and m.proc.poll() is None

    def kill(self, vmid: int) -> None:
        m = self.machines.pop(vmid, None)
        if m is None:
            return
        if m.proc.poll() is None:
            m.proc.send_signal(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            m.proc.wait(15)
        run(["ip", "link", "del", m.tap], check=False)
        if self.firewall is not None:
            self.firewall.remove(vmid)  # as the tap goes
        self.past.append(m)

    async def shutdown(self, vmid: int, timeout: float) -> bool:
        """PVE with the agent on: ``guest-shutdown`` through it, then wait for QEMU to exit."""
        m = self.machines[vmid]
        try:
            await self._qga(m, "guest-shutdown", reply=False)
        except AgentDown:
            return False
        deadline = time.monotonic() + timeout
        while m.proc.poll() is None and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        if m.proc.poll() is None:
            return False
        self.kill(vmid)  # its tap; the disk stays
        return True

    async def agent(self, vmid: int, command: str) -> Any:
        m = self.machines[vmid]
        result = await self._qga(m, command)
        if command == "guest-network-get-interfaces" and m.addressed is None:
            nic = [i for i in result or [] if str(i.get("hardware-address")).lower() == m.mac]
            ipv4 = [
                str(a.get("ip-address"))
                for i in nic
                for a in i.get("ip-addresses") or []
                if a.get("ip-address-type") == "ipv4"
            ]
            if ipv4:
                m.addressed, m.address = time.monotonic(), ipv4[0]
        return result

    async def _qga(self, m: Machine, command: str, *, reply: bool = True) -> Any:
        """One command on the guest agent's socket, after a ``guest-sync-delimited`` that
        flushes whatever an earlier, unanswered caller left behind."""
        async with m.lock:
            try:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_unix_connection(str(m.dir / "qga.sock")), self.wait("connect")
                )
            except (TimeoutError, OSError) as exc:
                raise AgentDown(str(exc)) from exc
            try:
                token = random.randrange(1, 2**31)
                sync = {"execute": "guest-sync-delimited", "arguments": {"id": token}}
                writer.write(json.dumps(sync).encode() + b"\n")
                await writer.drain()
                await asyncio.wait_for(self._synced(reader, token), self.wait("sync"))
                writer.write(json.dumps({"execute": command}).encode() + b"\n")
                await writer.drain()
                if not reply:
                    return None
                line = await asyncio.wait_for(reader.readline(), self.wait("reply"))
                answer = json.loads(line)
            except (TimeoutError, OSError, ValueError, asyncio.IncompleteReadError) as exc:
                raise AgentDown(f"{type(exc).__name__}: {exc}") from exc
            finally:
                writer.close()
            if "error" in answer:
                raise AgentDown(str(answer["error"].get("desc")))
            return answer.get("return")

    @staticmethod
    async def _synced(reader: asyncio.StreamReader, token: int) -> None:
        while True:
            await reader.readuntil(b"\xff")
            with contextlib.suppress(ValueError):
                if json.loads(await reader.readline()).get("return") == token:
                    return

    # --- for tests ---------------------------------------------------------------------

    def machine(self, vmid: int) -> Machine:
        for m in [*self.machines.values(), *reversed(self.past)]:
            if m.vmid == vmid:
                return m
        raise KeyError(vmid)

    def consoles(self) -> str:
        """Every machine's serial log (tail), for a failing test's message."""
        out = list(self.errors)
        for m in [*self.past, *self.machines.values()]:
            out.append(f"--- VM {m.vmid} console (tail) ---\n{m.console[-4000:]}")
        return "\n".join(out)


def cleanup_stale() -> list[str]:
    """Remove what hypervisors of dead test processes left: QEMUs, dnsmasq, bridge, taps."""
    removed: list[str] = []
    links = run(["ip", "-o", "link"]).stdout.decode()
    for hdir in state_dir().glob("pve-*"):
        try:
            owner = json.loads((hdir / "owner.json").read_text())
        except (OSError, ValueError):
            owner = {}
        if owner and _owner_alive(owner):
            continue
        if not owner and time.time() - hdir.stat().st_mtime < 60:
            continue  # being created right now
        for pidfile in [hdir / "dnsmasq.pid", *hdir.glob("vm-*/qemu.pid")]:
            with contextlib.suppress(OSError, ValueError, ProcessLookupError):
                pid = int(pidfile.read_text().strip())
                comm = Path(f"/proc/{pid}/comm").read_text()
                if pid_alive(pid) and ("qemu" in comm or "dnsmasq" in comm):
                    os.kill(pid, signal.SIGKILL)
        ident = hdir.name.removeprefix("pve-")
        for word in links.split():
            name = word.rstrip(":").split("@")[0]
            if name in (f"spvbr{ident}",) or name.startswith(f"spt{ident}"):
                run(["ip", "link", "del", name], check=False)
        HostFirewall.drop_tables(ident)
        shutil.rmtree(hdir, ignore_errors=True)
        removed.append(str(hdir))
    return removed
