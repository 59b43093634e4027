"""`oracle check`: refuse predicates that reach past the evidence for the agent's account.

The evidence object already has no attribute for claims (DESIGN §3). This check catches the
other routes, by reading each predicate's code and the values it closes over:

- reading the outside world directly: files, processes, sockets, databases, ``open``, ``eval``;
- global or closed-over state that is not constant data (an object the harness could fill in
  with the transcript after the task was written);
- words of the agent's account (``transcript``, ``final_message``, ``trajectory``…) used as
  names, attributes or strings, including files the agent wrote about itself;
- attributes of the evidence that do not exist.

It also refuses an injection whose ``where=`` names nothing in its sink's seed (no such file,
table, column or key, or none there holding its text), for the sinks whose seed can be read
before any trial (`oracle.fixtures.seed_text`); for the others it says so (`check_notes`).
"""

from __future__ import annotations

import dis
import enum
import inspect
import re
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from oracle.authoring.task import Task
from oracle.evidence.evidence import Evidence
from oracle.judging.evaluators import StatePredicates
from oracle.judging.llm.spec import Judge

FORBIDDEN_MODULES = frozenset(
    {
        "os",
        "io",
        "pathlib",
        "shutil",
        "glob",
        "subprocess",
        "socket",
        "sqlite3",
        "sqlalchemy",
        "psycopg",
        "pymysql",
        "MySQLdb",
        "redis",
        "pika",
        "urllib",
        "http",
        "requests",
        "httpx",
        "pickle",
        "shelve",
        "tempfile",
        "builtins",
        "importlib",
        "ctypes",
        "multiprocessing",
        "threading",
        "asyncio",
        "sys",
        "inspect",
        "gc",
        # More ways to the files, processes and network outside the evidence.
        "codecs",
        "posix",
        "nt",
        "_io",
        "mmap",
        "fcntl",
        "pty",
        "resource",
        "signal",
        "select",
        "selectors",
        "ssl",
        "ftplib",
        "smtplib",
        "imaplib",
        "poplib",
        "telnetlib",
        "xmlrpc",
        "marshal",
        "zipfile",
        "tarfile",
        "gzip",
        "bz2",
        "lzma",
        "dbm",
        "fileinput",
        "linecache",
        "runpy",
        "code",
        "pdb",
        "_thread",
        "concurrent",
        "docker",
        "mailbox",
    }
)
#: Dunder attributes that lead from any object back to globals, code and builtins.
FORBIDDEN_DUNDERS = frozenset(
    {
        "__globals__",
        "__code__",
        "__closure__",
        "__dict__",
        "__class__",
        "__subclasses__",
        "__builtins__",
        "__getattribute__",
        "__reduce__",
        "__reduce_ex__",
        "__mro__",
        "__bases__",
        "__base__",
        "__func__",
        "__self__",
        "__wrapped__",
        "__import__",
        "__loader__",
        "__spec__",
        "__init_subclass__",
    }
)
FORBIDDEN_BUILTINS = frozenset(
    {
        "open",
        "exec",
        "eval",
        "compile",
        "__import__",
        "globals",
        "locals",
        "vars",
        "input",
        "breakpoint",
        "memoryview",
    }
)
CLAIM_WORDS = re.compile(
    r"transcript|final_?message|final_?answer|final_?output|trajector|conversation|chat_?history"
    r"|narrative|self_?report|agent_?(?:log|report|status|claim|output|message)|claims?\b"
    r"|model_?output|assistant_?message|completion",
    re.IGNORECASE,
)
EVIDENCE_ATTRS = frozenset(name for name in dir(Evidence) if not name.startswith("_"))
CONSTANT_TYPES = (str, bytes, int, float, bool, type(None), re.Pattern, enum.Enum)


@dataclass(frozen=True)
class CheckIssue:
    """One refusal: which task, which predicate (or, with ``part="injection"``, which
    injection), what is wrong."""

    task: str
    predicate: str
    message: str
    part: str = "predicate"

    def __str__(self) -> str:
        if self.part == "injection":
            return f"task {self.task!r}, injection {self.predicate}: {self.message}"
        return f"task {self.task!r}, predicate {self.predicate!r}: {self.message}"


def _constant(value: Any, depth: int = 0) -> bool:
    """Immutable data all the way down. A list, dict or set is refused even when it holds only
    constants: anyone can fill it after the task was written."""
    if isinstance(value, CONSTANT_TYPES):
        return True
    if depth > 4:
        return False
    if isinstance(value, tuple | frozenset):
        return all(_constant(v, depth + 1) for v in value)
    if isinstance(value, types.MappingProxyType):
        return all(_constant(k, depth + 1) and _constant(v, depth + 1) for k, v in value.items())
    return False


def _codes(code: types.CodeType) -> Iterator[types.CodeType]:
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _codes(const)


def _global_names(code: types.CodeType) -> set[str]:
    names: set[str] = set()
    for ins in dis.get_instructions(code):
        if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME") and isinstance(ins.argval, str):
            names.add(ins.argval)
    return names


def _attr_chains(code: types.CodeType, param: str | None) -> Iterator[str]:
    """Attribute names loaded directly off the predicate's evidence parameter."""
    prev_is_param = False
    for ins in dis.get_instructions(code):
        if (
            prev_is_param
            and ins.opname in ("LOAD_ATTR", "LOAD_METHOD")
            and isinstance(ins.argval, str)
        ):
            yield ins.argval
        prev_is_param = ins.opname in ("LOAD_FAST", "LOAD_DEREF", "LOAD_FAST_LOAD_FAST") and (
            ins.argval == param
        )


def check_predicate(
    task: str, name: str, fn: Callable[..., Any], _seen: set[int] | None = None
) -> list[CheckIssue]:
    """Every reason to refuse `fn` as a predicate of `task` (empty when it is fine).

    Helper functions of the same module that the predicate calls are checked too."""
    issues: list[CheckIssue] = []
    seen = _seen if _seen is not None else set()
    seen.add(id(fn))
    is_helper = _seen is not None

    def refuse(message: str) -> None:
        issue = CheckIssue(task, name, message)
        if issue not in issues:
            issues.append(issue)

    code = getattr(fn, "__code__", None)
    if code is None:
        code = getattr(type(fn).__call__, "__code__", None)
        if code is None:
            return [CheckIssue(task, name, "is not Python code; it cannot be checked")]
    params = list(inspect.signature(fn).parameters)
    param = params[0] if params else None
    fn_globals: dict[str, Any] = getattr(fn, "__globals__", {})
    builtins_ns = fn_globals.get("__builtins__", {})
    builtin_names = set(builtins_ns if isinstance(builtins_ns, dict) else vars(builtins_ns))

    for c in _codes(code):
        for ins in dis.get_instructions(c):
            if ins.opname == "IMPORT_NAME" and isinstance(ins.argval, str):
                root = ins.argval.split(".")[0]
                if root in FORBIDDEN_MODULES:
                    refuse(f"imports {ins.argval!r}: predicates read the evidence only")
            elif ins.opname in ("LOAD_ATTR", "LOAD_METHOD", "STORE_ATTR") and (
                ins.argval in FORBIDDEN_DUNDERS
            ):
                refuse(f"reaches for {ins.argval!r}, a way around the evidence")
        for word in (*c.co_names, *c.co_varnames, *c.co_freevars):
            if CLAIM_WORDS.search(word):
                refuse(f"uses the name {word!r}, a word of the agent's own account")
        for const in c.co_consts:
            if isinstance(const, str) and CLAIM_WORDS.search(const):
                refuse(f"uses the string {const!r}, which names the agent's own account")
        for g in sorted(_global_names(c)):
            if g in fn_globals:
                value = fn_globals[g]
                if isinstance(value, types.ModuleType):
                    root = value.__name__.split(".")[0]
                    if root in FORBIDDEN_MODULES:
                        refuse(
                            f"uses the module {value.__name__!r}: predicates read the "
                            "evidence only, not the world directly"
                        )
                elif isinstance(value, types.FunctionType | types.BuiltinFunctionType | type):
                    mod = (getattr(value, "__module__", "") or "").split(".")[0]
                    if (
                        mod in FORBIDDEN_MODULES
                        or getattr(value, "__name__", "") in FORBIDDEN_BUILTINS
                    ):
                        refuse(
                            f"calls {g!r} from {mod or 'builtins'}: predicates read the "
                            "evidence only"
                        )
                elif not _constant(value):
                    refuse(
                        f"reads the global {g!r} ({type(value).__name__}), state outside the "
                        "evidence; only immutable data (strings, numbers, tuples, frozensets) "
                        "may be shared"
                    )
            elif g in builtin_names and g in FORBIDDEN_BUILTINS:
                refuse(f"calls the builtin {g!r}: predicates read the evidence only")
        if c is code and not is_helper:
            for attr in _attr_chains(c, param):
                if attr not in EVIDENCE_ATTRS:
                    refuse(f"reads evidence.{attr}, which evidence does not have")
    for default in (
        *(getattr(fn, "__defaults__", None) or ()),
        *(getattr(fn, "__kwdefaults__", None) or {}).values(),
    ):
        if not _constant(default) and not isinstance(default, types.FunctionType):
            refuse(
                f"has a default argument of type {type(default).__name__}, state outside the "
                "evidence; only immutable data may be captured"
            )
    for cell_name, cell in zip(
        code.co_freevars, getattr(fn, "__closure__", None) or (), strict=False
    ):
        try:
            value = cell.cell_contents
        except ValueError:
            continue
        if isinstance(value, types.FunctionType):
            if id(value) not in seen:
                issues.extend(
                    i for i in check_predicate(task, name, value, seen) if i not in issues
                )
        elif not _constant(value):
            refuse(
                f"closes over {cell_name!r} ({type(value).__name__}), state outside the "
                "evidence; only immutable data may be captured"
            )
    for g in sorted(_global_names(code)):
        helper = fn_globals.get(g)
        if (
            isinstance(helper, types.FunctionType)
            and id(helper) not in seen
            and helper.__module__ == getattr(fn, "__module__", None)
        ):
            for i in check_predicate(task, f"{name} → {g}", helper, seen):
                if i not in issues:
                    issues.append(i)
    return issues


class SeedReader(Protocol):
    """A sink spec that can tell, before any trial, whether its seed holds some text where a
    `where` names (`oracle.fixtures.seed_text` says what each kind reads)."""

    def seed_holds(self, where: str, text: str, base_dir: Path) -> tuple[bool | None, str]: ...


@dataclass(frozen=True)
class CheckNote:
    """What the check could not decide before the run, said rather than guessed: which
    task, which injection, and why."""

    task: str
    injection: str
    reason: str

    def __str__(self) -> str:
        return f"task {self.task!r}, injection {self.injection}: {self.reason}"


def _injection_named(task: Task) -> str:
    inj = task.injection
    assert inj is not None
    return f"(sink {inj.sink!r}, where={inj.where!r})"


def check_injection(task: Task) -> tuple[list[CheckIssue], list[CheckNote]]:
    """Refusals of an injection whose ``where=`` names nothing in the seed (no such file,
    table, column or key, or one that does not hold its text), and notes where the seed of its
    sink cannot be read before the run (that sink does not say, or reading it failed)."""
    inj = task.injection
    if inj is None:
        return [], []
    spec = task.spec(inj.sink)
    named = _injection_named(task)
    reader = getattr(spec, "seed_holds", None)
    if not callable(reader):
        kind = getattr(spec, "kind", "?")
        why = (
            f"the seed of a {kind!r} sink is not read before the run; whether the injection "
            "is planted is known only from a trial (injection.planted in its record)"
        )
        return [], [CheckNote(task.name, named, why)]
    try:
        holds, why = reader(inj.where, inj.text, task.base_dir)
    except Exception as exc:  # a seed that cannot be built: the trial will say so, loudly
        why = f"its seed could not be read before the run ({type(exc).__name__}: {exc})"
        return [], [CheckNote(task.name, named, why)]
    if holds is False:
        return [CheckIssue(task.name, named, f"names nothing in the seed: {why}", "injection")], []
    if holds is None:
        return [], [CheckNote(task.name, named, why)]
    return [], []


def check_notes(task: Task) -> list[CheckNote]:
    """What `oracle check` could not decide about `task` before the run (said, not guessed)."""
    return check_injection(task)[1]


def check_task(task: Task) -> list[CheckIssue]:
    """Check where `task`'s injection is planted, and every predicate (`check_predicates`)."""
    return [*check_injection(task)[0], *check_predicates(task)]


def check_predicates(task: Task) -> list[CheckIssue]:
    """Check every predicate of `task`."""
    issues: list[CheckIssue] = []
    for evaluator in (task.utility_evaluator, task.security_evaluator):
        if isinstance(evaluator, StatePredicates):
            for name, fn in evaluator.predicates:
                if isinstance(fn, Judge):  # its functions read the evidence like predicates
                    for read in fn.functions():
                        issues.extend(check_predicate(task.name, name, read))
                    continue
                issues.extend(check_predicate(task.name, name, fn))
    return issues


def refusals(task: Task) -> dict[str, str]:
    """``{predicate: why}`` for the predicates of `task` that `oracle check` refuses; computed
    once per task object. Trials use it, so a refused predicate is an error (its metric
    unknown) however the trial is run: CLI, library, pytest, Inspect."""
    cached: dict[str, str] | None = getattr(task, "_oracle_refusals", None)
    if cached is None:
        cached = {}
        for issue in check_predicates(task):
            name = issue.predicate.split(" → ", 1)[0]
            cached.setdefault(name, issue.message)
        object.__setattr__(task, "_oracle_refusals", cached)
    return cached
