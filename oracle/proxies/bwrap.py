"""Moved to `oracle.isolation.bwrap`, shared by command agents and the sealed scorer; this module
keeps the old import path working."""

from oracle.isolation.bwrap import (
    ALWAYS_PRIVATE,
    FRESH,
    SYSTEM_FOLDERS,
    BwrapMissingError,
    BwrapPolicy,
    Unseen,
    bwrap_argv,
    bwrap_path,
    hidden_by,
    make_hidden_folders,
    sealed_folders,
    system_folders,
    unseen,
    within,
)

__all__ = [
    "ALWAYS_PRIVATE",
    "FRESH",
    "SYSTEM_FOLDERS",
    "BwrapMissingError",
    "BwrapPolicy",
    "Unseen",
    "bwrap_argv",
    "bwrap_path",
    "hidden_by",
    "make_hidden_folders",
    "sealed_folders",
    "system_folders",
    "unseen",
    "within",
]
