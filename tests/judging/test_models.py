"""The judge's model backends, retries and disk cache, against a stand-in model server on
loopback (`tests.judging.model_server`) through the real OpenAI, Anthropic and Inspect SDKs."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import re
import time
from pathlib import Path

import pytest

from oracle.judging.llm import backends
from oracle.judging.llm.backends import ModelAnswer, ModelCall, ModelError, call_model, configured
from oracle.judging.llm.cache import JudgeCache, cache_key, default_cache
from tests.judging.model_server import ModelServer, Reply, rubric_responder, verdict

SYSTEM = "You are a judge. Rubric: did the agent say it deleted the backup?"
USER = "<output>I deleted the backup as asked.</output>"
DEAD = "http://127.0.0.1:9"  # the discard port: nothing listens there
PROXY_VARIABLES = (
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
)


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The waits between attempts, recorded instead of slept."""
    waited: list[float] = []
    monkeypatch.setattr(backends, "_sleep", waited.append)
    return waited


def openai_call(
    model: str = "judge-model", timeout: float = 60.0, max_tokens: int = 1024
) -> ModelCall:
    return ModelCall("openai", model, SYSTEM, USER, timeout=timeout, max_tokens=max_tokens)


# configured --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("anthropic/claude-sonnet-4-5", ("anthropic", "claude-sonnet-4-5")),
        ("inspect/openai/gpt-4o", ("inspect", "openai/gpt-4o")),
        ("openai/gpt-4o-mini", ("openai", "gpt-4o-mini")),
        ("llama3.1:8b", ("openai", "llama3.1:8b")),
        ("meta-llama/Llama-3.1-8B-Instruct", ("openai", "meta-llama/Llama-3.1-8B-Instruct")),
    ],
)
def test_configured_chooses_the_backend_by_prefix(
    judge_env: ModelServer, name: str, expected: tuple[str, str]
) -> None:
    if expected[0] == "inspect" and importlib.util.find_spec("inspect_ai") is None:
        pytest.skip("inspect_ai is not installed (pip install 'oracle[inspect]')")
    assert configured(name) == expected


def test_configured_reads_the_environment_when_the_task_names_no_model(
    judge_env: ModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ORACLE_JUDGE_MODEL", "anthropic/claude-haiku-4-5")
    assert configured(None) == ("anthropic", "claude-haiku-4-5")
    assert configured("openai/gpt-4o") == ("openai", "gpt-4o")  # the task's choice wins


def test_configured_without_a_model_says_so(judge_env: ModelServer) -> None:
    reason = configured(None)
    assert isinstance(reason, str)
    assert reason.startswith("no judge model configured")
    assert "ORACLE_JUDGE_MODEL" in reason
    assert configured("  ") == reason


def test_configured_names_the_missing_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    openai_reason = configured("gpt-4o")
    assert isinstance(openai_reason, str)
    assert openai_reason.startswith("no judge model configured: ")
    assert "OPENAI_BASE_URL" in openai_reason and "OPENAI_API_KEY" in openai_reason
    anthropic_reason = configured("anthropic/claude-haiku-4-5")
    assert isinstance(anthropic_reason, str)
    assert anthropic_reason.startswith("no judge model configured: ")
    assert "ANTHROPIC_API_KEY" in anthropic_reason
    # A local OpenAI-compatible server needs only its URL.
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:8000/v1")
    assert configured("gpt-4o") == ("openai", "gpt-4o")


def test_configured_names_a_missing_package(
    monkeypatch: pytest.MonkeyPatch, judge_env: ModelServer
) -> None:
    real = importlib.util.find_spec
    absent = {"openai", "anthropic", "inspect_ai"}
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name in absent else real(name, *a)
    )
    for name in ("openai/gpt-4o", "anthropic/claude-haiku-4-5"):
        reason = configured(name)
        assert isinstance(reason, str)
        assert reason.startswith("no judge model configured: ")
        assert "pip install 'oracle[judge]'" in reason
    reason = configured("inspect/openai/gpt-4o")
    assert isinstance(reason, str)
    assert reason.startswith("no judge model configured: ") and "inspect_ai" in reason


@pytest.mark.parametrize("name", ["anthropic/", "openai/", "inspect/openai"])
def test_configured_refuses_a_prefix_without_a_model(judge_env: ModelServer, name: str) -> None:
    reason = configured(name)
    assert isinstance(reason, str)
    assert reason.startswith("no judge model configured: ") and "names no model" in reason


# the OpenAI backend -----------------------------------------------------------------------


def test_openai_backend_asks_with_the_rubric_and_maps_the_answer(judge_env: ModelServer) -> None:
    judge_env.script(Reply(text=verdict(True, "it says so"), model="judge-model-2025-01-01"))
    answer = call_model(openai_call(max_tokens=300), cache=None)
    assert answer == ModelAnswer(
        text=verdict(True, "it says so"), model="judge-model-2025-01-01", finish="stop", attempts=1
    )
    [request] = judge_env.requests
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == "Bearer test"
    assert request.body["model"] == "judge-model"
    assert request.body["messages"] == [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": USER},
    ]
    assert request.body["temperature"] == 0
    assert request.body["max_tokens"] == 300
    assert not request.body.get("stream")


def test_openai_backend_maps_a_refusal_and_the_finish_reason(judge_env: ModelServer) -> None:
    judge_env.script(Reply(text=None, refusal="I can't judge this.", finish="content_filter"))
    answer = call_model(openai_call(), cache=None)
    assert (answer.text, answer.refusal, answer.finish) == (
        None,
        "I can't judge this.",
        "content_filter",
    )


def test_openai_backend_sends_a_placeholder_key_to_a_keyless_server(
    judge_env: ModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY")
    call_model(openai_call(), cache=None)
    assert judge_env.requests[0].headers["authorization"] == "Bearer not-needed"


def test_openai_backend_without_choices_is_an_error(judge_env: ModelServer) -> None:
    empty = {"id": "x", "object": "chat.completion", "created": 0, "model": "m", "choices": []}
    judge_env.script(Reply(body=json.dumps(empty).encode()))
    with pytest.raises(ModelError, match="the provider answered with no choices"):
        call_model(openai_call(), cache=None)


def test_scripted_rubric_responder_answers_by_the_output(judge_env: ModelServer) -> None:
    judge_env.responder = rubric_responder([("deleted the backup", True), ("backup", False)])
    said = call_model(openai_call(), cache=None)
    other = call_model(
        ModelCall("openai", "judge-model", SYSTEM, "<output>kept it</output>"), cache=None
    )
    assert json.loads(said.text or "")["is_success"] is True
    assert json.loads(other.text or "")["is_success"] is False


# the Anthropic backend --------------------------------------------------------------------


def test_anthropic_backend_asks_with_the_rubric_and_maps_the_answer(judge_env: ModelServer) -> None:
    import anthropic

    judge_env.script(Reply(text=verdict(False, "no such claim"), model="claude-stand-in-20250101"))
    answer = call_model(
        ModelCall("anthropic", "claude-haiku-4-5", SYSTEM, USER, max_tokens=200), cache=None
    )
    assert answer == ModelAnswer(
        text=verdict(False, "no such claim"), model="claude-stand-in-20250101", finish="end_turn"
    )
    [request] = judge_env.requests
    assert request.path == "/v1/messages"
    # anthropic >= 2 sends the key as a bearer token, older versions as x-api-key.
    key = request.headers.get("x-api-key") or request.headers["authorization"].removeprefix(
        "Bearer "
    )
    assert key == "test"
    assert request.body["model"] == "claude-haiku-4-5"
    assert request.body["system"] == SYSTEM
    assert request.body["messages"] == [{"role": "user", "content": USER}]
    assert request.body["max_tokens"] == 200
    # anthropic >= 2 speaks an API version that rejects sampling parameters.
    expected = None if int(anthropic.__version__.split(".")[0]) >= 2 else 0
    assert request.body.get("temperature") == expected


def test_anthropic_backend_maps_a_refusal(judge_env: ModelServer) -> None:
    judge_env.script(Reply(text=None, finish="refusal"))
    answer = call_model(ModelCall("anthropic", "claude-haiku-4-5", SYSTEM, USER), cache=None)
    assert answer.text is None
    assert answer.finish == "refusal"
    assert answer.refusal is not None and "declined" in answer.refusal


def test_anthropic_backend_retries_a_rate_limit_and_names_a_refusal_of_the_key(
    judge_env: ModelServer, sleeps: list[float]
) -> None:
    judge_env.script(Reply(status=429, headers={"retry-after": "1"}), Reply(text="ok"))
    answer = call_model(ModelCall("anthropic", "claude-haiku-4-5", SYSTEM, USER), cache=None)
    assert (answer.text, answer.attempts, sleeps) == ("ok", 2, [1.0])
    judge_env.script(Reply(status=401, message="invalid x-api-key"))
    with pytest.raises(ModelError, match=r"401: invalid x-api-key"):
        call_model(ModelCall("anthropic", "claude-haiku-4-5", SYSTEM, USER), cache=None)
    assert len(judge_env.requests) == 3


# the Inspect AI backend -------------------------------------------------------------------


@pytest.fixture
def inspect_env(judge_env: ModelServer) -> ModelServer:
    if importlib.util.find_spec("inspect_ai") is None:
        pytest.skip("inspect_ai is not installed (pip install 'oracle[inspect]')")
    # Loaded before a test's clock starts (a test timing a call would time the imports too,
    # 1.4 s in a process that has not loaded Inspect yet, and its OpenAI provider's SDK).
    importlib.import_module("inspect_ai.model")
    if importlib.util.find_spec("openai") is not None:
        importlib.import_module("openai")
    return judge_env


def test_inspect_backend_asks_through_get_model(inspect_env: ModelServer) -> None:
    inspect_env.script(Reply(text=verdict(True), model="stand-in-served"))
    # A name Inspect takes for a chat-completions model (an unknown one it sends to the
    # Responses API, which the stand-in does not speak).
    backend = configured("inspect/openai/gpt-4o-mini")
    assert backend == ("inspect", "openai/gpt-4o-mini")
    answer = call_model(ModelCall(*backend, SYSTEM, USER, max_tokens=100), cache=None)
    assert answer.text == verdict(True)
    assert answer.model == "stand-in-served"
    assert answer.finish == "stop"
    assert answer.attempts == 1
    [request] = inspect_env.requests
    assert request.path == "/v1/chat/completions"
    assert request.body["model"] == "gpt-4o-mini"
    roles = [(m["role"], m["content"]) for m in request.body["messages"]]
    assert ("user", USER) in roles
    assert any(role in ("system", "developer") and SYSTEM in str(text) for role, text in roles)
    assert request.body["temperature"] == 0
    assert request.body.get("max_tokens", request.body.get("max_completion_tokens")) == 100


def test_inspect_backend_works_inside_a_running_event_loop(inspect_env: ModelServer) -> None:
    inspect_env.script(Reply(text="from inside a loop"))

    async def scorer() -> ModelAnswer:
        return call_model(ModelCall("inspect", "openai/gpt-4o-mini", SYSTEM, USER), cache=None)

    assert asyncio.run(scorer()).text == "from inside a loop"


def test_inspect_backend_retries_a_rate_limit_and_stops_at_a_refusal_of_the_key(
    inspect_env: ModelServer, sleeps: list[float]
) -> None:
    inspect_env.script(Reply(status=429, headers={"Retry-After": "0.2"}), Reply(text="ok"))
    answer = call_model(ModelCall("inspect", "openai/gpt-4o-mini", SYSTEM, USER), cache=None)
    assert (answer.text, answer.attempts, sleeps) == ("ok", 2, [0.2])
    inspect_env.script(Reply(status=401))
    with pytest.raises(ModelError, match="401"):
        call_model(ModelCall("inspect", "openai/gpt-4o-mini", SYSTEM, USER), cache=None)
    assert len(inspect_env.requests) == 3


def test_inspect_backend_timeout_is_not_retried(
    inspect_env: ModelServer, sleeps: list[float]
) -> None:
    inspect_env.script(Reply(delay=2.0))
    started = time.monotonic()
    with pytest.raises(ModelError, match=r"the judge model did not answer within 0.5 s"):
        call_model(
            ModelCall("inspect", "openai/gpt-4o-mini", SYSTEM, USER, timeout=0.5), cache=None
        )
    assert time.monotonic() - started < 1.9
    assert len(inspect_env.requests) == 1
    assert sleeps == []


# retries and timeouts ---------------------------------------------------------------------


def test_a_rate_limit_is_retried_after_the_retry_after_header(
    judge_env: ModelServer, sleeps: list[float]
) -> None:
    judge_env.script(Reply(status=429, headers={"Retry-After": "0.2"}), Reply(text=verdict(True)))
    answer = call_model(openai_call(), cache=None)
    assert answer.text == verdict(True)
    assert answer.attempts == 2
    assert sleeps == [0.2]
    assert len(judge_env.requests) == 2


def test_rate_limits_past_the_retries_are_an_error(
    judge_env: ModelServer, sleeps: list[float]
) -> None:
    judge_env.responder = lambda body: Reply(status=429)
    with pytest.raises(ModelError, match=r"rate limited \(429\) after 5 attempts") as caught:
        call_model(openai_call(), cache=None)
    assert caught.value.attempts == 5
    assert len(judge_env.requests) == 5
    assert sleeps == [0.5, 1.0, 2.0, 4.0]  # no Retry-After: the backoff, doubling


def test_the_backoff_is_capped_and_so_is_retry_after(
    judge_env: ModelServer, sleeps: list[float], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ORACLE_JUDGE_RETRIES", "6")
    judge_env.responder = lambda body: Reply(status=503)
    with pytest.raises(ModelError, match=r"503.*after 7 attempts"):
        call_model(openai_call(), cache=None)
    assert sleeps == [0.5, 1.0, 2.0, 4.0, 8.0, 8.0]
    sleeps.clear()
    judge_env.responder = lambda body: Reply()
    judge_env.script(Reply(status=429, headers={"Retry-After": "120"}))
    assert call_model(openai_call(), cache=None).attempts == 2
    assert sleeps == [30.0]


def test_a_server_error_is_retried(judge_env: ModelServer, sleeps: list[float]) -> None:
    judge_env.script(Reply(status=500), Reply(text=verdict(False)))
    answer = call_model(openai_call(), cache=None)
    assert (answer.text, answer.attempts) == (verdict(False), 2)
    assert sleeps == [0.5]


def test_a_refused_key_is_an_error_at_once(judge_env: ModelServer, sleeps: list[float]) -> None:
    judge_env.script(Reply(status=401))
    with pytest.raises(ModelError, match=r"401: Incorrect API key provided") as caught:
        call_model(openai_call(), cache=None)
    assert caught.value.attempts == 1
    assert len(judge_env.requests) == 1
    assert sleeps == []


def test_a_timeout_is_not_retried(judge_env: ModelServer, sleeps: list[float]) -> None:
    judge_env.script(Reply(delay=2.0))
    started = time.monotonic()
    with pytest.raises(ModelError, match=r"the judge model did not answer within 0.5 s"):
        call_model(openai_call(timeout=0.5), cache=None)
    assert time.monotonic() - started < 1.9
    assert len(judge_env.requests) == 1
    assert sleeps == []


def test_an_unreachable_provider_is_retried_then_an_error(
    judge_env: ModelServer, sleeps: list[float], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", DEAD + "/v1")
    monkeypatch.setenv("ORACLE_JUDGE_RETRIES", "1")
    with pytest.raises(ModelError, match=r"could not reach the provider .* after 2 attempts"):
        call_model(openai_call(), cache=None)
    assert sleeps == [0.5]


def test_a_malformed_retry_count_is_named(
    judge_env: ModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ORACLE_JUDGE_RETRIES", "many")
    with pytest.raises(ModelError, match="ORACLE_JUDGE_RETRIES must be a whole number"):
        call_model(openai_call(), cache=None)
    assert judge_env.requests == []


def test_an_unknown_backend_is_an_error(judge_env: ModelServer) -> None:
    with pytest.raises(ModelError, match="unknown judge backend 'gemini'"):
        call_model(ModelCall("gemini", "m", SYSTEM, USER), cache=None)


# the cache --------------------------------------------------------------------------------


def test_a_second_identical_call_is_answered_from_the_cache(
    judge_env: ModelServer, tmp_path: Path
) -> None:
    judge_env.script(Reply(status=429, headers={"Retry-After": "0"}), Reply(text=verdict(True)))
    first = call_model(openai_call())
    second = call_model(openai_call())
    assert len(judge_env.requests) == 2  # the 429 and the answer; none for the second call
    assert (first.cached, second.cached) == (False, True)
    assert second == ModelAnswer(verdict(True), "stand-in-model", "stop", attempts=2, cached=True)
    key = cache_key(openai_call())
    kept = tmp_path / "judge-cache" / key[:2] / f"{key}.json"
    assert json.loads(kept.read_text())["text"] == verdict(True)


def test_the_cache_key_is_the_model_the_rubric_and_the_content(judge_env: ModelServer) -> None:
    call_model(openai_call())
    call_model(openai_call(model="other-model"))
    call_model(ModelCall("openai", "judge-model", SYSTEM + " Strictly.", USER))
    call_model(ModelCall("openai", "judge-model", SYSTEM, USER + " more"))
    call_model(openai_call(max_tokens=10))
    call_model(openai_call(timeout=5.0))  # the timeout does not change the question
    assert len(judge_env.requests) == 5


def test_a_corrupt_cache_file_is_a_miss_and_is_replaced(
    judge_env: ModelServer, tmp_path: Path
) -> None:
    cache = JudgeCache(tmp_path / "kept")
    path = cache.path(openai_call())
    path.parent.mkdir(parents=True)
    for broken in (
        "{not json",
        '["a list"]',
        '{"text": 3, "model": "m", "finish": null, "refusal": null}',
    ):
        path.write_text(broken)
        assert cache.get(openai_call()) is None
    answer = call_model(openai_call(), cache=cache)
    assert answer.cached is False
    assert len(judge_env.requests) == 1
    assert cache.get(openai_call()) == ModelAnswer(
        verdict(False, "default"), "stand-in-model", "stop", cached=True
    )
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left


@pytest.mark.parametrize("value", ["off", "0", ""])
def test_the_cache_can_be_turned_off(
    judge_env: ModelServer, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("ORACLE_JUDGE_CACHE", value)
    assert default_cache() is None
    call_model(openai_call())
    assert call_model(openai_call()).cached is False
    assert len(judge_env.requests) == 2


def test_errors_are_not_cached(judge_env: ModelServer, tmp_path: Path, sleeps: list[float]) -> None:
    judge_env.script(Reply(status=401), Reply(delay=2.0))
    with pytest.raises(ModelError, match="401"):
        call_model(openai_call(timeout=0.5))
    with pytest.raises(ModelError, match="did not answer"):
        call_model(openai_call(timeout=0.5))
    assert not (tmp_path / "judge-cache").exists()
    assert call_model(openai_call(timeout=0.5)).text == verdict(False, "default")
    assert len(judge_env.requests) == 3


def test_the_default_cache_folder(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("ORACLE_JUDGE_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    cache = default_cache()
    assert cache is not None and cache.folder == tmp_path / "xdg" / "oracle" / "judge"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    cache = default_cache()
    assert cache is not None and cache.folder == tmp_path / "home" / ".cache" / "oracle" / "judge"
    monkeypatch.setenv("ORACLE_JUDGE_CACHE", str(tmp_path / "named"))
    cache = default_cache()
    assert cache is not None and cache.folder == tmp_path / "named"
    assert not cache.folder.exists()  # made on the first answer kept, not before


# proxies ----------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["openai", "anthropic"])
def test_proxy_variables_do_not_divert_the_judge(
    judge_env: ModelServer, monkeypatch: pytest.MonkeyPatch, backend: str
) -> None:
    for name in PROXY_VARIABLES:
        monkeypatch.setenv(name, DEAD)
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    import httpx2

    # The variables would divert a client that trusts the environment (so this test can fail).
    with pytest.raises(httpx2.ConnectError), httpx2.Client() as trusting:
        trusting.post(judge_env.url + "/chat/completions", json={})
    assert judge_env.requests == []
    answer = call_model(ModelCall(backend, "judge-model", SYSTEM, USER), cache=None)
    assert answer.text == verdict(False, "default")
    assert len(judge_env.requests) == 1


def test_the_judge_proxy_is_used_when_named(
    judge_env: ModelServer, monkeypatch: pytest.MonkeyPatch, sleeps: list[float]
) -> None:
    monkeypatch.setenv("ORACLE_JUDGE_PROXY", DEAD)
    monkeypatch.setenv("ORACLE_JUDGE_RETRIES", "0")
    with pytest.raises(ModelError, match=r"could not reach the provider .* after 1 attempt"):
        call_model(openai_call(), cache=None)
    assert judge_env.requests == []


def test_a_malformed_judge_proxy_is_named(
    judge_env: ModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ORACLE_JUDGE_PROXY", "gopher://127.0.0.1:9")
    with pytest.raises(
        ModelError,
        match=re.escape("ORACLE_JUDGE_PROXY='gopher://127.0.0.1:9' is not a usable proxy"),
    ):
        call_model(openai_call(), cache=None)
    assert judge_env.requests == []
