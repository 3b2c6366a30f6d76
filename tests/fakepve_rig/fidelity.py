"""What a real PVE refuses and fakepve 0.5.0 accepts: a layer of rules over FakePve.

A mixin in front of FakePve (never a fork: every rule checks, then hands the request to
fakepve). Each rule names the qemu-server / pve-guest-common / pve-manager function it
follows (read in qemu-server 9.2, pve-manager 9, pve-guest-common 6); the list with
the tests that show sand meeting them is in ``tests/fakepve_rig/README.md``.

``pve_version`` (8 or 9) picks a profile: the version string ``GET /version`` answers,
the privileges that exist (``VM.GuestAgent.*`` on 9 only, ``VM.Monitor`` on 8 only)
and what the guest agent endpoints demand. The config parameters are the same on both:
qemu-server 8.3.10 (PVE 8.4) already took AMD SEV-SNP and the machine's S3/S4 switches.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from aiohttp import web
from fakepve import PveError
from fakepve.qemu import drives_of, is_cdrom, volume_ref

# GET /version per major (what a current 8.4 and 9.0 node answer).
VERSIONS = {8: ("8.4.1", "8.4"), 9: ("9.0.10", "9.0")}
# Privileges one major has and the other has not (PVE::AccessControl's $privgroups):
# PVE 9 split VM.Monitor into VM.GuestAgent.* (and dropped it).
ONLY_ON = {
    8: ("VM.Monitor",),
    9: (
        "VM.GuestAgent.Audit",
        "VM.GuestAgent.FileRead",
        "VM.GuestAgent.FileWrite",
        "VM.GuestAgent.FileSystemMgmt",
        "VM.GuestAgent.Unrestricted",
    ),
}
# What reading the guest agent's network answer takes (PVE::API2::Qemu::Agent's
# permission per command: 'VM.Monitor' on 8, 'VM.GuestAgent.Audit' on 9).
AGENT_AUDIT = {8: "VM.Monitor", 9: "VM.GuestAgent.Audit"}
# The datacenter.cfg keys an unprivileged reader of /cluster/options sees (get_options).
UNPRIVILEGED_OPTIONS = ("console", "tag-style")
USER_ALLOW = ("existing", "list", "none", "free")


def split_tags(text: object) -> list[str]:
    """PVE::Tools::split_list: tags separated by ``;``, ``,`` or spaces."""
    return [t for t in re.split(r"[;,\s]+", str(text or "")) if t]


def unique_tags(text: object) -> str:
    """PVE::GuestHelpers::get_unique_tags with the default tag-style: lower-cased, sorted,
    each once, joined by ``;``."""
    return ";".join(sorted({t.lower() for t in split_tags(text)}))


def bridge_of(net: object) -> str | None:
    """PVE::QemuServer::Network::parse_net's ``bridge``."""
    for part in str(net or "").split(","):
        key, _, value = part.partition("=")
        if key == "bridge":
            return value
    return None


class Fidelity:
    """Mixin of RigPve (before FakePve in the MRO)."""

    pve_version: int = 9
    # datacenter.cfg: {'user-tag-access': {'user-allow': ..., 'user-allow-list': [...]}}
    datacenter: dict[str, Any]
    # (source vmid, new vmid, snapname or None) of each clone asked for, in order.
    clone_sources: list[tuple[int, int, str | None]]

    def set_profile(self, major: int) -> None:
        if major not in VERSIONS:
            raise ValueError(f"PVE {major} is not a profile (8 or 9)")
        self.pve_version = major
        self.version, self.release_version = VERSIONS[major]  # type: ignore[attr-defined]

    def set_user_tag_access(self, allow: str, allow_list: tuple[str, ...] = ()) -> None:
        """datacenter.cfg ``user-tag-access: user-allow=<allow>,user-allow-list=<a;b>``."""
        if allow not in USER_ALLOW:
            raise ValueError(f"user-allow must be one of {', '.join(USER_ALLOW)}")
        self.datacenter["user-tag-access"] = {
            "user-allow": allow,
            "user-allow-list": list(allow_list),
        }

    # --- privileges (P1) -------------------------------------------------------------------

    def grant(self, user: str, path: str, *privs: str) -> None:
        """``pveum role add``/``acl modify`` refuse a privilege this major has not
        (PVE::AccessControl::verify_privname: "invalid privilege '…'")."""
        other = ONLY_ON[17 - self.pve_version]
        unknown = [p for p in privs if p in other]
        if unknown:
            raise ValueError(f"invalid privilege '{unknown[0]}' on PVE {self.pve_version}")
        super().grant(user, path, *privs)  # type: ignore[misc]

    async def _agent(self, request: web.Request) -> web.StreamResponse:
        """PVE::API2::Qemu::Agent: on 8 every command checks VM.Monitor (the PVE 9
        schema fakepve carries asks VM.GuestAgent.*, which 8 has not)."""
        if self.pve_version == 8:
            from fakepve.server import ok, params

            self._vm(request, "VM.Monitor")  # type: ignore[attr-defined]
            match = self.resolve(request, "/api2/json")  # type: ignore[attr-defined]
            values = dict(await params(request))
            values.update(match.params)
            return ok(await self._agent_call(match, values))  # type: ignore[attr-defined]
        return await super()._agent(request)  # type: ignore[misc, no-any-return]

    # --- cluster options (P4) ----------------------------------------------------------------

    def _build_app(self) -> web.Application:
        app: web.Application = super()._build_app()  # type: ignore[misc]

        @web.middleware
        async def options(request: web.Request, handler: Any) -> web.StreamResponse:
            # A middleware, not a route: fakepve's schema check would demand Sys.Audit,
            # where PVE's 'user => all' lets every user in.
            if request.method != "GET" or request.path.rstrip("/") != "/api2/json/cluster/options":
                return await handler(request)  # type: ignore[no-any-return]
            from fakepve.server import USER, error, ok

            user = request.get(USER)
            if not user:
                return await handler(request)  # type: ignore[no-any-return]
            try:
                return ok(self._fid_options(user))  # type: ignore[no-any-return]
            except PveError as e:
                return error(e.status, e.message)  # type: ignore[no-any-return]

        app.middlewares.append(options)
        return app

    def _privileged(self, user: str) -> bool:
        return bool(self.allowed(user, "/", "Sys.Modify"))  # type: ignore[attr-defined]

    def _fid_options(self, user: str) -> dict[str, Any]:
        """pve-manager PVE::API2::Cluster get_options: the whole datacenter.cfg with
        Sys.Audit on /, else console and tag-style only; ``allowed-tags`` for everyone."""
        if self.allowed(user, "/", "Sys.Audit"):  # type: ignore[attr-defined]
            out = json.loads(json.dumps(self.datacenter))
        else:
            out = {k: self.datacenter[k] for k in UNPRIVILEGED_OPTIONS if k in self.datacenter}
        out["allowed-tags"] = sorted(self._allowed_tags(user)[0])
        return out

    def _allowed_tags(self, user: str) -> tuple[set[str], bool]:
        """PVE::GuestHelpers::get_allowed_tags: (tags the user may set, free-form)."""
        access = self.datacenter.get("user-tag-access") or {}
        allow = access.get("user-allow", "free")
        privileged = self._privileged(user)
        tags: set[str] = set()
        if allow != "none" or privileged:
            tags.update(access.get("user-allow-list") or [])
        if allow in ("free", "existing") or privileged:
            for vm in self.vms:  # type: ignore[attr-defined]
                if privileged or self.allowed(user, f"/vms/{vm.vmid}", "VM.Audit"):  # type: ignore[attr-defined]
                    tags.update(split_tags(vm.config.get("tags")))
        return tags, allow == "free"

    def _assert_tags(self, user: str, old: object, new: object) -> None:
        """PVE::GuestHelpers::assert_tag_permissions: a tag added or removed needs
        user-tag-access to allow it, or Sys.Modify on /."""
        if self._privileged(user):
            return
        before, after = split_tags(old), split_tags(new)
        changed = {t for t in set(before) | set(after) if before.count(t) != after.count(t)}
        allowed, free = self._allowed_tags(user)
        for tag in sorted(changed):
            if not free and tag not in allowed:
                raise PveError(
                    403, f"Permission check failed (/, Sys.Modify for modifying tag '{tag}')"
                )

    # --- bridges (P3) ---------------------------------------------------------------------------

    def _check_bridges(self, user: str, config: dict[str, Any]) -> None:
        """PVE::QemuServer::check_bridge_access → PVE::GuestHelpers::check_vnet_access:
        SDN.Use on /sdn/zones/localnetwork/<bridge> for each net*'s bridge (root@pam
        passes)."""
        if user == "root@pam":
            return
        for key in sorted(config):
            if re.fullmatch(r"net\d+", key):
                bridge = bridge_of(config[key])
                if bridge:
                    self.require(user, f"/sdn/zones/localnetwork/{bridge}", "SDN.Use")  # type: ignore[attr-defined]

    # --- clone (P2, P3) ---------------------------------------------------------------------------

    async def _qm_clone(self, v: dict[str, Any], user: str) -> Any:
        """PVE::API2::Qemu clone_vm's load_and_check: check_bridge_access on the source
        config, then "can't clone VM to node '…' (VM uses local storage)" when a
        target node is given and $check_storage_access_clone found a volume on a
        storage that is not shared."""
        node, target = v["node"], v.get("target")
        src = self.find(node, v["vmid"])  # type: ignore[attr-defined]
        snap = v.get("snapname")
        # The request log holds no bodies: what each clone was made from, for tests.
        self.clone_sources.append((int(v["vmid"]), int(v["newid"]), snap))
        conf = src.snapshots.get(snap, src.config) if snap else src.config
        self._check_bridges(user, conf)
        if target and target not in (node, "localhost"):
            for _key, volume, props in drives_of(conf):
                if volume in ("none", "cdrom") or (is_cdrom(volume, props) and ":" not in volume):
                    continue
                sid = volume_ref(volume)[0]
                if sid is not None and not self.storages.get(sid, {}).get("shared"):  # type: ignore[attr-defined]
                    raise PveError(
                        500, f"can't clone VM to node '{target}' (VM uses local storage)"
                    )
        return await super()._qm_clone(v, user)  # type: ignore[misc]

    async def _qm_create(self, v: dict[str, Any], user: str) -> Any:
        """create_vm: check_bridge_access on the new config; tags through
        assert_tag_permissions and get_unique_tags."""
        self._check_bridges(user, v)
        if v.get("tags") is not None:
            self._assert_tags(user, "", v["tags"])
            v = {**v, "tags": unique_tags(v["tags"])}
        return await super()._qm_create(v, user)  # type: ignore[misc]

    # --- config (P3, P4, P5, P8, P9) -------------------------------------------------------------

    def full_digest(self, vm: Any) -> str:
        """PVE::QemuServer::parse_vm_config: the digest is the SHA-1 of the whole config
        file, so the pending section and the snapshots are in it."""
        blob = [vm.config, vm.pending, vm.snapshots]
        return hashlib.sha1(json.dumps(blob, sort_keys=True, default=str).encode()).hexdigest()

    async def _apply_config(self, vm: Any, user: str, p: dict[str, Any]) -> None:
        """PVE::API2::Qemu update_vm_api: the digest (of the whole file) first, then
        check_bridge_access on the new net* values and on the ones replaced or deleted,
        assert_tag_permissions on tags (normalised by get_unique_tags); afterwards
        PVE::AbstractConfig::cleanup_pending drops pending values equal to the current."""
        p = dict(p)
        digest = p.pop("digest", None)
        if digest and digest != self.full_digest(vm):
            raise PveError(500, "checksum mismatch (file change by other user?)")
        deletes = [k for k in str(p.get("delete") or "").split(",") if k]
        self._check_bridges(user, p)
        touched = {
            k: vm.config[k] for k in [*p, *deletes] if re.fullmatch(r"net\d+", k) and k in vm.config
        }
        self._check_bridges(user, touched)
        if "tags" in p:
            self._assert_tags(user, vm.config.get("tags"), p["tags"])
            p["tags"] = unique_tags(p["tags"])
        elif "tags" in deletes:
            self._assert_tags(user, vm.config.get("tags"), "")
        await super()._apply_config(vm, user, p)  # type: ignore[misc]
        for key, value in list(vm.pending.items()):
            if value is not None and str(vm.config.get(key)) == str(value):
                del vm.pending[key]

    async def _config_get(self, request: web.Request) -> web.StreamResponse:
        """vm_config → PVE::AbstractConfig::load_current_config: pending values applied
        (pending deletes dropped) unless ``current=1``; the digest of the whole file."""
        from fakepve.server import ok

        vm = self._vm(request, "VM.Audit")  # type: ignore[attr-defined]
        current = str(request.query.get("current", "0")).lower() in ("1", "true", "yes", "on")
        cfg = dict(vm.config)
        if not current:
            for key, value in vm.pending.items():
                if value is None:
                    cfg.pop(key, None)
                else:
                    cfg[key] = value
        if "memory" in cfg:
            cfg["memory"] = str(cfg["memory"])  # PVE sends it as a string
        cfg["digest"] = self.full_digest(vm)
        return ok(cfg)  # type: ignore[no-any-return]

    async def _pending(self, request: web.Request) -> web.StreamResponse:
        """vm_pending → PVE::GuestHelpers::config_with_pending_array: an item for every
        scalar key of the loaded config, so the ``digest`` parse_vm_config puts there (the
        SHA-1 of the whole file) too: a writer may send it back with its change (P16)."""
        from fakepve.server import ok

        answer = await super()._pending(request)  # type: ignore[misc]
        if not isinstance(answer, web.Response) or answer.status != 200 or not answer.body:
            return answer  # type: ignore[no-any-return]
        vm = self._vm(request, "VM.Audit")  # type: ignore[attr-defined]
        items = json.loads(bytes(answer.body))["data"]  # type: ignore[arg-type]
        items.append({"key": "digest", "value": self.full_digest(vm)})
        return ok(items)  # type: ignore[no-any-return]
