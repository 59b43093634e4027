"""Asking a judge's model and turning its answer into a predicate result.

The scorer (sealed, with no network) builds the judge's prompt from the evidence and hands it
back as a *pending* result; `ask` then runs in the oracle's own process, which alone may
reach the model: it asks (through the cache, with retries), parses the answer strictly and
records what was asked and answered. Every failure — no model configured, a provider error,
a timeout, an answer that does not parse — is the judge's error, so its metric is unknown with
the reason; never false.

Judge traffic leaves from this process with the environment's proxy settings ignored: it never
goes through the agent's egress recorder.
"""

from __future__ import annotations

import contextlib
from typing import Any

from oracle.evidence.record import JudgeRecord
from oracle.judging.llm.backends import DEFAULT, ModelCall, ModelError, call_model, configured
from oracle.judging.llm.cache import default_cache
from oracle.judging.llm.parse import parse
from oracle.judging.llm.spec import Example, Judge, JudgeRequest, Piece, mark_quotes

#: Seconds one model call may take (each attempt), unless the task gives the judge a limit
#: (``predicate_timeout``, or ``predicate_timeouts[name]``), as it does any predicate.
DEFAULT_TIMEOUT = 30.0
NOTHING = "nothing to judge: the agent's output holds no content this judge reads"


def model_of(judge: Judge) -> str | None:
    """The model `judge` would use now, as ``backend/model`` (None where none is configured)."""
    conf = configured(judge.model)
    return None if isinstance(conf, str) else f"{conf[0]}/{conf[1]}"


def judges_of(task: Any) -> list[tuple[str, Judge]]:
    """``(metric, judge)`` for every judge among `task`'s predicates, security first."""
    out = []
    for metric, ev in (
        ("security_breached", task.security_evaluator),
        ("utility_achieved", task.utility_evaluator),
    ):
        out += [(metric, fn) for _, fn in getattr(ev, "predicates", ()) if isinstance(fn, Judge)]
    return out


def ask(
    judge: Judge, req: JudgeRequest, *, timeout: float = DEFAULT_TIMEOUT, cache: Any = DEFAULT
) -> tuple[bool | None, str | None, JudgeRecord]:
    """``(value, error, record)`` for one request of `judge`."""
    name = judge.name
    record = JudgeRecord(rubric=judge.rubric, prompt_sha256=req.digest, pieces=list(req.sources))
    if req.rubric != judge.rubric:
        why = f"judge {name!r}: the scorer built its prompt for another rubric"
        return None, why, record.model_copy(update={"asked": False})
    if req.empty:
        return False, None, record.model_copy(update={"reasoning": NOTHING, "asked": False})
    conf = configured(judge.model)
    if isinstance(conf, str):
        return None, f"judge {name!r}: {conf}", record.model_copy(update={"asked": False})
    backend, model = conf
    record = record.model_copy(update={"backend": backend, "configured": model})
    call = ModelCall(backend, model, req.system, req.user, timeout, judge.max_tokens)
    store = default_cache() if cache is DEFAULT else cache
    answer = store.get(call) if store is not None else None
    try:
        if answer is None:
            answer = call_model(call, None)
    except ModelError as exc:
        return None, f"judge {name!r} ({backend} {model}): {exc}", record
    record = record.model_copy(
        update={
            "model": answer.model,
            "raw": answer.text,
            "finish": answer.finish,
            "cached": answer.cached,
            "attempts": answer.attempts,
        }
    )
    parsed = parse(answer.text, refusal=answer.refusal, finish=answer.finish)
    if parsed.value is None:
        return None, f"judge {name!r} ({backend} {model}): {parsed.error}", record
    if store is not None and not answer.cached:
        # Only a clean verdict is kept: a rescore answers the same, and an answer that did
        # not parse (or a refusal) is asked again next time rather than replayed.
        with contextlib.suppress(OSError):
            store.put(call, answer)
    return parsed.value, None, record.model_copy(update={"reasoning": parsed.reasoning})


def judge_example(
    judge: Judge,
    example: Example,
    injection: str | None = None,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    cache: Any = DEFAULT,
) -> tuple[bool | None, str | None, JudgeRecord]:
    """Judge one labelled example as if the agent had written it."""
    label = example.name or "example"
    piece = Piece(f"labelled example {label}", mark_quotes(example.text, injection))
    return ask(judge, judge.request([piece]), timeout=timeout, cache=cache)
