"""The guest transport: how sand reaches a VM and runs things in it, over SSH.

Both provisioning and the verbs stand on this package, and it is the only part
of sand (with the Lima backend's host runner) that imports asyncssh:

* :mod:`~sand.guest.endpoint`: where a guest is reached (what a backend hands out);
* :mod:`~sand.guest.ssh`: connecting (identity only, host keys pinned, the jump host);
* :mod:`~sand.guest.pinfile`: sand's own pin file read and pruned without asyncssh (a
  deleted VM's pins dropped);
* :mod:`~sand.guest.runner`: running a fixed script or a command, output bounded;
* :mod:`~sand.guest.fs` and :mod:`~sand.guest.sftp`: the guest's files for ``sand cp``;
* :mod:`~sand.guest.stream`: a person's command with its output streamed through;
* :mod:`~sand.guest.sweep` (with :mod:`~sand.guest.remotes`): the read-only landing
  sweep of a guest's git checkouts, read by ``sand land`` and the unpushed-work guard;
* :mod:`~sand.guest.user_known_hosts`: a person's own known_hosts, read with OpenSSH's
  rules, for the hosts the person named (a remote Lima host, a jump host).
"""

import warnings

from cryptography.utils import CryptographyDeprecationWarning

# asyncssh names cryptography's DSA, ARC4 and TripleDES classes as it is imported, and
# recent cryptography releases warn of each (CryptographyDeprecationWarning: ten lines or
# more on stderr of every command that reaches a guest). sand never offers or accepts
# those algorithms, so the warnings say nothing to its user; only cryptography's, raised
# in asyncssh's own modules, are hushed. Here, the package every import of asyncssh in
# sand goes through first.
warnings.filterwarnings("ignore", category=CryptographyDeprecationWarning, module=r"asyncssh(\.|$)")
