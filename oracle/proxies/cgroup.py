"""Moved to `oracle.isolation.cgroup`, shared by command agents and the sealed scorer; this module
keeps the old import path working."""

from oracle.isolation.cgroup import (
    CGROUP_ENV,
    PREFIX,
    STALE_AFTER,
    RunLimits,
    available,
)

__all__ = [
    "CGROUP_ENV",
    "PREFIX",
    "STALE_AFTER",
    "RunLimits",
    "available",
]
