"""The endpoint sand reads from an instance's ``ssh.config`` (on the limactl stand-in's
disk), written in any form OpenSSH's grammar allows: ``Key = value``, ``Key=value``,
tabs, quotes, comments, keywords in any case, a ``Match`` block after the host's."""

from __future__ import annotations

import pytest

from sand.backends.lima import LimaBackend
from sand.state.journal import Journal
from tests.backends.lima.conftest import one
from tests.limactl_standin import StandIn

FORMS = {
    "equals": "Host lima-vm1\n  Hostname = 10.0.0.7\n  Port = 60022\n  User = dev\n"
    '  IdentityFile = "{key}"\n',
    "tabs": "Host\tlima-vm1\n\tHostName\t10.0.0.7\n\tPORT\t60022\n\tUser\tdev\n"
    '\tIdentityFile\t"{key}"\n',
    "packed": "Host lima-vm1 other\nhostname=10.0.0.7\nport=60022 # Lima's own\nuser=dev\n"
    "identityfile='{key}'\nMatch all\n  Port 22\n",
}


@pytest.mark.parametrize("form", sorted(FORMS))
async def test_every_form_of_the_file_gives_the_same_endpoint(
    standin: StandIn, backend: LimaBackend, journal: Journal, form: str
) -> None:
    vm = one()
    await backend.observe([vm])
    current = await backend.create(vm, journal)
    key = standin.lima_home / "_config" / "a key"
    (standin.lima_home / "vm1" / "ssh.config").write_text(FORMS[form].format(key=key))
    ep = await backend.endpoint(vm, current)
    assert (ep.host, ep.port, ep.user, ep.identity) == ("10.0.0.7", 60022, "dev", str(key))
