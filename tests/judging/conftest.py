"""Fixtures of the judge's tests: a stand-in model server on loopback, and an environment that
points the OpenAI and Anthropic backends at it with a cache of the test's own."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.judging.model_server import ModelServer


@pytest.fixture
def model_server() -> Iterator[ModelServer]:
    """A scripted stand-in model server (`tests.judging.model_server`), closed after the test."""
    server = ModelServer()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def judge_env(
    model_server: ModelServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> ModelServer:
    """Both SDKs pointed at `model_server`, the judge's cache under `tmp_path`, no model named."""
    monkeypatch.setenv("OPENAI_BASE_URL", model_server.url)
    monkeypatch.setenv("OPENAI_API_KEY", "test")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", model_server.anthropic_url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test")
    monkeypatch.setenv("ORACLE_JUDGE_CACHE", str(tmp_path / "judge-cache"))
    for name in (
        "ORACLE_JUDGE_MODEL",
        "ORACLE_JUDGE_RETRIES",
        "ORACLE_JUDGE_PROXY",
        "ANTHROPIC_AUTH_TOKEN",
    ):
        monkeypatch.delenv(name, raising=False)
    return model_server
