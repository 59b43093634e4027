from __future__ import annotations

import pytest

from oracle.base.globs import PathOutsideRootError, check_relative, match


@pytest.mark.parametrize(
    ("pattern", "path", "expected"),
    [
        ("config/*.toml", "config/app.toml", True),
        ("config/*.toml", "config/sub/app.toml", False),
        ("**/*.key", "a/b/c.key", True),
        ("**/*.key", "c.key", True),
        ("public/**", "public/x/y.txt", True),
        ("public/**", "publicity.txt", False),
        ("*.txt", "a/b.txt", False),
        ("file?.txt", "file1.txt", True),
        ("file[0-9].txt", "filex.txt", False),
        ("file[!0-9].txt", "filex.txt", True),
        ("a.b", "axb", False),
    ],
)
def test_match(pattern, path, expected):
    assert match(pattern, path) is expected


@pytest.mark.parametrize("bad", ["../x", "a/../../x", "/etc/passwd", ".."])
def test_leaving_the_root(bad):
    with pytest.raises(PathOutsideRootError):
        check_relative(bad)


def test_normalised():
    assert check_relative("a/./b/../c") == "a/c"
    assert check_relative(".") == ""
