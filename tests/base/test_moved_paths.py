"""Old import paths keep working for one release, each with a deprecation warning."""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
import subprocess
import sys
import warnings

import pytest

from oracle.base.moved import MOVED

#: Old modules whose path is now a package's, and one name each used to hold.
NOW_PACKAGES = {
    "oracle.cli": "main",
    "oracle.controls": "run_controls",
    "oracle.evidence": "Evidence",
    "oracle.matrix": "parse_matrix",
    "oracle.sandbox": "Sandbox",
    "oracle.trial": "run_trial",
}


def _deprecations(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]


@pytest.mark.parametrize(
    ("old", "new"), sorted((o, n) for o, n in MOVED.items() if o not in NOW_PACKAGES)
)
def test_an_old_module_path_warns_and_gives_the_module_at_its_new_place(old, new):
    assert importlib.util.find_spec(old) is not None
    sys.modules.pop(old, None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)
    assert any(m.startswith(f"{old} moved to {new};") for m in _deprecations(caught))


@pytest.mark.parametrize(("old", "name"), sorted(NOW_PACKAGES.items()))
def test_a_name_of_an_old_module_that_is_now_a_package_still_imports(old, name):
    package = importlib.import_module(old)
    # Every module of the package loaded first: none may shadow a name the old module held.
    for found in pkgutil.iter_modules(package.__path__):
        if found.name != "__main__":
            importlib.import_module(f"{old}.{found.name}")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = getattr(package, name)
    assert value is getattr(importlib.import_module(MOVED[old]), name)
    assert any(f"{old}.{name} moved to {MOVED[old]}.{name}" in m for m in _deprecations(caught))
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = package.no_such_name


def test_the_warning_points_at_the_code_that_used_the_old_path(tmp_path):
    user = tmp_path / "user_code.py"
    user.write_text("import oracle.diff\nfrom oracle.trial import run_trial\n")
    done = subprocess.run(
        [sys.executable, "-W", "always::DeprecationWarning", str(user)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert f"{user}:1: DeprecationWarning: oracle.diff moved to oracle.evidence.diff" in done.stderr
    assert f"{user}:2: DeprecationWarning: oracle.trial.run_trial moved to" in done.stderr


def test_a_path_that_never_existed_is_still_an_import_error():
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("oracle.no_such_module")
