"""Plan-time reads of the world: the plan, its preflight and guard, the recovered view,
status and health. Shared by plan, apply, status and the board; changes nothing."""
