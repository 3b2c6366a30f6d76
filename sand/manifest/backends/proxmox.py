"""``type: proxmox``: a Proxmox VE cluster driven through its REST API.

Everything the manifest layer knows about Proxmox lives here: the config block, which
VM names PVE accepts, what an ``image`` means (the template it is cloned from, and
the storage it is cloned onto), the per-VM rules only Proxmox has, and where two
Proxmox backends would collide (one pool on one cluster).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from sand.manifest.backends.proxmox_cpu import DEFAULT_CPU, PveCpuType
from sand.manifest.egress import EgressProxyEndpoint
from sand.manifest.fields import (
    DERIVE_BASES_DESCRIPTION,
    HostName,
    LocalPath,
    PortNumber,
    PveBridge,
    PveNode,
    PvePool,
    PveStorage,
    Strict,
    Template,
)
from sand.manifest.hosts import host as host_key
from sand.manifest.rawdata import Finding, OwnershipScope, as_list, as_str
from sand.manifest.values import template_problem
from sand.manifest.yamlmarks import Path

# PVE stores the VM name as a DNS name (pve-common's "dns-name" format).
_LABEL = re.compile(r"^[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?$")


class ProxmoxConfig(Strict):
    """A Proxmox VE cluster driven through its REST API with a pool-scoped token."""

    TYPE: ClassVar[str] = "proxmox"
    TITLE: ClassVar[str] = "A Proxmox VE cluster."

    type: Literal["proxmox"] = Field(
        description="Proxmox VE, over its REST API.", examples=["proxmox"]
    )
    host: HostName = Field(
        description="The cluster's host name or IP address (no scheme, port or credentials).",
        examples=["pve.example.lan"],
    )
    port: PortNumber = Field(default=8006, description="The API's port.", examples=[443])
    node: PveNode | None = Field(
        default=None,
        description="The one node VMs are made on. Exactly one of node or nodes.",
        examples=["pve1"],
    )
    nodes: list[PveNode] | None = Field(
        default=None,
        min_length=1,
        description="Nodes VMs are spread over (a VM's own `node` pins it). Exactly one of "
        "node or nodes.",
        examples=[["pve1", "pve2"]],
    )
    pool: PvePool = Field(
        description="The pool sand's VMs live in; two backends on one host, port and pool are "
        "refused (each would see the other's VMs as its own).",
        examples=["sand"],
    )
    storage: PveStorage = Field(
        description="The storage VM disks are cloned onto.", examples=["local-lvm"]
    )
    bridge: PveBridge = Field(
        default="vmbr0", description="The bridge VMs' network attaches to.", examples=["vmbr1"]
    )
    template: Template = Field(
        description="Template VM to clone: its vmid (100 to 999999999) or its name.",
        examples=["debian-12-cloud", 9000],
    )
    token_file: LocalPath = Field(
        description="File holding 'user@realm!tokenid=secret'; refused unless mode is 0600 or "
        "stricter.",
        examples=["~/.config/sand/pve.token"],
    )
    verify_tls: bool = Field(
        default=True,
        description="Check the API's TLS certificate (against ca_file when it is set).",
        examples=[False],
    )
    ca_file: LocalPath | None = Field(
        default=None,
        description="The cluster's CA certificate (PVE's own: /etc/pve/pve-root-ca.pem).",
        examples=["~/.config/sand/pve-root-ca.pem"],
    )
    identity: LocalPath = Field(
        description="SSH private key for guests; its .pub goes to cloud-init.",
        examples=["~/.ssh/sand_ed25519"],
    )
    cpu: PveCpuType = Field(
        default=DEFAULT_CPU,
        description="CPU type of every VM of this backend that does not name its own "
        "(PVE's cputype: 'host', 'x86-64-v2-AES', ..., or 'custom-<name>'). Default host: "
        "on PVE's own default, kvm64, Node-based agents were seen to livelock.",
        examples=["x86-64-v2-AES"],
    )
    clone_parallelism: int | None = Field(
        # None: chosen by the storage the clones go to (backends/proxmox/context.py):
        # 10 on local storage, where PVE holds a node's own lock only to allocate, and 2
        # on shared storage, where the cluster-wide lock times out a third clone waiting.
        default=None,
        ge=1,
        le=32,
        description="How many VMs this backend clones at once, 1 to 32. Unset: 10 when "
        "the VMs' storage is local to a node (LVM-thin, ZFS, a directory), 2 when it is "
        "shared (Ceph, NFS, iSCSI); see docs/backends/proxmox.md.",
        examples=[4],
    )
    derive_bases: bool = Field(default=True, description=DERIVE_BASES_DESCRIPTION, examples=[False])
    egress_proxy: EgressProxyEndpoint | None = Field(
        default=None,
        description="Where sand's egress proxy for this backend's guests listens on this "
        "host (ADDRESS:PORT); a VM whose deny egress policy lists domains is refused "
        "without it. docs/egress.md#proxmox.",
        examples=["10.20.0.1:3128"],
    )

    egress_drift: bool = Field(
        default=True,
        description="Whether each plan reads back the PVE firewall of every VM with a deny "
        "egress policy (four requests a VM), to show and undo what a hand changed there. "
        "false: a no-op plan is the listing and one read at any fleet size, and a firewall "
        "opened by hand stays open until the VM's policy changes. docs/egress.md#drift.",
        examples=[False],
    )

    @model_validator(mode="after")
    def _one_placement(self) -> ProxmoxConfig:
        if (self.node is None) == (self.nodes is None):
            raise ValueError("set exactly one of 'node' (one node) or 'nodes' (placement)")
        return self

    @property
    def placement_nodes(self) -> list[str]:
        return [self.node] if self.node else list(self.nodes or [])

    # --- rules the rest of sand asks of a backend type ------------------------------

    @staticmethod
    def name_problem(name: str) -> str | None:
        """Why PVE would refuse ``name`` as a VM name, or None."""
        labels = name.split(".")
        if len(name) > 253 or not all(_LABEL.match(label) for label in labels):
            return (
                f"VM name {name!r} is not valid on Proxmox: use letters, digits and '-' "
                "(a DNS name), not starting or ending with '-'"
            )
        return None

    def derives_base_for(self, disk: int) -> bool:
        """Whether a VM of ``disk`` bytes may be cloned from a base sand derives."""
        return self.derive_bases

    def image_ref(self, vm_image: str | None, default: str | None) -> str:
        """``template:<template>@<storage>``: changing either replaces the VM. A VM's own
        ``image`` names another template; ``defaults.image`` (a Lima image) does not apply."""
        return f"template:{vm_image or self.template}@{self.storage}"

    def cpu_type(self, vm_cpu: str | None) -> str | None:
        """The VM's CPU type: its own ``cpu``, else this backend's (default ``host``)."""
        return vm_cpu or self.cpu

    @staticmethod
    def vm_findings(
        vm: str,
        at: Path,
        entry: dict[str, Any],
        backend: dict[str, Any],
        defaults: dict[str, Any],
        *,
        golden: bool = False,
    ) -> Iterator[Finding]:
        """Per-VM rules that hold only on Proxmox, on the raw YAML data (``golden``: the
        VM is made from an image under ``images``, whose ``from`` names the template)."""
        image = as_str(entry.get("image"))
        if golden:
            pass
        elif image is not None:
            why = template_problem(image)
            if why:
                yield (*at, "image"), f"a Proxmox VM's image names its template: {why}"
        elif defaults.get("image") is not None:
            # A Proxmox VM clones its backend's template; taking a Lima image as the
            # template's name would be a guess, and ignoring it a silent surprise.
            yield (
                ("defaults", "image"),
                f"defaults.image does not apply to Proxmox VM {vm!r}: it clones its "
                f"backend's template ({backend.get('template')!r}); set 'image' on the Lima "
                "VMs instead, or give this VM its own image (a template)",
            )
        if as_list(entry.get("ports")):
            yield (
                (*at, "ports"),
                "ports are forwarded only on Lima; a Proxmox VM has its own address on the "
                "bridge, so reach its ports there",
            )
        node = as_str(entry.get("node"))
        nodes = [backend["node"]] if as_str(backend.get("node")) else as_list(backend.get("nodes"))
        if node is not None and nodes and node not in nodes:
            yield (
                (*at, "node"),
                f"node {node!r} is not one of this backend's nodes: "
                + ", ".join(str(n) for n in nodes),
            )

    @staticmethod
    def ownership_scope(backend: dict[str, Any], manifest_dir: str) -> OwnershipScope | None:
        """Where this backend looks for its VMs: one pool of one cluster."""
        host, pool, port = backend.get("host"), backend.get("pool"), backend.get("port", 8006)
        if not isinstance(host, str) or not isinstance(pool, str):
            return None
        host = host.lower().rstrip(".")
        return (
            ("proxmox", host_key(host), port, pool),
            f"pool {pool!r} on {host}:{port}",
            "give each backend its own pool",
        )
