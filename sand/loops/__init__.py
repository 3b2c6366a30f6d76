"""What runs by itself: ``apply --watch``, ``sand sync`` and its git mirror, their wake-ups,
and the unattended run each of them makes."""
