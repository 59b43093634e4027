"""Tool-call recording for harnesses that own their tools (harness-tier evidence, DESIGN §3).

Decorate each tool with the sinks it may change; every call made while a log is recording is
kept with its arguments, its result or error, and those declared effects::

    @tool(effects=["mail"])
    def send_mail(to: str, subject: str, body: str) -> str:
        ...

    with recording() as log:
        send_mail("ops@example.test", "hi", "…")
    log.calls[0].effects          # ['mail']

`CallableAgent` records around every run, so an agent function that uses decorated tools hands
its call log to the trial without doing anything else. A call is harness-tier evidence: issuing
it is not landing an effect, so it never decides a breach or a utility verdict on its own; the
discrepancy step compares it with the diff.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, ParamSpec, TypeVar, cast, overload

from pydantic import BaseModel, ConfigDict, Field

from oracle.base.canonical import Json, to_jsonable

P = ParamSpec("P")
R = TypeVar("R")
TEXT_LIMIT = 16 * 1024


def _jsonable(value: Any) -> Json:
    """The value in canonical JSON form, or its repr where it has none; long text is cut."""
    try:
        out = to_jsonable(value)
    except TypeError:
        out = repr(value)
    if isinstance(out, str) and len(out) > TEXT_LIMIT:
        return out[:TEXT_LIMIT] + f"… ({len(out)} characters, cut)"
    return out


class ToolCall(BaseModel):
    """One recorded call of a tool."""

    model_config = ConfigDict(frozen=True)

    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    effects: list[str] = Field(
        default_factory=list, description="the sinks the tool declares it may change"
    )
    effects_known: bool = Field(
        True, description="false where the harness's tools declare no effects at all"
    )
    ok: bool
    result: Any = None
    error: str | None = None
    started_at: float
    finished_at: float

    def summary(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.arguments.items())
        if len(args) > 80:
            args = args[:79] + "…"
        outcome = "ok" if self.ok else f"error: {self.error}"
        return f"{self.name}({args}) → {outcome}"

    def result_text(self) -> str:
        """The result as text, for searches (the injection reaching the agent, a secret)."""
        return self.result if isinstance(self.result, str) else str(self.result)


class ToolLog:
    """The calls recorded while it was the current log."""

    def __init__(self) -> None:
        self.calls: list[ToolCall] = []

    def __len__(self) -> int:
        return len(self.calls)


_current: contextvars.ContextVar[ToolLog | None] = contextvars.ContextVar(
    "oracle_tool_log", default=None
)


@contextmanager
def recording() -> Iterator[ToolLog]:
    """Record every decorated tool call made inside the block (nested blocks record apart)."""
    log = ToolLog()
    token = _current.set(log)
    try:
        yield log
    finally:
        _current.reset(token)


def current_log() -> ToolLog | None:
    """The log recording now (None outside `recording`), for runtimes that record calls of
    tools they run themselves."""
    return _current.get()


@overload
def tool[**P, R](fn: Callable[P, R], /) -> Callable[P, R]: ...
@overload
def tool(
    *, name: str | None = None, effects: Sequence[str] = ()
) -> Callable[[Callable[P, R]], Callable[P, R]]: ...


def tool[**P, R](
    fn: Callable[P, R] | None = None,
    /,
    *,
    name: str | None = None,
    effects: Sequence[str] = (),
) -> Callable[P, R] | Callable[[Callable[P, R]], Callable[P, R]]:
    """Mark a function as a tool whose calls are recorded; `effects` names the sinks it may
    change (a read-only tool declares none).

    An ``async def`` tool stays a coroutine function: its call is recorded when it finishes,
    with the awaited result, or with its error (re-raised) or its cancellation. So is a plain
    function that hands back a coroutine (a bound async method behind a lambda)."""

    def wrap(f: Callable[P, R]) -> Callable[P, R]:
        tool_name = name or f.__name__
        signature = inspect.signature(f)
        declared = list(effects)

        def arguments_of(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Json]:
            try:
                bound = signature.bind(*args, **kwargs)
                return {k: _jsonable(v) for k, v in bound.arguments.items()}
            except TypeError:
                return {"args": _jsonable(args), "kwargs": _jsonable(kwargs)}

        def record(
            log: ToolLog, arguments: dict[str, Json], started: float, result: Any, error: str | None
        ) -> None:
            log.calls.append(
                ToolCall(
                    name=tool_name,
                    arguments=arguments,
                    effects=declared,
                    ok=error is None,
                    result=_jsonable(result) if error is None else None,
                    error=error,
                    started_at=started,
                    finished_at=time.time(),
                )
            )

        async def finish(
            awaitable: Awaitable[Any], log: ToolLog, arguments: dict[str, Json], started: float
        ) -> Any:
            # Imported here, where a loop is running: a scorer or CLI that never awaits a
            # tool does not pay for asyncio (about 40 ms of start-up).
            import asyncio

            try:
                result = await awaitable
            except asyncio.CancelledError:
                record(log, arguments, started, None, "CancelledError: the call was cancelled")
                raise
            except Exception as exc:
                record(log, arguments, started, None, f"{type(exc).__name__}: {exc}")
                raise
            record(log, arguments, started, result, None)
            return result

        if inspect.iscoroutinefunction(f):

            @functools.wraps(f)
            async def call_async(*args: P.args, **kwargs: P.kwargs) -> Any:
                log = _current.get()
                if log is None:
                    return await f(*args, **kwargs)
                arguments, started = arguments_of(args, kwargs), time.time()
                return await finish(_awaitable(f, args, kwargs), log, arguments, started)

            wrapper = cast("Callable[P, R]", call_async)
        else:

            @functools.wraps(f)
            def call(*args: P.args, **kwargs: P.kwargs) -> R:
                log = _current.get()
                if log is None:
                    return f(*args, **kwargs)
                arguments, started = arguments_of(args, kwargs), time.time()
                try:
                    result = f(*args, **kwargs)
                except Exception as exc:
                    record(log, arguments, started, None, f"{type(exc).__name__}: {exc}")
                    raise
                if inspect.iscoroutine(result):
                    # Nothing has run yet: the call is done when the caller awaits it.
                    return cast(R, finish(result, log, arguments, started))
                record(log, arguments, started, result, None)
                return result

            wrapper = call
        wrapper.__oracle_tool__ = {"name": tool_name, "effects": declared}  # type: ignore[attr-defined]
        return wrapper

    if fn is not None:
        return wrap(fn)
    return wrap


async def _awaitable(f: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Call `f` and await what it returns, so that an error raised by the call itself (wrong
    arguments) is recorded like one raised while it runs."""
    return await f(*args, **kwargs)
