"""Golden bases in the desired state: what a base is made of, and its fingerprint."""

from __future__ import annotations

from dataclasses import dataclass, replace

from sand.desired.digest import digest
from sand.desired.parts import ImageStep


@dataclass(frozen=True)
class MachineContent:
    """What a golden base holds, the same for every VM made from it: the machine-level
    provisioning of one login user (packages, toolchain, agents, the image's steps)."""

    user: str
    packages: tuple[str, ...]
    agents: tuple[str, ...]
    docker: bool
    steps: tuple[ImageStep, ...] = ()

    def as_data(self) -> dict[str, object]:
        return {
            "user": self.user,
            "packages": list(self.packages),
            "agents": list(self.agents),
            "docker": self.docker,
            "steps": [[s.name, s.run, s.timeout] for s in self.steps],
        }


# Bump to rebuild every golden base when what a base is made of changes meaning.
BASE_FORMAT = 1


@dataclass(frozen=True)
class DesiredBase:
    """A golden base on one backend: an image under ``images`` (``declared``), or one sand
    derives for VMs that share their machine-level provisioning. Built once per
    ``fingerprint``; a changed fingerprint is a new base."""

    project: str
    backend: str
    name: str  # the image's name under ``images``, or ``auto-<hash>``
    declared: bool
    source: str  # what the base is made from, as the backend's image reference
    content: MachineContent
    scripts: str = ""  # digest of the bundle scripts a base runs (sand.provision.bundle)
    fingerprint: str = ""

    @property
    def user(self) -> str:
        return self.content.user

    @property
    def docker(self) -> bool:
        return self.content.docker

    def inputs(self) -> dict[str, object]:
        """Everything the base is made of: its fingerprint is a digest of this."""
        return {
            "format": BASE_FORMAT,
            "source": self.source,
            "content": self.content.as_data(),
            "scripts": self.scripts,
        }


def with_base_fingerprint(base: DesiredBase) -> DesiredBase:
    return replace(base, fingerprint=digest(base.inputs()))
