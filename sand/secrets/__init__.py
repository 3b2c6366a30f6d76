"""Host-side secrets: resolve values from their sources, stamp what was delivered.

Values are resolved only for the VMs being applied, live only in memory as
:class:`SecretValue`, and reach a guest only over an SSH channel's stdin
(``sand.provision``). What stays behind is a stamp on the VM itself
(``sand.secrets.stamp``), never a value; the host keeps nothing.
"""

from sand.secrets.resolve import SecretValue, resolve_secrets, reveal, secret_names
from sand.secrets.stamp import Stamper

__all__ = [
    "SecretValue",
    "Stamper",
    "resolve_secrets",
    "reveal",
    "secret_names",
]
