"""``sand cp [-r] SRC DST``: files between the host and one VM, ``VM:PATH`` on one side."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from sand import activity
from sand.cli.guests import UsageError, say, split_remote
from sand.cli.waits import shown_while_waiting
from sand.guest.sftp import GuestRefused, open_sftp
from sand.terminal import one_line
from sand.verbs.copy import download, upload
from sand.verbs.target import connect, resolve


def run(args: argparse.Namespace) -> int:
    src_vm, src = split_remote(args.src)
    dst_vm, dst = split_remote(args.dst)
    if (src_vm is None) == (dst_vm is None):
        raise UsageError("sand cp copies between the host and one VM: write VM:PATH on one side")
    with shown_while_waiting(src_vm or dst_vm or ""):
        return asyncio.run(_cp(args.manifest, src_vm, src, dst_vm, dst, args.recursive))


async def _cp(
    manifest: str, src_vm: str | None, src: str, dst_vm: str | None, dst: str, recursive: bool
) -> int:

    def report(line: str) -> None:
        print(one_line(line, 4000), file=sys.stderr)  # it names guest files

    vm = src_vm or dst_vm
    assert vm is not None
    try:
        async with (
            resolve(manifest, vm, say) as target,
            connect(target.endpoint) as conn,
            open_sftp(conn) as fs,
        ):
            activity.reached()
            if src_vm is not None:
                summary = await download(fs, src, dst, recursive=recursive, report=report, vm=vm)
                verb = "downloaded"
            else:
                summary = await upload(
                    fs, Path(src), dst, recursive=recursive, report=report, vm=vm
                )
                verb = "uploaded"
    except OSError as exc:
        raise UsageError(f"sand cp: {exc}") from None
    except GuestRefused as exc:
        raise UsageError(f"sand cp: the guest refused: {one_line(exc.reason)}") from None
    print(summary.describe(verb), file=sys.stderr)
    return 0
