"""Real guests behind fakepve's VMs, with disks that follow PVE's clones of templates.

fakepve has no disks and boots nothing; each of its VMs is given a real netns guest
here, the way a booting VM's guest agent would report an address (the agent answers
with the guest's address once the VM has its net0). What a VM's disk holds is modelled
on what PVE does:

* a VM cloned from one of sand's golden bases (its marker names the base's
  fingerprint) starts from the base's disk: a guest whose overlay has, under its own
  upper dir, the frozen upper dir of the guest that base was built on
  (``NetnsGuest(layers=...)``) -- exactly the files the base held when it was frozen;
* the build machine of a golden base (sand's golden block in its description) starts
  from the source template's disk: the bare Debian rootfs, or the workbench tree;
* when PVE makes the build machine a template (sand shut it down first), its guest is
  frozen (``NetnsGuest.freeze``): its processes stop, its upper dir is kept, and no
  guest ever writes to it again;
* any other VM starts from the workbench tree (the rig's default template disk).

What a real clone's first boot does that the rig does as each guest starts: a new
hostname, new SSH host keys, the cloud-init user's authorized key (here: the one
identity the test's manifest names). What is not modelled: a real boot, DHCP, the
template's disk as a block device (a file tree stands in for it).
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Self

from tests.rig.guest import NetnsGuest
from tests.rig.workbench import AptMirror

_BLOCK = re.compile(r"```sand[ \t]*\r?\n(.*?)\r?\n```", re.DOTALL)


def sand_block(description: object) -> dict[str, Any]:
    """The last ```sand block of a PVE description, read as plain JSON."""
    blocks = _BLOCK.findall(str(description or ""))
    try:
        data = json.loads(blocks[-1]) if blocks else {}
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


class _Answering:
    """A thread that plays the guests while a ``with`` block runs: ``_once`` looks at
    what the backend holds now and acts on it, every 50 ms; an exception is kept in
    ``errors`` (the test reads them) and the loop goes on."""

    THREAD = "guests"

    def __init__(self) -> None:
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Self:
        """Answer while the block runs (a guest made stays until ``stop()``)."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=self.THREAD, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self._once()
            except Exception as exc:  # keep answering; the test reads the errors
                self.errors.append(f"{type(exc).__name__}: {exc}")
            time.sleep(0.05)

    def _once(self) -> None:
        raise NotImplementedError


class LayeredGuests(_Answering):
    """Plays the guests of a fakepve rig's VMs (see the module doc). A context manager:
    its thread answers until the block ends; ``stop()`` removes every guest it made."""

    THREAD = "layered-guests"

    def __init__(
        self,
        rig: Any,
        *,
        public_key: str,
        bare: Path,
        workbench: Path,
        mirror: AptMirror | None = None,
        base_from_bare: bool = True,
        on_guest: Callable[[str, NetnsGuest], None] | None = None,
    ) -> None:
        super().__init__()
        self.rig, self.public_key = rig, public_key
        self.bare, self.workbench, self.mirror = bare, workbench, mirror
        self.base_from_bare = base_from_bare
        self.on_guest = on_guest
        self.by_vmid: dict[int, NetnsGuest] = {}  # the guest of each VM now at that vmid
        self._answered: set[tuple[int, str]] = set()  # (vmid, incarnation) answered
        self.base_guests: dict[str, NetnsGuest] = {}  # base fingerprint -> build guest
        self.layers: dict[str, Path] = {}  # base fingerprint -> its frozen disk
        self.started: list[tuple[str, str, float]] = []  # (vm name, kind, seconds)
        self.retired: list[NetnsGuest] = []  # guests of VMs deleted since
        self._lock = threading.Lock()

    def stop(self) -> None:
        self.__exit__()
        for guest in [*self.by_vmid.values(), *self.retired, *self.base_guests.values()]:
            guest.stop()

    def guest_of(self, name: str) -> NetnsGuest:
        for vm in self.rig.vms_named(name):
            if vm.vmid in self.by_vmid:
                return self.by_vmid[vm.vmid]
        raise KeyError(name)

    # --- the loop ----------------------------------------------------------------------

    def _once(self) -> None:
        for vm in [*self.rig.templates(), *self.rig.vms()]:
            block = sand_block(vm.config.get("description"))
            if vm.template:
                if block.get("kind") == "golden":
                    self._freeze(str(block.get("fingerprint") or ""))
                continue
            # A vmid PVE hands out again is a new VM: its incarnation tells them apart.
            key = (vm.vmid, str(block.get("op") or vm.name))
            if key in self._answered or not vm.config.get("net0"):
                continue
            if block.get("kind") == "golden":
                guest = self._build_machine(str(block.get("fingerprint") or ""))
                kind = "base build"
            elif block.get("base"):
                fingerprint = str(block["base"])
                guest = self._start(layers=[self._freeze(fingerprint)])
                kind = f"clone of base {fingerprint[:8]}"
            else:
                guest = self._start()
                kind = "from the template"
            with self._lock:
                old = self.by_vmid.get(vm.vmid)
                self.by_vmid[vm.vmid] = guest
                self._answered.add(key)
            if old is not None:
                self.retired.append(old)
            self.rig.set_agent_ip(vm.vmid, guest.address)
            if self.on_guest is not None:
                self.on_guest(str(vm.name), guest)
            self.started.append((str(vm.name), kind, time.time()))

    def _build_machine(self, fingerprint: str) -> NetnsGuest:
        guest = self._start(rootfs=self.bare if self.base_from_bare else self.workbench)
        if self.mirror is not None:
            guest.run_root(["rm", "-rf", "/etc/apt/sources.list.d"], check=True)
            guest.run_root(
                ["sh", "-c", "cat > /etc/apt/sources.list"],
                input=self.mirror.sources_list().encode(),
                check=True,
            )
        self.base_guests[fingerprint] = guest
        return guest

    def _freeze(self, fingerprint: str) -> Path:
        if fingerprint not in self.layers:
            self.layers[fingerprint] = self.base_guests[fingerprint].freeze()
        return self.layers[fingerprint]

    def _start(self, *, rootfs: Path | None = None, layers: list[Path] | None = None) -> NetnsGuest:
        guest = NetnsGuest(rootfs=rootfs or self.workbench, layers=layers or ()).start()
        home = f"/home/{guest.user}"
        guest.run_root(
            ["sh", "-c", f"cat >> {home}/.ssh/authorized_keys"],
            input=(self.public_key + "\n").encode(),
            check=True,
        )
        return guest


class LimaLayeredGuests(_Answering):
    """The same for the limactl stand-in: a real guest behind each instance sand makes,
    bound before its ``limactl start`` returns (the stand-in's ``await_guest``).

    A golden base's instance (``sand-base-*``) gets a guest from the source's disk (the
    workbench tree) with the rig's apt mirror; once sand stamps it (after stopping it),
    its guest is frozen; an instance whose sand marker names a base starts from that
    frozen disk; any other instance from the workbench tree."""

    THREAD = "lima-guests"

    def __init__(self, standin: Any, *, workbench: Path, mirror: AptMirror | None = None) -> None:
        super().__init__()
        self.standin, self.workbench, self.mirror = standin, workbench, mirror
        self.by_name: dict[str, NetnsGuest] = {}
        self.base_guests: dict[str, NetnsGuest] = {}  # base instance -> its guest
        self.layers: dict[str, Path] = {}  # base fingerprint -> frozen disk
        self.started: list[tuple[str, str, float]] = []

    def stop(self) -> None:
        self.__exit__()
        for guest in [*self.by_name.values(), *self.base_guests.values()]:
            guest.stop()

    def _json(self, path: Path) -> dict[str, Any]:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def _once(self) -> None:
        home = self.standin.lima_home
        for d in sorted(p for p in home.iterdir() if p.is_dir() and not p.name.startswith("_")):
            name = d.name
            if not (d / "lima.yaml").exists():
                continue
            stamp = self._json(d / "sand-base.json")
            if name.startswith("sand-base-"):
                if stamp.get("golden") and name in self.base_guests:
                    self.layers.setdefault(stamp["golden"], self.base_guests[name].freeze())
                    continue
                if name not in self.base_guests and not stamp:
                    guest = self._start(self.workbench)
                    if self.mirror is not None:
                        guest.run_root(["rm", "-rf", "/etc/apt/sources.list.d"], check=True)
                        guest.run_root(
                            ["sh", "-c", "cat > /etc/apt/sources.list"],
                            input=self.mirror.sources_list().encode(),
                            check=True,
                        )
                    self.base_guests[name] = guest
                    self._bind(name, guest, "base build")
                continue
            marker = self._json(d / "sand-marker.json")
            if name in self.by_name or not marker:
                continue
            base = str(marker.get("base") or "")
            if base:
                guest = NetnsGuest(rootfs=self.workbench, layers=[self.layers[base]]).start()
                kind = f"clone of base {base[:8]}"
            else:
                guest = self._start(self.workbench)
                kind = "from the image"
            self.by_name[name] = guest
            self._bind(name, guest, kind)

    def _start(self, rootfs: Path) -> NetnsGuest:
        return NetnsGuest(rootfs=rootfs).start()

    def _bind(self, name: str, guest: NetnsGuest, kind: str) -> None:
        self.standin.back_with_guest(name, guest)
        self.started.append((name, kind, time.time()))
