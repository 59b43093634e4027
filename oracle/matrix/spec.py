"""The matrix file: which harnesses, tasks, repetitions, models and profiles make the cells.

A matrix is TOML (see ``matrices/demo.toml``)::

    schema_version = 1
    name = "demo"
    tasks = ["../tasks/demo/task_*.py"]   # paths or globs, relative to this file
    repetitions = 3
    models = ["none"]                      # or [models.<name>] tables: provider, version, settings
    profiles = ["default"]                 # or [profiles.<name>] tables: settings
    limits = { max_total_bytes = 268435456 }   # optional: archive limits (cell_archive.Limits)

    [harnesses.careful]
    agent = "careful"                      # careful, obedient, noop, module:function, file.py:fn

    [harnesses.obedient]
    agent = "obedient"
    settings = { temperature = 0 }

Harnesses may also be a list, each an agent named by itself or a table naming it (its cells'
harness is the name)::

    harnesses = ["careful", { agent = "cmd:python agent.py --x", name = "mine" }]

Every cell is one harness × task × model × profile × repetition; its id holds all five parts.
A file that is not TOML, or breaks the schema, raises `MatrixError` naming the file and line.
"""

from __future__ import annotations

import glob
import hashlib
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from oracle.evidence.record import Cell
from oracle.matrix.cell_archive import CellMeta, HarnessSetting, Limits, ModelSetting, Setting

SettingValue = str | int | float | bool
#: What a harness, model or profile name may be (it is part of each cell's id and archive
#: name); an agent's ``--name`` on the command line is held to it too.
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:@+-]*$")


class MatrixError(ValueError):
    """A matrix file that cannot be used; the message names the file, line and key."""


def _check_name(name: str, what: str) -> str:
    if not NAME.match(name):
        raise ValueError(
            f"{what} name {name!r}: use letters, digits and _ . : @ + - (no spaces or slashes)"
        )
    return name


class HarnessSpec(BaseModel):
    """An agent adapter and its settings (handed to the agent as ``ORACLE_SETTING_<KEY>``)."""

    model_config = ConfigDict(extra="forbid")

    agent: str = Field(min_length=1)
    settings: dict[str, SettingValue] = Field(default_factory=dict)


class ModelSpec(BaseModel):
    """A model: who serves it and which version. Every cell's archive records both; unless
    reduced with ``--no-parity``, the reducer holds each archive to what the matrix declares
    here."""

    model_config = ConfigDict(extra="forbid")

    provider: str = "none"
    version: str = "none"
    settings: dict[str, SettingValue] = Field(default_factory=dict)


class ProfileSpec(BaseModel):
    """A profile: a named set of settings for the agent."""

    model_config = ConfigDict(extra="forbid")

    settings: dict[str, SettingValue] = Field(default_factory=dict)


class LimitsSpec(BaseModel):
    """``[limits]``: the archive limits of the run (`oracle.matrix.cell_archive.Limits`), one
    setting
    for `oracle matrix run` (which refuses, before signing, an archive past them) and
    `oracle reduce` (which reads with them)."""

    model_config = ConfigDict(extra="forbid")

    max_archive_bytes: int = Field(Limits.max_archive_bytes, ge=1)
    max_members: int = Field(Limits.max_members, ge=1)
    max_member_bytes: int = Field(Limits.max_member_bytes, ge=1)
    max_total_bytes: int = Field(Limits.max_total_bytes, ge=1)
    max_ratio: float = Field(Limits.max_ratio, gt=0)
    ratio_free_bytes: int = Field(Limits.ratio_free_bytes, ge=0)


class MatrixFile(BaseModel):
    """The schema of a matrix file."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = 1
    name: str = "matrix"
    harnesses: dict[str, HarnessSpec] = Field(min_length=1)
    tasks: list[str] = Field(min_length=1)
    repetitions: int = Field(1, ge=1, le=100_000)
    models: dict[str, ModelSpec] = Field(default_factory=lambda: {"none": ModelSpec()})
    profiles: dict[str, ProfileSpec] = Field(default_factory=lambda: {"default": ProfileSpec()})
    limits: LimitsSpec = Field(default_factory=LimitsSpec)

    @field_validator("schema_version")
    @classmethod
    def _version(cls, v: int) -> int:
        if v != 1:
            raise ValueError(f"schema_version {v} is not supported (this oracle reads 1)")
        return v

    @field_validator("models", "profiles", mode="before")
    @classmethod
    def _names_to_tables(cls, v: Any) -> Any:
        # A plain list of names is shorthand for tables with no settings.
        if isinstance(v, list):
            if not all(isinstance(x, str) for x in v):
                raise ValueError("a list here holds names (strings)")
            if len(set(v)) != len(v):
                raise ValueError("a name appears twice")
            return {x: {} for x in v}
        return v

    @field_validator("harnesses", mode="before")
    @classmethod
    def _harness_list(cls, v: Any) -> Any:
        # A list is shorthand for the tables: each entry an agent (named by itself, as
        # "careful") or a table with an agent and, optionally, the name its cells go by
        # ({agent = "cmd:python agent.py --x", name = "mine"}) and its settings.
        if not isinstance(v, list):
            return v
        tables: dict[str, Any] = {}
        for n, entry in enumerate(v, 1):
            if isinstance(entry, str):
                name: object = entry
                table: dict[str, Any] = {"agent": entry}
            elif isinstance(entry, dict):
                table = dict(entry)
                name = table.pop("name", table.get("agent"))
            else:
                raise ValueError(f"entry {n}: give an agent, or a table with agent and name")
            if not isinstance(name, str):
                raise ValueError(f"entry {n}: the name is a string")
            if not NAME.match(name):
                raise ValueError(
                    f"entry {n}: {name!r} cannot name cells: give it a name of letters, digits "
                    f'and _ . : @ + - ({{agent = {name!r}, name = "mine"}})'
                )
            if name in tables:
                raise ValueError(f"entry {n}: the name {name!r} is another harness's already")
            tables[name] = table
        return tables

    @field_validator("harnesses", "models", "profiles")
    @classmethod
    def _names(cls, v: dict[str, Any]) -> dict[str, Any]:
        if not v:
            raise ValueError("name at least one")
        for k in v:
            _check_name(k, "a")
        return v


@dataclass(frozen=True)
class Matrix:
    """A loaded matrix: the file's content, where it came from, and its digest."""

    spec: MatrixFile
    path: Path
    digest: str
    #: The file's text, to name the line of a key in later errors (`where`).
    text: str = field(default="", repr=False, compare=False)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def limits(self) -> Limits:
        """The archive limits of this matrix's runs (``[limits]``, else the defaults)."""
        return Limits(**self.spec.limits.model_dump())

    def where(self, *loc: str) -> str:
        """``file:line`` of the key at `loc` (``file`` alone when no line defines it).

        >>> m = parse_matrix(b'tasks = ["t"]\\n[harnesses.a]\\nagent = "x"\\n', Path("m.toml"))
        >>> m.where("harnesses", "a", "agent").endswith("m.toml:3")
        True
        """
        line = line_of(self.text, list(loc))
        return f"{self.path}:{line}" if line else str(self.path)

    def task_paths(self) -> list[Path]:
        """Every task path the matrix names: globs expanded relative to the matrix file."""
        base = self.path.parent
        out: list[Path] = []
        for entry in self.spec.tasks:
            pattern = entry if Path(entry).is_absolute() else str(base / entry)
            if glob.has_magic(pattern):
                hits = sorted(Path(p) for p in glob.glob(pattern, recursive=True))
                if not hits:
                    raise MatrixError(f"{self.path}: tasks: {entry!r} matches nothing")
                out.extend(hits)
            else:
                p = Path(pattern)
                if not p.exists():
                    raise MatrixError(f"{self.path}: tasks: {entry!r} does not exist")
                out.append(p)
        return [p.resolve() for p in out]

    def cells(self, task_names: list[str]) -> list[Cell]:
        """Every cell, in a stable order; repetitions vary slowest so a partial run is even."""
        s = self.spec
        cells = [
            Cell(harness=h, task=t, repetition=r, model=m, profile=p)
            for r in range(s.repetitions)
            for t in task_names
            for h in s.harnesses
            for m in s.models
            for p in s.profiles
        ]
        seen: dict[str, Cell] = {}
        for c in cells:
            if c.folder in seen and seen[c.folder] != c:
                raise MatrixError(
                    f"{self.path}: cells {seen[c.folder].id} and {c.id} would share the archive "
                    f"name {c.folder}; rename one"
                )
            seen[c.folder] = c
        return cells

    def meta(self, cell: Cell) -> CellMeta:
        """What ``cell.json`` records about `cell`."""
        h = self.spec.harnesses[cell.harness]
        m = self.spec.models[cell.model]
        p = self.spec.profiles[cell.profile]
        return CellMeta(
            cell=cell,
            harness=HarnessSetting(name=cell.harness, agent=h.agent, settings=h.settings),
            model=ModelSetting(
                name=cell.model, provider=m.provider, version=m.version, settings=m.settings
            ),
            profile=Setting(name=cell.profile, settings=p.settings),
            matrix=self.name,
            matrix_digest=self.digest,
        )


def load_matrix(path: Path) -> Matrix:
    """Read and validate a matrix file; `MatrixError` names the file, the line and the key."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise MatrixError(f"{path}: cannot read the matrix file: {exc}") from None
    return parse_matrix(data, path)


def parse_matrix(data: bytes, path: Path) -> Matrix:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MatrixError(f"{path}: not UTF-8 text ({exc})") from None
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        # tomllib's message ends "(at line L, column C)"; lead with the line like a compiler.
        m = re.search(r"\(at line (\d+), column (\d+)\)", str(exc))
        msg = re.sub(r"\s*\(at line \d+, column \d+\)", "", str(exc))
        where = f"{path}:{m.group(1)}:{m.group(2)}" if m else str(path)
        raise MatrixError(f"{where}: not valid TOML: {msg}") from None
    try:
        spec = MatrixFile.model_validate(raw)
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            loc = [str(x) for x in err["loc"]]
            line = line_of(text, loc)
            where = f"{path}:{line}" if line else str(path)
            lines.append(f"{where}: {'.'.join(loc) or '(top level)'}: {err['msg']}")
        raise MatrixError("\n".join(lines)) from None
    return Matrix(spec, path.resolve(), "sha256:" + hashlib.sha256(data).hexdigest(), text)


_HEADER = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
_KEY = re.compile(r"""^\s*("[^"]*"|'[^']*'|[A-Za-z0-9_.\-" ]+?)\s*=""")


def _split_key(key: str) -> list[str]:
    parts = re.findall(r'"([^"]*)"|\'([^\']*)\'|([^.\s]+)', key)
    return [a or b or c for a, b, c in parts]


def line_of(text: str, loc: list[str]) -> int | None:
    """The line that defines the deepest prefix of `loc` (a pydantic error location).

    >>> line_of('a = 1\\n[harnesses.x]\\nagent = 3\\n', ['harnesses', 'x', 'agent'])
    3
    """
    best: tuple[int, int] | None = None  # (depth matched, line)
    table: list[str] = []
    for n, line in enumerate(text.splitlines(), 1):
        h = _HEADER.match(line)
        if h:
            table = _split_key(h.group(1))
            path = table
        else:
            k = _KEY.match(line)
            if not k:
                continue
            path = table + _split_key(k.group(1))
        depth = 0
        for a, b in zip(path, loc, strict=False):
            if a != b:
                break
            depth += 1
        if depth == len(path) and depth > 0 and (best is None or depth > best[0]):
            best = (depth, n)
    return best[1] if best else None
