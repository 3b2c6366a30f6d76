"""The per-VM verbs: ``sand shell``, ``sand cp``, ``sand land``, ``sand publish``.

Everything here treats what comes back from a guest as hostile data: it is
parsed into small records and validated before any of it is printed, stored
or used, and none of it ever reaches a host shell. The verbs stand on the
guest transport (:mod:`sand.guest`: SSH, the script runner, SFTP, the
landing sweep) and on the project session (:mod:`sand.project`), never on
``sand.apply``. Pure logic (branch-name rules, the landing ledger, change
sets, the forge client) imports neither asyncssh nor the backends, so its
tests run in milliseconds.
"""
