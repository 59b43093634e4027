"""The trial record: what one trial leaves, as a versioned pydantic model with a JSON schema.

The schema is exported into ``schemas/record.schema.json`` (``oracle schema``) and a test checks
that the file matches the model, so the record's shape only changes on purpose.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool

from oracle.evidence.attempt import Attempt
from oracle.evidence.claims import Claim
from oracle.evidence.invocation import Invocation
from oracle.evidence.tools import ToolCall
from oracle.evidence.usage import ModelUsage

SCHEMA_VERSION = 1
_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")


class Cell(BaseModel):
    """A trial's identity in a matrix: harness, task, repetition, model, profile."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    harness: str
    task: str
    repetition: int = 0
    model: str = "none"
    profile: str = "default"

    @property
    def id(self) -> str:
        """``task/harness/model/profile/rN``: unique within a matrix."""
        return f"{self.task}/{self.harness}/{self.model}/{self.profile}/r{self.repetition}"

    @property
    def folder(self) -> str:
        """A file-system-safe folder name for this cell's archive. Where a part had to be
        changed to be safe (``post_key ~base64`` and ``post_key_base64`` both read
        ``post_key_base64``) or could run into its neighbour (``__`` inside, ``_`` at an end),
        and where long parts are cut, the name ends with a digest of the whole identity, so
        that two cells never share a folder."""
        parts = (self.task, self.harness, self.model, self.profile, f"r{self.repetition}")
        safe = [_SAFE.sub("_", p) for p in parts]
        name = "__".join(safe)
        plain = all(
            s == p and "__" not in s and not s.startswith("_") and not s.endswith("_")
            for s, p in zip(safe, parts, strict=True)
        )
        if plain and len(name) <= 120:
            return name
        digest = hashlib.sha256(self.id.encode()).hexdigest()[:12]
        if len(name) + 14 <= 120:
            return f"{name}__{digest}"
        short = "__".join(s[:40] for s in safe)
        return f"{short}__{digest}"


class JudgeRecord(BaseModel):
    """What an LLM judge was asked and answered on this trial (`oracle.judging.llm`)."""

    model_config = ConfigDict(extra="forbid")

    backend: str | None = Field(None, description="openai, anthropic or inspect")
    configured: str | None = Field(None, description="the model as the task or env named it")
    model: str | None = Field(None, description="the model as the provider named it")
    rubric: str
    prompt_sha256: str = Field(description="sha256 of the prompt's system and user text")
    pieces: list[str] = Field(
        default_factory=list, description="where each piece of judged content came from"
    )
    raw: str | None = Field(None, description="the model's reply, as it came")
    reasoning: str | None = Field(None, description="the reply's reasoning, where it parsed")
    finish: str | None = Field(None, description="the finish reason, as the provider gave it")
    asked: bool = Field(
        True, description="a model was asked (false: nothing to judge, or no model to ask)"
    )
    cached: bool = Field(False, description="answered from the judge's cache")
    attempts: int = Field(0, description="calls made (rate-limit retries included)")


class PredicateRecord(BaseModel):
    """One predicate's value on this trial, with its error and the evidence tiers it read.
    An LLM judge is recorded as a predicate of kind ``judge``, with what it was asked."""

    model_config = ConfigDict(extra="forbid")

    name: str
    value: StrictBool | None
    error: str | None = None
    tiers: list[str] = Field(default_factory=list)
    kind: Literal["predicate", "judge"] = "predicate"
    judge: JudgeRecord | None = None


class EvaluatorRecord(BaseModel):
    """How one metric was evaluated. ``kind == "assertion"`` means not measured."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["predicate", "assertion", "unconfigured"]
    predicates: list[PredicateRecord] = Field(default_factory=list)


class SnapshotDigests(BaseModel):
    """The digests of one sink's snapshots (null where the observation failed)."""

    model_config = ConfigDict(extra="forbid")

    kind: str
    before: str | None
    after: str | None


class InjectionRecord(BaseModel):
    """Where the attack was planted and whether it was there before the agent ran."""

    model_config = ConfigDict(extra="forbid")

    sink: str
    where: str
    author: str
    planted: bool | None = Field(description="the text was found in the before snapshot")
    reached: bool | None = Field(
        None,
        description="the injection reached the agent (false: provably never, which makes a "
        "negative security verdict unknown; null: not determined)",
    )
    reached_via: list[str] = Field(default_factory=list, description="how it is known it did")
    reach_note: str = Field("", description="why it is not known, or how it is known it did not")
    applied: bool = Field(
        True, description="whether reach counted for the security verdict (not for controls)"
    )


class ControlsStatus(BaseModel):
    """Whether the task's predicates were proven by its controls, for this task digest."""

    model_config = ConfigDict(extra="forbid")

    status: Literal["proven", "unproven", "stale", "missing", "control"]
    reason: str = ""
    metrics: dict[str, str] = Field(
        default_factory=dict,
        description="metric → why it is unproven, where the others are proven (empty: all)",
    )


class Finding(BaseModel):
    """A discrepancy found beside the verdicts (DESIGN §7); never a verdict itself."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal[
        "silent_success",
        "phantom_action",
        "effect_without_call",
        "scope",
        "not_checked",
        "reach_not_observed",
    ] = Field(
        description="not_checked: the discrepancy step itself failed (detail says why); "
        "reach_not_observed: a breach stands although the injection was not seen reaching the "
        "agent (change is where it was planted, detail says what the probe saw)"
    )
    sink: str
    change: str
    detail: str
    claim: str | None = Field(None, description="the claim it contradicts, if any")
    call: str | None = Field(None, description="the tool call it contradicts, if any")


class ServerExposure(BaseModel):
    """A server of one of the task's sinks that lets an agent log in past the account the
    sandbox hands it (docs/servers.md, 'The server must ask for a secret')."""

    model_config = ConfigDict(extra="forbid")

    sink: str
    server: str
    endpoint: str = Field(description="host:port, as the agent's URLs name it")
    problems: list[str] = Field(description="what the server lets anyone do")
    gated: bool = Field(
        description="the agent reached this endpoint only through the jail's login gate, "
        "which admits the sandbox's account alone (an isolated command agent); false: "
        "nothing stood between the agent and what is open (an in-process agent, a command "
        "run without isolation, a server the gate does not speak for)"
    )


class ServerContainerRecord(BaseModel):
    """A server of one of the task's sinks that the run started in a container, because the
    configured one did not answer (``ORACLE_SERVERS=containers``; docs/servers.md)."""

    model_config = ConfigDict(extra="forbid")

    sink: str
    server: str = Field(description="PostgreSQL, MariaDB, Redis or RabbitMQ")
    image: str = Field(description="the image as named (a tag)")
    image_id: str = Field(description="the image that ran (sha256:…)")
    container: str = Field(description="the container's name")
    endpoint: str = Field(description="host:port it listens on")
    started_s: float = Field(
        description="seconds from the create request until the administrator logged in; "
        "paid once per run, not per trial"
    )


class ScoringRecord(BaseModel):
    """Where the predicates of a trial ran, and what that process could reach."""

    model_config = ConfigDict(extra="forbid")

    mode: Literal["sealed", "in-process", "container"] = Field(
        description="sealed: a scorer process that never held the transcript, handed only the "
        "evidence; container: the same in a container; in-process: beside the transcript, "
        "for debugging"
    )
    isolation: str = Field(
        description="what contained the scorer: 'bubblewrap' (no network, read-only files, "
        "the oracle's folders hidden), 'container', 'process' (a separate process only) or "
        "'none' (in-process)"
    )
    image: str | None = Field(None, description="the scorer's container image, by digest")
    note: str = Field("", description="why this mode, where it is not the default")
    contained: list[str] = Field(
        default_factory=list,
        description="predicates the scorer had to contain: ran past their time limit, "
        "exited, crashed or raised SystemExit/KeyboardInterrupt (each metric unknown)",
    )


class RescoreRecord(BaseModel):
    """What a rescored record replaced: `oracle rescore` ran the task's predicates again on
    an archived trial's evidence."""

    model_config = ConfigDict(extra="forbid")

    of: str = Field(description="sha256 of the record.json that was rescored")
    source: str = Field(description="the archive it was read from")
    at: float = Field(description="when it was rescored (Unix time)")
    previous: dict[str, StrictBool | None] = Field(description="metric → the archived verdict")
    previous_task_digest: str = Field(description="the task digest the archived trial ran")
    previous_not_measured: dict[str, str] = Field(default_factory=dict)


class TrialRecord(BaseModel):
    """What one trial leaves: verdicts with their reasons, the evidence digests and the diff."""

    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1] = 1
    cell: Cell
    utility_achieved: StrictBool | None
    security_breached: StrictBool | None
    autonomy_achieved: StrictBool | None
    evaluation_errors: dict[str, str] = Field(
        default_factory=dict, description="metric → why it is unknown"
    )
    error: str | None = Field(None, description="execution error: the run itself broke")
    evaluators: dict[str, EvaluatorRecord] = Field(default_factory=dict)
    autonomy_reason: str = ""
    invocation: Invocation | None = None
    injection: InjectionRecord | None = None
    snapshots: dict[str, SnapshotDigests] = Field(default_factory=dict)
    observation_errors: dict[str, str] = Field(default_factory=dict)
    diff: dict[str, Any] = Field(default_factory=dict, description="sink → typed changes")
    findings: list[Finding] = Field(default_factory=list)
    tool_calls: list[ToolCall] | None = Field(
        None, description="harness tier: the calls recorded (null: the harness owns no tools)"
    )
    network_attempts: list[Attempt] | None = Field(
        None,
        description="connections and datagrams the agent sent past the sandbox's network, "
        "and logins as anyone but the sandbox's account that a login gate refused "
        "(null: it did not run in a network namespace)",
    )
    exposures: list[ServerExposure] = Field(
        default_factory=list,
        description="servers of the task's sinks that let an agent log in past the "
        "sandbox's account, and whether this agent's way to each was gated",
    )
    servers: list[ServerContainerRecord] = Field(
        default_factory=list,
        description="servers of the task's sinks that this run started in containers",
    )
    usage: ModelUsage | None = Field(
        None,
        description="the model calls the egress recorder saw, the models that answered and "
        "the tokens they used, as the responses said (null: no recorder could observe them)",
    )
    final_message: str | None = Field(
        None, description="claim tier: what the agent said of its work; never evidence"
    )
    claims: list[Claim] = Field(
        default_factory=list, description="claim tier: the final message read into claims"
    )
    controls: ControlsStatus | None = None
    scoring: ScoringRecord | None = Field(
        None, description="where the predicates ran (null: the trial never reached evaluation)"
    )
    not_measured: dict[str, str] = Field(
        default_factory=dict,
        description="metric → why its verdict is not a measurement (an assertion, unproven "
        "predicates); reports keep such verdicts out of their rates",
    )
    task_digest: str = ""
    rescore: RescoreRecord | None = Field(
        None, description="set on a record made by oracle rescore: what it replaced"
    )
    versions: dict[str, str] = Field(default_factory=dict)
    started_at: float
    trigger_at: float | None = None
    finished_at: float

    def measured(self, metric: str) -> bool:
        """Whether `metric`'s verdict counts as a measurement in reports."""
        return metric not in self.not_measured


def record_schema() -> dict[str, Any]:
    """The JSON schema of `TrialRecord`, as exported into ``schemas/record.schema.json``."""
    schema = TrialRecord.model_json_schema()
    schema["$id"] = "https://oracle.invalid/schemas/record.schema.json"
    schema["title"] = "oracle trial record"
    return schema
