"""How much sand does at once and how often, unless told otherwise: written once here,
shown by the flags' help, fallen back on by the runs, the loops and the board."""

from __future__ import annotations

PARALLELISM = 10  # VMs created or changed at once (--parallelism)
INTERVAL = 60.0  # seconds between the re-observations of apply --watch and sand sync
DEBOUNCE = 0.5  # seconds a manifest save settles before apply --watch plans again
BOARD_INTERVAL = 30.0  # seconds between the board's re-observations (sand ui)
# A run nobody watches (sand sync) waits this long for another applier's lease.
UNATTENDED_LEASE_WAIT = 300.0
# How patient sand is with a running guest's SSH, on every path that reaches one (sand
# shell, cp, land, publish; the unpushed-work sweep before a destroy or replace; status
# --deep; the plan's check that a Lima guest's secrets survived): one try's connection,
# handshake and login, then all tries. A guest just restarted (a cpus change on Lima,
# under TCG) took longer than 8 s per handshake: the sweep's 8 s tries over 20 s refused
# a destroy while sand shell, with these, got in. One number for all, so no path gives
# up on a guest another path reaches.
GUEST_SSH_TRY = 15.0
GUEST_SSH_PATIENCE = 30.0
