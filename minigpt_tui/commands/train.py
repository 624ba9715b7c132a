"""``train``: a headless run of the schedule, with a progress bar or one JSON object."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from minigpt_tui.commands.common import (
    add_config_arguments,
    config_from_args,
    emit_json,
    graceful_stop,
    runs_dir_from_args,
)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("train", help="train a new run headless")
    add_config_arguments(parser)
    parser.add_argument("--run", help="run name (default: PRESET-TIMESTAMP)")
    parser.add_argument("--runs-dir", dest="runs_dir_sub", help="runs directory")
    parser.add_argument("--until", type=int, help="stop after this update (the schedule stays the same)")
    parser.add_argument("--json", action="store_true", help="print one JSON object at the end")
    parser.add_argument("--save-every", type=int, help="save a checkpoint every N updates (0: only at stop and best)")
    parser.add_argument("--keep-last", type=int, help="keep the last K checkpoints plus the best")
    parser.add_argument(
        "--init-from",
        metavar="CHECKPOINT",
        help="weights-only warm start from a model file, checkpoint or RUN:latest|best (a new training history)",
    )
    parser.set_defaults(handler=run_train)


def run_train(args: argparse.Namespace) -> int:
    from minigpt_tui.engine.corpus import load_corpus
    from minigpt_tui.engine.errors import ConfigError
    from minigpt_tui.engine.runs import RunDirectory
    from minigpt_tui.engine.trainer import TrainingSetup, Trainer, apply_precision

    from minigpt_tui.engine.checkpoint.directory import Checkpointer

    config = config_from_args(args)
    policy = {k: v for k, v in (("save_every", args.save_every), ("keep_last", args.keep_last)) if v is not None}
    if policy:
        config = config.replace(train=policy)
    if args.until is not None and not 1 <= args.until <= config.train.steps:
        raise ConfigError(f"--until must be between 1 and {config.train.steps}")
    runs_dir = runs_dir_from_args(args)
    warm = _warm_start(args.init_from, runs_dir, config) if args.init_from else None
    if warm is not None:
        config = config.replace(tokenizer={"merges": len(warm.tokenizer.merges)})
    apply_precision(config.train)
    corpus = load_corpus(config.corpus)
    with preparation_progress(not args.json) as progress:
        setup = TrainingSetup.build(config, corpus, warm.tokenizer if warm is not None else None, progress=progress)
    initial = {name: p.detach() for name, p in warm.model.named_parameters()} if warm is not None else None
    trainer = Trainer(setup, initial_weights=initial)
    run = RunDirectory.create(runs_dir, args.run, config.preset)
    run.write_json("config.json", config.to_dict())
    run.write_json("identities.json", identities(setup))
    if warm is not None:
        run.write_json("warm_start.json", _warm_record(warm))
    result = drive(trainer, run, until=args.until, show_progress=not args.json, checkpointer=Checkpointer(run))
    result["run_dir"] = str(run.path)
    if warm is not None:
        result["warm_start"] = _warm_record(warm)
        if not args.json:
            print(f"note: {result['warm_start']['note']}", file=sys.stderr)
    if args.json:
        emit_json(result)
    else:
        print_summary(result)
    return 0


def _warm_start(spec: str, runs_dir: Any, config: Any) -> Any:
    """The saved weights and tokenizer for a weights-only warm start, checked to fit."""
    import dataclasses

    from minigpt_tui.engine.checkpoint.portable import load_portable_model
    from minigpt_tui.engine.errors import ConfigError
    from minigpt_tui.engine.runs import resolve_model_file

    portable = load_portable_model(resolve_model_file(spec, runs_dir))
    saved = dataclasses.replace(portable.config, dropout=config.model.dropout, init_std=config.model.init_std)
    if saved != config.model:
        raise ConfigError(
            f"--init-from {spec}: the saved model ({portable.config.family}, width {portable.config.width}, "
            f"{portable.config.layers} layers) does not fit this run's model config (preset {config.preset})"
        )
    return portable


def _warm_record(portable: Any) -> dict[str, Any]:
    return {
        "from": str(portable.path),
        "model_identity": portable.identity,
        "tokenizer_identity": portable.tokenizer.identity,
        "note": "weights-only warm start: a new training history (fresh optimizer moments, schedule clock, "
        "data position, random streams and loss scaler); not a resume, so it does not continue the saved run",
    }


def identities(setup: Any) -> dict[str, Any]:
    return {
        "corpus": setup.corpus_summary(),
        "tokenizer": {"identity": setup.tokenizer.identity, "vocab_size": setup.tokenizer.vocab_size,
                      "merges": len(setup.tokenizer.merges)},
    }


def drive(trainer: Any, run: Any, *, until: int | None, show_progress: bool,
          checkpointer: Any = None) -> dict[str, Any]:
    """Run the schedule to ``until``, appending metrics; stop cleanly on Ctrl+C/SIGTERM."""
    from dataclasses import asdict

    from minigpt_tui.engine.trainer import UpdateRecord, scheduled_work

    updates: list[dict[str, Any]] = []
    evaluations: list[dict[str, Any]] = []
    saved: list[str] = []
    steps = trainer.config.train.steps
    target = steps if until is None else until
    save_every = trainer.config.train.save_every
    stopped_by = None
    saved_step: int | None = None
    due: list[str] = []  # why the next checkpoint is due; saved once this step's work is done
    with graceful_stop() as stop, _progress(show_progress, trainer.step, target) as advance:
        for item in scheduled_work(trainer, until):
            if isinstance(item, UpdateRecord):
                record = item.exact_fields()
                updates.append(record)
                run.append_metric({"kind": "update", **record, "seconds": item.seconds,
                                   "tokens_per_second": item.tokens_per_second})
                advance(item.step, item.loss)
                if save_every and item.step % save_every == 0:
                    due.append("interval")
            else:
                evaluations.append(asdict(item))
                run.append_metric({"kind": "evaluation", **asdict(item)})
                if trainer.best_step == item.step and item.step > 0:
                    due.append("best")
            # One checkpoint per step, after that step's scheduled evaluation.
            if not trainer.evaluation_due():
                if checkpointer is not None and due:
                    saved.append(str(checkpointer.save(trainer, "+".join(due))))
                    saved_step = trainer.step
                due = []
            if stop:
                stopped_by = stop.signal_name
                break
    if checkpointer is not None and saved_step != trainer.step:
        saved.append(str(checkpointer.save(trainer, "stop")))
    tensors, scalars = trainer.parameter_counts
    return {
        "preset": trainer.config.preset,
        "parameter_tensors": tensors,
        "parameter_scalars": scalars,
        "steps": steps,
        "step": trainer.step,
        "stopped_by": stopped_by,
        "updates": updates,
        "evaluations": evaluations,
        "best_step": trainer.best_step,
        "state_digest": trainer.state_digest(),
        "weights_digest": trainer.weights_digest(),
        "optimizer_digest": trainer.optimizer_digest(),
        "progress": trainer.progress(),
        "corpus_identity": trainer.setup.corpus.identity,
        "data": trainer.data_summary(),
        "evaluation_rule": trainer.evaluation_rule,
        "tokenizer_identity": trainer.tokenizer.identity,
        "checkpoints": saved,
    }


class preparation_progress:
    """Progress of the work before the first update (tokenizer training, encoding, the
    token cache) as rich bars on a terminal; silent otherwise. Ctrl+C stops that work
    cleanly: the cache is written atomically and the run folder comes only after it."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled and sys.stderr.isatty()
        self.tasks: dict[str, Any] = {}

    def __enter__(self):  # type: ignore[no-untyped-def]
        if not self.enabled:
            return None
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                            TimeElapsedColumn(), console=Console(stderr=True), transient=True)
        self.bar.__enter__()
        return self.advance

    def advance(self, label: str, done: int, total: int) -> None:
        if label not in self.tasks:
            self.tasks[label] = self.bar.add_task(label, total=total)
        self.bar.update(self.tasks[label], completed=done, total=total)

    def __exit__(self, *exc: object) -> None:
        if self.enabled:
            self.bar.__exit__(*exc)


class _progress:
    """A rich progress bar with ETA on a terminal; silent otherwise."""

    def __init__(self, enabled: bool, start: int, total: int) -> None:
        self.enabled = enabled and sys.stderr.isatty()
        self.start, self.total = start, total

    def __enter__(self):  # type: ignore[no-untyped-def]
        if not self.enabled:
            return lambda step, loss: None
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self.bar = Progress(TextColumn("training"), BarColumn(), MofNCompleteColumn(),
                            TextColumn("loss {task.fields[loss]}"), TimeRemainingColumn(),
                            console=Console(stderr=True))
        self.bar.__enter__()
        task = self.bar.add_task("train", total=self.total, completed=self.start, loss="-")
        return lambda step, loss: self.bar.update(task, completed=step, loss=f"{loss:.4f}")

    def __exit__(self, *exc: object) -> None:
        if self.enabled:
            self.bar.__exit__(*exc)


def print_summary(result: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(title=f"run {result['run_dir']}")
    table.add_column("record")
    table.add_column("value")
    table.add_row("preset", result["preset"])
    table.add_row("parameters", f"{result['parameter_scalars']} in {result['parameter_tensors']} tensors")
    data = result["data"]
    if data["mode"] == "stream":
        table.add_row("corpus", f"stream of {data['train_tokens']:,} train + {data['validation_tokens']:,} "
                      f"validation tokens, {data['train_windows']:,} windows")
    table.add_row("evaluation", result["evaluation_rule"])
    table.add_row("updates", f"{result['step']} of {result['steps']}")
    if result["updates"]:
        table.add_row("last batch loss", f"{result['updates'][-1]['loss']:.6f}")
    if result["evaluations"]:
        last = result["evaluations"][-1]
        val = last["validation_loss"]
        table.add_row("last evaluation", f"step {last['step']}: train {last['train_loss']:.6f}"
                      + (f", validation {val:.6f}" if val is not None else ""))
    table.add_row("best step", str(result["best_step"]))
    table.add_row("state digest", result["state_digest"])
    for path in result["checkpoints"]:
        table.add_row("checkpoint", path)
    if result["stopped_by"]:
        table.add_row("stopped by", result["stopped_by"])
    console.print(table)
