"""The permissions PVE declares for each API method sand (and the rig) calls.

Each method of PVE's API declares ``permissions => {...}``: ``check => [...]`` (a path
and privileges, ``and``/``or`` of them), or ``user => 'all'`` (any logged-in user; the
method's code checks what it needs, and may leave fields or rows out). pveproxy
evaluates the declaration before the method runs (``PVE::RPCEnvironment``
``check_api2_permissions``: root@pam passes, then ``user => 'all'``, then ``check``).
fakepve 0.5.0 evaluates the declarations of its PVE 9 schema for the methods it answers
from the schema, and checks by hand in the methods it models; here every method sand
calls is enforced from its declaration, read in the sources at each profile's version:

* PVE 8.4: pve-manager 8.4.1, qemu-server 8.3.10, pve-access-control 8.2.2,
  pve-storage 8.3.6;
* PVE 9.0: pve-manager 9.0.10, qemu-server 9.0.21, pve-access-control 9.0.3,
  pve-storage 9.0.13.

They are the same on both but for the guest agent's. ``in_code`` names what the
method's code checks or leaves out, and where the rig does the same. A method sand
calls that has no rule here fails ``tests/backends/proxmox/test_permissions.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from fakepve.server import USER, params

from tests.fakepve_rig.calls import relative, schema_match, template_of

ALL: dict[str, Any] = {"user": "all"}
VM = "/vms/{vmid}"


def perm(path: str, *privs: str, **opts: Any) -> list[Any]:
    """``['perm', path, [privs], opt => value, ...]``."""
    out: list[Any] = ["perm", path, list(privs)]
    for key, value in opts.items():
        out += [key, value]
    return out


def both(*rules: list[Any]) -> list[Any]:
    return ["and", *rules]


def either(*rules: list[Any]) -> list[Any]:
    return ["or", *rules]


def check(rule: list[Any]) -> dict[str, Any]:
    return {"check": rule}


@dataclass(frozen=True)
class Rule:
    source: str  # repository, file, method name
    declared: dict[str, Any]
    in_code: str = ""  # what the code checks or filters, and where the rig does it
    on: dict[int, dict[str, Any]] = field(default_factory=dict)  # a major's own

    def for_major(self, major: int) -> dict[str, Any]:
        return self.on.get(major, self.declared)


QEMU = "qemu-server src/PVE/API2/Qemu.pm"  # PVE/API2/Qemu.pm on 8
MANAGER = "pve-manager PVE/API2"
CONFIG_PRIVS = (
    "VM.Config.Disk",
    "VM.Config.CDROM",
    "VM.Config.CPU",
    "VM.Config.Memory",
    "VM.Config.Network",
    "VM.Config.HWType",
    "VM.Config.Options",
    "VM.Config.Cloudinit",
)  # $vm_config_perm_list
STORAGE_READ = perm("/storage/{storage}", "Datastore.Audit", "Datastore.AllocateSpace", any=1)
TASK_OWNER = (
    "the task's owner, or Sys.Audit on /nodes/<node> (fakepve FakePve._get_task, _task_list)"
)

ONE = "/nodes/{node}/qemu/{vmid}"
# A VM's firewall (egress, docs/egress.md): pve-firewall 5.1.1 (PVE 8.4) and 6.0.x
# (PVE 9) declare the same. Options in src/PVE/API2/Firewall/VM.pm (get_options,
# set_options); rules and ipsets in Rules.pm and IPSet.pm, whose declarations are
# PVE::Firewall::rules_audit_permissions('vm') / rules_modify_permissions('vm').
FIREWALL = "pve-firewall src/PVE/API2/Firewall"
# (method, path below ONE, the method's source, the one privilege it declares on the VM)
VM_METHODS = (
    ("DELETE", "", f"{QEMU} destroy_vm", "VM.Allocate"),
    ("GET", "/config", f"{QEMU} vm_config", "VM.Audit"),
    ("GET", "/pending", f"{QEMU} vm_pending", "VM.Audit"),
    ("GET", "/status/current", f"{QEMU} vm_status", "VM.Audit"),
    ("POST", "/template", f"{QEMU} template", "VM.Allocate"),
    ("GET", "/snapshot", f"{QEMU} snapshot_list", "VM.Audit"),
    ("POST", "/snapshot", f"{QEMU} snapshot", "VM.Snapshot"),
    ("DELETE", "/snapshot/{snapname}", f"{QEMU} delsnapshot", "VM.Snapshot"),
    ("GET", "/firewall/options", f"{FIREWALL}/VM.pm get_options", "VM.Audit"),
    ("GET", "/firewall/log", f"{FIREWALL}/VM.pm log", "VM.Console"),
    ("PUT", "/firewall/options", f"{FIREWALL}/VM.pm set_options", "VM.Config.Network"),
    ("GET", "/firewall/rules", f"{FIREWALL}/Rules.pm get_rules", "VM.Audit"),
    ("POST", "/firewall/rules", f"{FIREWALL}/Rules.pm create_rule", "VM.Config.Network"),
    ("PUT", "/firewall/rules/{pos}", f"{FIREWALL}/Rules.pm update_rule", "VM.Config.Network"),
    ("DELETE", "/firewall/rules/{pos}", f"{FIREWALL}/Rules.pm delete_rule", "VM.Config.Network"),
    ("GET", "/firewall/ipset", f"{FIREWALL}/IPSet.pm ipset_index", "VM.Audit"),
    ("POST", "/firewall/ipset", f"{FIREWALL}/IPSet.pm create_ipset", "VM.Config.Network"),
    ("GET", "/firewall/ipset/{name}", f"{FIREWALL}/IPSet.pm get_ipset", "VM.Audit"),
    ("POST", "/firewall/ipset/{name}", f"{FIREWALL}/IPSet.pm create_ip", "VM.Config.Network"),
    ("DELETE", "/firewall/ipset/{name}", f"{FIREWALL}/IPSet.pm delete_ipset", "VM.Config.Network"),
    (
        "DELETE",
        "/firewall/ipset/{name}/{cidr}",
        f"{FIREWALL}/IPSet.pm remove_ip",
        "VM.Config.Network",
    ),
)

RULES: dict[tuple[str, str], Rule] = {
    **{
        (method, ONE + below): Rule(source, check(perm(VM, priv)))
        for method, below, source, priv in VM_METHODS
    },
    # Whether the datacenter's firewall is on, without which pve-firewall applies no VM
    # rule (PVE::Firewall::update): Sys.Audit on /, which a pool-scoped token lacks.
    ("GET", "/cluster/firewall/options"): Rule(
        f"{FIREWALL}/Cluster.pm get_options", check(perm("/", "Sys.Audit"))
    ),
    ("GET", "/version"): Rule(f"{MANAGER}.pm version", ALL),
    ("GET", "/access/permissions"): Rule(
        "pve-access-control src/PVE/API2/AccessControl.pm permissions",
        ALL,
        "another user's needs Sys.Audit on /access (sand reads its own: not modelled)",
    ),
    ("GET", "/cluster/resources"): Rule(
        f"{MANAGER}/Cluster.pm resources",
        ALL,
        "rows by VM.Audit / Datastore.Audit (fakepve), a VM's pool and pool rows by "
        "Pool.Audit, node usage by Sys.Audit on the node (fields.py)",
    ),
    ("GET", "/cluster/nextid"): Rule(f"{MANAGER}/Cluster.pm nextid", ALL),
    ("GET", "/cluster/options"): Rule(
        f"{MANAGER}/Cluster.pm get_options",
        {"user": "all", "check": perm("/", "Sys.Audit")},
        "user => 'all' wins over the check: all of datacenter.cfg with Sys.Audit on /, "
        "else console, tag-style and allowed-tags (fidelity.py P4)",
    ),
    ("GET", "/nodes"): Rule(
        f"{MANAGER}/Nodes.pm index", ALL, "node usage by Sys.Audit on the node (fields.py)"
    ),
    ("GET", "/nodes/{node}/network"): Rule(
        f"{MANAGER}/Network.pm index",
        ALL,
        "a bridge only with SDN.Audit or SDN.Use on /sdn/zones/localnetwork/<bridge> (fields.py)",
    ),
    ("GET", "/nodes/{node}/tasks"): Rule(f"{MANAGER}/Tasks.pm node_tasks", ALL, TASK_OWNER),
    ("GET", "/nodes/{node}/tasks/{upid}/status"): Rule(
        f"{MANAGER}/Tasks.pm read_task_status", ALL, TASK_OWNER
    ),
    ("GET", "/nodes/{node}/tasks/{upid}/log"): Rule(
        f"{MANAGER}/Tasks.pm read_task_log", ALL, TASK_OWNER
    ),
    ("GET", "/pools"): Rule(
        f"{MANAGER}/Pool.pm index", ALL, "pools by Pool.Audit (fakepve PoolsApi._pool_index)"
    ),
    ("GET", "/pools/{poolid}"): Rule(
        f"{MANAGER}/Pool.pm read_pool", check(perm("/pool/{poolid}", "Pool.Audit"))
    ),
    ("GET", "/nodes/{node}/qemu"): Rule(
        f"{QEMU} vmlist", ALL, "VMs by VM.Audit (fakepve FakePve._qemu_list)"
    ),
    ("POST", "/nodes/{node}/qemu"): Rule(
        f"{QEMU} create_vm",
        ALL,
        "VM.Allocate on /vms/<vmid> or /pool/<pool>, each key's VM.Config.* and "
        "Datastore.AllocateSpace (fakepve QemuApi._qm_create), SDN.Use on bridges and "
        "tag rights (fidelity.py P3, P4)",
    ),
    ("PUT", "/nodes/{node}/qemu/{vmid}/config"): Rule(
        f"{QEMU} update_vm",
        check(perm(VM, *CONFIG_PRIVS, any=1)),
        "each key's own privilege (fakepve FakePve._apply_config), SDN.Use on old and "
        "new bridges, tag rights (fidelity.py P3, P4)",
    ),
    ("PUT", "/nodes/{node}/qemu/{vmid}/resize"): Rule(
        f"{QEMU} resize_vm",
        check(perm(VM, "VM.Config.Disk")),
        "Datastore.AllocateSpace on the disk's storage (pve.py RigPve._rig_resize)",
    ),
    ("POST", "/nodes/{node}/qemu/{vmid}/clone"): Rule(
        f"{QEMU} clone_vm",
        check(
            both(
                perm(VM, "VM.Clone"),
                either(
                    perm("/vms/{newid}", "VM.Allocate"),
                    perm("/pool/{pool}", "VM.Allocate", require_param="pool"),
                ),
            )
        ),
        "Datastore.AllocateSpace on the target storage (fakepve QemuApi._qm_clone), "
        "SDN.Use on the source's bridges (fidelity.py P3)",
    ),
    **{
        ("POST", f"/nodes/{{node}}/qemu/{{vmid}}/status/{action}"): Rule(
            f"{QEMU} vm_{action}",
            check(perm(VM, "VM.PowerMgmt")),
            "with todisk: Datastore.AllocateSpace on statestorage (fidelity.py P10; "
            "VM.Config.Disk not modelled)"
            if action == "suspend"
            else "",
        )
        for action in ("start", "stop", "shutdown", "reboot", "suspend", "resume")
    },
    ("GET", "/nodes/{node}/qemu/{vmid}/agent/network-get-interfaces"): Rule(
        "qemu-server src/PVE/API2/Qemu/Agent.pm register_command network-get-interfaces",
        check(perm(VM, "VM.GuestAgent.Audit", "VM.GuestAgent.Unrestricted", any=1)),
        on={8: check(perm(VM, "VM.Monitor"))},
    ),
    ("GET", "/nodes/{node}/storage/{storage}/status"): Rule(
        "pve-storage src/PVE/API2/Storage/Status.pm read_status", check(STORAGE_READ)
    ),
    ("GET", "/nodes/{node}/storage/{storage}/content"): Rule(
        "pve-storage src/PVE/API2/Storage/Content.pm index", check(STORAGE_READ)
    ),
    ("POST", "/nodes/{node}/storage/{storage}/download-url"): Rule(
        "pve-storage src/PVE/API2/Storage/Status.pm download_url",
        check(
            both(
                perm("/storage/{storage}", "Datastore.AllocateTemplate"),
                either(
                    perm("/", "Sys.Audit", "Sys.Modify"), perm("/nodes/{node}", "Sys.AccessNetwork")
                ),
            )
        ),
    ),
}


def rule_of(method: str, template: str | None) -> Rule | None:
    return RULES.get((method, template)) if template is not None else None


class Declared:
    """Mixin of RigPve: each request to a method of :data:`RULES` passes its declared
    permissions (for the profile's major) before fakepve answers it, as pveproxy's
    rest_handler runs check_api2_permissions before the method."""

    def _build_app(self) -> web.Application:
        app: web.Application = super()._build_app()  # type: ignore[misc]

        @web.middleware
        async def declared(request: web.Request, handler: Any) -> web.StreamResponse:
            await self._check_declared(request)
            return await handler(request)  # type: ignore[no-any-return]

        # Right inside fakepve's login check (which sets the user), before any answer.
        login = app.middlewares.index(self._middleware)  # type: ignore[attr-defined]
        app.middlewares.insert(login + 1, declared)
        return app

    async def _check_declared(self, request: web.Request) -> None:
        rel = relative(request)
        user = request.get(USER)
        if rel is None or user is None:
            return
        template = template_of(request.method, rel)
        rule = rule_of(request.method, template)
        if rule is None:
            return
        perms = rule.for_major(self.pve_version)  # type: ignore[attr-defined]
        if perms.get("user") == "all":  # check_api2_permissions: before any check
            return
        match = schema_match(rel)
        values = dict(await params(request))
        values.update(match.params)
        info = match.methods[request.method].get("parameters") or {}
        self.check_permissions(user, perms, values, info.get("properties", {}))  # type: ignore[attr-defined]
