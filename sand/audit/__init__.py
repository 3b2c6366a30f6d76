"""The host's audit trail: what sand did, hash-chained, signed, verifiable offline.

- ``trail``: ``record(kind, **fields)`` and ``secret_digest(value)``, what the rest of
  sand calls; where the log lives
- ``chain``: one record as bytes, its hash and its link
- ``log``: appending under a lock, torn records owned up to, checkpoints every so often
- ``keys``: the host's signing key and secret-digest key, made once, 0600
- ``seal``: signed checkpoints and ``head.json``
- ``verify``: the walk that names the first record the chain no longer vouches for
- ``export``: checkpoints pushed to a git ref (and read back) or sent to syslog
- ``entries``: the records as ``sand audit log`` shows them
- ``check``: the log held to the pinned key, ``head.json`` and the exported checkpoints
"""
