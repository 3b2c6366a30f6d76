"""A hostile guest's output is inert on the host, end to end.

The guest is a real netns sshd behind the limactl stand-in, reached by a real
`sand apply`. It has been tampered with the way a compromised VM would be: an
APT hook (``APT::Update::Pre-Invoke``) that prints an OSC 52 clipboard write,
a window-title sequence, a carriage return and a fake "Apply complete!", then
fails. The manifest asks for a package the guest lacks, so provisioning runs
``apt-get update``, the hook fires and the step fails. Every place those bytes
could reach is read back as bytes: the apply's stdout and stderr, the stored
``last-apply.json``, `sand status`, and `sand shell VM -- printf ...` (and
``--raw``, which must pass them through untouched).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.limactl_standin import StandIn
from tests.provision.e2e_helpers import stand_in_agents

pytestmark = pytest.mark.e2e

CLIPBOARD = "cHduZWQtY2xpcGJvYXJk"  # base64 the hook asks the terminal to copy
TITLE = "owned-title"
FAKE = "Apply complete! Resources: 1 added, 0 changed, 0 destroyed."
# The hook, as the compromised guest installed it (octal escapes: printf does the rest).
HOOK = (
    "#!/bin/sh\n"
    f"printf '\\033]52;c;{CLIPBOARD}\\007'\n"
    f"printf '\\033]0;{TITLE}\\033\\\\'\n"
    "printf '\\302\\2332J\\342\\200\\256'\n"  # 8-bit CSI (as UTF-8) and a bidi override
    f"printf 'E: mirror unreachable\\r{FAKE}\\n'\n"
    "exit 1\n"
)
APT_CONF = 'APT::Update::Pre-Invoke { "/usr/local/sbin/sand-e2e-hostile"; };\n'
MANIFEST = """\
apiVersion: sand/v1
project: inerte2e
backends:
  laptop: {type: lima, lima_home: ./lima}
defaults: {image: debian-12, disk: 20GiB, memory: 2GiB}
vms:
  - name: dev-1
    packages: [sand-e2e-not-installed]
"""
# ESC and the other C0 controls but \n and \t, DEL, C1, bidi overrides/isolates.
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def assert_inert(raw: bytes, where: str) -> str:
    """``raw`` is valid UTF-8 with no control sequence, and no line of it
    passes for sand's own success line; returns it as text."""
    text = raw.decode("utf-8")  # strict: a raw 8-bit C1 byte would not decode
    assert not CONTROL.search(text), (where, CONTROL.findall(text), text)
    assert CLIPBOARD not in text and TITLE not in text, (where, text)
    forged = [line for line in text.splitlines() if line.startswith("Apply complete!")]
    assert forged == [], (where, text)
    return text


class Cli:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.standin = StandIn.create(root, lima_home=root / "lima")
        (root / "sand.yaml").write_text(MANIFEST)
        self.agents = stand_in_agents(root / "agents")

    def sand(self, *args: str) -> subprocess.CompletedProcess[bytes]:
        env = {
            **self.standin.env(),
            "SAND_STATE_DIR": str(self.root / "state"),
            "SAND_AGENT_SOURCE": str(self.agents),
            "NO_COLOR": "1",
        }
        env.pop("LIMA_HOME")
        return subprocess.run(
            [sys.executable, "-m", "sand", *args],
            env=env, capture_output=True, timeout=300, cwd=self.root, check=False,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip


def test_a_hostile_failing_step_reaches_the_host_inert(tmp_path: Path, netns_guest) -> None:
    guest = netns_guest()
    hook = "/usr/local/sbin/sand-e2e-hostile"
    install = f"cat > {hook} && chmod 755 {hook}"
    guest.run_root(["sh", "-c", install], input=HOOK.encode(), check=True)
    guest.run_root(
        ["sh", "-c", "cat > /etc/apt/apt.conf.d/00sand-e2e-hostile"],
        input=APT_CONF.encode(),
        check=True,
    )
    # The hook really prints the sequences (so the test below can fail).
    raw_hook = guest.run_root(["/usr/local/sbin/sand-e2e-hostile"]).stdout
    assert b"\x1b]52;c;" in raw_hook and b"\r" + FAKE.encode() in raw_hook

    cli = Cli(tmp_path)
    cli.standin.back_with_guest("dev-1", guest)

    proc = cli.sand("apply", "--auto-approve")
    assert proc.returncode == 1
    out = assert_inert(proc.stdout, "apply stdout")
    err = assert_inert(proc.stderr, "apply stderr")
    assert "Apply finished with 1 failed VM(s)" in out
    # The guest's words did reach the host, quoted behind a marker, inert.
    assert f"| {FAKE}" in out and "guest step 'packages' failed" in out
    assert "Traceback" not in err

    records = tmp_path / "state" / "projects" / "inerte2e" / "last-apply.json"
    assert_inert(records.read_bytes(), "last-apply.json bytes")
    stored = json.loads(records.read_bytes())["dev-1"]["error"]
    assert_inert(stored.encode(), "last-apply.json error")
    assert FAKE in stored and "mirror unreachable" in stored

    status = cli.sand("status")
    text = assert_inert(status.stdout, "status stdout")
    assert_inert(status.stderr, "status stderr")
    assert "dev-1: last error: guest step 'packages' failed" in text
    assert f"| {FAKE}" in text

    # The same sequences from a command the user runs.
    printf = ["--", "printf", f"\\033]52;c;{CLIPBOARD}\\007\\033]0;{TITLE}\\007\\r{FAKE}\\n"]
    shell = cli.sand("shell", "dev-1", *printf)
    assert shell.returncode == 0, shell.stderr
    assert shell.stdout == f"\n{FAKE}\n".encode()  # the text stays, the sequences do not
    assert_inert(shell.stderr, "shell stderr")
    raw = cli.sand("shell", "--raw", "dev-1", *printf)
    assert raw.returncode == 0, raw.stderr
    assert raw.stdout == f"\x1b]52;c;{CLIPBOARD}\x07\x1b]0;{TITLE}\x07\r{FAKE}\n".encode()
    # --raw is for binary pipelines: every byte value comes through unchanged.
    binary = cli.sand("shell", "--raw", "dev-1", "--", "head", "-c", "256", "/usr/bin/env")
    assert binary.stdout == guest.read_file("/usr/bin/env")[:256]
