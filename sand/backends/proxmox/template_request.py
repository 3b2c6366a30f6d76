"""What ``sand template build`` is asked to make, checked before any request, and the
privileges making it takes, named one by one when the token lacks them.

The privileges are PVE's own rules for the calls the build makes (qemu-server's create
and template checks, pve-storage's download and volume access), read against the
token's effective permissions (``GET /access/permissions``) the way ``sand doctor``
reads them: on the path, on a propagating parent, or on the pool for its members.
"""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass

from sand.backends.proxmox.context import Ctx
from sand.backends.proxmox.errors import ErrorKind, ProxmoxError
from sand.backends.proxmox.refusals import Permissions, holds
from sand.manifest.values import control_problem, pve_node_problem, pve_storage_problem

# Debian's generic cloud image: cloud-init and the QEMU guest agent's package ready.
DEFAULT_IMAGE_URL = (
    "https://cloud.debian.org/images/cloud/trixie/latest/debian-13-genericcloud-amd64.qcow2"
)
DEFAULT_IMAGE_STORAGE = "local"
# Disk formats PVE imports from an ``import`` volume with ``import-from``.
IMAGE_FORMATS = ("qcow2", "raw", "vmdk")
# download-url's checksum algorithms and the length of their hex digests.
CHECKSUMS = {"md5": 32, "sha1": 40, "sha224": 56, "sha256": 64, "sha384": 96, "sha512": 128}
_FILENAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,200}$")
_DNS_LABEL = re.compile(r"^[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?$")
# What the template VM is made with; sand's clones set their own size and CPU count.
TEMPLATE_CORES = 2
TEMPLATE_MEMORY_MIB = 2048


@dataclass(frozen=True)
class TemplateRequest:
    name: str
    url: str
    filename: str  # the image's name on the image storage
    image_storage: str
    node: str
    checksum: tuple[str, str] | None  # (algorithm, hex digest) download-url verifies

    @property
    def volid(self) -> str:
        return f"{self.image_storage}:import/{self.filename}"


def refuse(ctx: Ctx, message: str) -> ProxmoxError:
    return ProxmoxError(ctx.name, f"template build: {message}", kind=ErrorKind.REFUSED)


def make_request(
    ctx: Ctx,
    *,
    name: str | None = None,
    url: str | None = None,
    checksum: str | None = None,
    image_storage: str | None = None,
    node: str | None = None,
) -> TemplateRequest:
    """The request with its defaults (the backend's template name and first node, Debian's
    cloud image, storage ``local``), or a refusal saying what is wrong."""
    config = ctx.config
    if name is None:
        if isinstance(config.template, int) or str(config.template).isdigit():
            raise refuse(ctx, f"the backend's template is a vmid ({config.template}): give --name")
        name = str(config.template)
    if name.isdigit() or len(name) > 253 or not all(_DNS_LABEL.match(p) for p in name.split(".")):
        raise refuse(ctx, f"{name!r} is not a PVE VM name (letters, digits, '-' and '.')")
    url = url or DEFAULT_IMAGE_URL
    storage = image_storage or DEFAULT_IMAGE_STORAGE
    node = node or config.placement_nodes[0]
    for problem in (pve_storage_problem(storage), pve_node_problem(node)):
        if problem:
            raise refuse(ctx, problem)
    return TemplateRequest(
        name=name,
        url=url,
        filename=_filename(ctx, url),
        image_storage=storage,
        node=node,
        checksum=_checksum(ctx, checksum),
    )


def _filename(ctx: Ctx, url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    if control_problem(url) or any(c.isspace() for c in url):
        raise refuse(ctx, "the image URL holds spaces or control characters")
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise refuse(ctx, f"the image URL must be http(s)://host/...: {url!r}")
    if parts.username or parts.password:
        # PVE keeps the URL in its task log, readable by every user of the node.
        raise refuse(ctx, "the image URL holds credentials; sand never puts them in a URL")
    filename = urllib.parse.unquote(parts.path.rsplit("/", 1)[-1])
    if not _FILENAME.match(filename) or filename.rsplit(".", 1)[-1] not in IMAGE_FORMATS:
        raise refuse(
            ctx,
            f"the image URL must end in a disk image's file name ({', '.join(IMAGE_FORMATS)}): "
            f"{filename!r}",
        )
    return filename


def _checksum(ctx: Ctx, value: str | None) -> tuple[str, str] | None:
    if value is None:
        return None
    algorithm, _, digest = value.partition(":")
    algorithm, digest = algorithm.lower(), digest.lower()
    length = CHECKSUMS.get(algorithm)
    if length is None or len(digest) != length or not re.fullmatch(r"[0-9a-f]+", digest):
        raise refuse(
            ctx,
            "--checksum is ALGORITHM:HEX with one of " + ", ".join(CHECKSUMS) + " (e.g. "
            "sha512:<the image's line in SHA512SUMS>)",
        )
    return algorithm, digest


# --- privileges ------------------------------------------------------------------------


def build_privileges(ctx: Ctx, req: TemplateRequest, cpu: str) -> list[tuple[str, str, str]]:
    """(privilege, path, what for) of everything but the download."""
    pool = f"/pool/{ctx.config.pool}"
    need = [
        ("VM.Allocate", pool, "to create the VM in the pool and make it a template"),
        ("Pool.Audit", pool, "to see the pool's storages and which VMs are in it"),
        ("VM.Config.CPU", pool, "cpu, cores"),
        ("VM.Config.Memory", pool, "memory"),
        ("VM.Config.Disk", pool, "the imported disk, the cloud-init drive, boot"),
        ("VM.Config.HWType", pool, "scsihw, serial0, vga"),
        ("VM.Config.Network", pool, "net0, ipconfig0"),
        ("VM.Config.Options", pool, "name, agent, ostype, description, tags"),
        ("Datastore.AllocateSpace", f"/storage/{ctx.config.storage}", "the VM's disks"),
        (
            "Datastore.Audit or Datastore.AllocateSpace",
            f"/storage/{req.image_storage}",
            "to find and import the image",
        ),
        ("SDN.Use", f"/sdn/zones/localnetwork/{ctx.config.bridge}", "net0 on the bridge"),
    ]
    if cpu.startswith("custom-"):
        need.append(("Sys.Audit", "/nodes", f"the custom CPU model {cpu}"))
    return need


def download_privileges(ctx: Ctx, req: TemplateRequest) -> list[tuple[str, str, str]]:
    why = "to download the image"
    return [
        ("Datastore.AllocateTemplate", f"/storage/{req.image_storage}", why),
        ("Sys.AccessNetwork", f"/nodes/{req.node}", why),
    ]


def missing(
    ctx: Ctx, perms: Permissions, need: list[tuple[str, str, str]], pool_storages: set[str]
) -> list[str]:
    """The privileges of ``need`` the token lacks, as 'PRIV on PATH (what for)'; a need
    written 'A or B' is met by either. The pool's role reaches a storage only when the
    storage is a member of the pool (``pool_storages``)."""
    pool = (f"/pool/{ctx.config.pool}",)
    out: list[str] = []
    for privilege, path, why in need:
        member = path.startswith("/storage/") and path.split("/")[2] in pool_storages
        also = pool if member else ()
        if any(holds(perms, path, p, also) for p in privilege.split(" or ")):
            continue
        # download-url also takes Sys.Audit and Sys.Modify on / instead (far broader).
        if privilege == "Sys.AccessNetwork" and all(
            holds(perms, "/", p) for p in ("Sys.Audit", "Sys.Modify")
        ):
            continue
        out.append(f"{privilege} on {path} ({why})")
    return out


async def pool_storages(ctx: Ctx) -> set[str]:
    """The storages that are members of the backend's pool (one request)."""
    answer = await ctx.client.get("pools", poolid=ctx.config.pool, type="storage") or []
    return {
        str(m.get("storage"))
        for pool in answer
        if isinstance(pool, dict)
        for m in pool.get("members") or []
        if isinstance(m, dict) and m.get("type") == "storage"
    }


def refuse_missing(ctx: Ctx, req: TemplateRequest, lacking: list[str]) -> ProxmoxError:
    return ProxmoxError(
        ctx.name,
        f"template build of {req.name!r} refused, nothing was created: the token lacks "
        + "; ".join(lacking),
        kind=ErrorKind.FORBIDDEN,
    )
