"""Build (once) and cache the Debian bookworm rootfs every rig guest runs on.

The rootfs is a plain debootstrap tree.  Guests never modify it: netns guests
mount it as the read-only lower layer of an overlayfs, the qemu image is built
from a copy.  A build is keyed by a hash of its recipe (suite, variant,
package list, RECIPE_VERSION), so changing the package list builds a new tree
instead of silently reusing a stale one; the stamp file inside the tree records
the recipe so a human can see what a cached tree is.

CLI (used by .ci/rig-setup.sh)::

    python -m tests.rig.rootfs build      # build if missing, print the path
    python -m tests.rig.rootfs path       # print the path, exit 1 if not built
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tests.rig._util import RigError, cache_dir, file_lock, log, missing_tools, remove_tree, run

SUITE = "bookworm"
VARIANT = "minbase"

# What sand's provisioning expects on a freshly created Debian guest.  systemd
# is included because it is cheap (~10 MB) and real guests have `systemctl`;
# netns guests still start sshd directly, only the qemu VM boots systemd.
PACKAGES: tuple[str, ...] = (
    "openssh-server",
    "sudo",
    "git",
    "direnv",
    "ca-certificates",
    "procps",
    "iproute2",
    "python3",
    "bash",
    "coreutils",
    "curl",
    "systemd",
    # `sand shell` attaches a persistent tmux session (a plain shell without it).
    "tmux",
)

# Bump when _customize() changes so cached trees are rebuilt.
RECIPE_VERSION = 2

STAMP_NAME = ".sand-rig-stamp.json"


@dataclass(frozen=True)
class RootfsRecipe:
    suite: str = SUITE
    variant: str = VARIANT
    packages: tuple[str, ...] = PACKAGES
    recipe_version: int = RECIPE_VERSION
    # Not part of the key: the same recipe from another mirror is the same tree.
    mirror: str = field(default="", compare=False)

    def key(self) -> str:
        ident = {
            "suite": self.suite,
            "variant": self.variant,
            "packages": sorted(self.packages),
            "recipe_version": self.recipe_version,
        }
        return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:12]

    def stamp(self) -> dict[str, object]:
        data = asdict(self)
        data["packages"] = sorted(self.packages)
        data["key"] = self.key()
        return data


def apt_mirror(suite: str = SUITE) -> str:
    """The Debian mirror apt on this machine already uses for `suite`.

    Reads deb822 ``*.sources`` and one-line ``*.list`` files.  We deliberately
    don't fall back to a hard-coded host: CI and dev machines only reach the
    mirror their apt is configured for.
    """
    candidates: list[Path] = []
    main_list = Path("/etc/apt/sources.list")
    if main_list.exists():
        candidates.append(main_list)
    src_dir = Path("/etc/apt/sources.list.d")
    if src_dir.is_dir():
        candidates.extend(sorted(p for p in src_dir.iterdir() if p.suffix in (".list", ".sources")))
    for path in candidates:
        text = path.read_text(errors="replace")
        if path.suffix == ".sources":
            for stanza in re.split(r"\n\s*\n", text):
                fields: dict[str, str] = {}
                for line in stanza.splitlines():
                    if line.startswith("#") or ":" not in line:
                        continue
                    k, _, v = line.partition(":")
                    fields[k.strip().lower()] = v.strip()
                if fields.get("enabled", "yes").lower() == "no":
                    continue
                if "deb" not in fields.get("types", "").split():
                    continue
                if (
                    suite in fields.get("suites", "").split()
                    and "main" in fields.get("components", "").split()
                ):
                    return fields["uris"].split()[0].rstrip("/")
        else:
            for raw in text.splitlines():
                # "deb [opts] URI suite comp..." -- drop comments and [opts].
                parts = re.sub(r"\[[^]]*\]", "", raw.split("#", 1)[0]).split()
                if (
                    len(parts) >= 4
                    and parts[0] == "deb"
                    and parts[2] == suite
                    and "main" in parts[3:]
                ):
                    return parts[1].rstrip("/")
    raise RigError(f"no apt source for Debian {suite} main found in /etc/apt; cannot debootstrap")


def rootfs_path(recipe: RootfsRecipe | None = None) -> Path:
    recipe = recipe or RootfsRecipe()
    return cache_dir() / f"rootfs-{recipe.suite}-{recipe.key()}"


def is_built(path: Path, recipe: RootfsRecipe) -> bool:
    stamp = path / STAMP_NAME
    if not stamp.is_file():
        return False
    try:
        data = json.loads(stamp.read_text())
    except (OSError, ValueError):
        return False
    return bool(data.get("key") == recipe.key() and data.get("packages") == sorted(recipe.packages))


def _customize(root: Path) -> None:
    """One-time tweaks shared by every guest built from this tree."""
    # Host keys must be unique per guest; debootstrap's openssh-server postinst
    # generated some.  Guests write fresh ones at start.
    for key in (root / "etc/ssh").glob("ssh_host_*"):
        key.unlink()
    # The sshd policy the rig promises (see guest.py), as a drop-in so it wins
    # over Debian's defaults (sshd uses the first value it reads for a keyword,
    # and Debian's sshd_config Includes sshd_config.d/*.conf first).
    dropin = root / "etc/ssh/sshd_config.d/00-sand-rig.conf"
    dropin.parent.mkdir(parents=True, exist_ok=True)
    dropin.write_text(
        "# Written by tests/rig/rootfs.py\n"
        "PasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\n"
        "PermitRootLogin prohibit-password\n"
        "PubkeyAuthentication yes\n"
        "MaxAuthTries 6\n"
        # No PAM: there is no logind in netns guests, and without PAM the
        # account only needs a non-locked password field ('*').
        "UsePAM no\n"
        "HostKey /etc/ssh/ssh_host_ed25519_key\n"
        "UseDNS no\n"
    )
    # Guests have no route off the test network; apt inside them can't work,
    # and the lists only bloat every copy.  Keep the sources so the qemu image
    # build can still apt-get install the kernel from a copy of this tree.
    run(["chroot", root, "apt-get", "clean"], check=False)
    (root / "etc/hostname").write_text("sand-rig\n")
    # debootstrap copied the build host's resolver, which guests can't reach
    # (they have no route off the test network); fail DNS fast instead.
    resolv = root / "etc/resolv.conf"
    resolv.unlink(missing_ok=True)
    resolv.write_text("# sand rig guests have no DNS\n")
    # An empty machine-id makes systemd (qemu guest) generate one per boot,
    # so copies don't share an id.
    (root / "etc/machine-id").write_text("")


def build_rootfs(recipe: RootfsRecipe, dest: Path) -> None:
    """debootstrap into a temp dir next to `dest`, then rename atomically."""
    missing = missing_tools(["debootstrap"])
    if missing:
        raise RigError(f"missing tools: {missing} (apt-get install debootstrap)")
    mirror = recipe.mirror or apt_mirror(recipe.suite)
    recipe = RootfsRecipe(
        suite=recipe.suite, variant=recipe.variant, packages=recipe.packages, mirror=mirror
    )
    debs = cache_dir() / "debs"
    debs.mkdir(exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.tmp-", dir=dest.parent))
    try:
        t0 = time.monotonic()
        log(f"debootstrap {recipe.suite} from {mirror} into {tmp} ({len(recipe.packages)} pkgs)")
        run(
            [
                "debootstrap",
                f"--variant={recipe.variant}",
                f"--include={','.join(recipe.packages)}",
                "--components=main",
                # Keeps downloaded .debs so a recipe change rebuilds quickly.
                f"--cache-dir={debs}",
                recipe.suite,
                tmp,
                mirror,
            ],
            timeout=1800,
        )
        _customize(tmp)
        (tmp / STAMP_NAME).write_text(json.dumps(recipe.stamp(), indent=2, sort_keys=True) + "\n")
        os.chmod(tmp, 0o755)
        os.rename(tmp, dest)
        log(f"rootfs built in {time.monotonic() - t0:.0f}s: {dest}")
    except BaseException:
        remove_tree(tmp)
        raise


def ensure_rootfs(recipe: RootfsRecipe | None = None) -> Path:
    """Return the cached rootfs for `recipe`, building it if needed.

    Safe to call from concurrent processes: the first one builds under a lock,
    the others wait and then reuse its tree.
    """
    recipe = recipe or RootfsRecipe()
    dest = rootfs_path(recipe)
    if is_built(dest, recipe):
        return dest
    with file_lock(cache_dir() / "rootfs.lock"):
        if is_built(dest, recipe):
            return dest
        if dest.exists():
            # A tree without a valid stamp is a leftover from an older layout;
            # the rename below needs the name free.
            remove_tree(dest)
        _remove_stale_tmp(dest.parent)
        build_rootfs(recipe, dest)
        _prune_old_trees(dest)
    return dest


def _prune_old_trees(current: Path) -> None:
    """Delete trees of older recipes (~400 MB each) unless a running guest
    still has one as its overlay lower layer."""
    mountinfo = Path("/proc/self/mountinfo").read_text()
    for old in current.parent.glob(f"rootfs-{current.name.split('-')[1]}-*"):
        if old == current or not old.is_dir():
            continue
        if f"lowerdir={old}" in mountinfo:
            continue
        log(f"removing rootfs of an older recipe: {old}")
        remove_tree(old)


def _remove_stale_tmp(parent: Path) -> None:
    # Temp trees of a builder that was killed.  We hold the build lock, so no
    # live builder owns them.
    for p in parent.glob(".rootfs-*.tmp-*"):
        remove_tree(p)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.rig.rootfs")
    parser.add_argument("command", choices=["build", "path"])
    args = parser.parse_args(argv)
    recipe = RootfsRecipe()
    if args.command == "path":
        path = rootfs_path(recipe)
        print(path)
        return 0 if is_built(path, recipe) else 1
    t0 = time.monotonic()
    path = ensure_rootfs(recipe)
    print(path)
    log(f"rootfs ready in {time.monotonic() - t0:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
