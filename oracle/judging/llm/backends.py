"""The judge's models, reached through well-kept SDKs (never hand-written HTTP).

A judge names its model as ``<backend>/<model>``, in the task (``model=``) or in
``ORACLE_JUDGE_MODEL``:

- ``anthropic/claude-…``: the Anthropic API (``ANTHROPIC_API_KEY``, ``ANTHROPIC_BASE_URL``);
- ``inspect/<provider>/<model>``: any model Inspect AI can reach, through ``get_model``;
- ``openai/<model>``, or a name with no known prefix: an OpenAI-compatible endpoint (the OpenAI
  API, vLLM, a llama.cpp server, Ollama…) at ``OPENAI_BASE_URL`` with ``OPENAI_API_KEY``.

    backend = configured("anthropic/claude-sonnet-4-5")    # ("anthropic", "claude-sonnet-4-5")
    answer = call_model(ModelCall(*backend, system=RUBRIC, user=OUTPUT))
    answer.text                                            # '{"is_success": true, ...}'

Rate limits (429) and transient failures (5xx, a dropped connection) are asked again, up to
``ORACLE_JUDGE_RETRIES`` times (4), waiting 0.5 s doubling to 8 s, or what the provider's
``Retry-After`` says (at most 30 s). A timeout is not asked again: a judge that does not answer
within the call's timeout leaves its metric unknown. Answers are kept in the disk cache
(`oracle.judging.llm.cache`), errors never.

The OpenAI and Anthropic clients ignore the proxy variables of the environment (they may name
an agent's egress recorder); ``ORACLE_JUDGE_PROXY`` names a proxy for the judge explicitly.
Inspect AI's clients follow its own settings.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import enum
import importlib
import importlib.util
import math
import os
import sys
import time
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import replace
from typing import Any

# The question and the answer are defined with the cache that keeps them (below this module).
from oracle.judging.llm.cache import JudgeCache, ModelAnswer, ModelCall, default_cache

__all__ = [
    "DEFAULT",
    "ModelAnswer",
    "ModelCall",
    "ModelError",
    "call_model",
    "configured",
]

MODEL_ENV = "ORACLE_JUDGE_MODEL"
RETRIES_ENV = "ORACLE_JUDGE_RETRIES"
PROXY_ENV = "ORACLE_JUDGE_PROXY"
DEFAULT_RETRIES = 4
FIRST_BACKOFF = 0.5
MAX_BACKOFF = 8.0
MAX_RETRY_AFTER = 30.0
# The SDKs insist on a key; a local OpenAI-compatible server does not check it.
PLACEHOLDER_KEY = "not-needed"
NO_MODEL = "no judge model configured"
BACKENDS = ("openai", "anthropic", "inspect")
# Inspect providers whose model arguments reach an OpenAI or Anthropic SDK client.
SDK_RETRY_PROVIDERS = ("openai", "anthropic", "openai-api")

# Tests replace it to see the waits without waiting.
_sleep: Callable[[float], None] = time.sleep


class ModelError(RuntimeError):
    """The model could not be asked, or gave no answer; the message says why.

    `attempts` counts the calls made before giving up (0: none could be made).
    """

    def __init__(self, message: str, attempts: int = 0) -> None:
        super().__init__(message)
        self.attempts = attempts


class _Default(enum.Enum):
    CACHE = "the default cache"


DEFAULT = _Default.CACHE
"""`call_model`'s default cache: `default_cache()`, read when the call is made."""


def configured(model: str | None) -> tuple[str, str] | str:
    """The judge's ``(backend, model)``, or the reason it has none (starts "no judge model
    configured"). `model` is the task's choice; without one, ``ORACLE_JUDGE_MODEL``.

        configured("inspect/openai/gpt-4o")    # ("inspect", "openai/gpt-4o")
        configured("llama3.1:8b")              # ("openai", "llama3.1:8b") with OPENAI_BASE_URL
        configured(None)                       # "no judge model configured (…)", env unset
    """
    name = (model or os.environ.get(MODEL_ENV) or "").strip()
    if not name:
        return f"{NO_MODEL} (name one with the judge's model= or {MODEL_ENV})"
    backend, rest = _split(name)
    if not rest or (backend == "inspect" and "/" not in rest.strip("/")):
        shape = "inspect/<provider>/<model>" if backend == "inspect" else f"{backend}/<model>"
        return f"{NO_MODEL}: {name!r} names no model (write {shape})"
    missing = _missing(backend, rest)
    if missing:
        return f"{NO_MODEL}: {missing}"
    return backend, rest


def _split(name: str) -> tuple[str, str]:
    prefix, _, rest = name.partition("/")
    if prefix in BACKENDS:
        return prefix, rest
    return "openai", name


def _missing(backend: str, model: str) -> str | None:
    """What `backend` lacks to be asked (a package, a variable), or None."""
    if backend == "inspect":
        if importlib.util.find_spec("inspect_ai") is None:
            return f"inspect model {model!r} needs inspect_ai (pip install 'oracle[inspect]')"
        return None
    if importlib.util.find_spec(backend) is None:
        return f"the {backend} package is not installed (pip install 'oracle[judge]')"
    if backend == "openai" and not _env("OPENAI_BASE_URL", "OPENAI_API_KEY"):
        return (
            f"openai model {model!r} needs OPENAI_BASE_URL (an OpenAI-compatible server) "
            "or OPENAI_API_KEY"
        )
    if backend == "anthropic" and not _env(
        "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL"
    ):
        return f"anthropic model {model!r} needs ANTHROPIC_API_KEY or ANTHROPIC_BASE_URL"
    return None


def _env(*names: str) -> bool:
    return any(os.environ.get(name) for name in names)


def call_model(call: ModelCall, cache: JudgeCache | _Default | None = DEFAULT) -> ModelAnswer:
    """Ask `call`'s model, through `cache` (by default `default_cache()`; None: no cache).

    Raises `ModelError` with the reason when there is no answer: the package is missing, the
    provider refused the call, it did not answer within ``call.timeout``, or it was still rate
    limited after the retries.
    """
    store = default_cache() if cache is DEFAULT else cache
    if isinstance(store, JudgeCache):
        kept = store.get(call)
        if kept is not None:
            return kept
    answer = _ask_with_retries(call)
    if isinstance(store, JudgeCache):
        # A cache that cannot be written costs a second call later, not this answer.
        with contextlib.suppress(OSError):
            store.put(call, answer)
    return answer


class _Failure(Exception):
    """A provider's failure, as the retry loop sees it: a timeout, an HTTP status, or a
    connection that failed."""

    def __init__(
        self,
        kind: str,
        status: int | None = None,
        message: str = "",
        retry_after: float | None = None,
    ) -> None:
        super().__init__(kind, status, message)
        self.kind = kind  # "timeout" | "status" | "connection"
        self.status = status
        self.message = message
        self.retry_after = retry_after

    @property
    def transient(self) -> bool:
        if self.kind == "connection":
            return True
        return self.status is not None and (self.status == 429 or self.status >= 500)


def _ask_with_retries(call: ModelCall) -> ModelAnswer:
    ask = _ASK.get(call.backend)
    if ask is None:
        raise ModelError(f"unknown judge backend {call.backend!r} (one of {', '.join(BACKENDS)})")
    attempts = 1 + _retries()
    for attempt in range(1, attempts + 1):
        try:
            return replace(ask(call), attempts=attempt)
        except _Failure as failure:
            if failure.kind == "timeout":
                raise ModelError(
                    f"the judge model did not answer within {call.timeout:g} s", attempt
                ) from None
            if not failure.transient:
                raise ModelError(
                    f"the provider answered {failure.status}: {failure.message}", attempt
                ) from None
            if attempt == attempts:
                raise ModelError(_gave_up(failure, attempt), attempt) from None
            _sleep(_delay(attempt, failure.retry_after))
        except ModelError as error:
            error.attempts = attempt
            raise
    raise AssertionError("unreachable: the last attempt returns or raises")


def _retries() -> int:
    text = os.environ.get(RETRIES_ENV, "").strip()
    if not text:
        return DEFAULT_RETRIES
    try:
        retries = int(text)
    except ValueError:
        retries = -1
    if retries < 0:
        raise ModelError(
            f"{RETRIES_ENV} must be a whole number of retries (0 or more), not {text!r}"
        )
    return retries


def _delay(attempt: int, retry_after: float | None) -> float:
    """The wait after failed attempt number `attempt` (1, 2, …)."""
    if retry_after is not None:
        return min(max(retry_after, 0.0), MAX_RETRY_AFTER)
    return min(FIRST_BACKOFF * 2.0 ** (attempt - 1), MAX_BACKOFF)


def _gave_up(failure: _Failure, n: int) -> str:
    attempts = f"{n} attempt" if n == 1 else f"{n} attempts"
    if failure.status == 429:
        return f"rate limited (429) after {attempts}"
    if failure.kind == "status":
        return f"the provider failed ({failure.status}: {failure.message}) after {attempts}"
    return f"could not reach the provider ({failure.message}) after {attempts}"


def _retry_after(headers: Mapping[str, str]) -> float | None:
    """The provider's requested wait in seconds (``retry-after-ms`` or ``Retry-After``)."""
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            seconds = float(value) * scale
        except ValueError:
            continue  # an HTTP date: fall back to the backoff
        if math.isfinite(seconds):
            return seconds
    return None


def _failure(exc: BaseException) -> _Failure | None:
    """`exc` as a failure, when an SDK (directly or through Inspect) raised it."""
    for name in ("openai", "anthropic"):
        sdk = sys.modules.get(name)
        if sdk is None:
            continue
        if isinstance(exc, sdk.APITimeoutError):
            return _Failure("timeout")
        if isinstance(exc, sdk.APIStatusError):
            headers = exc.response.headers
            return _Failure(
                "status", exc.status_code, _provider_message(exc), _retry_after(headers)
            )
        if isinstance(exc, sdk.APIConnectionError):
            return _Failure("connection", message=str(exc) or type(exc).__name__)
    if isinstance(exc, TimeoutError) or type(exc).__name__ == "AttemptTimeoutError":
        return _Failure("timeout")
    return None


def _provider_message(exc: Any) -> str:
    """The provider's own words from an error body (``error.message``), else the SDK's."""
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return str(error["message"])
    return str(getattr(exc, "message", None) or exc)


def _http_client(client_class: type[Any], timeout: float) -> Any:
    """An HTTP client that ignores the environment's proxies; ``ORACLE_JUDGE_PROXY`` if set."""
    proxy = os.environ.get(PROXY_ENV) or None
    try:
        return client_class(trust_env=False, timeout=timeout, proxy=proxy)
    except ValueError as exc:  # a proxy URL the HTTP client cannot use
        raise ModelError(f"{PROXY_ENV}={proxy!r} is not a usable proxy URL: {exc}") from exc


def _sdk(name: str) -> Any:
    """The SDK package `name`, or a `ModelError` that says how to install it."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise ModelError(
            f"the {name} package is not installed (pip install 'oracle[judge]'): {exc}"
        ) from exc


def _ask_openai(call: ModelCall) -> ModelAnswer:
    openai = _sdk("openai")
    http_client = _http_client(openai.DefaultHttpxClient, call.timeout)
    try:
        client = openai.OpenAI(
            base_url=os.environ.get("OPENAI_BASE_URL") or None,
            api_key=os.environ.get("OPENAI_API_KEY") or PLACEHOLDER_KEY,
            max_retries=0,
            timeout=call.timeout,
            http_client=http_client,
        )
        with client:
            response = client.chat.completions.create(
                model=call.model,
                messages=[
                    {"role": "system", "content": call.system},
                    {"role": "user", "content": call.user},
                ],
                temperature=0,
                max_tokens=call.max_tokens,
            )
    except openai.OpenAIError as exc:
        raise _failure(exc) or ModelError(f"the openai call failed: {exc}") from exc
    if not response.choices:
        raise ModelError("the provider answered with no choices")
    choice = response.choices[0]
    return ModelAnswer(
        text=choice.message.content,
        model=response.model or None,
        finish=choice.finish_reason or None,
        refusal=getattr(choice.message, "refusal", None),
    )


def _ask_anthropic(call: ModelCall) -> ModelAnswer:
    anthropic = _sdk("anthropic")
    # With only a bearer token, a placeholder key would be sent beside it and refused.
    token_only = os.environ.get("ANTHROPIC_AUTH_TOKEN") and not os.environ.get("ANTHROPIC_API_KEY")
    http_client = _http_client(anthropic.DefaultHttpxClient, call.timeout)
    # The API version anthropic >= 2 sends (2026-10-21) rejects sampling parameters on every
    # model; older versions take temperature 0, for a steadier verdict.
    sampling: dict[str, Any] = {"temperature": 0} if _major(anthropic.__version__) < 2 else {}
    try:
        client = anthropic.Anthropic(
            base_url=os.environ.get("ANTHROPIC_BASE_URL") or None,
            api_key=os.environ.get("ANTHROPIC_API_KEY")
            or (None if token_only else PLACEHOLDER_KEY),
            max_retries=0,
            timeout=call.timeout,
            http_client=http_client,
        )
        with client:
            response = client.messages.create(
                model=call.model,
                system=call.system,
                messages=[{"role": "user", "content": call.user}],
                max_tokens=call.max_tokens,
                **sampling,
            )
    except anthropic.AnthropicError as exc:
        raise _failure(exc) or ModelError(f"the anthropic call failed: {exc}") from exc
    texts = [block.text for block in response.content or [] if block.type == "text"]
    stop = response.stop_reason
    refused = stop == "refusal"
    return ModelAnswer(
        text="".join(texts) if texts else None,
        model=response.model or None,
        finish=stop,
        refusal="the model declined to answer (stop_reason refusal)" if refused else None,
    )


def _major(version: str) -> int:
    head = version.split(".")[0]
    return int(head) if head.isdigit() else 0


def _ask_inspect(call: ModelCall) -> ModelAnswer:
    try:
        from inspect_ai.model import (
            ChatMessageSystem,
            ChatMessageUser,
            GenerateConfig,
            ModelOutput,
            get_model,
        )
    except ImportError as exc:
        raise ModelError(
            f"inspect_ai is not installed (pip install 'oracle[inspect]'): {exc}"
        ) from exc
    # Inspect counts whole seconds; asyncio.timeout below holds the call to the exact timeout.
    seconds = max(1, math.ceil(call.timeout))
    config = GenerateConfig(
        temperature=0,
        max_tokens=call.max_tokens,
        timeout=seconds,
        attempt_timeout=seconds,
        max_retries=0,  # the retries are ours, so they count and wait alike on every backend
    )

    # These providers hand model arguments to their SDK's client, whose own retries would hide
    # calls from ours; other providers keep their SDK's retries beneath ours.
    provider = call.model.split("/")[0]
    sdk_args: dict[str, Any] = {"max_retries": 0} if provider in SDK_RETRY_PROVIDERS else {}

    async def generate() -> ModelOutput:
        # Not memoized: its client would be bound to this event loop, which closes after.
        async with get_model(call.model, memoize=False, **sdk_args) as model:
            async with asyncio.timeout(call.timeout):  # the call, not the provider's start
                return await model.generate(
                    [ChatMessageSystem(content=call.system), ChatMessageUser(content=call.user)],
                    config=config,
                )

    try:
        output = _run(generate)
    except Exception as exc:
        cause = _unwrap(exc)
        raise _failure(cause) or ModelError(f"the inspect model call failed: {cause}") from exc
    stop = str(output.choices[0].stop_reason) if output.choices else None
    if output.error and not output.completion and stop != "content_filter":
        raise ModelError(f"the inspect model answered with an error: {output.error}")
    refusal = None
    if stop == "content_filter":
        refusal = output.error or "the model's content filter stopped its answer"
    return ModelAnswer(
        text=output.completion if output.choices else None,
        model=output.model or None,
        finish=stop,
        refusal=refusal,
    )


def _run[T](factory: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run a coroutine to its end from synchronous code, also inside a running event loop (the
    oracle is embedded in Inspect evals): then in a fresh thread with its own loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(factory())
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(lambda: asyncio.run(factory())).result()


def _unwrap(exc: BaseException) -> BaseException:
    """The provider's error inside the wrappers async code puts around it (tenacity's
    RetryError, an exception group)."""
    seen = 0
    while seen < 10:
        seen += 1
        if isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
            exc = exc.exceptions[0]
            continue
        last = getattr(exc, "last_attempt", None)  # tenacity.RetryError
        inner = last.exception() if last is not None and hasattr(last, "exception") else None
        if isinstance(inner, BaseException):
            exc = inner
            continue
        break
    return exc


_ASK: dict[str, Callable[[ModelCall], ModelAnswer]] = {
    "openai": _ask_openai,
    "anthropic": _ask_anthropic,
    "inspect": _ask_inspect,
}
