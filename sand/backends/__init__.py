"""Backends: where VMs live. Each sits behind :class:`sand.backends.protocol.Backend`."""
