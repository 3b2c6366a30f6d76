"""Helpers around the ``limactl`` stand-in (the contract is in ``standin.py``).

Typical use in a test::

    s = StandIn.create(tmp_path)          # bin/limactl shim + an empty LIMA_HOME
    monkeypatch.setenv("PATH", s.path)    # the stand-in first on PATH
    monkeypatch.setenv("LIMA_HOME", str(s.lima_home))
    s.fail("start", "did not receive an event with the \\"running\\" status", name="vm1")
    ...
    assert s.commands() == ["list"]

``StandIn.create(root)`` writes ``root/bin/limactl``: a two-line shim that runs the
stand-in with *this* interpreter (so PyYAML is importable even from an SSH session with
a bare PATH). The log and config live under ``<LIMA_HOME>/_standin/`` by default, which
Lima never lists (names starting with ``_`` are reserved), so a remote stand-in reached
over SSH finds them without environment variables.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import yaml

STANDIN_DIR = Path(__file__).resolve().parent
SCRIPT = STANDIN_DIR / "limactl"

GLOBAL_VALUE_FLAGS = ("--log-level", "--log-format")


class GuestLike(Protocol):
    """What the rig's NetnsGuest / QemuGuest expose."""

    @property
    def address(self) -> str: ...
    @property
    def port(self) -> int: ...
    @property
    def user(self) -> str: ...
    @property
    def client_key_path(self) -> Path: ...


@dataclass(frozen=True)
class Invocation:
    time: float
    argv: tuple[str, ...]
    lima_home: str | None
    pid: int
    cwd: str
    tty: bool | None
    qemu_env: dict[str, str] | None = None  # the QEMU_SYSTEM_* variables it ran with

    @property
    def command(self) -> str:
        """The subcommand (first word that is not a flag or a global flag's value)."""
        skip = False
        for word in self.argv:
            if skip:
                skip = False
                continue
            if word in GLOBAL_VALUE_FLAGS:
                skip = True
                continue
            if not word.startswith("-"):
                return word
        return ""

    @property
    def tty_false(self) -> bool:
        return "--tty=false" in self.argv or "-y" in self.argv or "--yes" in self.argv


def log_messages(stderr: str) -> list[str]:
    """The ``msg=...`` of each logrus line on stderr, unquoted (``\"`` → ``"``)."""
    out = []
    for line in stderr.splitlines():
        _, sep, rest = line.partition(" msg=")
        if sep:
            try:
                out.append(str(json.loads(rest)))
            except json.JSONDecodeError:
                out.append(rest)
        else:
            out.append(line)
    return out


def write_shim(bin_dir: Path, python: str = sys.executable) -> Path:
    """``bin_dir/limactl``: this interpreter without ``site`` (half the start-up time),
    with only PyYAML's directory added to the path."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    shim = bin_dir / "limactl"
    yaml_dir = str(Path(yaml.__file__).resolve().parent.parent)
    shim.write_text(
        f"#!{python} -S\nimport sys\nsys.path.append({yaml_dir!r})\nimport runpy\n"
        f"runpy.run_path({str(SCRIPT)!r}, run_name='__main__')\n",
        encoding="utf-8",
    )
    shim.chmod(0o755)
    return shim


# A QEMU for the stand-in to run (``"qemu": true``): it writes its ``-pidfile`` and lives
# until it is sent SIGTERM, so its /proc/PID/cmdline is what Lima's QEMU would show.
FAKE_QEMU = """
import os, signal, sys
args = sys.argv[1:]
path = args[args.index("-pidfile") + 1]
with open(path + ".tmp", "w") as fh:
    fh.write(f"{os.getpid()}\\n")
os.replace(path + ".tmp", path)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
while True:
    signal.pause()
"""


class StandIn:
    """One stand-in installation: a bin dir with ``limactl`` and a LIMA_HOME."""

    def __init__(self, root: Path, lima_home: Path | None = None) -> None:
        self.root = root
        self.bin_dir = root / "bin"
        self.lima_home = lima_home or root / "lima"
        self.executable = self.bin_dir / "limactl"

    @classmethod
    def create(cls, root: Path, lima_home: Path | None = None) -> StandIn:
        s = cls(root, lima_home)
        write_shim(s.bin_dir)
        (s.lima_home / "_standin").mkdir(parents=True, exist_ok=True)
        return s

    # -- environment ---------------------------------------------------------------

    @property
    def path(self) -> str:
        """PATH with the stand-in first."""
        return f"{self.bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"

    def run_qemu(self) -> Path:
        """Make each start run a QEMU (``bin/qemu-system-x86_64``, a fake that only holds
        its command line): the stand-in then has a ``qemu.pid`` per running instance."""
        qemu = self.bin_dir / "qemu-system-x86_64"
        qemu.write_text(f"#!{sys.executable} -S\n{FAKE_QEMU}", encoding="utf-8")
        qemu.chmod(0o755)
        self.configure(qemu=True)
        return qemu

    def stop_qemus(self) -> None:
        """Every fake QEMU still running (a test's teardown)."""
        for pid_file in self.lima_home.glob("*/qemu.pid"):
            with contextlib.suppress(OSError, ValueError):
                os.kill(int(pid_file.read_text().strip()), 15)

    def env(self) -> dict[str, str]:
        return {**os.environ, "PATH": self.path, "LIMA_HOME": str(self.lima_home)}

    # -- configuration and fault injection ------------------------------------------

    @property
    def config_path(self) -> Path:
        return self.lima_home / "_standin" / "config.json"

    @property
    def log_path(self) -> Path:
        return self.lima_home / "_standin" / "invocations.jsonl"

    def config(self) -> dict[str, Any]:
        try:
            data = json.loads(self.config_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        return data if isinstance(data, dict) else {}

    def configure(self, **changes: Any) -> None:
        """Merge top-level keys into the config (a value of None removes the key)."""
        cfg = self.config()
        for key, value in changes.items():
            if value is None:
                cfg.pop(key, None)
            else:
                cfg[key] = value
        self.config_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.config_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(cfg, indent=2), encoding="utf-8")
        os.replace(tmp, self.config_path)

    def fail(self, command: str, message: str, *, name: str | None = None) -> None:
        """Make ``command`` fail with ``message`` (for every instance, or only ``name``)."""
        faults = dict(self.config().get("fail") or {})
        if name is None:
            faults[command] = message
        else:
            current = faults.get(command)
            per = dict(current) if isinstance(current, dict) else {}
            per[name] = message
            faults[command] = per
        self.configure(fail=faults)

    def clear_faults(self) -> None:
        self.configure(fail=None)

    def back_with_guest(self, name: str, guest: GuestLike | None = None, **fields: Any) -> None:
        """Point instance ``name``'s sshLocalPort/ssh.config at a real sshd."""
        guests = dict(self.config().get("guests") or {})
        entry: dict[str, Any] = {}
        if guest is not None:
            entry = {
                "address": guest.address,
                "port": guest.port,
                "user": guest.user,
                "identity": str(guest.client_key_path),
            }
        entry.update(fields)
        guests[name] = entry
        self.configure(guests=guests)
        bound = self.instance_dir(name) / "standin-guest.json"
        if bound.parent.is_dir() and "*" not in name:
            bound.write_text(json.dumps(entry), encoding="utf-8")  # re-point a made instance

    # -- the invocation log ---------------------------------------------------------

    def invocations(self) -> list[Invocation]:
        try:
            lines = self.log_path.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return []
        out = []
        for line in lines:
            rec = json.loads(line)
            out.append(
                Invocation(
                    time=rec["time"],
                    argv=tuple(rec["argv"]),
                    lima_home=rec.get("lima_home"),
                    pid=rec["pid"],
                    cwd=rec["cwd"],
                    tty=rec.get("tty"),
                    qemu_env=rec.get("qemu_env"),
                )
            )
        return out

    def commands(self) -> list[str]:
        return [i.command for i in self.invocations()]

    def clear_log(self) -> None:
        self.log_path.unlink(missing_ok=True)

    # -- acting like a person with a shell -------------------------------------------

    def run(
        self, *args: str, check: bool = True, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run the stand-in directly (e.g. a human cloning or editing an instance)."""
        proc = subprocess.run(
            [str(self.executable), "--tty=false", *args],
            env=self.env(),
            input=input,
            capture_output=True,
            text=True,
            timeout=60,
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"limactl {' '.join(args)} failed: {proc.stderr}")
        return proc

    def list_json(self, *names: str) -> list[dict[str, Any]]:
        proc = self.run("list", "--json", *names)
        return [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]

    def instance_dir(self, name: str) -> Path:
        return self.lima_home / name

    def instances(self) -> list[str]:
        if not self.lima_home.exists():
            return []
        return sorted(
            p.name
            for p in self.lima_home.iterdir()
            if p.is_dir() and not p.name.startswith(("_", "."))
        )

    def read_yaml(self, name: str) -> dict[str, Any]:
        data = yaml.safe_load((self.instance_dir(name) / "lima.yaml").read_text())
        assert isinstance(data, dict)
        return data

    def write_yaml(self, name: str, doc: dict[str, Any]) -> None:
        (self.instance_dir(name) / "lima.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))

    def make_instance(
        self, name: str, doc: dict[str, Any] | None = None, *, files: Iterable[str] = ()
    ) -> Path:
        """Plant an instance as if a person had created it with limactl."""
        self.run("create", f"--name={name}", "-", input=yaml.safe_dump(doc or {}))
        d = self.instance_dir(name)
        for f in files:
            (d / f).write_text("")
        return d
