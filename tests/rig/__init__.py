"""Real-guest test rig for sand.

Real SSH targets, all built from one cached Debian bookworm
debootstrap so they behave like the Debian guests sand provisions:

* :class:`tests.rig.guest.NetnsGuest` -- a "container" guest: its own network
  namespace, PID/mount/UTS namespaces and a disposable overlay copy of the
  rootfs, running a real OpenSSH ``sshd``.  Starts in well under a second.
* :class:`tests.rig.qemu.QemuGuest` -- one full VM (own kernel, systemd as
  PID 1) under ``qemu-system-x86_64 -accel tcg``.
* :class:`tests.rig.pveguests.QemuHypervisor` -- real VMs behind a fakepve rig's
  VMs: each that starts boots (TCG) with the NoCloud drive PVE would generate from
  its config, DHCP on a bridge of its own, its qemu-guest-agent answering the API
  (image: :mod:`tests.rig.pveimage`, the real-Lima image plus the agent); with
  ``firewall=True`` each VM's PVE firewall applied on the host as pve-firewall does
  (:class:`tests.rig.pvefirewall.HostFirewall`), its denial log read off netlink
  (:class:`tests.rig.nflog.NflogReader`); :class:`tests.rig.witness.Witness` listens
  where a guest must not reach.
* :class:`tests.rig.gitserver.GitServer` -- ``git http-backend`` behind HTTP
  basic auth with a token, reachable from netns guests.

Guests run on the *workbench tree* (:mod:`tests.rig.workbench`): the rootfs
with what sand installs in every guest already installed, as on a prepared
image, because guests reach no Debian mirror. The same module serves the
*apt mirror* of those packages (:class:`tests.rig.workbench.AptMirror`) for
tests that prove the installs on a bare guest.

Helpers: :mod:`tests.rig.ssh` (asyncssh options with the rig key and the
pinned host key) and :class:`tests.rig.argv.ArgvWatch` (samples every
process's argv during an operation, to prove a secret never appeared there).
:class:`tests.rig.slowdoor.SlowDoor` plays a slow guest in front of a guest's sshd;
:class:`tests.rig.acceptloop.AcceptLoop` is the accept thread of a test's own TCP
server, which a close really ends (a thread left in accept on a closed socket takes
a later test's connections).

The pytest fixtures live in :mod:`tests.rig.fixtures`; list it in a conftest's
``pytest_plugins`` to use them.  Everything here needs root; .ci/rig-setup.sh
installs the host packages and pre-builds the caches.
"""
