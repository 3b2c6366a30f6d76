"""How much sand does at once and how often, unless told otherwise: written once here,
shown by the flags' help, fallen back on by the runs, the loops and the board."""

from __future__ import annotations

PARALLELISM = 10  # VMs created or changed at once (--parallelism)
INTERVAL = 60.0  # seconds between the re-observations of apply --watch and sand sync
DEBOUNCE = 0.5  # seconds a manifest save settles before apply --watch plans again
BOARD_INTERVAL = 30.0  # seconds between the board's re-observations (sand ui)
# A run nobody watches (sand sync) waits this long for another applier's lease.
UNATTENDED_LEASE_WAIT = 300.0
