"""The real Lima, for tests and for people: who runs it, with which environment.

``limactl`` refuses to run as root (``cmd/limactl/main.go``) and the suite runs as
root, so the rig runs Lima as an unprivileged user of its own, with the Lima prefix
:mod:`tests.rig.limabuild` made first on PATH and a LIMA_HOME in that user's home.

CLI (run as root)::

    python -m tests.rig.lima env         # `export` lines: PATH, LIMA_HOME, HOME, the user,
                                         # QEMU_SYSTEM_X86_64, the bootable image's directory
    python -m tests.rig.lima run -- CMD  # CMD as that user, with that environment

e.g. ``python -m tests.rig.lima run -- limactl --version`` or
``python -m tests.rig.lima run -- sand validate /tmp/sand.yaml``: ``sand`` is on that
user's PATH, this checkout's code run with the system Python and sand's dependencies.
"""

from __future__ import annotations

import argparse
import os
import pwd
import shlex
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.rig import limabuild, limaimage, limapy
from tests.rig._util import RigError, file_lock, run

USER = "sand-lima"
HOME = Path("/var/lib/sand-lima")
# Lima's qemu driver looks for the binary through this variable before PATH.
QEMU_ENV = "QEMU_SYSTEM_X86_64"
# Lima picks KVM whenever /dev/kvm exists (pkg/driver/qemu: Accel), with `-cpu host`;
# where the device exists but cannot be used (this rig's machines), qemu must run
# TCG instead, with a CPU model TCG supports. The wrapper rewrites just that.
_TCG_WRAPPER = r"""#!/bin/sh
# sand rig: run Lima's qemu with TCG (see tests/rig/lima.py).
for a do
  shift
  case $a in
    q35,accel=kvm) set -- "$@" "q35,vmport=off,accel=tcg" ;;
    host) set -- "$@" "max" ;;
    *) set -- "$@" "$a" ;;
  esac
done
exec qemu-system-x86_64 "$@"
"""


@dataclass(frozen=True)
class LimaRig:
    prefix: Path
    user: str
    uid: int
    gid: int
    home: Path

    @property
    def limactl(self) -> Path:
        return self.prefix / "bin" / "limactl"

    @property
    def lima_home(self) -> Path:
        return self.home / ".lima"

    @property
    def qemu(self) -> Path:
        return self.prefix.parent / "qemu-tcg"

    def env(self) -> dict[str, str]:
        path = os.pathsep.join([str(self.prefix / "bin"), "/usr/local/bin", "/usr/bin", "/bin"])
        return {
            QEMU_ENV: str(self.qemu),
            "PATH": path,
            "HOME": str(self.home),
            "USER": self.user,
            "LOGNAME": self.user,
            "LIMA_HOME": str(self.lima_home),
            "LANG": "C.UTF-8",
        }

    def argv(self, command: Sequence[str], extra: Mapping[str, str] | None = None) -> list[str]:
        """``command`` as the rig's user (setpriv: no setuid helper, no PAM), with the
        rig's environment plus ``extra``."""
        env = {**self.env(), **(extra or {})}
        return [
            "setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--init-groups",
            "--reset-env", "--", "env", *(f"{k}={v}" for k, v in env.items()),
            *command,
        ]  # fmt: skip

    def run(
        self,
        command: Sequence[str],
        *,
        cwd: Path | None = None,
        timeout: float = 300,
        extra: Mapping[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.argv(command, extra),
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=cwd or self.home,
            check=False,
        )


def ensure_user() -> pwd.struct_passwd:
    """The unprivileged user Lima runs as (made once; needs root)."""
    try:
        return pwd.getpwnam(USER)
    except KeyError:
        pass
    if os.geteuid() != 0:
        raise RigError(f"the user {USER!r} does not exist, and making it needs root")
    with file_lock(HOME.parent / ".sand-lima-user.lock"):
        try:
            return pwd.getpwnam(USER)
        except KeyError:
            run(["useradd", "--system", "--create-home", "--home-dir", HOME,
                 "--shell", "/bin/sh", USER])  # fmt: skip
    return pwd.getpwnam(USER)


def rig(*, build: bool = False) -> LimaRig:
    """The rig with Lima built (``build``: build it if missing, else RigError)."""
    prefix = limabuild.build() if build else limabuild.built()
    if prefix is None:
        raise RigError(
            f"Lima {limabuild.VERSION} is not built: run `bash scripts/bootstrap` "
            "(or python -m tests.rig.limabuild build)"
        )
    entry = ensure_user()
    home = Path(entry.pw_dir)
    wrapper = prefix.parent / "qemu-tcg"
    if not wrapper.is_file() or wrapper.read_text() != _TCG_WRAPPER:
        if os.geteuid() != 0:
            raise RigError(f"{wrapper} is missing or stale, and writing it needs root")
        wrapper.write_text(_TCG_WRAPPER)
        wrapper.chmod(0o755)
    return LimaRig(prefix=prefix, user=USER, uid=entry.pw_uid, gid=entry.pw_gid, home=home)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.rig.lima")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("env", help="print export lines for the real Lima")
    run_parser = sub.add_parser("run", help="run a command as the rig's user")
    run_parser.add_argument("argv", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    try:
        lima = rig()
    except RigError as exc:
        print(exc, file=sys.stderr)
        return 1
    try:
        for_sand = limapy.sand_for_user()
    except (RigError, subprocess.CalledProcessError) as exc:
        print(f"sand for the Lima user: {exc}", file=sys.stderr)
        return 1
    # `sand` on the user's PATH, as a person types it (the tier's own runs pass theirs).
    path = f"{for_sand['PATH_PREFIX']}{os.pathsep}{lima.env()['PATH']}"
    with_sand = {"PATH": path, "PYTHONPATH": for_sand["PYTHONPATH"]}
    if args.command == "env":
        extra = {"SAND_LIMA_USER": lima.user, **with_sand}
        image = limaimage.built()
        if image is not None:  # a Debian 12 image Lima boots (tests/rig/limaimage.py)
            extra["SAND_LIMA_IMAGE_DIR"] = str(image)
        for key, value in {**lima.env(), **extra}.items():
            print(f"export {key}={shlex.quote(value)}")
        return 0
    command = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    if not command:
        parser.error("run: give a command after --")
    return subprocess.run(lima.argv(command, with_sand), check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
