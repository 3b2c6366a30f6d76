"""A stand-in for ``limactl`` (Lima v2.2): same subcommands, flags, output and exit codes
for the part of Lima sand drives, with instances kept as plain directories and no VMs.

Contract (what the real tool does, and where this was read in lima-vm/lima at 183a60d7):

Global flags (``cmd/limactl/main.go``): ``--tty[=BOOL]`` (default: stdout is a terminal;
the last one given wins), ``-y/--yes`` (alias of ``--tty=false``; combining both is an
error), ``--debug``, ``--log-level``, ``--log-format``; ``--version`` prints ``limactl
version X``. Errors are logged logrus-style on stderr (``level=fatal msg="..."``, the
message quoted with ``\"`` escapes) with exit status 1; warnings and infos go to stderr
as ``level=warning|info``. Nothing but command output goes to stdout. Set
``LIMACTL_STANDIN_REFUSE_ROOT=1`` to get Lima's "must not run as the root user".

``LIMA_HOME`` (``pkg/limatype/dirnames``): ``$LIMA_HOME`` or ``~/.lima``; names starting
with ``_`` or ``.`` are not instances (``pkg/store/store.go``); instance names are
containerd identifiers, at most 76 characters, not ending in ``.yml``/``.yaml``.
``<LIMA_HOME>/_config/{user,user.pub,default.yaml,override.yaml}``; an instance dir holds
``lima.yaml``, ``lima-version``, ``protected`` (``limactl protect``), ``ssh.config``
(written on start, ``pkg/hostagent/hostagent.go``: ``Host lima-<name>``, ``IdentityFile``,
``StrictHostKeyChecking no``, ``UserKnownHostsFile /dev/null``, ``User``, ``Hostname``,
``Port``), ``ha.stdout.log``/``ha.stderr.log``, and ``ha.pid`` while running (the host
agent writes it as it starts, so its mtime is when the instance was last started; stop
removes it). Running state lives in ``standin.pid`` (a ``.pid`` file, so ``clone`` skips
it as it skips Lima's pid files).

``list [--json|--format json|yaml|table] [-q] [NAME...]`` (``cmd/limactl/list.go``,
``pkg/store/instance.go``, ``pkg/limatype/lima_instance.go``): JSON Lines, one compact
object per instance, sorted by name, with Lima's field names (``name hostname status dir
vmType arch cpus memory disk sshLocalPort sshConfigFile hostAgentPID driverPID errors
config sshAddress protected limaVersion param`` and the deprecated ``HostOS HostArch
LimaHome IdentityFile``), empty maps removed as Lima's yq pass does. ``config`` is the
instance's lima.yaml with defaults filled the way ``pkg/limayaml/defaults.go`` does for
the keys sand checks (mounts merged d→y→o, portForwards o→y→d with hostIP/guestIP/proto
defaults, ssh.*, containerd, plain mode stripping mounts and non-static forwards). No
instances: a warning and exit 0. An unknown NAME: a warning and exit 1. A directory
without ``lima.yaml`` (mid-clone/mid-delete) is listed as ``Broken`` with an error, as
since v2.2.0; with ``version`` configured below 2.2.0 the whole listing fails with exit 1
and no output instead (lima-vm/lima#5236).

``create [--name N] [flags] FILE.yaml|-|template:NAME`` (``cmd/limactl/start.go``): ``-``
reads the template from stdin and needs ``--name``; an existing name fails ("instance
... already exists"). ``base:`` templates are embedded before the edit flags apply
(``pkg/limatmpl/embed.go``): the base's keys fill what is missing and its lists are
*appended* (prepended for ``provision``/``probes``), so ``template:debian-12`` brings
``template:_images/debian-12`` and ``template:_default/mounts`` (the host home, read-only)
even into a file that says ``mounts: []``, exactly as ``templates/debian-12.yaml`` does;
``template:default`` is the same with the Ubuntu image. ``start NAME`` starts a Stopped
instance (already Running: info, exit 0). ``stop [-f] NAME...`` (not Running without -f:
"expected status ... got ...").
``delete|rm|remove [-f] NAME...`` (``pkg/instance/delete.go``): refuses protected
instances even with -f, refuses a non-Stopped one without -f, refuses a directory without
lima.yaml (v2.2), ignores missing names with a warning. ``clone [--start] [edit flags] OLD
NEW`` (``pkg/instance/clone.go``): OLD must exist and not be Running, NEW must not exist;
copies every file except ``protected``, ``swtpm`` and ``*.pid|*.sock|*.tmp``; lima.yaml
(hence ``param``) is copied. ``rename [--start] [edit flags] OLD NEW`` shares that code
but moves the files and removes OLD's directory (``protected`` is not carried over).
``create --list-templates`` prints the template store's names, one per line, without the
hidden ``_default/``/``_images/`` ones; ``template:NAME`` must name one of them (else
"template ... not found"). ``edit [--start] [edit flags] NAME`` (``cmd/limactl/edit.go``):
refuses a Running instance; refuses shrinking the disk (``ValidateAgainstLatestConfig``).
``protect|unprotect NAME...``. Edit flags (``cmd/limactl/editflags``): ``--cpus``,
``--memory``/``--disk`` (GiB), ``--set EXPR`` (repeatable, joined with ``|``), ``--param
k=v``, ``--mount-none``, ``--ssh-port``; create adds ``--plain``, ``--containerd``,
``--port-forward``. ``--set`` accepts the yq subset sand emits: ``.path.to["key"] = <JSON>``
terms joined by ``|``; anything else fails like a yq parse error. ``param`` keys must
match ``^[a-zA-Z][a-zA-Z0-9_]*$`` and be referenced by a provision/probe/portForward
(``validateParamIsUsed``). With ``--tty`` true, commands that would prompt (create
without ``-``, clone/edit without ``--start``) fail instead of hanging.

Stand-in only (not Lima), in ``$LIMACTL_STANDIN_CONFIG`` or
``<LIMA_HOME>/_standin/config.json`` (JSON, re-read on every call)::

    {"version": "2.2.0",                  # what --version and lima-version say
     "fail": {"list": "msg",              # a command fails: "msg" for every instance,
              "start": {"vm1": "msg"},    #   or per instance ("*" = any);
              "version": "msg"},          #   "version": --version itself fails
     "clone_delay": 0.5,                  # seconds the new dir exists without lima.yaml
     "create_delay": 0.0,                 # seconds a create's dir has lima.yaml, no disk
     "keygen_delay": 0.0,                 # seconds the first create's key is missing after
                                          #   its check (two at once: one fails, as Lima's)
     "delete_delay": 0.5,                 # seconds between removing lima.yaml and the dir
     "start_delay": 0.0,
     "await_guest": 0.0,                  # seconds `start` waits for the instance's guest
                                          #   binding to appear (Lima waits for the guest
                                          #   to boot; a test binds one meanwhile)
     "stop_delay": 0.0,                   # seconds `stop` takes before the instance is down
     "hide_from_list": ["vm1"],           # instances a whole listing leaves out (a listing
                                          #   that forgets; naming them still finds them)
     "require_tty_false": false,          # refuse any call without --tty=false / --yes
     "host_user": "claude",               # default guest user (Lima: the host user)
     "templates": {"NAME": {...}},         # extra/overridden templates (name -> YAML map)
     "missing_templates": ["NAME"],        # templates that "do not exist"
     "guests": {"vm1": {"address": "10.213.0.5", "port": 22, "user": "claude",
                        "identity": "/path/client_key",     # back an instance by a real sshd;
                        "rekey": ["argv"],     # run at every start: new guest host keys
                        "boot": ["argv"]}}}    # run at every start: what a boot empties
                                               #   (the guest's tmpfs)

Like Lima, it refuses to run as root (before anything, ``--version`` included) unless
``$LIMACTL_STANDIN_ALLOW_ROOT`` is set, which sand's suite sets (it runs as root); it
refuses port 22 in any forward (``validatePort``); the host agent's ``ha.stderr.log`` is
JSON lines. ``tests/backends/lima/test_standin_contract.py`` runs one sequence against
this and the real limactl and compares them.

Every invocation is appended to ``$LIMACTL_STANDIN_LOG`` or
``<LIMA_HOME>/_standin/invocations.jsonl`` as ``{"time", "argv", "lima_home", "pid",
"cwd", "tty", "qemu_env"}`` before anything else happens (``qemu_env``: the
``QEMU_SYSTEM_*`` variables, which name the QEMU a start runs).

With ``"qemu": true`` in the config, ``start`` also runs a QEMU as Lima's qemu driver
does (``$QEMU_SYSTEM_X86_64``, else ``qemu-system-x86_64`` on PATH; the ``-netdev user``
line of ``pkg/driver/qemu/qemu.go``; ``-pidfile <dir>/qemu.pid``) and waits for its pid
file; ``stop`` and ``delete`` end it.
"""

from __future__ import annotations

import contextlib
import copy
import fnmatch
import getpass
import json
import os
import platform
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, NoReturn

import yaml

DEFAULT_VERSION = "2.2.0"
IDENTIFIER = re.compile(r"^[A-Za-z0-9]+(?:[._-][A-Za-z0-9]+)*$")
PARAM_NAME = re.compile(r"^[a-zA-Z][a-zA-Z0-9_]*$")
SIZE = re.compile(r"^(\d+(?:\.\d+)*) ?([kKmMgGtTpP])?[iI]?[bB]?$")
SKIP_ON_CLONE = ("protected", "swtpm")
TMP_SUFFIXES = (".pid", ".sock", ".tmp")
STATE_FILE = "standin.pid"
QEMU_PID = "qemu.pid"  # written by QEMU itself (Lima passes -pidfile)


class Fatal(Exception):
    """An error limactl reports with level=fatal and exit status 1."""


# --- logging ---------------------------------------------------------------------------


# limactl refuses root; sand's suite runs as root, so it sets this (tests/conftest.py).
ALLOW_ROOT_ENV = "LIMACTL_STANDIN_ALLOW_ROOT"


def _ts() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _log(level: str, msg: str) -> None:
    sys.stderr.write(f'time="{_ts()}" level={level} msg={json.dumps(msg)}\n')


def info(msg: str) -> None:
    _log("info", msg)


def warn(msg: str) -> None:
    _log("warning", msg)


def fatal(msg: str) -> NoReturn:
    raise Fatal(msg)


# --- paths and config ------------------------------------------------------------------


def lima_home() -> Path:
    env = os.environ.get("LIMA_HOME")
    return Path(env) if env else Path.home() / ".lima"


def standin_dir() -> Path:
    return lima_home() / "_standin"


def load_config() -> dict[str, Any]:
    path = os.environ.get("LIMACTL_STANDIN_CONFIG") or str(standin_dir() / "config.json")
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except FileNotFoundError:
        return {}
    return data if isinstance(data, dict) else {}


def version(cfg: dict[str, Any]) -> str:
    return str(cfg.get("version") or DEFAULT_VERSION)


def version_tuple(v: str) -> tuple[int, ...]:
    parts = re.findall(r"\d+", v.split("-")[0])
    return tuple(int(p) for p in parts[:3]) or (0,)


def fault(cfg: dict[str, Any], command: str, name: str | None = None) -> str | None:
    spec = (cfg.get("fail") or {}).get(command)
    if spec is None:
        return None
    if isinstance(spec, str):
        return spec
    if isinstance(spec, dict):
        value = spec.get(name or "") or spec.get("*")
        return str(value) if value else None
    return None


def log_invocation(argv: list[str], tty: bool | None) -> None:
    path = os.environ.get("LIMACTL_STANDIN_LOG") or str(standin_dir() / "invocations.jsonl")
    record = {
        "time": time.time(),
        "argv": argv,
        "lima_home": os.environ.get("LIMA_HOME"),
        "pid": os.getpid(),
        "cwd": os.getcwd(),
        "tty": tty,
        # What Lima's qemu driver reads (``Exe()``): which QEMU a start would run.
        "qemu_env": {k: v for k, v in os.environ.items() if k.startswith("QEMU_SYSTEM_")},
    }
    with contextlib.suppress(OSError):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, (json.dumps(record) + "\n").encode())
    finally:
        os.close(fd)


# --- argument parsing (cobra-like) ----------------------------------------------------

GLOBAL_VALUE = {"--log-level", "--log-format"}
GLOBAL_BOOL = {"--debug"}

EDIT_VALUE = {"--cpus", "--memory", "--disk", "--set", "--param", "--ssh-port", "--shell"}
EDIT_BOOL = {"--mount-none", "--start"}
CREATE_VALUE = EDIT_VALUE | {"--name", "--containerd", "--port-forward", "--arch", "--vm-type"}
CREATE_BOOL = {"--mount-none", "--plain", "--list-templates"}

COMMANDS: dict[str, tuple[set[str], set[str]]] = {
    "list": ({"--format", "-f", "--yq", "--filter", "-l"}, {"--json", "-q", "--quiet"}),
    "create": (CREATE_VALUE, CREATE_BOOL),
    "start": (CREATE_VALUE | {"--timeout"}, CREATE_BOOL | {"--foreground", "--progress"}),
    "stop": (set(), {"-f", "--force"}),
    "delete": (set(), {"-f", "--force"}),
    "clone": (EDIT_VALUE, EDIT_BOOL),
    "rename": (EDIT_VALUE, EDIT_BOOL),
    "edit": (EDIT_VALUE, EDIT_BOOL),
    "protect": (set(), set()),
    "unprotect": (set(), set()),
}
ALIASES = {"ls": "list", "rm": "delete", "remove": "delete"}
MULTI = {"--set", "--param", "--port-forward", "--yq", "--filter", "-l"}


class Args:
    def __init__(self) -> None:
        self.command = ""
        self.positional: list[str] = []
        self.values: dict[str, list[str]] = {}
        self.flags: set[str] = set()
        self.tty: bool | None = None
        self.yes = False
        self.version = False

    def value(self, name: str, default: str | None = None) -> str | None:
        vals = self.values.get(name)
        return vals[-1] if vals else default

    def many(self, name: str) -> list[str]:
        return self.values.get(name, [])


def parse_bool(text: str) -> bool:
    low = text.lower()
    if low in ("1", "t", "true"):
        return True
    if low in ("0", "f", "false"):
        return False
    fatal(f'invalid argument "{text}" for "--tty" flag: strconv.ParseBool: parsing "{text}"')


def parse_args(argv: list[str]) -> Args:
    args = Args()
    rest = list(argv)
    pending: list[str] = []
    # The subcommand is the first word that is not a global flag (or its value).
    i = 0
    while i < len(rest):
        a = rest[i]
        if not args.command and not a.startswith("-"):
            args.command = ALIASES.get(a, a)
            i += 1
            continue
        pending.append(a)
        i += 1
    value_flags, bool_flags = COMMANDS.get(args.command, (set(), set()))
    it = iter(range(len(pending)))
    for j in it:
        a = pending[j]
        if a == "--":
            args.positional.extend(pending[j + 1 :])
            break
        if not a.startswith("-") or a == "-":
            args.positional.append(a)
            continue
        name, eq, inline = a.partition("=")
        if name == "--tty":
            args.tty = parse_bool(inline) if eq else True
            continue
        if name in ("-y", "--yes"):
            args.yes = True
            continue
        if name in ("--version", "-v") and not args.command:
            args.version = True
            continue
        if name in GLOBAL_BOOL or name in bool_flags:
            if name in bool_flags:
                args.flags.add(name.lstrip("-"))
            continue
        if name in GLOBAL_VALUE or name in value_flags:
            if eq:
                val = inline
            else:
                try:
                    val = pending[next(it)]
                except StopIteration:
                    fatal(f"flag needs an argument: {name}")
            if name in value_flags:
                args.values.setdefault(name.lstrip("-"), []).append(val)
            continue
        fatal(f"unknown flag: {name}")
    return args


# --- sizes, YAML, the yq subset ------------------------------------------------------


def ram_in_bytes(text: str | int) -> int:
    """go-units RAMInBytes: binary multipliers whether or not an ``i`` is written."""
    if isinstance(text, int):
        return text
    m = SIZE.match(str(text).strip())
    if not m:
        fatal(f"invalid size: '{text}'")
    number = float(m.group(1))
    unit = (m.group(2) or "").lower()
    mult = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50}[unit]
    return int(number * mult)


def load_yaml(text: str, where: str) -> dict[str, Any]:
    try:
        data = yaml.safe_load(text) if text.strip() else {}
    except yaml.YAMLError as exc:
        fatal(f"failed to unmarshal YAML ({where}): {exc}")
    if data is None:
        return {}
    if not isinstance(data, dict):
        fatal(f"failed to unmarshal YAML ({where}): not a mapping")
    return data


def dump_yaml(data: dict[str, Any]) -> str:
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False)


_PATH_TOKEN = re.compile(r'\.([A-Za-z_][A-Za-z0-9_]*)|\["((?:[^"\\]|\\.)*)"\]|\[(\d+)\]')


def _split_terms(expr: str) -> list[str]:
    terms, depth, quote, cur = [], 0, False, []
    escaped = False
    for ch in expr:
        if quote:
            cur.append(ch)
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                quote = False
            continue
        if ch == '"':
            quote = True
        elif ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
        elif ch == "|" and depth == 0:
            terms.append("".join(cur))
            cur = []
            continue
        cur.append(ch)
    terms.append("".join(cur))
    return [t.strip() for t in terms if t.strip()]


def apply_yq(doc: dict[str, Any], expr: str) -> dict[str, Any]:
    """Apply ``.a.b["c"][0] = <JSON>`` terms joined by ``|`` (the subset sand emits)."""
    doc = copy.deepcopy(doc)
    for term in _split_terms(expr):
        lhs, sep, rhs = term.partition("=")
        if not sep or lhs.endswith(("|", "+", "-", "/", "*", "!", "<", ">")) or rhs.startswith("="):
            fatal(
                f"failed to apply yq expression {expr!r}: stand-in supports only '.path = <JSON>'"
            )
        lhs = lhs.strip()
        keys: list[str | int] = []
        pos = 0
        while pos < len(lhs):
            m = _PATH_TOKEN.match(lhs, pos)
            if not m:
                fatal(f"failed to apply yq expression {expr!r}: bad path {lhs!r}")
            if m.group(1) is not None:
                keys.append(m.group(1))
            elif m.group(2) is not None:
                keys.append(json.loads('"' + m.group(2) + '"'))
            else:
                keys.append(int(m.group(3)))
            pos = m.end()
        if not keys:
            fatal(f"failed to apply yq expression {expr!r}: empty path")
        try:
            value = json.loads(rhs.strip())
        except json.JSONDecodeError:
            fatal(f"failed to apply yq expression {expr!r}: value is not JSON: {rhs.strip()!r}")
        node: Any = doc
        for k in keys[:-1]:
            if isinstance(k, int):
                node = node[k]
            else:
                if not isinstance(node.get(k), (dict, list)):
                    node[k] = {}
                node = node[k]
        last = keys[-1]
        if value is None and isinstance(last, str) and isinstance(node, dict):
            node[last] = None
        else:
            node[last] = value
    return doc


def edit_expressions(args: Args, *, create: bool) -> list[str]:
    exprs: list[str] = []
    if (cpus := args.value("cpus")) is not None:
        exprs.append(f".cpus = {int(cpus)}")
    if (mem := args.value("memory")) is not None:
        exprs.append(f'.memory = "{float(mem):g}GiB"')
    if (disk := args.value("disk")) is not None:
        exprs.append(f'.disk = "{float(disk):g}GiB"')
    if "mount-none" in args.flags:
        exprs.append(".mounts = null")
    if (port := args.value("ssh-port")) is not None:
        exprs.append(f".ssh.localPort = {int(port)}")
    if create:
        if "plain" in args.flags:
            exprs.append(".plain = true")
        if (mode := args.value("containerd")) is not None:
            system = "system" in mode.split("+")
            user = "user" in mode.split("+")
            exprs.append(f".containerd.system = {json.dumps(system)}")
            exprs.append(f".containerd.user = {json.dumps(user)}")
    exprs.extend(args.many("set"))
    return exprs


def apply_params(doc: dict[str, Any], params: list[str]) -> dict[str, Any]:
    for p in params:
        key, sep, value = p.partition("=")
        if not sep:
            fatal(f"invalid parameter {p!r}, expected NAME=VALUE")
        if key not in (doc.get("param") or {}):
            fatal(f"template does not define param {key!r}")
        doc["param"][key] = value
    return doc


def port_forward_exprs(specs: list[str]) -> list[str]:
    rules = []
    for spec in specs:
        ports, _, extra = spec.partition(",")
        host, sep, guest = ports.partition(":")
        if not sep:
            fatal(f"invalid port forward format {ports!r}, expected HOST:GUEST")
        static = extra.strip() == "static=true"
        rules.append({"guestPort": int(guest), "hostPort": int(host), "static": static})
    return [".portForwards = " + json.dumps(rules)] if rules else []


# --- validation (pkg/limayaml/validate.go, the parts that matter here) -----------------


def validate(doc: dict[str, Any]) -> None:
    params = doc.get("param") or {}
    if not isinstance(params, dict):
        fatal("field `param` must be a map")
    used_in: list[str] = []
    for p in doc.get("provision") or []:
        for key in ("script", "content", "expression", "owner", "path", "permissions"):
            if isinstance(p, dict) and isinstance(p.get(key), str):
                used_in.append(p[key])
    for p in doc.get("probes") or []:
        if isinstance(p, dict) and isinstance(p.get("script"), str):
            used_in.append(p["script"])
    for key, value in params.items():
        if not PARAM_NAME.match(str(key)):
            fatal(f"param {key!r} name does not match regex {PARAM_NAME.pattern!r}")
        if not str(value).isprintable():
            fatal(f"param {key!r} value contains unprintable character")
        ref = re.compile(
            r"{{[^}]*\.Param\." + re.escape(str(key)) + r"[^}]*}}|\bPARAM_" + str(key) + r"\b"
        )
        if not any(ref.search(s) for s in used_in):
            fatal(
                f"field `param` key {key!r} is not used in any provision, probe, copyToHost, "
                "or portForward"
            )
    for i, rule in enumerate(doc.get("portForwards") or []):
        if not isinstance(rule, dict):
            fatal(f"field `portForwards[{i}]` must be a map")
        for key in ("guestPort", "hostPort"):
            if key in rule and not (isinstance(rule[key], int) and 0 < rule[key] <= 65535):
                fatal(f"field `portForwards[{i}].{key}` must be an integer between 1 and 65535")
            if rule.get(key) == 22:  # Lima's validatePort: its own SSH forward owns 22
                fatal(f"field `portForwards[{i}].{key}` must not be 22")
        for key in ("guestPortRange", "hostPortRange"):
            ends = rule.get(key) or []
            for j, end in enumerate(ends if isinstance(ends, list) else []):
                if end == 22:
                    fatal(f"field `portForwards[{i}].{key}[{j}]` must not be 22")
        if rule.get("guestIPMustBeZero") and rule.get("guestIP") not in ("0.0.0.0", None):
            fatal(
                f"field `portForwards[{i}].guestIPMustBeZero` can only be true when field "
                f"`portForwards[{i}].guestIP` is 0.0.0.0"
            )
    for i, m in enumerate(doc.get("mounts") or []):
        if not isinstance(m, dict) or not m.get("location"):
            fatal(f"field `mounts[{i}].location` must be set")
    for key in ("memory", "disk"):
        if doc.get(key) is not None:
            ram_in_bytes(doc[key])
    if doc.get("cpus") is not None and (not isinstance(doc["cpus"], int) or doc["cpus"] < 1):
        fatal("field `cpus` must be a positive integer")


def validate_against_latest(
    new: dict[str, Any], latest: dict[str, Any], cfg: dict[str, Any]
) -> None:
    """The new YAML as written against the latest one with defaults filled."""
    if new.get("disk") is None:
        return
    old_disk = resolve(latest, cfg)["disk"]
    if ram_in_bytes(new["disk"]) < ram_in_bytes(old_disk):
        fatal(f"field `disk`: shrinking the disk ({old_disk} --> {new['disk']}) is not supported")


# --- defaults (pkg/limayaml/defaults.go, the subset sand inspects) ---------------------


def host_arch() -> str:
    m = platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(m, m)


def config_file(name: str) -> dict[str, Any]:
    path = lima_home() / "_config" / name
    try:
        return load_yaml(path.read_text(encoding="utf-8"), str(path))
    except FileNotFoundError:
        return {}


def _pick(key: str, y: dict[str, Any], d: dict[str, Any], o: dict[str, Any], default: Any) -> Any:
    if o.get(key) is not None:
        return o[key]
    if y.get(key) is not None:
        return y[key]
    if d.get(key) is not None:
        return d[key]
    return default


def _sub(doc: dict[str, Any], key: str) -> dict[str, Any]:
    value = doc.get(key)
    return value if isinstance(value, dict) else {}


def fill_port_forward(rule: dict[str, Any]) -> dict[str, Any]:
    r = dict(rule)
    r.setdefault("proto", "any")
    if r.get("guestIP") is None:
        r["guestIP"] = "0.0.0.0" if r.get("guestIPMustBeZero") else "127.0.0.1"
    if r.get("guestIPMustBeZero") is None:
        r["guestIPMustBeZero"] = r["guestIP"] == "0.0.0.0"
    r.setdefault("hostIP", "127.0.0.1")
    if not r.get("guestPortRange"):
        gp = r.get("guestPort") or 0
        r["guestPortRange"] = [gp, gp] if gp else [1, 65535]
    if not r.get("hostSocket") and not r.get("hostPortRange"):
        hp = r.get("hostPort") or 0
        r["hostPortRange"] = [hp, hp] if hp else list(r["guestPortRange"])
    return r


def resolve(y: dict[str, Any], cfg: dict[str, Any]) -> dict[str, Any]:
    """The instance's lima.yaml with defaults filled (what ``list --json`` shows as config)."""
    d, o = config_file("default.yaml"), config_file("override.yaml")
    r = copy.deepcopy(y)
    r["vmType"] = _pick("vmType", y, d, o, "qemu")
    r["os"] = _pick("os", y, d, o, "Linux")
    r["arch"] = _pick("arch", y, d, o, host_arch())
    r["cpus"] = _pick("cpus", y, d, o, 4)
    r["memory"] = str(_pick("memory", y, d, o, "4GiB"))
    r["disk"] = str(_pick("disk", y, d, o, "100GiB"))
    user_name = str(cfg.get("host_user") or getpass.getuser())
    yu, du, ou = _sub(y, "user"), _sub(d, "user"), _sub(o, "user")
    name = _pick("name", yu, du, ou, user_name)
    r["user"] = {
        "name": name,
        "comment": _pick("comment", yu, du, ou, "Lima"),
        "home": _pick("home", yu, du, ou, f"/home/{name}.linux"),
        "shell": _pick("shell", yu, du, ou, "/bin/bash"),
        "uid": _pick("uid", yu, du, ou, 1000),
        "passwordlessSudo": _pick("passwordlessSudo", yu, du, ou, True),
    }
    ys, ds, os_ = _sub(y, "ssh"), _sub(d, "ssh"), _sub(o, "ssh")
    r["ssh"] = {
        "localPort": _pick("localPort", ys, ds, os_, 0),
        "loadDotSSHPubKeys": _pick("loadDotSSHPubKeys", ys, ds, os_, False),
        "forwardAgent": _pick("forwardAgent", ys, ds, os_, False),
        "forwardX11": _pick("forwardX11", ys, ds, os_, False),
        "forwardX11Trusted": _pick("forwardX11Trusted", ys, ds, os_, False),
    }
    yc, dc, oc = _sub(y, "containerd"), _sub(d, "containerd"), _sub(o, "containerd")
    r["containerd"] = {
        "system": _pick("system", yc, dc, oc, False),
        "user": _pick("user", yc, dc, oc, True),
    }
    r["plain"] = bool(_pick("plain", y, d, o, False))
    # Mounts: d, y, o in that order, merged when the location repeats (last one wins).
    mounts: list[dict[str, Any]] = []
    where: dict[str, int] = {}
    for m in [*(d.get("mounts") or []), *(y.get("mounts") or []), *(o.get("mounts") or [])]:
        if not isinstance(m, dict):
            continue
        m = dict(m)
        loc = str(m.get("location", ""))
        if loc in where:
            mounts[where[loc]].update({k: v for k, v in m.items() if v is not None})
            continue
        where[loc] = len(mounts)
        mounts.append(m)
    for m in mounts:
        if m.get("writable") is None:
            m["writable"] = False
        if m.get("mountPoint") is None:
            m["mountPoint"] = m.get("location")
    r["mounts"] = mounts
    rules = [*(o.get("portForwards") or []), *(y.get("portForwards") or [])]
    rules += list(d.get("portForwards") or [])
    r["portForwards"] = [fill_port_forward(x) for x in rules if isinstance(x, dict)]
    if r["plain"]:
        r["portForwards"] = [x for x in r["portForwards"] if x.get("static")]
        r["mounts"] = []
        r["containerd"] = {"system": False, "user": False}
    if y.get("param") is not None:
        r["param"] = y["param"]
    return r


# --- instances --------------------------------------------------------------------------


def validate_name(name: str) -> None:
    if not IDENTIFIER.match(name) or len(name) > 76:
        fatal(f"instance name {name!r} is not a valid identifier")
    if name.lower().endswith((".yml", ".yaml")):
        fatal(f"instance name {name!r} must not end with .yml or .yaml suffix")


def inst_dir(name: str) -> Path:
    validate_name(name)
    return lima_home() / name


def instance_names() -> list[str]:
    home = lima_home()
    try:
        entries = sorted(os.listdir(home))
    except FileNotFoundError:
        return []
    return [n for n in entries if not n.startswith((".", "_")) and (home / n).is_dir()]


def read_state(d: Path) -> dict[str, Any]:
    try:
        data = json.loads((d / STATE_FILE).read_text(encoding="utf-8"))
        return data if isinstance(data, dict) else {}
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


def read_instance_yaml(name: str) -> dict[str, Any] | None:
    path = inst_dir(name) / "lima.yaml"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    return load_yaml(text, str(path))


def status_of(d: Path) -> str:
    return "Running" if read_state(d).get("status") == "Running" else "Stopped"


def ensure_user_key(cfg: dict[str, Any] | None = None) -> Path:
    """Lima's own SSH key, made by the first create or start of a LIMA_HOME. Lima checks
    for it, then runs ``ssh-keygen`` with no lock: a second first create that checked
    before the key was written fails as the real one does (``keygen_delay``: the
    seconds between the check and the key, 0: no window)."""
    cfgdir = lima_home() / "_config"
    key = cfgdir / "user"
    if not key.exists():
        if delay := float((cfg or {}).get("keygen_delay") or 0):
            time.sleep(delay)
            if key.exists():
                fatal(
                    f"failed to run [ssh-keygen -t ed25519 -q -N  -C lima -f {key}]: "
                    f'"{key} already exists.\\nOverwrite (y/n)? ": exit status 1'
                )
        cfgdir.mkdir(parents=True, exist_ok=True, mode=0o755)
        key.write_text(
            "-----BEGIN OPENSSH PRIVATE KEY-----\nstand-in key, not a real one\n"
            "-----END OPENSSH PRIVATE KEY-----\n",
            encoding="utf-8",
        )
        key.chmod(0o600)
        (cfgdir / "user.pub").write_text("ssh-ed25519 AAAAstandin lima\n", encoding="utf-8")
    return key


def inspect(name: str, cfg: dict[str, Any]) -> dict[str, Any]:
    d = inst_dir(name)
    home = lima_home()
    base: dict[str, Any] = {
        "name": name,
        "hostname": f"lima-{name}",
        "status": "",
        "dir": str(d),
        "vmType": "",
        "arch": "",
    }
    y = read_instance_yaml(name)
    globals_ = {
        "HostOS": sys.platform if sys.platform != "linux" else "linux",
        "HostArch": host_arch(),
        "LimaHome": str(home),
        "IdentityFile": str(home / "_config" / "user"),
    }
    if y is None:
        base.update(
            hostname="",
            status="Broken",
            errors=[f"open {d / 'lima.yaml'}: no such file or directory"],
            protected=False,
            limaVersion="",
        )
        base.update(globals_)
        return base
    if y is not None and not (d / "lima.yaml").read_text(encoding="utf-8").strip():
        # An empty lima.yaml (a create killed as it wrote the file): Lima lists the
        # instance with no config, status "" and no errors in the JSON; why, on stderr.
        # (Lima lists any lima.yaml without images so; the stand-in, which lets tests
        # plant a person's instance from a bare `{}`, only the empty file.)
        warn(f"instance `{name}` has errors: [field `images` must be set]")
        base.update(errors=[], protected=False, limaVersion="")
        base.update(globals_)
        return base
    conf = resolve(y, cfg)
    state = read_state(d)
    running = state.get("status") == "Running"
    guest = guest_of(name, cfg)
    out = dict(base)
    out.update(
        status="Running" if running else "Stopped",
        vmType=conf["vmType"],
        arch=conf["arch"],
        cpus=conf["cpus"],
        memory=ram_in_bytes(conf["memory"]),
        disk=ram_in_bytes(conf["disk"]),
    )
    port = int(state.get("sshLocalPort") or conf["ssh"]["localPort"] or 0)
    if not port and (d / "ssh.config").exists():
        port = _port_from_ssh_config(d / "ssh.config")
    if port:
        out["sshLocalPort"] = port
    out["sshConfigFile"] = str(d / "ssh.config")
    if running:
        out["hostAgentPID"] = int(state.get("pid") or 1)
        out["driverPID"] = int(state.get("pid") or 1)
    out["config"] = conf
    out["sshAddress"] = str(guest.get("address") or "127.0.0.1")
    out["protected"] = (d / "protected").exists()
    try:
        out["limaVersion"] = (d / "lima-version").read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        out["limaVersion"] = ""
    if y.get("param"):
        out["param"] = y["param"]
    out.update(globals_)
    return out


def _port_from_ssh_config(path: Path) -> int:
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line.startswith("Port "):
            with contextlib.suppress(ValueError):
                return int(line[5:])
    return 0


def strip_empty_maps(value: Any) -> Any:
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            v = strip_empty_maps(v)
            if isinstance(v, dict) and not v:
                continue
            out[k] = v
        return out
    if isinstance(value, list):
        return [strip_empty_maps(v) for v in value if not (isinstance(v, dict) and not v)]
    return value


def write_instance(name: str, doc: dict[str, Any], cfg: dict[str, Any]) -> Path:
    d = inst_dir(name)
    d.mkdir(mode=0o700)
    (d / "lima.yaml").write_text(dump_yaml(doc), encoding="utf-8")
    (d / "lima-version").write_text(version(cfg) + "\n", encoding="utf-8")
    (d / "cidata.iso").write_bytes(b"stand-in cidata\n")
    if delay := float(cfg.get("create_delay") or 0):
        time.sleep(delay)  # Lima copies the image into the instance now
    (d / "disk").write_bytes(b"\0" * 4096)
    bind_guest(name, cfg)
    return d


GUEST_FILE = "standin-guest.json"


def bind_guest(name: str, cfg: dict[str, Any]) -> None:
    """Give a new instance the real guest configured for its name (an exact name, or a
    glob such as ``vm-sandnew*``). Stand-in only: the binding is the instance's "disk",
    so ``rename`` carries it along, and a clone gets its own or none."""
    guests = cfg.get("guests") or {}
    entry = guests.get(name)
    if entry is None:
        entry = next((g for pat, g in guests.items() if fnmatch.fnmatchcase(name, pat)), None)
    path = inst_dir(name) / GUEST_FILE
    if entry:
        path.write_text(json.dumps(entry), encoding="utf-8")
    else:
        path.unlink(missing_ok=True)


def guest_of(name: str, cfg: dict[str, Any]) -> dict[str, Any]:
    try:
        found = json.loads((inst_dir(name) / GUEST_FILE).read_text(encoding="utf-8"))
        if isinstance(found, dict):
            return found
    except (OSError, ValueError):
        pass
    return dict((cfg.get("guests") or {}).get(name) or {})


# The templates Lima 2.2 ships (``templates/*.yaml`` at 183a60d7, without ``experimental/``):
# what ``limactl create --list-templates`` prints and what ``template:NAME`` may name.
KNOWN_TEMPLATES = (
    "almalinux",
    "almalinux-10",
    "almalinux-8",
    "almalinux-9",
    "alpine",
    "alpine-3.21",
    "alpine-3.22",
    "alpine-3.23",
    "alpine-iso",
    "apptainer",
    "apptainer-rootful",
    "archlinux",
    "buildkit",
    "centos-stream",
    "centos-stream-10",
    "centos-stream-9",
    "debian",
    "debian-11",
    "debian-12",
    "debian-13",
    "default",
    "docker",
    "docker-rootful",
    "faasd",
    "fedora",
    "fedora-41",
    "fedora-42",
    "fedora-43",
    "fedora-44",
    "freebsd",
    "freebsd-15",
    "homebrew-linux",
    "homebrew-macos",
    "k0s",
    "k3s",
    "k8s",
    "linuxbrew",
    "macos",
    "macos-15",
    "macos-26",
    "opensuse",
    "opensuse-leap",
    "opensuse-leap-15",
    "opensuse-leap-16",
    "oraclelinux",
    "oraclelinux-10",
    "oraclelinux-8",
    "oraclelinux-9",
    "podman",
    "podman-rootful",
    "rocky",
    "rocky-10",
    "rocky-8",
    "rocky-9",
    "ubuntu",
    "ubuntu-20.04",
    "ubuntu-22.04",
    "ubuntu-24.04",
    "ubuntu-24.10",
    "ubuntu-25.04",
    "ubuntu-25.10",
    "ubuntu-26.04",
    "ubuntu-lts",
    "windows",
    "windows-11",
    "windows-2025",
)


def template_names(cfg: dict[str, Any]) -> list[str]:
    """``--list-templates``: Lima's store plus configured ones, hidden ``_`` ones left out."""
    missing = set(cfg.get("missing_templates") or [])
    names = set(KNOWN_TEMPLATES) | set(cfg.get("templates") or {})
    return sorted(n for n in names if n not in missing and not n.startswith("_"))


def builtin_template(name: str, cfg: dict[str, Any]) -> dict[str, Any]:
    """Lima's template store, shaped like ``templates/``: ``NAME`` = image + home mount."""
    custom = (cfg.get("templates") or {}).get(name)
    if isinstance(custom, dict):
        return copy.deepcopy(custom)
    if not re.match(r"^[A-Za-z0-9._/-]+$", name) or name in (cfg.get("missing_templates") or []):
        fatal(f"template {name!r} not found")
    if not name.startswith("_") and name not in KNOWN_TEMPLATES:
        fatal(f"template {name!r} not found")
    if name == "_default/mounts":
        # templates/_default/mounts.yaml: the host home, read-only.
        return {"mounts": [{"location": "~"}]}
    if name.startswith("_images/"):
        image = name.split("/", 1)[1]
        return {
            "images": [
                {"location": f"https://stand-in.invalid/{image}-amd64.qcow2", "arch": "x86_64"},
                {"location": f"https://stand-in.invalid/{image}-arm64.qcow2", "arch": "aarch64"},
            ]
        }
    image = "ubuntu" if name == "default" else name
    # templates/default.yaml and templates/<distro>.yaml: `mounts: []` plus these bases.
    return {"mounts": [], "base": [f"template:_images/{image}", "template:_default/mounts"]}


def _locator_name(locator: str) -> str:
    return locator.split(":", 1)[1].lstrip("/")


def _merge_base(a: dict[str, Any], b: dict[str, Any], top: bool = True) -> dict[str, Any]:
    """limatmpl mergeDocuments: keep a's scalars, add b's new keys, append b's lists
    (prepend for base/provision/probes)."""
    out = dict(a)
    for key, bv in b.items():
        if key not in out or out[key] is None:
            out[key] = copy.deepcopy(bv)
            continue
        av = out[key]
        if isinstance(av, dict) and isinstance(bv, dict):
            out[key] = _merge_base(av, bv, top=False)
        elif isinstance(av, list) and isinstance(bv, list):
            if top and key in ("provision", "probes"):
                out[key] = copy.deepcopy(bv) + av
            else:
                out[key] = av + copy.deepcopy(bv)
    return out


def embed(doc: dict[str, Any], cfg: dict[str, Any], depth: int = 0) -> dict[str, Any]:
    """Inline every ``base:`` template (``pkg/limatmpl/embed.go``), so lima.yaml has none."""
    if depth > 10:
        fatal("base templates nest too deeply")
    bases = doc.get("base")
    if bases is None:
        return doc
    out = {k: v for k, v in doc.items() if k != "base"}
    for entry in bases if isinstance(bases, list) else [bases]:
        locator = entry.get("url") if isinstance(entry, dict) else entry
        if not isinstance(locator, str) or not locator.startswith("template:"):
            fatal(f"stand-in: unsupported base locator {locator!r}")
        base = embed(builtin_template(_locator_name(locator), cfg), cfg, depth + 1)
        out = _merge_base(out, base)
    return out


def template_doc(locator: str, cfg: dict[str, Any]) -> dict[str, Any]:
    return embed(builtin_template(_locator_name(locator), cfg), cfg)


# --- commands ---------------------------------------------------------------------------


def cmd_list(args: Args, cfg: dict[str, Any]) -> int:
    if msg := fault(cfg, "list"):
        fatal(msg)
    fmt = args.value("format") or args.value("f") or "table"
    if "json" in args.flags:
        fmt = "json"
    names = instance_names()
    if not args.positional:
        hidden = set(cfg.get("hide_from_list") or ())
        names = [n for n in names if n not in hidden]
    if not args.positional and not names:
        warn("No instance found. Run `limactl create` to create an instance.")
        return 0
    wanted = names
    unmatched = False
    if args.positional:
        wanted = []
        for arg in args.positional:
            if arg in names:
                wanted.append(arg)
            else:
                warn(f"No instance matching {arg} found.")
                unmatched = True
    old = version_tuple(version(cfg)) < (2, 2, 0)
    instances = []
    for n in wanted:
        if old and not (lima_home() / n / "lima.yaml").exists():
            fatal(
                f"unable to load instance {n}: open {lima_home() / n / 'lima.yaml'}: "
                "no such file or directory"
            )
        instances.append(inspect(n, cfg))
    for inst in instances:
        if inst.get("errors"):
            warn(f"instance {inst['name']!r} has errors")
    if "q" in args.flags or "quiet" in args.flags:
        for inst in instances:
            print(inst["name"])
    elif fmt == "json":
        for inst in instances:
            sys.stdout.write(json.dumps(strip_empty_maps(inst), separators=(",", ":")) + "\n")
    elif fmt == "yaml":
        for inst in instances:
            sys.stdout.write("---\n" + dump_yaml(strip_empty_maps(inst)))
    else:
        print("NAME\tSTATUS\tSSH\tCPUS\tMEMORY\tDISK\tDIR")
        for inst in instances:
            ssh = f"{inst.get('sshAddress', '127.0.0.1')}:{inst.get('sshLocalPort', 0)}"
            print(
                f"{inst['name']}\t{inst['status']}\t{ssh}\t{inst.get('cpus', 0)}\t"
                f"{inst.get('memory', 0)}\t{inst.get('disk', 0)}\t{inst['dir']}"
            )
    sys.stdout.flush()
    return 1 if unmatched else 0


def _read_template(
    args: Args, tty: bool, name: str | None, cfg: dict[str, Any]
) -> tuple[str, dict[str, Any]]:
    arg = args.positional[0] if args.positional else ""
    if arg == "-":
        if not name:
            fatal("must pass instance name with --name when reading template from stdin")
        if args.tty is True:
            fatal("cannot use --tty=true when reading template from stdin")
        return name, embed(load_yaml(sys.stdin.read(), "stdin"), cfg)
    if tty:
        fatal("stand-in: would open the interactive template editor; run with --tty=false")
    if arg.startswith("template:"):
        tname = arg.split(":", 1)[1].lstrip("/")
        return name or tname.replace("/", "-"), template_doc(arg, cfg)
    if arg.endswith((".yaml", ".yml")):
        path = Path(arg)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            fatal(f"open {arg}: no such file or directory")
        return name or path.stem, embed(load_yaml(text, arg), cfg)
    if arg:
        if name and name != arg:
            fatal(
                f"instance name {arg!r} and CLI flag --name={name!r} cannot be specified together"
            )
        return arg, template_doc("template:default", cfg)
    return name or "default", template_doc("template:default", cfg)


def do_create(args: Args, cfg: dict[str, Any], tty: bool) -> str:
    name, doc = _read_template(args, tty, args.value("name"), cfg)
    validate_name(name)
    if msg := fault(cfg, "create", name):
        fatal(msg)
    if (lima_home() / name).exists():
        fatal(f"instance {name!r} already exists")
    exprs = edit_expressions(args, create=True) + port_forward_exprs(args.many("port-forward"))
    if exprs:
        doc = apply_yq(doc, " | ".join(exprs))
    doc = apply_params(doc, args.many("param"))
    validate(doc)
    lima_home().mkdir(parents=True, exist_ok=True)
    ensure_user_key(cfg)
    write_instance(name, doc, cfg)
    return name


def cmd_create(args: Args, cfg: dict[str, Any], tty: bool) -> int:
    if "list-templates" in args.flags:
        for name in template_names(cfg):
            print(name)
        return 0
    name = do_create(args, cfg, tty)
    info(f"Run `limactl start {name}` to start the instance.")
    return 0


def do_start(name: str, cfg: dict[str, Any]) -> None:
    d = inst_dir(name)
    y = read_instance_yaml(name)
    if y is None:
        fatal(f"instance {name!r} has no configuration")
    if status_of(d) == "Running":
        info(
            f"The instance {name!r} is already running. "
            f"Run `limactl shell {name}` to open the shell."
        )
        return
    if delay := float(cfg.get("start_delay") or 0):
        time.sleep(delay)
    if wait := float(cfg.get("await_guest") or 0):
        deadline = time.monotonic() + wait
        while not (d / GUEST_FILE).exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    if msg := fault(cfg, "start", name):
        # The host agent logs JSON lines (it runs with --log-format=json).
        (d / "ha.stderr.log").write_text(
            json.dumps({"level": "fatal", "msg": msg, "time": _ts()}) + "\n", encoding="utf-8"
        )
        fatal(msg)
    conf = resolve(y, cfg)
    guest = guest_of(name, cfg)
    if rekey := guest.get("rekey"):
        # Lima's host agent writes a new cloud-init instance-id at every start, and
        # cloud-init then makes the guest new SSH host keys: the backing guest does too.
        done = subprocess.run([str(a) for a in rekey], capture_output=True, check=False)
        if done.returncode:
            fatal(f"rekeying the guest failed: {done.stderr.decode(errors='replace')}")
    if boot := guest.get("boot"):
        # A stopped guest's tmpfs is gone when it starts again: the backing guest's too.
        done = subprocess.run([str(a) for a in boot], capture_output=True, check=False)
        if done.returncode:
            fatal(f"booting the guest failed: {done.stderr.decode(errors='replace')}")
    key = ensure_user_key()
    port = int(guest.get("port") or conf["ssh"]["localPort"] or 0)
    if not port:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    address = str(guest.get("address") or "127.0.0.1")
    user = str(guest.get("user") or conf["user"]["name"])
    identity = str(guest.get("identity") or key)
    (d / "ssh.config").write_text(
        "# This SSH config file can be passed to 'ssh -F'.\n"
        "# This file is created by Lima, but not used by Lima itself currently.\n"
        "# Modifications to this file will be lost on restarting the Lima instance.\n"
        f"Host lima-{name}\n"
        f'  IdentityFile "{identity}"\n'
        "  StrictHostKeyChecking no\n"
        "  UserKnownHostsFile /dev/null\n"
        "  NoHostAuthenticationForLocalhost yes\n"
        "  PreferredAuthentications publickey\n"
        "  Compression no\n"
        "  BatchMode yes\n"
        "  IdentitiesOnly yes\n"
        f"  User {user}\n"
        "  ControlMaster auto\n"
        f'  ControlPath "{d / "ssh.sock"}"\n'
        "  ControlPersist yes\n"
        f"  Hostname {address}\n"
        f"  Port {port}\n",
        encoding="utf-8",
    )
    (d / "ssh.config").chmod(0o600)
    if cfg.get("qemu"):
        run_qemu(name, d, port)
    (d / STATE_FILE).write_text(
        json.dumps({"status": "Running", "sshLocalPort": port, "pid": os.getpid()}),
        encoding="utf-8",
    )
    (d / "ha.pid").write_text(f"{os.getpid()}\n", encoding="utf-8")
    with open(d / "ha.stdout.log", "a", encoding="utf-8") as fh:
        fh.write(json.dumps({"status": {"running": True, "sshLocalPort": port}, "time": _ts()}))
        fh.write("\n")
    info("READY. Run `limactl shell " + name + "` to open the shell.")


def run_qemu(name: str, d: Path, port: int) -> None:
    """With ``"qemu": true``: run the QEMU Lima's driver would (``$QEMU_SYSTEM_X86_64``,
    else ``qemu-system-x86_64`` on PATH), with the user-mode network line of
    ``pkg/driver/qemu/qemu.go`` and ``-pidfile``, and wait for its pid file."""
    words = shlex.split(os.environ.get("QEMU_SYSTEM_X86_64") or "qemu-system-x86_64")
    exe = shutil.which(words[0])
    if exe is None:
        fatal(f'exec: "{words[0]}": executable file not found in $PATH')
    netdev = (
        f"user,id=net0,net=192.168.5.0/24,dhcpstart=192.168.5.15,hostfwd=tcp:127.0.0.1:{port}-:22"
    )
    argv = [exe, *words[1:], "-name", f"lima-{name}", "-netdev", netdev]
    argv += ["-device", "virtio-net-pci,netdev=net0", "-pidfile", str(d / QEMU_PID)]
    (d / QEMU_PID).unlink(missing_ok=True)
    with open(d / "qemu.stderr.log", "wb") as err:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
            start_new_session=True,
        )
    deadline = time.monotonic() + 30
    while not (d / QEMU_PID).exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            text = (d / "qemu.stderr.log").read_text(errors="replace").strip()
            fatal(f"failed to start qemu (exit {proc.returncode}): {text}")
        time.sleep(0.02)


def stop_qemu(d: Path) -> None:
    """End the instance's QEMU (as the host agent does at stop) and wait for it."""
    try:
        pid = int((d / QEMU_PID).read_text().strip())
        os.kill(pid, 15)
    except (OSError, ValueError):
        pid = 0
    deadline = time.monotonic() + 10
    while pid and time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            break  # gone
        if state == "Z":
            break  # ended; its parent (not this process) reaps it
        time.sleep(0.02)
    (d / QEMU_PID).unlink(missing_ok=True)


def cmd_start(args: Args, cfg: dict[str, Any], tty: bool) -> int:
    arg = args.positional[0] if args.positional else "default"
    if arg == "-" or arg.startswith("template:") or arg.endswith((".yaml", ".yml")):
        name = do_create(args, cfg, tty)
    else:
        name = args.value("name") or arg
        if not (lima_home() / name).exists():
            info(f"Creating an instance {name!r} from template:default (Not from template:{name})")
            warn(
                "This form is deprecated. "
                f"Use `limactl create --name={name} template:default` instead"
            )
            lima_home().mkdir(parents=True, exist_ok=True)
            write_instance(name, template_doc("template:default", cfg), cfg)
        else:
            exprs = edit_expressions(args, create=False)
            if exprs:
                _edit_in_place(name, exprs, args, cfg)
    do_start(name, cfg)
    return 0


def cmd_stop(args: Args, cfg: dict[str, Any]) -> int:
    errors = []
    for name in args.positional or ["default"]:
        d = inst_dir(name)
        if not (d / "lima.yaml").exists():
            errors.append(f"open {d / 'lima.yaml'}: no such file or directory")
            continue
        if msg := fault(cfg, "stop", name):
            errors.append(msg)
            continue
        force = "f" in args.flags or "force" in args.flags
        if status_of(d) != "Running" and not force:
            errors.append(
                f'expected status "Running", got "{status_of(d)}" (maybe use `limactl stop -f`?)'
            )
            continue
        if (delay := float(cfg.get("stop_delay") or 0)) and not force:
            time.sleep(delay)
        stop_qemu(d)
        (d / STATE_FILE).unlink(missing_ok=True)
        (d / "ha.pid").unlink(missing_ok=True)
        info(f"Sending SIGINT to hostagent process of {name!r}" if not force else "Killing")
    if errors:
        fatal("\n".join(errors))
    return 0


def cmd_delete(args: Args, cfg: dict[str, Any]) -> int:
    if not args.positional:
        fatal("requires at least 1 arg(s), only received 0")
    force = "f" in args.flags or "force" in args.flags
    errors = []
    for name in args.positional:
        d = inst_dir(name)
        if not d.exists():
            warn(f"Ignoring non-existent instance {name!r}")
            continue
        if not (d / "lima.yaml").exists():
            errors.append(
                f"instance {name!r} directory {str(d)!r} exists but its 'lima.yaml' could not be "
                "read; it was NOT deleted, in case it is currently being cloned into. If no "
                "`limactl` operation is using it, remove it manually"
            )
            continue
        if msg := fault(cfg, "delete", name):
            fatal(f"failed to delete instance {name!r}: {msg}")
        if (d / "protected").exists():
            fatal(
                f"failed to delete instance {name!r}: instance is protected to prohibit "
                "accidental removal (Hint: use `limactl unprotect`)"
            )
        if not force and status_of(d) != "Stopped":
            fatal(
                f"failed to delete instance {name!r}: "
                f'expected status "Stopped", got "{status_of(d)}"'
            )
        stop_qemu(d)
        (d / "lima.yaml").unlink()
        if delay := float(cfg.get("delete_delay") or 0):
            time.sleep(delay)
        shutil.rmtree(d)
        info(f"Deleted {name!r} ({str(d)!r})")
    if errors:
        fatal("\n".join(errors))
    return 0


def _edit_in_place(name: str, exprs: list[str], args: Args, cfg: dict[str, Any]) -> bool:
    path = inst_dir(name) / "lima.yaml"
    text = path.read_text(encoding="utf-8")
    latest = load_yaml(text, str(path))
    new = apply_yq(latest, " | ".join(exprs)) if exprs else copy.deepcopy(latest)
    new = apply_params(new, args.many("param"))
    if new == latest:
        info("Aborting, no changes made to the instance")
        return False
    validate(new)
    validate_against_latest(new, latest, cfg)
    path.write_text(dump_yaml(new), encoding="utf-8")
    return True


def cmd_clone(args: Args, cfg: dict[str, Any], tty: bool, *, rename: bool = False) -> int:
    """``clone`` and ``rename`` share Lima's CloneOrRename (``pkg/instance/clone.go``):
    rename moves every file but ``protected``/``swtpm``/``*.pid|*.sock|*.tmp`` and then
    removes the old directory, so a renamed instance is no longer protected."""
    verb = "rename" if rename else "clone"
    if len(args.positional) != 2:
        fatal(f"accepts 2 arg(s), received {len(args.positional)}")
    old, new = args.positional
    od, nd = inst_dir(old), inst_dir(new)
    if not (od / "lima.yaml").exists():
        fatal(f"instance {old!r} not found")
    if old == new:
        fatal(f"new instance name {new!r} must be different from {old!r}")
    if status_of(od) == "Running":
        fatal(f"cannot {verb} a running instance")
    if nd.exists():
        fatal(f"instance {new!r} already exists")
    if msg := fault(cfg, verb, new):
        fatal(msg)
    nd.mkdir(mode=0o700)
    delay = float(cfg.get("clone_delay") or 0)
    for root, dirs, files in os.walk(od):
        dirs.sort()
        rel = Path(root).relative_to(od)
        dirs[:] = [x for x in dirs if x not in SKIP_ON_CLONE]
        for x in dirs:
            (nd / rel / x).mkdir(exist_ok=True)
        for f in sorted(files):
            if f in SKIP_ON_CLONE or f.endswith(TMP_SUFFIXES):
                continue
            if f == "lima.yaml" and delay:
                time.sleep(delay)  # the lima-vm/lima#5236 window: a dir without lima.yaml
            if rename:
                os.rename(Path(root) / f, nd / rel / f)
            else:
                shutil.copy2(Path(root) / f, nd / rel / f)
    if rename:
        shutil.rmtree(od)
    else:
        bind_guest(new, cfg)  # a copy of the disk is another machine
    exprs = edit_expressions(args, create=False)
    if exprs or args.many("param"):
        _edit_in_place(new, exprs, args, cfg)
    start = "start" in args.flags
    if tty and "start" not in args.flags:
        fatal("stand-in: would ask whether to start the instance; run with --tty=false")
    if start:
        do_start(new, cfg)
    return 0


def cmd_edit(args: Args, cfg: dict[str, Any], tty: bool) -> int:
    name = args.positional[0] if args.positional else "default"
    d = inst_dir(name)
    if not (d / "lima.yaml").exists():
        fatal(f"instance {name!r} not found")
    if status_of(d) == "Running":
        fatal("cannot edit a running instance")
    if msg := fault(cfg, "edit", name):
        fatal(msg)
    exprs = edit_expressions(args, create=False)
    if not exprs and not args.many("param"):
        if tty:
            fatal("stand-in: would open an editor; run with --tty=false")
        info("Aborting, no changes made to the instance")
        return 0
    changed = _edit_in_place(name, exprs, args, cfg)
    if changed:
        info(f"Instance {name!r} configuration edited")
    if tty and "start" not in args.flags:
        fatal("stand-in: would ask whether to start the instance; run with --tty=false")
    if "start" in args.flags:
        do_start(name, cfg)
    return 0


def cmd_protect(args: Args, cfg: dict[str, Any], on: bool) -> int:
    errors = []
    for name in args.positional:
        d = inst_dir(name)
        if not (d / "lima.yaml").exists():
            errors.append(f"failed to inspect instance {name!r}: no such instance")
            continue
        marker = d / "protected"
        if on:
            if marker.exists():
                warn(f"Instance {name!r} is already protected. Skipping.")
                continue
            marker.write_bytes(b"")
            marker.chmod(0o400)
            info(f"Protected {name!r}")
        else:
            if not marker.exists():
                warn(f"Instance {name!r} isn't protected. Skipping.")
                continue
            marker.unlink()
            info(f"Unprotected {name!r}")
    if errors:
        fatal("\n".join(errors))
    return 0


def main(argv: list[str]) -> int:
    words = argv[1:]
    try:
        args = parse_args(words)
    except Fatal as exc:
        log_invocation(words, None)
        _log("fatal", str(exc))
        return 1
    tty = args.tty if args.tty is not None else (not args.yes and sys.stdout.isatty())
    log_invocation(words, tty)
    if os.geteuid() == 0 and not os.environ.get(ALLOW_ROOT_ENV):
        # Lima refuses root before anything else, --version included (cmd/limactl/main.go).
        sys.stderr.write("limactl: must not run as the root user\n")
        return 1
    try:
        if args.tty is not None and args.yes:
            fatal("cannot use both --tty and --yes flags at the same time")
        if args.yes:
            tty = False
        cfg = load_config()
        if args.version:
            if (broken := fault(cfg, "version")) is not None:
                fatal(broken)
            print(f"limactl version {version(cfg)}")
            return 0
        if cfg.get("require_tty_false") and not (args.tty is False or args.yes):
            fatal("stand-in: require_tty_false is set and this call did not pass --tty=false")
        cmd = args.command
        if cmd == "list":
            return cmd_list(args, cfg)
        if cmd == "create":
            return cmd_create(args, cfg, tty)
        if cmd == "start":
            return cmd_start(args, cfg, tty)
        if cmd == "stop":
            return cmd_stop(args, cfg)
        if cmd == "delete":
            return cmd_delete(args, cfg)
        if cmd == "clone":
            return cmd_clone(args, cfg, tty)
        if cmd == "rename":
            return cmd_clone(args, cfg, tty, rename=True)
        if cmd == "edit":
            return cmd_edit(args, cfg, tty)
        if cmd in ("protect", "unprotect"):
            return cmd_protect(args, cfg, cmd == "protect")
        if not cmd:
            print("Lima: Linux virtual machines (stand-in)")
            return 0
        fatal(f'unknown command "{cmd}" for "limactl"')
    except Fatal as exc:
        _log("fatal", str(exc))
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
