"""Fixtures of the three test rigs, registered once for the whole suite:
real guests (netns sshd, qemu), fakepve, and the limactl stand-in."""

pytest_plugins = [
    "tests.rig.fixtures",
    "tests.fakepve_rig.fixtures",
    "tests.limactl_standin.fixtures",
]
