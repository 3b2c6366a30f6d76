"""Hold a project's lease from a process of its own, until killed:
``python -m tests.contract.hold_lease MANIFEST.json TTL``. Prints ``held`` once it has it.

The contract's expiry rule is about a holder killed with SIGKILL: that takes a process."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from sand.backends.factory import make_backend
from sand.backends.lease import LeaseHolder
from sand.manifest.models import Manifest


async def main(path: Path, ttl: float) -> None:
    manifest = Manifest.model_validate(json.loads(path.read_text()))
    (name,) = manifest.backends
    backend = make_backend(
        name, manifest.backends[name], project=manifest.project, manifest_dir=path.parent
    )
    async with backend.lease(LeaseHolder.here(command="hold_lease"), ttl=ttl):
        print("held", flush=True)
        await asyncio.sleep(3600)


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), float(sys.argv[2])))
