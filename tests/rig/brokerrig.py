"""The broker's HTTP side run in this process, for one VM, beside a rig git server.

The same server ``python -m sand.broker`` runs, with one VM granted and the token
handed to it as an apply would; its upstream TLS trusts ``cafile`` (the rig's
self-signed certificate) as the daemon trusts ``SSL_CERT_FILE``.
"""

from __future__ import annotations

import ssl
import threading
from pathlib import Path

from sand.broker.server import BrokerServer, BrokerState
from sand.broker.store import VMGrants, credential_hash, update_grants
from sand.desired.brokered import BrokerGrant


def start_broker(
    directory: Path,
    vm: str,
    credential: str,
    grant: BrokerGrant,
    token: str,
    cafile: str,
    more: tuple[tuple[BrokerGrant, str], ...] = (),
) -> BrokerServer:
    """A broker serving ``vm`` (its ``credential``) on 127.0.0.1, granted ``grant``
    (and each of ``more``) with its token; shut it down after."""
    directory.mkdir(mode=0o700, exist_ok=True)
    granted = ((grant, token), *more)
    update_grants(
        directory, vm, VMGrants(credential_hash(credential), "", tuple(g for g, _ in granted))
    )
    state = BrokerState(directory)
    state.tokens.update({g.secret: t for g, t in granted})
    broker = BrokerServer(("127.0.0.1", 0), state)
    broker.tls = ssl.create_default_context(cafile=cafile)
    threading.Thread(target=broker.serve_forever, daemon=True).start()
    return broker
