"""``sand doctor``'s look at a backend's egress proxy on this host.

The proxy is where a Proxmox guest's domain rules are enforced, and it is started by
the apply that provisions a VM behind it, so a person learns that it cannot run (the
declared address is not one of this host's, another program holds the port) only from
a failed provisioning. Doctor says it first, and also that a listener died (a restart
of this host, a kill): the VMs registered behind it are without their allowed names,
failing closed, until the next apply delivers to them again
(``sand.survey.host_services``).
"""

from __future__ import annotations

import socket

from sand.egress.registry import listener_of, registered

CONNECT_PATIENCE = 3.0


def _split(listen: str) -> tuple[str, int]:
    address, _, port = listen.rpartition(":")
    return address, int(port)


def _bind_problem(listen: str) -> str | None:
    """Why a listener could not bind ``listen`` now (None: it could)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        # As the listener binds: a port left in TIME_WAIT by the last one is free.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(_split(listen))
        except OSError as exc:
            return exc.strerror or str(exc)
    return None


def _answers(listen: str) -> str | None:
    """Why the listener at ``listen`` takes no connection (None: it takes one)."""
    try:
        socket.create_connection(_split(listen), timeout=CONNECT_PATIENCE).close()
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


def proxy_findings(project: str, backend: str, listen: str) -> list[tuple[str, str]]:
    """(level, text) about the proxy ``backend`` declares at ``listen``: ``ok``,
    ``warning`` or ``error``, as the backend's other findings."""
    vms = registered(project, backend)
    behind = f"{len(vms)} VM(s) registered behind it"
    running = listener_of(project, backend)
    if running is not None:
        pid, at = running
        if at != listen:
            return [
                (
                    "warning",
                    f"egress proxy listens on {at} (pid {pid}), the manifest declares "
                    f"{listen}: the next apply that provisions a VM behind it moves it",
                )
            ]
        refused = _answers(listen)
        if refused is not None:
            why = f"egress proxy (pid {pid}) takes no connection on {listen}: {refused}"
            return [("error", why)]
        return [("ok", f"egress proxy listening on {listen} (pid {pid}), {behind}")]
    problem = _bind_problem(listen)
    if problem is not None:
        return [
            (
                "error",
                f"egress proxy cannot listen on {listen}: {problem} (egress_proxy must be "
                "an address of this host on the guests' network, with a port nothing else "
                "holds)",
            )
        ]
    if vms:
        return [
            (
                "error",
                f"egress proxy is not running, with {behind}: their allowed names fail until "
                "sand apply delivers to them again, which starts it (the plan shows it)",
            )
        ]
    return [("ok", f"egress proxy can listen on {listen}; the apply that needs it starts it")]
