"""What a new VM is made from: the template (and its storage), the node it is placed
on, and the key pair it is reached with. Shared by the create path, the golden bases,
preflight and the doctor."""

from __future__ import annotations

from pathlib import Path

from sand.backends.proxmox.context import Ctx
from sand.backends.proxmox.errors import ProxmoxError
from sand.backends.proxmox.observe import Row
from sand.desired import DesiredVM


def parse_image(image: str, default_storage: str) -> tuple[str, str]:
    """``template:<vmid-or-name>@<storage>`` as (template, storage)."""
    ref = image[len("template:") :] if image.startswith("template:") else image
    if "@" in ref:
        ref, _, storage = ref.rpartition("@")
        return ref, storage or default_storage
    return ref, default_storage


def find_template(ctx: Ctx, rows: list[Row], ref: str, node: str) -> Row:
    if ref.isdigit():
        found = [r for r in rows if str(r["vmid"]) == ref]
        if found and not found[0].get("template"):
            raise ProxmoxError(ctx.name, f"VM {ref} is not a template; sand clones templates only")
    else:
        found = [r for r in rows if r.get("name") == ref and r.get("template")]
    if not found:
        raise ProxmoxError(
            ctx.name,
            f"template {ref!r} not found on the cluster (or the token lacks VM.Audit on it)",
        )
    # A copy on the target node first, then any whose node is up (status "unknown":
    # its node is offline, and a clone runs where its source lives).
    found.sort(key=lambda r: (r.get("status") == "unknown", r.get("node") != node, int(r["vmid"])))
    if found[0].get("status") == "unknown":
        raise ProxmoxError(
            ctx.name,
            f"template {ref!r} is on node {found[0].get('node')}, which is offline",
            transient=True,
        )
    return found[0]


async def pick_node(ctx: Ctx, vm: DesiredVM | None) -> str:
    """vm.node, the only placement node, or the online one with most free memory."""
    candidates = [vm.node] if vm is not None and vm.node else ctx.config.placement_nodes
    if len(candidates) == 1:
        return candidates[0]
    free: dict[str, int] = {}
    for row in await ctx.client.get("nodes") or []:
        name = str(row.get("node"))
        if name in candidates and row.get("status", "online") == "online":
            free[name] = (
                int(row.get("maxmem") or 0) - int(row.get("mem") or 0) - ctx.reserved.get(name, 0)
            )
    if not free:
        raise ProxmoxError(
            ctx.name, f"none of the placement nodes ({', '.join(candidates)}) is online"
        )
    return max(sorted(free), key=lambda n: free[n])


def read_pubkey_path(ctx: Ctx) -> Path:
    return ctx.identity.with_name(ctx.identity.name + ".pub")


def identity_problem(ctx: Ctx) -> str | None:
    """The key pair a new VM is reached with: cloud-init installs the public half, sand
    logs in with the private one. Checked before anything is made (or a lease taken)."""
    for path, what in ((ctx.identity, "private key"), (read_pubkey_path(ctx), "public key")):
        if not path.is_file():
            return f"identity: the {what} {path} does not exist"
    return None


def read_pubkey(ctx: Ctx) -> str:
    pub = read_pubkey_path(ctx)
    try:
        key = pub.read_text(encoding="utf-8").strip()
    except OSError:
        raise ProxmoxError(
            ctx.name, f"public key {pub} of identity {ctx.identity} not found (cloud-init needs it)"
        ) from None
    if not key.startswith(("ssh-", "ecdsa-", "sk-")):
        raise ProxmoxError(ctx.name, f"{pub} does not look like an OpenSSH public key")
    return key


def template_row(rows: list[Row], ref: str) -> Row | None:
    """The listing row a template reference (a vmid, or a template's name) names; of
    several, a readable one first, then the lowest vmid."""
    if ref.isdigit():
        found = [r for r in rows if str(r.get("vmid")) == ref]
    else:
        found = [r for r in rows if r.get("name") == ref and r.get("template")]
    found.sort(key=lambda r: (r.get("status") == "unknown", int(r.get("vmid") or 0)))
    return found[0] if found else None
