"""The fenced ```sand block at the end of a PVE VM's description: sand's full marker
(read only on a deep, per-VM read), a golden base's or a template's own block, and the
operator's text around it, which every write keeps (see sand.backends.proxmox.marker
for the tags, and what each kind of block holds).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from sand.backends.proxmox.marker import GOLDEN_KIND, TEMPLATE_KIND
from sand.desired import DesiredVM
from sand.manifest.egress import ALLOW, DENY
from sand.observed import Marker

_BLOCK = re.compile(r"\n*```sand[ \t]*\r?\n(.*?)\r?\n```[ \t]*\n*", re.DOTALL)


def render_golden_block(
    project: str,
    backend: str,
    vmid: int,
    image: str,
    fingerprint: str,
    source: str,
    state: str,
    op: str,
) -> str:
    """The description block of a golden base (``state``: ``building`` or ``ready``;
    ``op``: the journal entry that built it, its incarnation)."""
    data: dict[str, object] = {
        "op": op,
        "tool": "sand",
        "kind": GOLDEN_KIND,
        "project": project,
        "backend": backend,
        "vmid": vmid,
        "image": image,
        "fingerprint": fingerprint,
        "source": source,
        "state": state,
    }
    return _fenced(data)


def parse_golden_block(text: object) -> dict[str, Any] | None:
    return _block_of_kind(text, GOLDEN_KIND)


def parse_block(text: object) -> dict[str, Any] | None:
    """The JSON object in the description's last ```sand block, or None."""
    if not text:
        return None
    blocks = _BLOCK.findall(str(text))
    if not blocks:
        return None
    try:
        data = json.loads(blocks[-1])
    except ValueError:
        return None
    if not isinstance(data, dict) or data.get("tool", "sand") != "sand":
        return None
    return data


def parse_description(text: object) -> Marker | None:
    """The marker in the description's last ```sand block, or None."""
    data = parse_block(text)
    if data is None or data.get("kind") in (TEMPLATE_KIND, GOLDEN_KIND):
        return None
    try:
        return Marker(
            project=str(data["project"]),
            name=str(data["name"]),
            identity=str(data["vmid"]),
            fingerprint=str(data.get("fingerprint") or ""),
            guest_fingerprint=str(data.get("guest_fingerprint") or ""),
            image=str(data.get("image") or ""),
            backend=str(data.get("backend") or ""),
            incarnation=str(data.get("op") or ""),
            created_at=created_at_of(data),
            base=str(data.get("base") or ""),
            pool=str(data.get("pool") or ""),
        )
    except KeyError:
        return None


def created_at_of(block: Any) -> int:
    """The block's ``created_at`` (0 when absent or not a plain positive integer)."""
    value = block.get("created_at") if isinstance(block, dict) else None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return 0
    return value


def operator_text(text: object) -> str:
    """The description without sand's block: what an operator wrote."""
    return _BLOCK.sub("\n\n", str(text or "")).strip()


def render_block(marker: Marker, **extra: object) -> str:
    """The fenced block; ``extra`` adds keys such as ``protect`` (protection was set by
    sand, not by an operator). The marker's incarnation is written as ``op`` (the
    journal entry that cloned the VM) and its backend as ``backend``."""
    data: dict[str, object] = {
        "tool": "sand",
        "project": marker.project,
        "name": marker.name,
        "vmid": int(marker.identity),
        "fingerprint": marker.fingerprint,
        "guest_fingerprint": marker.guest_fingerprint,
        "image": marker.image,
    }
    if marker.backend:
        data["backend"] = marker.backend
    if marker.incarnation:
        data["op"] = marker.incarnation
    if marker.created_at:
        data["created_at"] = marker.created_at
    if marker.base:
        data["base"] = marker.base
    if marker.pool:
        data["pool"] = marker.pool
    data.update((k, v) for k, v in extra.items() if v is not None)
    return _fenced(data)


def merge_description(current: object, marker: Marker, **extra: object) -> str:
    """The description with sand's block replaced, operator text kept first."""
    text = operator_text(current)
    block = render_block(marker, **extra)
    return f"{text}\n\n{block}" if text else block


def render_template_block(name: str, vmid: int, source: str) -> str:
    """The block of a template sand built: its name, its own vmid (a copy an operator
    makes names another) and the image it was imported from."""
    data: dict[str, object] = {
        "tool": "sand",
        "kind": TEMPLATE_KIND,
        "template": name,
        "vmid": vmid,
        "source": source,
    }
    return _fenced(data)


def parse_template_block(text: object) -> dict[str, Any] | None:
    """The block of a template sand built, or None (none, or a VM's marker)."""
    return _block_of_kind(text, TEMPLATE_KIND)


def _block_of_kind(text: object, kind: str) -> dict[str, Any] | None:
    data = parse_block(text)
    return data if data is not None and data.get("kind") == kind else None


def _fenced(data: dict[str, object]) -> str:
    return "```sand\n" + json.dumps(data, sort_keys=True) + "\n```"


def enforced_egress(block: Mapping[str, Any], want: DesiredVM | None) -> str | None:
    """The policy the VM's firewall was last written with (its marker's); a VM that
    records none has no firewall of sand's: open (``allow``), which a deny policy changes."""
    recorded = block.get("egress")
    if isinstance(recorded, str):
        return recorded
    return ALLOW if want is not None and want.egress and want.egress.policy == DENY else None
