"""A self-signed certificate for the rig's HTTPS git server (openssl's CLI).

The certificate is its own CA: a client that trusts it (``SSL_CERT_FILE``,
``http.sslCAInfo``) checks the server as it would a real one, name included.
"""

from __future__ import annotations

from pathlib import Path

from tests.rig._util import run


def self_signed(directory: Path, address: str, names: tuple[str, ...] = ()) -> tuple[str, str]:
    """(certificate, key) files for ``address`` (an IP) and ``names`` in ``directory``."""
    alt = ",".join([f"IP:{address}", *(f"DNS:{name}" for name in names)])
    cert, key = directory / "rig-cert.pem", directory / "rig-key.pem"
    run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=sand-rig",
            "-addext",
            f"subjectAltName={alt}",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ]
    )
    return str(cert), str(key)
