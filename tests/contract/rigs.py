"""The far sides the Backend contract is checked against, behind one small interface.

Each rig is real parts: fakepve (a fake PVE 9 API over HTTPS), the limactl stand-in
run as a local process, and the same stand-in on a remote host behind a real sshd.
sand's backend is built from a manifest through the one factory, as a run builds it;
everything a test asserts about the world it reads here, from the far side itself
(fakepve's VMs, the stand-in's instance directories), never from what sand says.

Every rig names its one backend entry ``box``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from sand.backends.factory import make_backend
from sand.backends.protocol import Backend
from sand.desired import DesiredState, build_desired
from sand.manifest.models import Manifest
from tests.backends.lima.sshd_rig import Sshd
from tests.fakepve_rig.rig import FakePveRig
from tests.limactl_standin import StandIn

BOX = "box"


@dataclass(frozen=True)
class Outage:
    """One way a backend cannot be read, and how to end it."""

    label: str
    start: Callable[[], None]
    end: Callable[[], None] | None  # None: it lasts (the rig's last outage)


class ContractRig:
    """What the contract tests need of a far side; one subclass per backend kind."""

    kind = ""
    defaults: ClassVar[Mapping[str, Any]] = {}

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir

    def __repr__(self) -> str:
        return f"<{self.kind} rig>"

    # --- sand's side: a manifest, its desired state, the backend the factory builds ----

    def backend_fields(self) -> dict[str, Any]:
        raise NotImplementedError

    def manifest(self, vms: list[dict[str, Any]], *, project: str = "demo") -> dict[str, Any]:
        return {
            "apiVersion": "sand/v1",
            "project": project,
            "backends": {BOX: self.backend_fields()},
            "defaults": {"provision": False, **self.defaults},
            "vms": vms,
        }

    def state(
        self,
        vms: list[dict[str, Any]],
        *,
        project: str = "demo",
        images: dict[str, Any] | None = None,
    ) -> DesiredState:
        data = self.manifest(vms, project=project)
        if images:
            data["images"] = images
        manifest = Manifest.model_validate(data)
        return build_desired(manifest, bundle_digest="contract", machine_digest="contract")

    def backend(self, *, project: str = "demo") -> Backend:
        manifest = Manifest.model_validate(self.manifest([], project=project))
        return make_backend(BOX, manifest.backends[BOX], project=project, manifest_dir=self.workdir)

    # --- the far side ------------------------------------------------------------------

    def names(self) -> list[str]:
        """The VMs' names on the far side (no templates, no Lima bases), sorted."""
        raise NotImplementedError

    def snapshot(self) -> dict[str, Any]:
        """Everything a mutation could change, to prove one did not happen."""
        raise NotImplementedError

    def remove_by_hand(self, identity: str) -> None:
        """Delete a VM as a person would, behind sand's back."""
        raise NotImplementedError

    def plant_unmanaged(self, name: str) -> None:
        """A VM a person made, with no marker of sand's."""
        raise NotImplementedError

    def copy_by_hand(self, identity: str, name: str) -> None:
        """A person's copy of one of sand's VMs (the marker comes along, naming the
        original's identity)."""
        raise NotImplementedError

    def outages(self) -> list[Outage]:
        raise NotImplementedError

    # --- windows in which a create can be cut short -----------------------------------

    def slow_down_the_make(self) -> None:
        """Make the step that brings the VM into being take long enough to be cut."""
        raise NotImplementedError

    def slow_down_the_start(self) -> None:
        """Make the step after the marker is written take long enough to be cut."""
        raise NotImplementedError

    def half_made(self, name: str) -> bool:
        """The VM exists in part, with no marker of sand's yet."""
        raise NotImplementedError

    def marked(self, name: str) -> bool:
        """The VM exists and carries sand's marker (its fingerprint still empty)."""
        raise NotImplementedError

    # --- golden bases ------------------------------------------------------------------

    def answer_agents(self) -> contextlib.AbstractContextManager[None]:
        """While a base's build machine boots, answer what its guest agent would."""
        return contextlib.nullcontext()

    def bases(self) -> dict[str, bool]:
        """Golden bases on the far side: identity -> ready to be cloned from."""
        raise NotImplementedError


class FakePve(ContractRig):
    kind = "fakepve"
    defaults: ClassVar[Mapping[str, Any]] = {"memory": "2GiB", "disk": "8GiB"}

    def __init__(self, workdir: Path, rig: FakePveRig) -> None:
        super().__init__(workdir)
        self.rig = rig

    def backend_fields(self) -> dict[str, Any]:
        return self.rig.backend_fields()

    def backend(self, *, project: str = "demo") -> Backend:
        # The rig's backend is the factory's, with retry and poll times shrunk.
        return self.rig.make_backend(project, name=BOX)

    def names(self) -> list[str]:
        return sorted(vm.name for vm in self.rig.vms())

    def snapshot(self) -> dict[str, Any]:
        def read() -> dict[str, Any]:
            return {
                vm.vmid: (
                    vm.name,
                    vm.status,
                    vm.pool,
                    vm.lock,
                    json.dumps(vm.config, sort_keys=True),
                )
                for vm in self.rig.pve.vms
            }

        return self.rig.run(read)

    def _vmid(self, name: str) -> int | None:
        found = self.rig.vms_named(name)
        return int(found[0].vmid) if found else None

    def remove_by_hand(self, identity: str) -> None:
        self.rig.destroy_by_hand(int(identity))

    def plant_unmanaged(self, name: str) -> None:
        self.rig.seed_vm(300 + len(self.rig.vms()), name)

    def copy_by_hand(self, identity: str, name: str) -> None:
        # PVE's clone copies tags and description: the marker still names the original.
        original = self.rig.vm(int(identity))
        assert original is not None
        config = dict(original.config)
        vmid = 400 + len(self.rig.vms())
        self.rig.seed_vm(vmid, name, tags=config.get("tags"), description=config.get("description"))

    def outages(self) -> list[Outage]:
        rig = self.rig
        return [
            Outage(
                "the API answers 503",
                lambda: rig.fail("GET", "/cluster/resources", 503, "Service Unavailable"),
                rig.clear_faults,
            ),
            Outage(
                "the token is refused",
                lambda: rig.fail("GET", "/cluster/resources", 401, "authentication failure"),
                rig.clear_faults,
            ),
        ]

    def slow_down_the_make(self) -> None:
        self.rig.set_time_scale(0.01)
        self.rig.set_task_secs("qmclone", 30)  # 0.3 s holding lock: clone

    def slow_down_the_start(self) -> None:
        self.rig.set_time_scale(0.01)
        self.rig.set_task_secs("qmstart", 30)

    def half_made(self, name: str) -> bool:
        vmid = self._vmid(name)
        vm = self.rig.vm(vmid) if vmid is not None else None
        return vm is not None and vm.lock == "clone"

    def marked(self, name: str) -> bool:
        vmid = self._vmid(name)
        vm = self.rig.vm(vmid) if vmid is not None else None
        tags = str(vm.config.get("tags") or "") if vm is not None else ""
        return f"sand-{vmid}-" in tags

    @contextlib.contextmanager
    def answer_agents(self) -> Iterator[None]:
        stop = threading.Event()

        def loop() -> None:
            answered: set[int] = set()
            while not stop.is_set():
                for vm in self.rig.vms():
                    if vm.vmid not in answered and vm.config.get("net0"):
                        self.rig.set_agent_ip(vm.vmid, f"10.99.0.{len(answered) + 10}")
                        answered.add(vm.vmid)
                time.sleep(0.02)

        thread = threading.Thread(target=loop, daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()

    def bases(self) -> dict[str, bool]:
        out: dict[str, bool] = {}
        for vm in [*self.rig.templates(), *self.rig.vms()]:
            tags = str(vm.config.get("tags") or "")
            if "sand-golden-" in tags:
                out[str(vm.vmid)] = bool(vm.template) and "sand-golden-new" not in tags
        return out


class LimaStandIn(ContractRig):
    kind = "lima"
    defaults: ClassVar[Mapping[str, Any]] = {
        "image": "debian-12",
        "memory": "2GiB",
        "disk": "20GiB",
    }

    def __init__(self, workdir: Path, standin: StandIn) -> None:
        super().__init__(workdir)
        self.standin = standin

    def backend_fields(self) -> dict[str, Any]:
        return {
            "type": "lima",
            "lima_home": str(self.standin.lima_home),
            "limactl": str(self.standin.executable),
        }

    def names(self) -> list[str]:
        return [n for n in self.standin.instances() if not n.startswith("sand-base")]

    def snapshot(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in self.standin.instances():
            d = self.standin.instance_dir(name)
            out[name] = {
                str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest()
                for p in sorted(d.rglob("*"))
                if p.is_file() and not p.name.endswith(".log")
            }
        return out

    def remove_by_hand(self, identity: str) -> None:
        self.standin.run("delete", "--force", identity)

    def plant_unmanaged(self, name: str) -> None:
        self.standin.make_instance(name, {"cpus": 1})

    def copy_by_hand(self, identity: str, name: str) -> None:
        # `limactl clone` needs the original stopped; the sidecar is copied with it.
        self.standin.run("stop", identity)
        self.standin.run("clone", identity, name)

    def _limactl_gone(self) -> Outage:
        exe = self.standin.executable
        away = exe.with_name("limactl.away")
        return Outage(
            "limactl is not installed", lambda: exe.rename(away), lambda: away.rename(exe)
        )

    def outages(self) -> list[Outage]:
        s = self.standin
        return [
            Outage(
                "`limactl list` fails",
                lambda: s.fail("list", "failed to connect to the host agent socket"),
                s.clear_faults,
            ),
            self._limactl_gone(),
        ]

    def slow_down_the_make(self) -> None:
        self.standin.configure(create_delay=1.0)  # the new directory has no disk yet

    def slow_down_the_start(self) -> None:
        self.standin.configure(start_delay=1.0)

    def half_made(self, name: str) -> bool:
        # A create under way: the directory is there, its disk (the image's copy) not yet.
        d = self.standin.instance_dir(name)
        return d.is_dir() and not (d / "disk").exists()

    def marked(self, name: str) -> bool:
        return (self.standin.instance_dir(name) / "sand-marker.json").is_file()

    def bases(self) -> dict[str, bool]:
        out: dict[str, bool] = {}
        for name in self.standin.instances():
            if not name.startswith("sand-base-"):
                continue
            try:
                stamp = json.loads((self.standin.instance_dir(name) / "sand-base.json").read_text())
            except (OSError, ValueError):
                stamp = {}
            out[name] = bool(stamp.get("golden"))
        return out


class RemoteLima(LimaStandIn):
    """The stand-in on a remote host: a real sshd on 127.0.0.1 with it on PATH."""

    kind = "lima-remote"

    def __init__(self, workdir: Path, sshd: Sshd) -> None:
        super().__init__(workdir, sshd.standin)
        self.sshd = sshd

    def backend_fields(self) -> dict[str, Any]:
        s = self.sshd
        return {
            "type": "lima",
            "ssh": {
                "host": "127.0.0.1",
                "port": s.port,
                "user": "root",
                "identity": str(s.client_key),
                "known_hosts": str(s.known_hosts),
                "lima_home": str(s.standin.lima_home),
            },
        }

    def _host_down(self) -> Outage:
        def stop() -> None:
            self.sshd.proc.terminate()
            self.sshd.proc.wait(10)

        return Outage("the remote host is down", stop, None)

    def outages(self) -> list[Outage]:
        return [*super().outages(), self._host_down()]
