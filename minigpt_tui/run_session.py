"""What the app's training worker does, apart from the UI: build a trainer, create its run
directory, write metrics, and hold the controller so that the UI can command it.

Everything that imports torch is imported inside functions that run on the worker thread,
so importing this module costs the first frame nothing.
"""

from __future__ import annotations

import csv
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from minigpt_tui.messages import LoadedCurve, RunHistory, RunSummary

CSV_COLUMNS = ("kind", "step", "lr", "loss", "grad_norm", "loss_scale", "next_loss_scale", "applied",
               "valid_targets", "seconds", "tokens_per_second", "train_loss", "validation_loss",
               "train_targets", "validation_targets", "extra")


class RunHandle:
    """The UI's handle on a controller that the worker thread creates.

    Commands sent before the controller exists are kept and delivered, in order, the
    moment it is attached; the controller applies them at its first update boundary.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._controller: Any = None
        self._early: list[str] = []
        self.saving = False  # whether the controller was given a checkpointer

    def attach(self, controller: Any) -> None:
        with self._lock:
            self._controller = controller
            early, self._early = self._early, []
        for name in early:
            getattr(controller, name)()

    def send(self, command: str) -> None:
        """``command`` is a controller method: pause, resume, stop, evaluate_now, save_now."""
        with self._lock:
            controller = self._controller
            if controller is None:
                self._early.append(command)
                return
        getattr(controller, command)()

    @property
    def unsaved_updates(self) -> int:
        controller = self._controller
        return 0 if controller is None else controller.unsaved_updates


class GuardedCheckpointer:
    """Wraps the checkpoint engine's saver; refuses while no run directory exists yet, and
    after :meth:`discard` (quitting without saving)."""

    def __init__(self) -> None:
        self.inner: Any = None
        self.discarding = False

    def discard(self) -> None:
        self.discarding = True

    def save(self, trainer: Any, reason: str) -> Path:
        from minigpt_tui.engine.errors import CheckpointError

        if self.discarding:
            raise CheckpointError("not saved: quitting without saving")
        if self.inner is None:
            raise CheckpointError("the run directory is not ready yet")
        return self.inner.save(trainer, reason)


def checkpointer_factory() -> Callable[[Any], Any] | None:
    """The checkpoint engine's saver for a run directory, or None while it is not installed."""
    try:
        from minigpt_tui.engine.checkpoint.directory import Checkpointer  # type: ignore[import-not-found]
    except ImportError:
        return None
    return Checkpointer  # keeps the run config's keep_last newest plus the best


@dataclass
class RunFiles:
    """The run directory of the run being trained, once it exists (worker thread)."""

    run: Any = None
    writes_failed: int = 0

    def append(self, item: Any) -> None:
        if self.run is None:
            return
        if hasattr(item, "exact_fields"):
            record = {"kind": "update", **item.exact_fields(), "seconds": item.seconds,
                      "tokens_per_second": item.tokens_per_second}
        else:
            record = {"kind": "evaluation", **asdict(item)}
        try:
            self.run.append_metric(record)
        except OSError:
            self.writes_failed += 1


@dataclass
class NewRunPlan:
    """A new run from a resolved config (a RunConfig), in ``runs_dir``."""

    config: Any
    runs_dir: Path
    name: str | None = None
    files: RunFiles = field(default_factory=RunFiles)

    def build(self, announce: Callable[[RunSummary], None],
              checkpointer: GuardedCheckpointer | None) -> Any:
        """Load the corpus, train the tokenizer, build the trainer; only then create the
        run directory, so that a failed start leaves nothing on disk."""
        from minigpt_tui.engine.corpus import load_corpus
        from minigpt_tui.engine.runs import RunDirectory
        from minigpt_tui.engine.trainer import Trainer, TrainingSetup, apply_precision

        config = self.config
        apply_precision(config.train)
        corpus = load_corpus(config.corpus)
        setup = TrainingSetup.build(config, corpus)
        trainer = Trainer(setup)
        run = RunDirectory.create(self.runs_dir, self.name, config.preset)
        run.write_json("config.json", config.to_dict())
        run.write_json("identities.json", identities(setup))
        self.files.run = run
        make = checkpointer_factory()
        if checkpointer is not None and make is not None:
            checkpointer.inner = make(run)
        announce(summarize(trainer, run.name, run.path))
        return trainer


@dataclass
class ResumePlan:
    """Continue a saved run from a checkpoint folder, exactly where it stopped. The run it
    belongs to (``RUN/checkpoints/step-N``) keeps its metrics and checkpoints; a loose
    checkpoint continues in a new run folder (as ``minigpt-tui resume`` does)."""

    checkpoint: Path
    runs_dir: Path
    files: RunFiles = field(default_factory=RunFiles)

    def build(self, announce: Callable[[RunSummary], None],
              checkpointer: GuardedCheckpointer | None) -> Any:
        """Restore the trainer (the engine refuses, with one line, what it cannot continue)
        before anything is written."""
        from minigpt_tui.engine.checkpoint.directory import restore_trainer
        from minigpt_tui.engine.errors import ConfigError
        from minigpt_tui.engine.runs import RunDirectory

        folder = Path(self.checkpoint)
        trainer = restore_trainer(folder)
        if trainer.finished:
            raise ConfigError(f"the checkpoint at step {trainer.step} has completed its schedule of "
                              f"{trainer.config.train.steps} updates: nothing to resume")
        if folder.parent.name == "checkpoints" and (folder.parent.parent / "config.json").is_file():
            run = RunDirectory(folder.parent.parent)
        else:
            run = RunDirectory.create(self.runs_dir, None, f"resumed-{trainer.config.preset}")
            run.write_json("config.json", trainer.config.to_dict())
        run.append_metric({"kind": "resume", "from": str(folder), "step": trainer.step})
        self.files.run = run
        make = checkpointer_factory()
        if checkpointer is not None and make is not None:
            checkpointer.inner = make(run)
        announce(summarize(trainer, run.name, run.path, resumed_from=folder))
        return trainer


def saved_run_config(checkpoint: Path) -> Any:
    """The RunConfig saved in a checkpoint's training state, from its header alone (no torch)."""
    import json

    from minigpt_tui.engine.checkpoint.safetensors_io import read_header
    from minigpt_tui.engine.config import RunConfig
    from minigpt_tui.engine.errors import CheckpointError

    path = Path(checkpoint) / "training.safetensors"
    if not path.is_file():
        raise CheckpointError(f"{checkpoint} holds no training.safetensors: it cannot be resumed")
    try:
        return RunConfig.from_dict(json.loads(read_header(path).metadata["config"]))
    except (KeyError, ValueError, TypeError) as err:
        raise CheckpointError(f"{path}: no readable run config ({type(err).__name__})") from None


def identities(setup: Any) -> dict[str, Any]:
    return {
        "corpus": setup.corpus_summary(),
        "tokenizer": {"identity": setup.tokenizer.identity, "vocab_size": setup.tokenizer.vocab_size,
                      "merges": len(setup.tokenizer.merges)},
    }


def summarize(trainer: Any, run_name: str, run_dir: Path | None, resumed_from: Path | None = None) -> RunSummary:
    config = trainer.config
    tensors, scalars = trainer.parameter_counts
    corpus = trainer.setup.corpus
    return RunSummary(
        run_name=run_name,
        run_dir=run_dir,
        preset=config.preset,
        parameter_tensors=tensors,
        parameter_scalars=scalars,
        corpus_source=corpus.source,
        corpus_identity=corpus.identity,
        train_records=len(corpus.train),
        validation_records=len(corpus.validation),
        tokenizer_identity=trainer.tokenizer.identity,
        vocab_size=trainer.tokenizer.vocab_size,
        merges=len(trainer.tokenizer.merges),
        precision=config.train.precision,
        dtype=config.dtype_name,
        threads=1 if config.train.precision == "exact" else config.train.threads,
        steps=config.train.steps,
        start_step=trainer.step,
        resumed_from=resumed_from,
        corpus_mode=config.corpus.mode,
        train_tokens=trainer.data_summary().get("train_tokens", 0),
        validation_tokens=trainer.data_summary().get("validation_tokens", 0),
        evaluation_rule=trainer.evaluation_rule,
    )


def drive(plan: NewRunPlan | ResumePlan, handle: RunHandle, feed: Callable[[Any], None],
          checkpointer: GuardedCheckpointer) -> None:
    """The worker's whole job: make the controller, attach it, run it to the end."""
    from minigpt_tui.engine.controller import RunController

    saving = checkpointer_factory() is not None
    handle.saving = saving
    controller = RunController(
        lambda: plan.build(feed, checkpointer if saving else None),
        feed,
        checkpointer=checkpointer if saving else None,
        on_record=plan.files.append,
    )
    handle.attach(controller)
    controller.run()


# -- metrics files (no torch) ----------------------------------------------------------------
def read_metrics(path: Path) -> list[dict[str, Any]]:
    """The records of a run directory's ``metrics.jsonl`` (or of that file itself)."""
    import json

    from minigpt_tui.engine.errors import ConfigError

    target = path / "metrics.jsonl" if path.is_dir() else path
    try:
        lines = target.read_text("utf-8").splitlines()
    except FileNotFoundError:
        raise ConfigError(f"no metrics.jsonl in {path}") from None
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"cannot read {target}: {err}") from None
    records = []
    for line in lines:
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            break  # a torn last line after a crash: keep what precedes it
    return records


def load_history(run_dir: Path, until_step: int) -> RunHistory:
    """The records a resumed run had up to ``until_step``: the last record of each update
    and evaluation step at or before it (a run resumed before may hold a step twice)."""
    from types import SimpleNamespace

    updates: dict[int, Any] = {}
    evaluations: dict[tuple[int, bool], Any] = {}
    for record in read_metrics(run_dir):
        step = record.get("step")
        if not isinstance(step, int) or step > until_step:
            continue
        if record.get("kind") == "update":
            updates[step] = SimpleNamespace(
                step=step, loss=record.get("loss"), lr=record.get("lr"), grad_norm=record.get("grad_norm"),
                loss_scale=record.get("loss_scale", 1.0), tokens_per_second=record.get("tokens_per_second"),
                applied=record.get("applied", True))
        elif record.get("kind") == "evaluation":
            extra = bool(record.get("extra"))
            evaluations[(step, extra)] = SimpleNamespace(
                step=step, train_loss=record.get("train_loss"), validation_loss=record.get("validation_loss"),
                extra=extra)
    scheduled = [e for e in evaluations.values() if not e.extra and e.validation_loss is not None]
    best = min(scheduled, key=lambda e: (e.validation_loss, e.step)) if scheduled else None
    ordered_evaluations = sorted(evaluations.values(), key=lambda e: (e.step, e.extra))
    return RunHistory(tuple(updates[k] for k in sorted(updates)), tuple(ordered_evaluations),
                      best.step if best else None)


def load_curve(path: Path) -> LoadedCurve:
    from minigpt_tui.engine.errors import ConfigError

    records = read_metrics(path)
    updates = tuple((int(r["step"]), float(r["loss"])) for r in records
                    if r.get("kind") == "update" and "loss" in r)
    evaluations = [r for r in records if r.get("kind") == "evaluation"]
    train = tuple((int(r["step"]), float(r["train_loss"])) for r in evaluations)
    validation = tuple((int(r["step"]), float(r["validation_loss"])) for r in evaluations
                       if r.get("validation_loss") is not None)
    if not updates and not train:
        raise ConfigError(f"{path} has no update or evaluation records")
    name = (path if path.is_dir() else path.parent).name
    return LoadedCurve(name=name, updates=updates, train=train, validation=validation)


def export_csv(run_dir: Path, target: Path | None = None) -> Path:
    """Write the run's metrics as CSV (one row per update or evaluation); return its path."""
    records = read_metrics(run_dir)
    target = target or run_dir / "metrics.csv"
    tmp = target.with_suffix(target.suffix + ".tmp")
    with tmp.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=CSV_COLUMNS, extrasaction="ignore")
        writer.writeheader()
        for record in records:
            writer.writerow({k: record.get(k, "") for k in CSV_COLUMNS})
    tmp.replace(target)
    return target
