from tests.fakepve_rig.fixtures import *  # noqa: F403
