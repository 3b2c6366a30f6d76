"""The stand-in agent executables a provision uploads instead of installing the agents
(tests and benches name a host directory of them in $SAND_AGENT_SOURCE)."""

from __future__ import annotations

import tarfile
from collections.abc import Sequence
from io import BytesIO
from pathlib import Path

from sand.provision.checks import ProvisionSpecError

AGENT_SOURCE_ENV = "SAND_AGENT_SOURCE"


def agent_tar(source: Path, agents: Sequence[str]) -> bytes:
    """Stand-in agent executables from the host dir named by SAND_AGENT_SOURCE."""
    buf = BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for agent in agents:
            path = source / agent
            if not path.is_file():
                raise ProvisionSpecError(
                    f"{AGENT_SOURCE_ENV}={source}: there is no {agent} file to upload"
                )
            info = tar.gettarinfo(str(path), arcname=agent)
            info.mtime = 0  # the same files make the same tar: the step's digest holds
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            info.mode = 0o755
            with path.open("rb") as fh:
                tar.addfile(info, fh)
    return buf.getvalue()
