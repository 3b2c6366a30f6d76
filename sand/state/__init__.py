"""Host state: journal, project lock, per-VM records. Secret-free by construction."""
