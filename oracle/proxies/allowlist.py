"""Moved to `oracle.isolation.allowlist`, shared by command agents and the sealed scorer; this
module keeps the old import path working."""

from oracle.isolation.allowlist import (
    BIN_FOLDERS,
    MAX_INTERPRETERS,
    ProgramFiles,
    installation,
    program_files,
)

__all__ = [
    "BIN_FOLDERS",
    "MAX_INTERPRETERS",
    "ProgramFiles",
    "installation",
    "program_files",
]
