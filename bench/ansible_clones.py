"""Slow clones on fakepve: sand at its defaults beside Ansible's ``proxmox_kvm`` at
``forks=10``, the same VMs on the same fake, in one run.

    python bench/ansible_clones.py [--vms 50] [--clone-secs 20] [--ansible-playbook PATH]

Optional: it needs ``ansible-playbook`` with the community.proxmox collection, which
``pip install ansible`` bundles, and proxmoxer and requests beside it (its modules run
under the Python next to ``ansible-playbook``). A virtualenv of its own keeps Ansible's
dependencies off sand's::

    python3 -m venv /tmp/ansible && /tmp/ansible/bin/pip install ansible proxmoxer requests
    SAND_BENCH_ANSIBLE=/tmp/ansible/bin/ansible-playbook python3 bench/run.py --only Ansible

Left out (one row saying why) when no ``ansible-playbook`` is found.

Each side creates and starts N VMs cloned from the fake's template (fakepve at time
scale 1: a clone takes ``--clone-secs`` real seconds, a start one). Ansible runs one
play over N hosts (``connection: local``), each cloning its VM with ``proxmox_kvm``
(``full: true``, its own ``newid``: N forks asking ``/cluster/nextid`` at once would
be handed the same id) and then starting it, ``forks=10``: the way a playbook makes a
fleet. sand runs one apply as ``sand apply`` does (``bench.create_throughput``), at
its defaults: on the fake's local storage, 10 clones at a time.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.create_throughput import START_SECS, measure  # noqa: E402
from bench.summary import record  # noqa: E402
from tests.fakepve_rig.rig import FakePveRig  # noqa: E402

FORKS = 10
FIRST_VMID = 2000

PLAY = """\
- hosts: all
  gather_facts: false
  module_defaults:
    community.proxmox.proxmox_kvm:
      api_host: 127.0.0.1
      api_port: {port}
      api_user: {user}
      api_token_id: {token_id}
      api_token_secret: "{{{{ lookup('file', '{token_file}') }}}}"
      validate_certs: false
      node: {node}
      timeout: 600
  tasks:
    - name: clone
      community.proxmox.proxmox_kvm:
        clone: {template}
        newid: "{{{{ vmid }}}}"
        name: "{{{{ inventory_hostname }}}}"
        full: true
        storage: {storage}
        pool: {pool}
    - name: start
      community.proxmox.proxmox_kvm:
        vmid: "{{{{ vmid }}}}"
        state: started
"""


def find_playbook(given: str | None = None) -> str | None:
    """``ansible-playbook``: the one given, $SAND_BENCH_ANSIBLE, or the one on PATH."""
    return given or os.environ.get("SAND_BENCH_ANSIBLE") or shutil.which("ansible-playbook")


def ansible_seconds(playbook: str, vms: int, clone_secs: float) -> float:
    """Seconds of one ``ansible-playbook -f 10`` creating and starting ``vms`` VMs."""
    from fakepve.certs import make_cert

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        pki = make_cert(tmp, hosts=("127.0.0.1",))[:2]
        rig = FakePveRig(pki, work / "pve", time_scale=1.0)
        try:
            rig.set_task_secs("qmclone", clone_secs)
            rig.set_task_secs("qmstart", START_SECS)
            user, token = rig.token_id.split("!")
            secret = rig.token_file.read_text(encoding="utf-8").strip().split("=", 1)[1]
            secret_file = work / "token-secret"
            secret_file.write_text(secret, encoding="utf-8")  # never on argv
            secret_file.chmod(0o600)
            python = Path(playbook).resolve().parent / "python"
            hosts = [
                f"c-{i:03d} vmid={FIRST_VMID + i} ansible_connection=local "
                f"ansible_python_interpreter={python if python.exists() else sys.executable}"
                for i in range(vms)
            ]
            (work / "hosts.ini").write_text("\n".join(hosts) + "\n", encoding="utf-8")
            (work / "play.yml").write_text(
                PLAY.format(
                    port=rig.port,
                    user=user,
                    token_id=token,
                    token_file=secret_file,
                    node=rig.nodes[0],
                    template=rig.template_name,
                    storage=rig.storage,
                    pool=rig.pool,
                ),
                encoding="utf-8",
            )
            env = {**os.environ, "ANSIBLE_HOST_KEY_CHECKING": "False", "ANSIBLE_NOCOLOR": "1"}
            started = time.perf_counter()
            done = subprocess.run(
                [playbook, "-i", "hosts.ini", "-f", str(FORKS), "play.yml"],
                cwd=work,
                env=env,
                capture_output=True,
                text=True,
            )
            seconds = time.perf_counter() - started
            if done.returncode != 0:
                raise RuntimeError(f"ansible-playbook failed:\n{done.stdout[-3000:]}")
            made = [vm for vm in rig.vms() if vm.name.startswith("c-")]
            running = [vm for vm in made if vm.status == "running"]
            assert len(made) == len(running) == vms, (len(made), len(running))
            return seconds
        finally:
            rig.stop()


def rows(
    vms: int = 50, clone_secs: float = 20.0, playbook: str | None = None
) -> list[tuple[str, str]]:
    found = find_playbook(playbook)
    if found is None:
        return [("(left out)", "no ansible-playbook (set $SAND_BENCH_ANSIBLE; see the module)")]
    theirs = ansible_seconds(found, vms, clone_secs)
    m = measure(vms, clone_secs, 1.0)
    ours, k = float(str(m["elapsed"])), int(str(m["k"]))
    ideal = math.ceil(vms / FORKS) * clone_secs + START_SECS
    record(
        f"Proxmox cold create, N={vms}, {clone_secs:g} s clones: sand at its defaults",
        ours,
        "s",
        baseline=(f"Ansible proxmox_kvm forks={FORKS}", theirs),
    )
    return [
        (
            f"N={vms}, {clone_secs:g} s clones, create and start",
            f"sand ({k} at a time, its default) {ours:.1f} s; Ansible proxmox_kvm "
            f"forks={FORKS} {theirs:.1f} s ({ours / theirs:.2f}x); ideal at {FORKS} at "
            f"a time {ideal:.1f} s",
        )
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vms", type=int, default=50)
    parser.add_argument("--clone-secs", type=float, default=20.0)
    parser.add_argument("--ansible-playbook", help="default: $SAND_BENCH_ANSIBLE or PATH's")
    args = parser.parse_args()
    for key, value in rows(args.vms, args.clone_secs, args.ansible_playbook):
        print(f"{key:40} {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
