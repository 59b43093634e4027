"""File-system operations the sandbox and the fixtures share."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path
from typing import Any


def remove_tree(path: Path) -> None:
    """Remove `path` whatever its permission bits say (an agent may have chmod-ed things);
    a link is removed itself, never followed."""

    def retry(func: Any, p: str, exc: BaseException) -> None:
        if isinstance(exc, FileNotFoundError):
            return
        parent = os.path.dirname(p)
        os.chmod(parent, stat.S_IRWXU)
        if os.path.isdir(p) and not os.path.islink(p):
            os.chmod(p, stat.S_IRWXU)
        func(p)

    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path, onexc=retry)
