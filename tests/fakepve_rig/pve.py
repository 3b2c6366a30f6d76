"""FakePve with what sand's tests need on top of fakepve 0.5.0.

* ``PUT /nodes/{node}/qemu/{vmid}/resize`` changes the disk's ``size=`` (fakepve
  answers it generically and stores nothing): grow only, as PVE.
* ``task_secs``: PVE seconds a task type takes (a clone holds ``lock: clone``
  meanwhile), to test polling, timeouts and concurrency.
* ``task_warnings``: make a task end ``WARNINGS: n`` with ``WARN:`` log lines.
* ``task_failures``: make the next task(s) of a type end ``TASK ERROR: <message>``
  before doing anything (a failed clone is cleaned up, as PVE does).
* ``fast_forward()``: every timed wait under way (a 30-second clone a killed sand
  left running) ends now, so a test waits for the moment it is about, not the rest.
* the fidelity layer: what a real PVE refuses (:mod:`tests.fakepve_rig.fidelity`).
* the forms PVE stores and answers with (:mod:`tests.fakepve_rig.forms`): typed values,
  drives printed again, cloud-init drives and MACs made, ``maxdisk`` of the boot disk.
* hibernation as qemu-server does it (:mod:`tests.fakepve_rig.hibernation`).
* a request log with query strings, answer status and the token id that sent it,
  outermost middleware, so a dropped connection is logged too.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from fakepve import FakePve, PveError, TaskError
from fakepve.lxc import format_size
from fakepve.qemu import is_cdrom, join_drive, split_drive

from tests.fakepve_rig.fidelity import Fidelity
from tests.fakepve_rig.fields import Fields
from tests.fakepve_rig.forms import StoredForms
from tests.fakepve_rig.hibernation import Hibernation
from tests.fakepve_rig.machines import Machines
from tests.fakepve_rig.paths import Paths
from tests.fakepve_rig.permissions import Declared

API = "/api2/json"
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


@dataclass(frozen=True)
class Request:
    method: str
    path: str  # without /api2/json
    query: dict[str, str] = field(default_factory=dict)
    status: int = 0  # 0: the connection was dropped
    at: float = 0.0  # when the answer was sent (time.time())
    took: float = 0.0  # seconds from arrival to answer (a hung request shows here)
    token: str = ""  # the API token's id (user@realm!name) that sent it, never its secret

    def __str__(self) -> str:
        q = "&".join(f"{k}={v}" for k, v in self.query.items())
        return f"{self.method} {self.path}{'?' + q if q else ''} -> {self.status}"


def _token_id(header: str) -> str:
    """``PVEAPIToken=user@realm!name=secret`` → ``user@realm!name``."""
    scheme, _, value = header.partition("=")
    if scheme.strip() != "PVEAPIToken":
        return ""
    return value.rpartition("=")[0]


def _bytes(text: str) -> int:
    text = text.strip()
    unit = text[-1] if text and text[-1] in "KMGT" else ""
    return int(float(text[: len(text) - len(unit)] or 0) * _UNITS[unit])


class RigPve(Machines, Paths, Declared, Fields, Hibernation, Fidelity, StoredForms, FakePve):  # type: ignore[misc]
    """FakePve behind the fidelity layer (:mod:`tests.fakepve_rig.fidelity`), with real
    machines behind its VMs when given a hypervisor (:mod:`tests.fakepve_rig.machines`)."""

    def __init__(self, *args: Any, pve_version: int = 9, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.datacenter: dict[str, Any] = {}
        self.clone_sources: list[tuple[int, int, str | None]] = []
        self.set_profile(pve_version)
        self.log: list[Request] = []
        self.task_secs: dict[str, float] = {}
        self.task_warnings: dict[tuple[str, str], list[str]] = {}
        self.task_failures: dict[tuple[str, str], list[str]] = {}
        self._background: set[asyncio.Future[None]] = set()
        # VMs ``GET /cluster/resources`` leaves out (a stale or cut-short cluster view);
        # each node's own list (``GET /nodes/{node}/qemu``) still shows them.
        self.hidden_from_listing: set[int] = set()
        self._forward: asyncio.Event | None = None  # made on the server's loop
        # Requests held unanswered (hold_writes): (method, path suffix, field, value).
        self.holds: list[tuple[str, str, str, str]] = []
        # Real seconds added before answering (delay_requests): (method, path suffix).
        self.delays: dict[tuple[str, str], float] = {}
        # Real seconds an answer, made at once, takes to arrive (delay_answers).
        self.answer_delays: dict[tuple[str, str], float] = {}
        self._dropped: asyncio.Event | None = None

    # --- time -----------------------------------------------------------------------

    async def pause(self, secs: float) -> None:
        """fakepve's pause (PVE seconds times ``time_scale``), cut short by fast_forward."""
        if not (secs and self.time_scale):
            return
        if self._forward is None:
            self._forward = asyncio.Event()
        forward = self._forward
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(forward.wait(), secs * self.time_scale)

    def fast_forward(self) -> None:
        """End every pause under way now (on the server's loop); later ones run as set."""
        if self._forward is not None:
            self._forward.set()
        self._forward = None

    # --- held requests ----------------------------------------------------------

    def hold_writes(self, method: str, suffix: str, field: str, value: str) -> None:
        """From now on, a ``method`` request to a path ending in ``suffix`` whose form
        sets ``field`` to ``value`` is held unanswered and never carried out, until
        :meth:`drop_held` (then it fails as a dropped connection): a test kills sand
        while the call it is about to make cannot land."""
        self.holds.append((method, suffix, field, value))

    def drop_held(self) -> None:
        self.holds.clear()
        if self._dropped is not None:
            self._dropped.set()
        self._dropped = None

    def delay_requests(self, method: str, suffix: str, secs: float) -> None:
        """Answer each ``method`` request to a path ending in ``suffix`` ``secs`` real
        seconds late (whatever the time scale): a test makes such calls overlap."""
        self.delays[(method, suffix)] = secs

    def delay_answers(self, method: str, suffix: str, secs: float) -> None:
        """Answer each ``method`` request to a path ending in ``suffix`` at once, but let
        the answer arrive ``secs`` real seconds later (a busy network, a loaded client):
        what it says may no longer hold when it is read."""
        self.answer_delays[(method, suffix)] = secs

    async def _delayed(self, request: web.Request) -> None:
        for (method, suffix), secs in self.delays.items():
            if request.method == method and request.path.endswith(suffix):
                await asyncio.sleep(secs)
                return

    async def _held(self, request: web.Request) -> bool:
        if not any(request.method == m and request.path.endswith(s) for m, s, _, _ in self.holds):
            return False
        form = await request.post()  # read and kept by aiohttp: fakepve reads it again
        if not any(
            request.method == m and request.path.endswith(s) and form.get(f) == v
            for m, s, f, v in self.holds
        ):
            return False
        if self._dropped is None:
            self._dropped = asyncio.Event()
        await self._dropped.wait()
        return True

    # --- request log -------------------------------------------------------------

    def _build_app(self) -> web.Application:
        app: web.Application = super()._build_app()

        @web.middleware
        async def record(request: web.Request, handler: Any) -> web.StreamResponse:
            path = request.path[len(API) :] if request.path.startswith(API) else request.path
            query = dict(request.query)
            start = time.time()
            token = _token_id(request.headers.get("Authorization", ""))

            def done(status: int) -> None:
                now = time.time()
                self.log.append(
                    Request(request.method, path, query, status, now, now - start, token)
                )

            await self._delayed(request)
            if await self._held(request):
                done(0)
                request.transport.close()  # type: ignore[union-attr]
                raise ConnectionResetError("fakepve rig: a held request was dropped")
            try:
                response: web.StreamResponse = await handler(request)
            except BaseException:
                done(0)
                raise
            done(response.status)
            for (method, suffix), secs in self.answer_delays.items():
                if request.method == method and request.path.endswith(suffix):
                    await asyncio.sleep(secs)
            if path == "/cluster/resources" and self.hidden_from_listing:
                response = self._without_hidden(response)
            return response

        app.middlewares.insert(0, record)
        return app

    def _without_hidden(self, response: web.StreamResponse) -> web.StreamResponse:
        if not isinstance(response, web.Response) or response.status != 200 or not response.body:
            return response
        body = json.loads(bytes(response.body))  # type: ignore[arg-type]
        body["data"] = [
            r for r in body.get("data") or [] if r.get("vmid") not in self.hidden_from_listing
        ]
        return web.json_response(body)

    # --- tasks ---------------------------------------------------------------------

    async def task(
        self,
        node: str,
        ttype: str,
        tid: Any,
        user: str,
        body: Any,
        vm: Any = None,
        lock: bool = True,
        log: Any = (),
    ) -> str:
        secs = self.task_secs.get(ttype, 0)
        warn = self.task_warnings.pop((ttype, str(tid)), None) or self.task_warnings.get(
            (ttype, "*")
        )
        failures = self.task_failures.get((ttype, str(tid))) or self.task_failures.get((ttype, "*"))
        failure = failures.pop(0) if failures else None
        inner = body

        async def timed() -> Any:
            await self.pause(secs)
            if failure is not None:
                if ttype == "qmclone" and vm in self.vms:
                    self.vms.remove(vm)  # PVE removes what a failed clone made
                raise TaskError(failure)
            note = await inner()
            if warn:
                raise TaskError(f"WARNINGS: {len(warn)}")
            return note

        upid: str = await super().task(node, ttype, tid, user, timed, vm=vm, lock=lock, log=log)
        if warn:
            record = self.tasks[upid]

            async def fix_log() -> None:
                while record["status"] != "stopped":
                    await asyncio.sleep(0.002)
                if str(record.get("exitstatus", "")).startswith("WARNINGS"):
                    del record["log"][-2:]
                    record["log"].extend(f"WARN: {line}" for line in warn)
                    record["log"].append(f"TASK WARNINGS: {len(warn)}")

            if record["status"] == "stopped":
                await fix_log()
            else:
                self._background.add(asyncio.ensure_future(fix_log()))
        return upid

    # --- disk resize -----------------------------------------------------------------

    def _routes_sandrig(self) -> list[tuple[str, str, Any]]:
        return [("PUT", "/nodes/{node}/qemu/{vmid}/resize", self._rig_resize)]

    async def _rig_resize(self, v: dict[str, Any], user: str) -> str:
        vm = self.find(v["node"], v["vmid"])
        self.need_quorum()
        self._check_lock(vm)
        key = str(v["disk"])
        value = vm.config.get(key)
        if value is None:
            raise PveError(500, f"disk '{key}' does not exist")
        volume, props = split_drive(value)
        if is_cdrom(volume, props):
            raise PveError(500, "you can't resize a cdrom")
        storage = volume.partition(":")[0]
        # PVE::API2::Qemu resize_vm checks it in its code (its declaration: VM.Config.Disk).
        self.require(user, f"/storage/{storage}", "Datastore.AllocateSpace")
        current = _bytes(str(props.get("size", "0")))
        text = str(v["size"])
        new = current + _bytes(text[1:]) if text.startswith("+") else _bytes(text)
        if new < current:
            raise PveError(500, "shrinking disks is not supported")

        async def body() -> None:
            props["size"] = format_size(new)
            vm.config[key] = join_drive(volume, props)
            sid, _, name = volume.partition(":")
            vol = self.storages.get(sid, {}).get("volumes", {}).get(name)
            if vol is not None:
                vol["size"] = new

        result: str = await self.task(vm.node, "resize", vm.vmid, user, body, vm=vm)
        return result
