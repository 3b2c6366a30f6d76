"""Desired state: the manifest resolved into one normalised spec per VM."""

from sand.desired.spec import (
    DesiredPort,
    DesiredRepo,
    DesiredSecret,
    DesiredState,
    DesiredVM,
    build_desired,
    digest,
)

__all__ = [
    "DesiredPort",
    "DesiredRepo",
    "DesiredSecret",
    "DesiredState",
    "DesiredVM",
    "build_desired",
    "digest",
]
