"""The scrub before a VM's memory is saved (sand/provision/memory.py): its command line
holds names only, and only its own report lines are read back."""

from __future__ import annotations

import shlex

from sand.provision.memory import SCRUB, left_words, scrub_command
from tests.provision.helpers import make_vm, secret


def test_the_scrub_command_is_the_fixed_script_over_the_secrets_variable_names():
    vm = make_vm(user="claude", secrets=(secret("API", "~/work", "API_KEY"),))
    argv = shlex.split(scrub_command(vm, "debian"))
    assert argv[:5] == ["sudo", "-n", "/bin/sh", "-c", SCRUB]
    assert argv[5:] == ["sand-scrub", "claude", "API_KEY"]  # $0, the user, the names
    assert shlex.split(scrub_command(vm, "root"))[:3] == ["/bin/sh", "-c", SCRUB]


def test_only_the_scrubs_own_report_lines_are_read_and_each_once():
    output = (
        b"left memory\n"
        b"left env API_KEY\nleft env API_KEY\n"
        b"left agent claude\n"
        b"left agent evil\x1b[2J\n"  # not an agent: not read
        b"left env $(reboot)\n"  # not a variable name
        b"shred: some error text\n"
    )
    assert left_words(output) == (
        "freed pages not zeroed (init_on_free=1 from the guest's next boot)",
        "API_KEY in a running process's environment",
        "claude login (its running session)",
    )
    assert left_words(b"") == ()
