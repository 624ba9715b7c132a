"""What a training session reports (events, in order) and what it accepts (commands).

Events are frozen records; a sink receives each one on the session's thread. Commands are
an enum that travels through a queue and takes effect at the next update boundary.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from minigpt_tui.engine.analysis.roles import HEAD_ROLES
from minigpt_tui.engine.core.errors import MiniGPTError

if TYPE_CHECKING:
    from minigpt_tui.engine.analysis.probe_scores import ProbeScore
    from minigpt_tui.engine.training.trainer import EvaluationRecord, UpdateRecord


class Command(enum.Enum):
    """What a user can ask of a running session; applied at the next update boundary."""

    PAUSE = "pause"
    RESUME = "resume"
    STOP = "stop"
    EVALUATE = "evaluate"  # an extra evaluation: never changes the best step
    SAVE = "save"  # a manual checkpoint


class SaveReason(enum.StrEnum):
    """Why a checkpoint was written (recorded in the checkpoint; joined with '+')."""

    INTERVAL = "interval"
    BEST = "best"
    PAUSE = "pause"
    MANUAL = "manual"
    STOP = "stop"


@dataclass(frozen=True)
class RunSummary:
    """What identifies a prepared run (sent once, before :class:`RunStarted`)."""

    run_name: str
    run_dir: Path | None
    preset: str
    parameter_tensors: int
    parameter_scalars: int
    corpus_source: str
    corpus_identity: str
    train_records: int
    validation_records: int
    tokenizer_identity: str
    vocab_size: int
    merges: int
    precision: str
    dtype: str
    threads: int
    steps: int
    start_step: int = 0
    resumed_from: Path | None = None
    corpus_mode: str = "records"
    train_tokens: int = 0  # stream mode: tokens in each split's array
    validation_tokens: int = 0
    evaluation_rule: str = ""
    tokenizer_kind: str = ""  # "tokenizers": the model's own tokenizer.json; "": our byte-level BPE


@dataclass(frozen=True)
class Preparing:
    """Long work before the run starts (tokenizer training, encoding, writing the token
    cache): ``done`` of ``total`` units of ``label``, sent before :class:`RunSummary`."""

    label: str
    done: int
    total: int


class PreparationStopped(Exception):
    """A stop asked for while the run was still preparing: raised at the next progress
    report, before anything is written (the session ends as stopped at update 0)."""


class PreparingReports:
    """The engine's progress callback as :class:`Preparing` events, at most ``per_second``
    a second: the first report of each label and its completion always pass. When
    ``stopped()`` holds, the next report raises :class:`PreparationStopped`."""

    def __init__(self, sink: EventSink, *, per_second: float = 10.0,
                 clock: Callable[[], float] = time.monotonic,
                 stopped: Callable[[], bool] = lambda: False) -> None:
        self._sink = sink
        self._interval = 1.0 / per_second
        self._clock = clock
        self._stopped = stopped
        self._label: str | None = None
        self._last = -1e9

    def __call__(self, label: str, done: int, total: int) -> None:
        if self._stopped():
            raise PreparationStopped(label)
        now = self._clock()
        if label == self._label and done < total and now - self._last < self._interval:
            return
        self._label, self._last = label, now
        self._sink(Preparing(label, min(done, total), total))

    def warn(self, action: str, message: str) -> None:
        """Something preparation did without (the token cache, say): said once, not fatal."""
        self._sink(Refused(action, message))


@dataclass(frozen=True)
class RunStarted:
    summary: dict[str, Any]
    step: int
    steps: int


@dataclass(frozen=True)
class UpdateDone:
    record: UpdateRecord
    steps: int


@dataclass(frozen=True)
class EvaluationDone:
    record: EvaluationRecord
    best_step: int | None
    best_changed: bool


@dataclass(frozen=True)
class ProbesScored:
    """The run's probes scored greedily right after a scheduled evaluation."""

    step: int
    source: str  # "bundled:probes.json" or the probe file's path
    scores: tuple[ProbeScore, ...]

    @property
    def matched(self) -> int:
        return sum(score.match for score in self.scores)


@dataclass(frozen=True)
class Sample:
    prompt: str
    greedy: str
    sampled: str
    greedy_ids: tuple[int, ...]
    sampled_ids: tuple[int, ...]

    def to_json(self) -> dict[str, Any]:
        return {"prompt": self.prompt, "greedy": self.greedy, "sampled": self.sampled,
                "greedy_ids": list(self.greedy_ids), "sampled_ids": list(self.sampled_ids)}


@dataclass(frozen=True)
class SamplesTaken:
    """A scheduled evaluation's samples (an event, and a ``samples`` record in metrics.jsonl)."""

    step: int
    samples: tuple[Sample, ...]

    def to_json(self) -> dict[str, Any]:
        return {"kind": "samples", "step": self.step, "samples": [s.to_json() for s in self.samples]}


@dataclass(frozen=True)
class HeadsScored:
    """Every head's role scores at a scheduled evaluation (a ``heads`` record)."""

    step: int
    roles: tuple[Any, ...]  # HeadRole

    def top(self, role: str) -> Any:
        return max(self.roles, key=lambda r: (getattr(r, role), -r.layer, -r.head))

    def to_json(self) -> dict[str, Any]:
        return {"kind": "heads", "step": self.step, "heads": [r.to_json() for r in self.roles],
                "top": {role: {"layer": self.top(role).layer, "head": self.top(role).head,
                               "score": getattr(self.top(role), role)} for role in HEAD_ROLES}}


@dataclass(frozen=True)
class Paused:
    step: int


@dataclass(frozen=True)
class Resumed:
    step: int


@dataclass(frozen=True)
class Saved:
    step: int
    path: Path
    reason: str


@dataclass(frozen=True)
class ThreadsChanged:
    """An automatic run moved to another thread count because it updates faster there."""

    step: int
    before: int
    after: int
    reason: str


@dataclass(frozen=True)
class Refused:
    action: str
    message: str


KEPT_FILES = "kept files"  # a Refused notice: a checkpoint folder kept because it holds a user's files


class FinishReason(enum.StrEnum):
    COMPLETED = "completed"  # the schedule (or --until) is done
    STOPPED = "stopped"  # a stop command or a signal


@dataclass(frozen=True)
class Finished:
    step: int
    reason: str  # a FinishReason
    state_digest: str


@dataclass(frozen=True)
class Failed:
    message: str


Event = (Preparing | RunSummary | RunStarted | UpdateDone | EvaluationDone | ProbesScored | SamplesTaken
         | HeadsScored | Paused | Resumed | Saved
         | ThreadsChanged | Refused | Finished | Failed)
EventSink = Callable[[Any], None]


def report_failures(work: Callable[[], Any], sink: EventSink) -> None:
    """Run ``work`` on a worker thread: a failure becomes a :class:`Failed` event (an
    unexpected one named by its type), so a worker never dies silently."""
    try:
        work()
    except MiniGPTError as err:
        sink(Failed(str(err)))
    except BaseException as err:  # noqa: BLE001 - a worker must report, never die silently
        if isinstance(err, (KeyboardInterrupt, SystemExit, GeneratorExit)):
            raise
        # a library's panic is a BaseException and may print a page: its first line only
        sink(Failed(f"{type(err).__name__}: {next(iter(str(err).splitlines()), '')}"))
