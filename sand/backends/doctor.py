"""What ``sand doctor`` finds on a backend: one report, whatever the backend type."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class Finding:
    severity: str  # "error" | "warning" | "ok"
    message: str

    def __str__(self) -> str:
        return f"{self.severity}: {self.message}"


@dataclass(frozen=True)
class DoctorReport:
    """Every check's finding. Iterating yields the problems only (errors and warnings,
    as text), which is what ``sand doctor`` prints; an empty iteration means healthy."""

    backend: str
    findings: tuple[Finding, ...]
    kind: str  # the backend's type, as each line names it: "lima", "proxmox"

    def __iter__(self) -> Iterator[str]:
        return iter([str(f) for f in self.findings if f.severity != "ok"])

    def __len__(self) -> int:
        return sum(1 for f in self.findings if f.severity != "ok")

    @property
    def ok(self) -> bool:
        return not any(f.severity == "error" for f in self.findings)

    @property
    def problems(self) -> list[str]:
        return [f.message for f in self.findings if f.severity != "ok"]

    def lines(self) -> list[str]:
        return [f"{self.kind} {self.backend}: {f}" for f in self.findings]
