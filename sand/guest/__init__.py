"""The guest transport: how sand reaches a VM over SSH (endpoints, connections)."""
