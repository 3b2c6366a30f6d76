"""Egress enforced on the host, outside the guest (docs/egress.md).

- ``policy``: a VM's policy file as the proxy reads it, and the proxy's one decision
  (which names and addresses, on which ports).
- ``proxy``: the egress proxy, one process per guest connection (``python -m
  sand.egress.proxy``), logging each denial on the host.
- ``relay``: the credential broker's forward for a restricted guest (``python -m
  sand.egress.relay``), one process per connection.
- ``registry``: Proxmox guests' egress proxy on this host: which VM may use it (its
  credential and address), its policy files, the listener started or adopted.
- ``listener``: that proxy, one long-lived process per project and backend (``python
  -m sand.egress.listener``), serving each connection as ``proxy`` does.
- ``shim``: the QEMU shim a Lima VM with a deny policy is started through: net0
  restricted, the proxy forwarded (``python -m sand.egress.shim``).
"""
