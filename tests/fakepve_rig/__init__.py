"""A fakepve (fake Proxmox VE API) test rig: start, seed, fault and inspect it.

fakepve is AGPL and test-only: it is imported here and in tests, never from
``sand/``. See :mod:`tests.fakepve_rig.rig` for :class:`FakePveRig` and
:mod:`tests.fakepve_rig.fixtures` for the pytest fixtures.
"""

from tests.fakepve_rig.rig import SAND_PRIVILEGES, FakePveRig, Request

__all__ = ["SAND_PRIVILEGES", "FakePveRig", "Request"]
