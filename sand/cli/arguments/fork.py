"""``sand fork``'s flags."""

from __future__ import annotations

from sand.cli.flags import Number, Subcommands, manifest_option, vm_argument

MAX_FORKS = 64  # --count is bounded here, as the parser reads it


def add(sub: Subcommands) -> None:
    p = sub.add_parser(
        "fork",
        help="print the manifest entries of N forks of a VM (writes nothing)",
        usage="sand fork [-f FILE] [--count N] [--prefix P] [--memory] [--apply "
        "[--auto-approve]] VM",
        description="Print N entries `- name: P<i>` / `from: {vm: VM}` to add under "
        "`vms:`; each is created, at the next apply, from VM as it is then (its repos on a "
        "branch fork/<name>), and then lives its own life. Nothing is written: "
        "`sand fork VM --count 3 >> sand.yaml` appends them when `vms:` is the file's "
        "last section. Only the entries go to stdout (with --apply too); everything else "
        "is said on stderr.",
        epilog="examples:\n  sand fork agent-1 --count 3 >> sand.yaml\n"
        "  sand fork agent-1 --prefix try- --apply >> sand.yaml",
    )
    manifest_option(p)
    p.add_argument(
        "--count",
        type=Number(1, MAX_FORKS, whole=True),
        default=1,
        metavar="N",
        help=f"how many forks, 1-{MAX_FORKS}",
    )
    p.add_argument(
        "--prefix",
        metavar="P",
        help="their names: P1, P2, ... skipping names the manifest uses (default: VM-fork-)",
    )
    p.add_argument(
        "--memory",
        action="store_true",
        help="Proxmox: fork the source's memory too (snapshot: memory)",
    )
    p.add_argument(
        "--apply",
        action="store_true",
        help="also create them now (an apply targeted at them, with the entries added to "
        "the manifest in memory only): add the printed entries to the file afterwards, or "
        "the next apply plans them as VMs to delete",
    )
    p.add_argument("--auto-approve", action="store_true", help="with --apply: apply without asking")
    vm_argument(p, "the VM to fork")
