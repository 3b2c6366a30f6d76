"""The credential broker: brokered secrets stay on the host (docs/credentials.md).

- ``access``: what a guest is given (the broker's URL, its VM's broker credential).
- ``store``: the broker's host state (grants by credential hash, where it listens).
- ``pktline``: git's pkt-lines, as much as a push's refs and a refusal need.
- ``api``: what a plain HTTP request may do (the GitHub API of the repositories, declared
  hosts), decided from its method, path and body.
- ``server``: the HTTP reverse proxy for git's smart HTTP and those requests, deciding each.
- ``daemon``: the broker process that outlives an apply (``python -m sand.broker``).
- ``client``: an apply's side: start or adopt the broker, grant a VM, revoke it.
"""
