"""``sand doctor`` for a Proxmox backend: is the token able to do its job, and no more?

One ``GET /access/permissions`` gives the token's effective privileges per
path. Every privilege sand uses must be there (on the pool, which PVE projects
onto its VMs and storage, or on the narrower path itself), and nothing may be
granted on ``/`` or ``/vms`` (that reaches VMs outside the pool), but Sys.Audit on ``/``
not propagated (read-only: whether the datacenter's firewall is on, for egress).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sand.backends.doctor import DoctorReport, Finding
from sand.backends.proxmox import locality, refusals
from sand.backends.proxmox.cloudinit_drive import template_problem
from sand.backends.proxmox.context import Ctx
from sand.backends.proxmox.errors import ErrorKind, ProxmoxError
from sand.backends.proxmox.observe import listing
from sand.backends.proxmox.refusals import Permissions, holds
from sand.backends.proxmox.sources import parse_image, read_pubkey
from sand.egress.checkup import proxy_findings

# On the pool (projected onto the VMs sand creates).
VM_PRIVILEGES = (
    "VM.Allocate",
    "VM.Audit",
    "VM.Config.CPU",
    "VM.Config.Cloudinit",
    "VM.Config.Disk",
    "VM.Config.HWType",
    "VM.Config.Memory",
    "VM.Config.Network",
    "VM.Config.Options",
    "VM.PowerMgmt",
)  # and the guest agent's audit privilege, which depends on the PVE major (refusals.py)
STORAGE_PRIVILEGES = ("Datastore.AllocateSpace", "Datastore.Audit")
# Privileges that let a token change who may do what, or the hosts themselves.
DANGEROUS = (
    "Permissions.Modify",
    "User.Modify",
    "Group.Allocate",
    "Realm.Allocate",
    "Realm.AllocateUser",
    "Sys.Modify",
    "Sys.PowerMgmt",
    "Sys.Console",
)
TOO_BROAD_PATHS = ("/", "/vms")
# Allowed on ``/`` alone, not propagated, read-only: is the datacenter's firewall on.
AUDIT = "Sys.Audit"


def check_permissions(
    perms: Permissions,
    *,
    pool: str,
    storage: str,
    bridge: str,
    template: str | None,
    template_in_pool: bool,
    nodes: list[str],
    major: int = refusals.LATEST,
    forks: bool = False,
    egress: bool = False,
) -> list[Finding]:
    """``egress``: a VM of the manifest declares a deny policy (then the one read-only
    grant on ``/`` is asked for)."""
    findings: list[Finding] = []
    pool_path = f"/pool/{pool}"
    missing: list[str] = []
    for priv in (*VM_PRIVILEGES, refusals.agent_privilege(major)):
        if not holds(perms, pool_path, priv):
            missing.append(f"{priv} on {pool_path}")
    if not holds(perms, pool_path, "Pool.Audit"):
        missing.append(f"Pool.Audit on {pool_path}: {refusals.POOL_AUDIT_WHY}")
    if forks and not holds(perms, pool_path, "VM.Snapshot"):
        # A fork is a clone of a snapshot of its source, taken for it and removed after.
        missing.append(f"VM.Snapshot on {pool_path} (a VM of the manifest is a fork)")
    if template is not None:
        tpath = f"/vms/{template}"
        also = (pool_path,) if template_in_pool else ()
        if not holds(perms, tpath, "VM.Clone", also):
            missing.append(f"VM.Clone on {tpath} (the template)")
    spath = f"/storage/{storage}"
    for priv in STORAGE_PRIVILEGES:
        if not holds(perms, spath, priv, (pool_path,)):
            missing.append(f"{priv} on {spath} (or on {pool_path} with the storage a member)")
    bpath = f"/sdn/zones/localnetwork/{bridge}"
    if not holds(perms, bpath, "SDN.Use"):
        missing.append(f"SDN.Use on {bpath}")
    for item in missing:
        findings.append(Finding("error", f"missing privilege {item}"))
    if len(nodes) > 1:
        for node in nodes:
            if not holds(perms, f"/nodes/{node}", "Sys.Audit"):
                findings.append(
                    Finding(
                        "warning",
                        f"no Sys.Audit on /nodes/{node}: placement cannot see its free memory",
                    )
                )
    findings.extend(_datacenter_audit(perms, egress))
    for path in TOO_BROAD_PATHS:
        # Sys.Audit on / is judged by _datacenter_audit (accepted when not propagated).
        granted = sorted(p for p in perms.get(path) or {} if (path, p) != ("/", AUDIT))
        if granted:
            findings.append(
                Finding(
                    "error",
                    f"too broad: the token holds {', '.join(granted)} on {path}, which reaches "
                    f"VMs outside pool {pool!r}; grant sand's role on {pool_path} instead",
                )
            )
    for path, held in sorted(perms.items()):
        if path in TOO_BROAD_PATHS:
            continue
        risky = sorted(p for p in held if p in DANGEROUS)
        if risky:
            findings.append(
                Finding("error", f"too broad: {', '.join(risky)} on {path} is never needed")
            )
    if not missing:
        findings.append(Finding("ok", f"the token holds every privilege sand needs on {pool_path}"))
    return findings


def _datacenter_audit(perms: Permissions, egress: bool) -> list[Finding]:
    """The one grant allowed on ``/``: Sys.Audit, not propagated, read-only (whether the
    datacenter's firewall is on, which egress needs: sand.backends.proxmox.firewall)."""
    root = perms.get("/") or {}
    if AUDIT in root and refusals.propagates(root[AUDIT]):
        return [
            Finding(
                "error",
                "too broad: Sys.Audit on / propagates to every path; grant it with "
                "--propagate 0 (only / is read: whether the datacenter's firewall is on)",
            )
        ]
    if AUDIT in root:
        return [Finding("ok", "Sys.Audit on / (not propagated): reads the datacenter's firewall")]
    if egress:
        return [
            Finding(
                "error",
                "missing privilege Sys.Audit on / (not propagated): a VM declares egress, "
                "which needs the datacenter's firewall on, and only that grant reads it; "
                "fix: pveum role add SandAudit --privs Sys.Audit && pveum acl modify / "
                "--roles SandAudit --tokens '<token id>' --propagate 0",
            )
        ]
    return []


async def doctor(
    ctx: Ctx, *, forks: bool = False, egress: bool = False, proxied: bool = False
) -> DoctorReport:
    """``forks``: a VM of the manifest forks another here (then VM.Snapshot is needed);
    ``proxied``: a VM's egress goes through the backend's egress proxy on this host."""
    findings: list[Finding] = []
    if proxied and ctx.config.egress_proxy is not None:
        # This host's side first: it needs no API, and answers when the API does not.
        proxy = proxy_findings(ctx.project, ctx.name, str(ctx.config.egress_proxy))
        findings.extend(Finding(level, text) for level, text in proxy)

    def done() -> DoctorReport:
        return DoctorReport(ctx.name, tuple(findings), "proxmox")

    try:
        token = ctx.client.token
        findings.append(Finding("ok", f"token file {ctx.client.token_file} ({token.token_id})"))
    except ProxmoxError as e:
        findings.append(Finding("error", e.detail))
        return done()
    try:
        # One attempt: doctor answers "is it reachable now", not after a minute of retries.
        version = await ctx.client.request("GET", "version", retry=False)
    except ProxmoxError as e:
        if e.kind is ErrorKind.UNREACHABLE:  # no usable answer: refused, TLS, timeout
            where = f"https://{ctx.config.host}:{ctx.config.port}"
            findings.append(Finding("error", f"the PVE API at {where} is unreachable: {e.detail}"))
        else:
            findings.append(Finding("error", e.detail))
        return done()
    major = refusals.major_of(version)
    try:
        findings.append(
            Finding("ok", f"API reachable at {ctx.config.host}: PVE {version.get('version')}")
        )
        perms = await ctx.client.get("access/permissions")
        rows = await listing(ctx)
        nodes = await ctx.client.get("nodes")
        options = await ctx.client.get("cluster/options")
    except ProxmoxError as e:
        findings.append(Finding("error", e.detail))
        return done()
    ref, storage = parse_image(f"template:{ctx.config.template}@{ctx.config.storage}", "")
    tmpl = [
        r
        for r in rows
        if (str(r["vmid"]) == ref if ref.isdigit() else r.get("name") == ref) and r.get("template")
    ]
    if not tmpl:
        findings.append(
            Finding("error", f"template {ref!r} not found (or the token lacks VM.Audit on it)")
        )
    findings.extend(
        check_permissions(
            perms or {},
            pool=ctx.config.pool,
            storage=storage,
            bridge=ctx.config.bridge,
            template=str(tmpl[0]["vmid"]) if tmpl else None,
            template_in_pool=bool(tmpl and tmpl[0].get("pool") == ctx.config.pool),
            nodes=ctx.config.placement_nodes,
            major=major,
            forks=forks,
            egress=egress,
        )
    )
    findings.extend(_tag_findings(perms or {}, options or {}, rows))
    if tmpl:
        findings.extend(await _locality_findings(ctx, tmpl[0], storage))
        unattachable = await template_problem(ctx, tmpl[0], perms or {}, storage)
        findings.extend([Finding("error", unattachable)] if unattachable else [])
    online = {str(n.get("node")): n.get("status", "online") for n in nodes or []}
    for node in ctx.config.placement_nodes:
        if node not in online:
            findings.append(Finding("error", f"node {node!r} is not in the cluster"))
        elif online[node] != "online":
            findings.append(Finding("warning", f"node {node!r} is {online[node]}"))
    try:
        read_pubkey(ctx)
    except ProxmoxError as e:
        findings.append(Finding("error", e.detail))
    return done()


def _tag_findings(perms: Permissions, options: Mapping[str, Any], rows: list[Any]) -> list[Finding]:
    seen = {t for r in rows for t in str(r.get("tags") or "").replace(",", ";").split(";") if t}
    problem, note = refusals.tag_access(
        options,
        seen,
        sys_audit="Sys.Audit" in (perms.get("/") or {}),
        sys_modify="Sys.Modify" in (perms.get("/") or {}),
    )
    if problem:
        return [Finding("error", problem)]
    return [Finding("ok", note or "tags: user-tag-access lets the token write sand's tags")]


async def _locality_findings(ctx: Ctx, template: Any, storage: str) -> list[Finding]:
    """A template on local storage clones on its own node only (locality.py)."""
    tnode = str(template.get("node") or "")
    others = [n for n in ctx.config.placement_nodes if n != tnode]
    if not others:
        return []
    try:
        rows = await ctx.client.get("cluster/resources", type="storage") or []
        names = await locality.template_storages(ctx, template)
    except ProxmoxError as e:
        return [Finding("warning", f"cannot tell where the template can be cloned: {e.detail}")]
    storages = {(str(r.get("node")), str(r.get("storage"))): r for r in rows}
    local = locality.not_shared(storages, tnode, [*names, storage])
    if not local:
        return []
    why = locality.local_reason(template, local)
    if tnode in ctx.config.placement_nodes:
        return [
            Finding(
                "warning",
                f"{why}: VMs are cloned on node {tnode} only, never on {', '.join(others)}; "
                "move the template to shared storage to use every node",
            )
        ]
    return [
        Finding(
            "error",
            f"{why}: PVE cannot clone it to {', '.join(others)}; add node {tnode} to the "
            "placement nodes or move the template to shared storage",
        )
    ]
