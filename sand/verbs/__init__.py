"""The per-VM verbs: ``sand shell``, ``sand cp``, ``sand land``, ``sand publish``.

Everything here treats what comes back from a guest as hostile data: it is
parsed into small records and validated before any of it is printed, stored
or used, and none of it ever reaches a host shell. Pure logic (branch-name
rules, the landing ledger, change sets, the forge client) lives in modules
that import neither asyncssh nor the backends, so its tests run in
milliseconds; :mod:`sand.verbs.guest` is the one place that talks SSH.
"""
