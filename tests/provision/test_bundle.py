"""The bundle's digest is a content hash, and computing it needs only the stdlib."""

from __future__ import annotations

import io
import shutil
import subprocess
import sys
import tarfile

from sand.provision.bundle import Bundle, bundle_digest


def test_digest_is_stable_and_changes_when_a_script_changes(tmp_path):
    copy = tmp_path / "bundle"
    shutil.copytree(Bundle().root, copy)
    assert bundle_digest(copy) == bundle_digest()
    script = copy / "home.sh"
    script.write_text(script.read_text() + "\n# edited\n")
    assert bundle_digest(copy) != bundle_digest()


def test_digest_covers_the_executable_bit(tmp_path):
    copy = tmp_path / "bundle"
    shutil.copytree(Bundle().root, copy)
    (copy / "repos.sh").chmod(0o644)
    assert bundle_digest(copy) != bundle_digest()


def test_tar_is_deterministic_and_carries_the_digest():
    bundle = Bundle()
    assert bundle.tar == Bundle().tar
    with tarfile.open(fileobj=io.BytesIO(bundle.tar)) as tar:
        names = tar.getnames()
        digest = tar.extractfile("DIGEST").read().decode().strip()  # type: ignore[union-attr]
        modes = {m.name: m.mode for m in tar.getmembers()}
    assert digest == bundle.digest
    assert {"lib.sh", "secrets.sh", "git-credential-sand", "files/claude-settings.json"} <= set(
        names
    )
    assert modes["secrets.sh"] == 0o755
    assert modes["lib.sh"] == 0o644


def test_digest_at_plan_time_imports_only_the_standard_library():
    code = (
        "import sys\n"
        "from sand.provision import bundle_digest\n"
        "bundle_digest()\n"
        "heavy = [m for m in ('asyncssh', 'pydantic', 'structlog', 'yaml', 'cryptography')\n"
        "         if m in sys.modules]\n"
        "print(','.join(heavy))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == ""


def test_scripts_pass_bash_syntax_check():
    for rel, data, _executable in Bundle().files:
        if rel.endswith(".sh") or rel == "git-credential-sand":
            result = subprocess.run(["bash", "-n"], input=data, capture_output=True)
            assert result.returncode == 0, (rel, result.stderr)
