"""What an isolated agent program needs from the host's files, found on real files."""

from __future__ import annotations

import os
import pwd
import sys
import tempfile
from pathlib import Path

from oracle.isolation.allowlist import installation, program_files

ENV = {"PATH": "/usr/bin:/bin"}


def _program(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


def test_a_program_brings_its_installation_and_its_interpreter_through_env(tmp_path: Path):
    tool = _program(tmp_path / "tool" / "bin" / "tool", "#!/bin/sh\n")
    agent = _program(tmp_path / "app" / "agent", "#!/usr/bin/env -S tool --flag\n")
    env = {"PATH": f"{tool.parent}:/usr/bin"}
    found = program_files(agent, [str(agent)], env)
    assert found.chain == (
        ("it is at", agent),
        ("its interpreter is", tool),
        ("its interpreter is", Path("/bin/sh")),
    )
    # The agent's own folder, and the tool's installation (above its bin folder).
    assert found.readable == (tmp_path / "app", tmp_path / "tool")


def test_a_program_in_a_broad_folder_comes_alone():
    """A folder right under the root (``/tmp`` here) or a home folder is never bound whole:
    the program comes alone."""
    assert installation(Path("/usr/local/bin")) == Path("/usr/local")
    home = Path(pwd.getpwuid(os.getuid()).pw_dir)
    assert installation(home / "bin") == home / "bin"  # not the home folder above it
    with tempfile.NamedTemporaryFile(dir="/tmp", prefix="oracle-agent-") as f:
        program = Path(f.name)
        program.write_text("#!/bin/sh\n")
        assert program_files(program, [str(program)], ENV).readable == (program,)
    assert program_files(Path("/nonexistent/agent"), ["agent"], ENV).readable == ()


def test_a_virtual_environment_brings_its_base_and_what_its_site_packages_add(tmp_path: Path):
    venv = tmp_path / "venv"
    site = venv / "lib" / "python3.12" / "site-packages"
    site.mkdir(parents=True)
    base = Path(sys.base_prefix)
    (venv / "pyvenv.cfg").write_text(
        f"home = {base / 'bin'}\ninclude-system-site-packages = false\n"
    )
    python = venv / "bin" / "python"
    python.parent.mkdir()
    python.symlink_to(Path(sys.executable).resolve())
    old_style, mapped, spaced, script_home = (tmp_path / n for n in ("old", "src", "ns", "app"))
    for folder in (old_style, mapped, spaced, script_home):
        folder.mkdir()
    (site / "old.pth").write_text(f"# a comment\nimport os\n{old_style}\n")
    (site / "__editable__.pkg-1.0.pth").write_text("import __editable___pkg_1_0_finder\n")
    (site / "__editable___pkg_1_0_finder.py").write_text(
        "import sys\n"
        f"MAPPING: dict[str, str] = {{'pkg': {str(mapped / 'pkg')!r}}}\n"
        f"NAMESPACES: dict[str, list[str]] = {{'ns': [{str(spaced)!r}]}}\n"
        "MAPPING['other'] = '/never/read'\n"
    )
    (mapped / "pkg").mkdir()
    script = script_home / "agent.py"
    script.write_text("print('hi')\n")
    found = program_files(python, [str(python), "-X", "dev", "-u", str(script)], ENV)
    expected = {venv, old_style, mapped / "pkg", spaced, script_home}
    assert {p for p in found.readable if tmp_path in p.parents} == expected
    if not str(base).startswith(("/usr/", "/bin/")):  # a base outside the system's folders
        assert base in found.readable or any(p in base.parents for p in found.readable)
    # -c and -m name no script: only the command's absolute file arguments come along.
    by_module = program_files(python, [str(python), "-m", "agent", str(script)], ENV)
    assert script in by_module.readable and script_home not in by_module.readable


def test_nothing_inside_a_hidden_folder_is_bound(tmp_path: Path):
    agent = _program(tmp_path / "runs" / "agent", "#!/bin/sh\n")
    found = program_files(agent, [str(agent)], ENV, hidden=[tmp_path / "runs"])
    assert found.readable == ()
    assert found.chain[0] == ("it is at", agent)
