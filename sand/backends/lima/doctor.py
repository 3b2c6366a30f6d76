"""``sand doctor`` for a Lima backend: can sand drive ``limactl`` where this backend says?

Checked, one finding per cause:

* ``limactl`` is there and executable: on PATH (a bare name) or at the configured path,
  on this machine or on the remote host (over the same pinned SSH connection that apply
  uses, so an unknown or changed host key, a refused login or a closed port is reported
  exactly as apply would meet it);
* its version is at least 2.2.0: older listings fail while any instance is being cloned
  or deleted (lima-vm/lima#5236), and sand then leaves that host alone for the run;
* ``LIMA_HOME``, when it exists, is a directory sand can write; a missing one is fine
  (Lima creates it) as long as it can be created: its nearest existing parent is a
  directory sand can write;
* perl runs there, with ``Fcntl``: the project's one-writer lease on a Lima host is an
  flock held by a small perl process (``scripts.LEASE``), so without it no apply can
  change a VM there.

Nothing is changed. Remotely it is one exec of a fixed script (data only as arguments).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, cast

from sand.backends.doctor import DoctorReport, Finding
from sand.backends.lima.context import Ctx
from sand.backends.lima.listing import MIN_VERSION, version_tuple
from sand.backends.lima.runner import HostRunner
from sand.errors import SandError

if TYPE_CHECKING:
    from sand.backends.lima.remote import RemoteRunner

TIMEOUT = 60.0

# $1 = limactl. Prints "home STATE" (LIMA_HOME as the runner sets it: missing, i.e.
# creatable, uncreatable, notdir, readonly or ok), "perl ok|missing|broken", then
# "limactl missing|notexec|found" and, when found, "version_rc N" and "version TEXT".
REMOTE_PROBE = r"""
home=${LIMA_HOME:-$HOME/.lima}
if ! command -v perl >/dev/null 2>&1; then echo "perl missing"
elif perl -MFcntl -e 1 >/dev/null 2>&1; then echo "perl ok"
else echo "perl broken"; fi
if [ ! -e "$home" ]; then
  p=$home
  while [ ! -e "$p" ]; do p=$(dirname -- "$p"); done
  if [ -d "$p" ] && [ -w "$p" ] && [ -x "$p" ]; then echo "home missing"
  else echo "home uncreatable"; fi
elif [ ! -d "$home" ]; then echo "home notdir"
elif [ -w "$home" ] && [ -x "$home" ]; then echo "home ok"
else echo "home readonly"; fi
case $1 in -*) echo "limactl missing"; exit 0 ;; esac
p=$(command -v "$1" 2>/dev/null) || { echo "limactl missing"; exit 0; }
case $p in
  /*) if [ -d "$p" ] || [ ! -x "$p" ]; then echo "limactl notexec"; exit 0; fi ;;
esac
echo "limactl found"
v=$("$1" --tty=false --version 2>&1)
echo "version_rc $?"
printf 'version %s\n' "$v"
"""


async def doctor(ctx: Ctx, runner: HostRunner) -> DoctorReport:
    """``runner``: the host runner itself, not behind the lease fence (a doctor takes no
    lease), so its kind tells a remote host from this machine."""
    limactl = ctx.limactl
    if runner.remote:
        findings = await _remote(cast("RemoteRunner", runner), limactl)
    else:
        findings = await _local(runner, limactl)
    return DoctorReport(ctx.name, tuple(findings), "lima")


# --- this machine -------------------------------------------------------------------------


async def _local(runner: HostRunner, limactl: str) -> list[Finding]:
    findings = _local_lima_home(getattr(runner, "lima_home", None))
    findings.append(await _local_perl(runner))
    problem = _local_executable(limactl)
    if problem is not None:
        return [Finding("error", problem), *findings]
    try:
        res = await runner.run([limactl, "--tty=false", "--version"], timeout=TIMEOUT)
    except SandError as exc:
        return [Finding("error", str(exc)), *findings]
    text = res.stdout.decode(errors="replace").strip()
    if not res.ok:
        detail = res.err_tail(1) or text[-300:]  # its last word is the one that says why
        return [
            Finding(
                "error",
                f"`{limactl} --version` failed on {runner.where} (exit {res.returncode})"
                + (f": {detail}" if detail else ""),
            ),
            *findings,
        ]
    return [_version_finding(text, runner.where), *findings]


def _local_executable(limactl: str) -> str | None:
    """Why ``limactl`` cannot be run here, or None."""
    if "/" not in limactl:
        if shutil.which(limactl) is None:
            return (
                f"{limactl!r} not found on PATH on this machine (is Lima installed? or set "
                "the backend's `limactl:` to its path)"
            )
        return None
    path = Path(limactl)
    if not path.exists():
        return f"limactl {path} (the backend's `limactl:`) does not exist"
    if path.is_dir() or not os.access(path, os.X_OK):
        return f"limactl {path} (the backend's `limactl:`) is not an executable file"
    return None


async def _local_perl(runner: HostRunner) -> Finding:
    if shutil.which("perl") is None:
        return _perl_finding("missing", runner.where)
    try:
        res = await runner.run(["perl", "-MFcntl", "-e", "1"], timeout=TIMEOUT)
    except SandError:
        return _perl_finding("broken", runner.where)
    return _perl_finding("ok" if res.ok else "broken", runner.where)


def _perl_finding(state: str | None, where: str) -> Finding:
    why = (
        "sand holds the project's one-writer lease on a Lima host with a small perl "
        "process (an flock), so no apply can change a VM there without it"
    )
    if state == "ok":
        return Finding("ok", f"perl on {where} (for the project's lease)")
    if state == "missing":
        return Finding("error", f"perl not found on {where}: {why}; install perl")
    return Finding("error", f"perl on {where} cannot load Fcntl: {why}; repair perl")


def _local_lima_home(configured: str | None) -> list[Finding]:
    """LIMA_HOME as limactl will see it: the backend's, else the environment's, else
    Lima's default."""
    home = Path(configured or os.environ.get("LIMA_HOME") or Path.home() / ".lima")
    if not home.exists():
        blocker = _cannot_create(home)
        if blocker:
            return [
                Finding(
                    "error",
                    f"LIMA_HOME {home} does not exist and cannot be created: {blocker}",
                )
            ]
        return [Finding("ok", f"LIMA_HOME {home} does not exist yet (Lima creates it)")]
    if not home.is_dir():
        return [Finding("error", f"LIMA_HOME {home} is not a directory")]
    if not os.access(home, os.W_OK | os.X_OK):
        return [
            Finding(
                "error",
                f"LIMA_HOME {home} is not writable (uid {os.geteuid()}): limactl cannot "
                "create or change instances there",
            )
        ]
    return [Finding("ok", f"LIMA_HOME {home} is a writable directory")]


def _cannot_create(path: Path) -> str | None:
    """Why ``mkdir -p path`` would fail here (its nearest existing parent), or None."""
    parent = path.absolute().parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        return f"{parent} is not a directory"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"{parent} is not writable (uid {os.geteuid()})"
    return None


# --- a remote host ------------------------------------------------------------------------


async def _remote(runner: RemoteRunner, limactl: str) -> list[Finding]:
    where = runner.where
    try:
        res = await runner.run(
            ["sh", "-c", REMOTE_PROBE, "sand-doctor", limactl], env={"LC_ALL": "C"}, timeout=TIMEOUT
        )
    except SandError as exc:
        # Connect, authentication and host-key failures, worded by the runner.
        return [Finding("error", str(exc))]
    if not res.ok:
        return [Finding("error", f"the probe script failed on {where} (exit {res.returncode})")]
    facts: dict[str, str] = {}
    for line in res.stdout.decode(errors="replace").splitlines():
        key, _, value = line.partition(" ")
        facts.setdefault(key, value)
    findings = [Finding("ok", f"SSH to the remote Lima host {where} (host key pinned)")]
    home = runner.target.lima_home
    state = facts.get("home")
    if state == "notdir":
        findings.append(Finding("error", f"LIMA_HOME {home} on {where} is not a directory"))
    elif state == "readonly":
        findings.append(Finding("error", f"LIMA_HOME {home} on {where} is not writable"))
    elif state == "uncreatable":
        findings.append(
            Finding(
                "error",
                f"LIMA_HOME {home} on {where} does not exist and cannot be created (its "
                "nearest existing parent is not a writable directory)",
            )
        )
    findings.append(_perl_finding(facts.get("perl"), where))
    found = facts.get("limactl")
    if found == "missing":
        findings.append(
            Finding(
                "error",
                f"{limactl!r} not found on {where} (on the PATH of a non-interactive SSH "
                "session; set the backend's `limactl:` to its path there)",
            )
        )
    elif found == "notexec":
        findings.append(Finding("error", f"limactl {limactl} on {where} is not executable"))
    elif facts.get("version_rc") != "0":
        findings.append(
            Finding(
                "error",
                f"`{limactl} --version` failed on {where} (exit {facts.get('version_rc')}): "
                f"{facts.get('version', '')}".rstrip(": "),
            )
        )
    else:
        findings.append(_version_finding(facts.get("version", ""), where))
    return findings


def _version_finding(text: str, where: str) -> Finding:
    v = version_tuple(text)
    if not v:
        return Finding("warning", f"cannot read limactl's version on {where} from {text!r}")
    shown = ".".join(map(str, v))
    if v < MIN_VERSION:
        return Finding(
            "warning",
            f"limactl {shown} on {where} is older than 2.2.0: its listing fails while any "
            "instance is being cloned or deleted (lima-vm/lima#5236), so sand must leave "
            "that host alone for the run; upgrade Lima",
        )
    return Finding("ok", f"limactl {shown} on {where}")
