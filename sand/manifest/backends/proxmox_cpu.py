"""The CPU type of a Proxmox guest (PVE's ``cpu`` option, its ``cputype``).

PVE refuses a built-in type it does not define ("Built-in cputype ... is not
defined") only when the config is written, which for sand is mid-apply, after the
clone. So the names qemu-server defines are checked here, at validate time, with
a located error; a cluster's own models are written ``custom-<name>`` and only
their spelling can be checked before PVE sees them.

The default is ``host``: on ``kvm64`` (qemu-server's default when ``cpu`` is unset)
Node-based agents such as Claude Code were seen to livelock at 100% CPU.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import Field

from sand.manifest.fields import rule

DEFAULT_CPU = "host"

# qemu-server's built-in CPU models (PVE::QemuServer::CPUConfig, PVE 8/9): the vendor
# models, the generic ones, and the x86-64 micro-architecture levels.
BUILTIN_CPU_TYPES = frozenset(
    {
        # generic (the host's vendor)
        "host", "max", "kvm32", "kvm64", "qemu32", "qemu64",
        "x86-64-v2", "x86-64-v2-AES", "x86-64-v3", "x86-64-v4",
        # Intel
        "486", "pentium", "pentium2", "pentium3", "coreduo", "core2duo",
        "Conroe", "Penryn", "Nehalem", "Nehalem-IBRS", "Westmere", "Westmere-IBRS",
        "SandyBridge", "SandyBridge-IBRS", "IvyBridge", "IvyBridge-IBRS",
        "Haswell", "Haswell-IBRS", "Haswell-noTSX", "Haswell-noTSX-IBRS",
        "Broadwell", "Broadwell-IBRS", "Broadwell-noTSX", "Broadwell-noTSX-IBRS",
        "Skylake-Client", "Skylake-Client-IBRS", "Skylake-Client-noTSX-IBRS",
        "Skylake-Client-v4", "Skylake-Server", "Skylake-Server-IBRS",
        "Skylake-Server-noTSX-IBRS", "Skylake-Server-v4", "Skylake-Server-v5",
        "Cascadelake-Server", "Cascadelake-Server-v2", "Cascadelake-Server-noTSX",
        "Cascadelake-Server-v4", "Cascadelake-Server-v5", "Cooperlake", "Cooperlake-v2",
        "KnightsMill", "Icelake-Client", "Icelake-Client-noTSX", "Icelake-Server",
        "Icelake-Server-noTSX", "Icelake-Server-v3", "Icelake-Server-v4",
        "Icelake-Server-v5", "Icelake-Server-v6", "SapphireRapids", "SapphireRapids-v2",
        "GraniteRapids",
        # AMD
        "athlon", "phenom", "Opteron_G1", "Opteron_G2", "Opteron_G3", "Opteron_G4",
        "Opteron_G5", "EPYC", "EPYC-IBPB", "EPYC-v3", "EPYC-v4", "EPYC-Rome",
        "EPYC-Rome-v2", "EPYC-Rome-v3", "EPYC-Rome-v4", "EPYC-Milan", "EPYC-Milan-v2",
        "EPYC-Genoa",
    }
)  # fmt: skip
# A custom model's section id (PVE's pve-configid: a letter, then word characters, '-').
_CUSTOM = re.compile(r"^custom-[A-Za-z][A-Za-z0-9_-]{0,63}$")
_BY_FOLDED = {name.lower(): name for name in BUILTIN_CPU_TYPES}


def cpu_type_problem(value: str) -> str | None:
    """Why PVE would refuse ``value`` as a VM's CPU type, or None."""
    if value in BUILTIN_CPU_TYPES or _CUSTOM.match(value):
        return None
    if "," in value or "=" in value:
        return (
            f"{value!r}: name only the CPU type (e.g. 'host' or 'x86-64-v2-AES'); "
            "sand does not manage CPU flags"
        )
    if value.startswith("custom-"):
        return (
            f"{value!r} is not a valid custom CPU model name: 'custom-' then a letter, "
            "then letters, digits, '_' or '-'"
        )
    known = _BY_FOLDED.get(value.lower())
    if known is not None:
        return f"{value!r} is not a PVE CPU type; PVE's names are case-sensitive: {known!r}"
    return (
        f"{value!r} is not a CPU type PVE defines (e.g. 'host', 'x86-64-v2-AES', 'kvm64', "
        "'EPYC-Rome'); a cluster's own model is written 'custom-<name>'"
    )


PveCpuType = Annotated[
    str,
    rule(cpu_type_problem),
    # PVE's names exactly (case matters: 'HOST' is refused), or a custom model's.
    Field(
        json_schema_extra={
            "anyOf": [
                {"type": "string", "enum": sorted(BUILTIN_CPU_TYPES)},
                {"type": "string", "pattern": _CUSTOM.pattern},
            ]
        }
    ),
]
