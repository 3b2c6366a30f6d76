"""sand: declarative fleets of disposable development VMs for coding agents.

The package tree follows the data flow: ``manifest`` (YAML → validated models)
→ ``desired`` (normalised per-VM specs with fingerprints) → ``backends``
(observe what exists) → ``plan`` (pure diff) → ``apply`` (the only layer that
mutates, together with the backends) → ``provision`` (guest content over SSH).
"""

__version__ = "0.1.0"
