"""What a guest is given to reach the broker: its URL and the VM's broker credential.

The credential is worthless anywhere but at this broker, for this VM, while its
entry in the broker's grants lasts (it goes with the VM). It is still kept off
argv and out of logs like any secret: ``repr`` never shows it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Where a Lima guest whose network is restricted by its egress policy (QEMU's
# ``restrict=on``: it cannot reach the host's loopback at 192.168.5.2) reaches the
# broker: a forward of its own in Lima's user-mode network, relayed on the host to the
# broker's loopback listener (``sand.egress.shim``, ``sand.egress.relay``).
RESTRICTED_LIMA_ADDRESS = "192.168.5.5"
RESTRICTED_LIMA_PORT = 80


@dataclass(frozen=True)
class BrokerAccess:
    url: str  # http://<address the guest reaches the broker at>:<port>
    _credential: str = field(repr=False)

    def reveal(self) -> str:
        return self._credential
