"""Starting a container: one that fails to start is removed, and one whose process died before
its start (the engine's `DIED_BEFORE_START`, seen under load) is tried again.

The first test runs on the real engine; the engine's race cannot be caused at will, so the
retry is driven by a fake client (named so) that answers as the engine did when it happened."""

from __future__ import annotations

import uuid

import pytest

from oracle.isolation.engine import DIED_BEFORE_START, docker_client, start_container
from tests.conftest import require_images


def test_a_container_that_cannot_start_is_removed_and_not_tried_again():
    image = require_images()["agent"]
    label = f"oracle-test-{uuid.uuid4().hex[:12]}"
    client = docker_client()
    try:
        config = {
            "image": image,
            "entrypoint": ["/no/such/program"],
            "command": [],
            "network_mode": "none",
            "labels": {"oracle.test": label},
            "detach": True,
        }
        with pytest.raises(Exception, match="no/such/program") as caught:
            start_container(client, config)
        assert DIED_BEFORE_START not in str(caught.value)
        left = client.containers.list(all=True, filters={"label": f"oracle.test={label}"})
        assert left == []
        # The same configuration with a program that exists runs, and is the one returned.
        started = start_container(client, {**config, "entrypoint": ["sleep", "30"]})
        try:
            started.reload()
            assert started.status == "running"
            assert started.labels["oracle.test"] == label
        finally:
            started.remove(force=True)
    finally:
        client.close()


class FakeContainer:
    def __init__(self, error: str | None) -> None:
        self.error, self.removed = error, False

    def start(self) -> None:
        if self.error:
            raise RuntimeError(self.error)

    def remove(self, force: bool) -> None:
        self.removed = force


class FakeClient:
    """Answers each create with the next of `errors` (None: the start works)."""

    def __init__(self, *errors: str | None) -> None:
        self.errors = list(errors)
        self.made: list[FakeContainer] = []
        self.configs: list[dict] = []
        self.containers = self

    def create(self, **config: object) -> FakeContainer:
        self.configs.append(config)
        self.made.append(FakeContainer(self.errors.pop(0)))
        return self.made[-1]


DIED = f'500 Server Error: Internal Server Error ("{DIED_BEFORE_START}: unknown")'


def test_a_process_that_died_before_its_start_is_tried_again_in_a_new_container():
    client = FakeClient(DIED, DIED, None)
    got = start_container(client, {"image": "i", "detach": True})
    assert got is client.made[2]
    assert [c.removed for c in client.made] == [True, True, False]
    # `detach` is the word of `containers.run`, not of `create`.
    assert client.configs == [{"image": "i"}] * 3


def test_the_tries_are_bounded_and_other_errors_are_not_tried_again():
    client = FakeClient(DIED, DIED, DIED, None)
    with pytest.raises(RuntimeError, match=DIED_BEFORE_START):
        start_container(client, {"image": "i"}, tries=3)
    assert len(client.made) == 3 and all(c.removed for c in client.made)
    other = FakeClient("no such image", None)
    with pytest.raises(RuntimeError, match="no such image"):
        start_container(other, {"image": "i"})
    assert len(other.made) == 1 and other.made[0].removed
