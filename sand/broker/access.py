"""What a guest is given to reach the broker: its URL and the VM's broker credential.

The credential is worthless anywhere but at this broker, for this VM, while its
entry in the broker's grants lasts (it goes with the VM). It is still kept off
argv and out of logs like any secret: ``repr`` never shows it.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class BrokerAccess:
    url: str  # http://<address the guest reaches the broker at>:<port>
    _credential: str = field(repr=False)

    def reveal(self) -> str:
        return self._credential
