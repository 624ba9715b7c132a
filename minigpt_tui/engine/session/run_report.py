"""What a headless training run reports (``train`` and ``resume``): the note a user needs
before it starts, the records its events carried (:class:`RunLog`), and, at its end, one
JSON-ready report of its summary, those records, the trainer's digests and progress, and
where it started from (:func:`run_report`). Torch-free at import.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from minigpt_tui.engine.core.devices import choose_device
from minigpt_tui.engine.session.events import (
    EvaluationDone,
    HeadsScored,
    ProbesScored,
    SamplesTaken,
    Saved,
    UpdateDone,
)


def mixed_precision_note(config: Any) -> str | None:
    """What a user should know before a run trains in ``config``'s precision on its device
    (None: nothing), e.g. bf16 emulated on a processor without it."""
    from minigpt_tui.engine.training.trainer import (  # deferred: imports torch
        mixed_precision_note as note_for,
    )

    return note_for(config.train.precision, choose_device(config.train.device).kind)


class RunLog:
    """The records a run's events carry, as its report lists them: every update's exact
    fields, every evaluation, the probes, samples and head roles scored at them, and the
    checkpoints saved. Call it with each event; other events are left to the caller."""

    def __init__(self) -> None:
        self.updates: list[dict[str, Any]] = []
        self.evaluations: list[dict[str, Any]] = []
        self.saved: list[str] = []
        self.probes: list[dict[str, Any]] = []
        self.samples: list[dict[str, Any]] = []
        self.heads: list[dict[str, Any]] = []

    def __call__(self, event: Any) -> None:
        for kind, handler in self._HANDLERS:
            if isinstance(event, kind):
                handler(self, event)
                return

    def _update(self, event: Any) -> None:
        self.updates.append(event.record.exact_fields())

    def _evaluation(self, event: Any) -> None:
        self.evaluations.append(asdict(event.record))

    def _probes(self, event: Any) -> None:
        self.probes.append({"step": event.step, "source": event.source, "matched": event.matched,
                            "probes": [score.to_json() for score in event.scores]})

    def _samples(self, event: Any) -> None:
        self.samples.append(event.to_json())

    def _heads(self, event: Any) -> None:
        record = event.to_json()
        self.heads.append({"step": record["step"], "top": record["top"]})

    def _saved(self, event: Any) -> None:
        self.saved.append(str(event.path))

    _HANDLERS: tuple[tuple[type, Any], ...] = (
        (UpdateDone, _update),
        (EvaluationDone, _evaluation),
        (ProbesScored, _probes),
        (SamplesTaken, _samples),
        (HeadsScored, _heads),
        (Saved, _saved),
    )


def run_report(prepared: Any, log: RunLog, stopped_by: str | None) -> dict[str, Any]:
    """A finished run's report: its summary, what it recorded, the trainer's state, and where
    it started from when it did not start fresh (empty on a rank that writes nothing)."""
    if prepared.run is None:  # a rank other than 0: it writes and reports nothing
        return {}
    return {**_result(prepared, log, stopped_by), **_starts(prepared)}


def _result(prepared: Any, log: RunLog, stopped_by: str | None) -> dict[str, Any]:
    """What a finished run reports: its summary, what it recorded and the trainer's state."""
    trainer = prepared.trainer
    summary = prepared.summary
    assert summary is not None  # every rank that writes has one
    return {
        "preset": summary.preset,
        "parameter_tensors": summary.parameter_tensors,
        "parameter_scalars": summary.parameter_scalars,
        "steps": summary.steps,
        "step": trainer.step,
        "stopped_by": stopped_by,
        "updates": log.updates,
        "evaluations": log.evaluations,
        "probes": log.probes,
        "samples": log.samples,
        "heads": log.heads,
        "best_step": trainer.best_step,
        "state_digest": trainer.state_digest(),
        "weights_digest": trainer.weights_digest(),
        "optimizer_digest": trainer.optimizer_digest(),
        "progress": trainer.progress(),
        "corpus_identity": summary.corpus_identity,
        "corpus_source": summary.corpus_source,
        "data": trainer.data_summary(),
        "evaluation_rule": summary.evaluation_rule,
        "tokenizer_identity": summary.tokenizer_identity,
        "checkpoints": [path for path in log.saved if Path(path).exists()],  # retention deleted the rest
        "run_dir": str(summary.run_dir),
        "device": trainer.placement.kind,
        "world_size": trainer.parallel.world_size,
        "global_batch": trainer.config.train.batch_size * trainer.config.train.microbatches
        * trainer.parallel.world_size,
    }


def _starts(prepared: Any) -> dict[str, Any]:
    """Where the run started from, when it did not start fresh: a warm start, a resume."""
    result: dict[str, Any] = {}
    if prepared.warm_start is not None:
        result["warm_start"] = prepared.warm_start.to_json()
    if prepared.resumed_from is not None:
        from minigpt_tui.engine.training.checkpoints import (  # deferred: imports torch
            continuation_record,
        )

        result["resumed_from"] = str(prepared.resumed_from)
        result["continuation"] = continuation_record(prepared.trainer)
    return result
