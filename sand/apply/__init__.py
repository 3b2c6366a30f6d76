"""Apply: carry out a plan, recover from crashes, guard what holds work, watch."""
