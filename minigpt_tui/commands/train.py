"""``train``: a headless run of the schedule, with a progress bar or one JSON object."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text

from minigpt_tui.commands.common import (
    add_config_arguments,
    config_from_args,
    emit_json,
    graceful_stop,
    output_console,
    runs_dir_from_args,
    setting_help,
)
from minigpt_tui.commands.launch import (
    add_process_arguments,
    joined_world,
    launch,
    launch_requested,
)
from minigpt_tui.commands.task_progress import (
    REFRESHES_PER_SECOND,
    RateColumn,
    Throttle,
    evaluation_line,
)
from minigpt_tui.engine.core.errors import CheckpointError, ConfigError, WriteRefused
from minigpt_tui.engine.core.memory import require_memory_for_training
from minigpt_tui.engine.core.printable import escape_controls
from minigpt_tui.engine.session.events import (
    EvaluationDone,
    FinishReason,
    KEPT_FILES,
    Paused,
    Preparing,
    Refused,
    Resumed,
    RunStarted,
    UpdateDone,
)
from minigpt_tui.engine.session.plans import NewRun
from minigpt_tui.engine.session.run_report import RunLog, mixed_precision_note, run_report
from minigpt_tui.engine.session.tensorboard import check_log_folder
from minigpt_tui.engine.session.training import TrainingSession


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("train", help="train a new run headless")
    add_config_arguments(parser)
    parser.add_argument("--run", help="run name (default: PRESET-TIMESTAMP)")
    parser.add_argument("--runs-dir", dest="runs_dir_sub", metavar="DIR", help="runs directory")
    parser.add_argument("--until", type=int, help="stop after this update, 1 to --steps (the schedule stays the same)")
    parser.add_argument("--json", action="store_true", help="print one JSON object at the end")
    parser.add_argument("--save-every", type=int, help=f"{setting_help('train.save_every')} (0: only at stop and best)")
    parser.add_argument("--keep-last", type=int, help=setting_help("train.keep_last"))
    parser.add_argument(
        "--init-from",
        metavar="MODEL",
        help="start from this model's weights, architecture and tokenizer (a new training history): a model "
             "file, checkpoint, RUN:latest|best, transformers folder or GGUF file",
    )
    add_probe_arguments(parser)
    add_tensorboard_argument(parser)
    add_process_arguments(parser)
    parser.set_defaults(handler=run_train)


def add_tensorboard_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tensorboard", metavar="DIR",
                        help="also write the run's scalars as TensorBoard event files in DIR/RUN while it trains "
                             "(needs the tensorboard extra); view them with tensorboard --logdir DIR")


def tensorboard_folder(args: argparse.Namespace) -> Path | None:
    """The ``--tensorboard`` folder, checked before anything starts (None: not asked for)."""
    return check_log_folder(args.tensorboard) if args.tensorboard else None


def add_probe_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--probes", metavar="FILE",
                        help="score this probes file after every scheduled evaluation (default: the bundled "
                             "probes on a bundled corpus, none on your own text)")
    parser.add_argument("--no-probes", action="store_true", help="score no probes during the run")
    parser.add_argument("--sample-prompts", metavar="FILE",
                        help="continue these prompts (a probes file) at every scheduled evaluation (default: the "
                             "probes' prompts, or the first words of a few validation records)")
    parser.add_argument("--no-watch", action="store_true",
                        help="record no samples or head roles at the evaluations")


def probe_options(args: argparse.Namespace) -> dict[str, Any]:
    if args.no_probes and args.probes:
        raise ConfigError("choose either --probes FILE or --no-probes, not both")
    if args.no_watch and args.sample_prompts:
        raise ConfigError("choose either --sample-prompts FILE or --no-watch, not both")
    return {"probes": args.probes, "score_probes": not args.no_probes, "sample_prompts": args.sample_prompts,
            "watch": not args.no_watch}


def run_train(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    tensorboard = tensorboard_folder(args)
    if launch_requested(args):
        if args.nproc >= 1:  # before any process starts: all of them together must fit
            require_memory_for_training(config, processes=args.nproc)
        return launch(args, config.train.device)
    _note_mixed_precision(config)
    with joined_world(config.train.device) as parallel:
        plan = NewRun(config, runs_dir_from_args(args), args.run, until=args.until, init_from=args.init_from,
                      parallel=parallel, **probe_options(args))
        result = drive(plan, show_progress=not args.json and not parallel.distributed, tensorboard=tensorboard)
    if not parallel.world.is_writer:
        return 0  # rank 0 alone reports
    if args.json:
        emit_json(result)
    else:
        if "warm_start" in result:
            print(f"note: {result['warm_start']['note']}", file=sys.stderr)
        print_summary(result)
    return 0


def _note_mixed_precision(config: Any) -> None:
    note = mixed_precision_note(config)
    if note is not None:
        print(f"note: {note}", file=sys.stderr)


class RunRecorder:
    """The command line's sink: keeps what the JSON result lists (its :class:`RunLog`) and
    moves the progress bar. A refused save ends the command with its one-line reason, as any
    engine error does."""

    def __init__(self, advance: Any) -> None:
        self.advance = advance
        self.log = RunLog()

    def __call__(self, event: Any) -> None:
        self.log(event)
        for kind, handler in self._HANDLERS:
            if isinstance(event, kind):
                handler(self, event)
                return

    def _update(self, event: Any) -> None:
        self.advance(event.record.step, event.record.loss)

    def _refused(self, event: Any) -> None:
        if event.action == "save":
            raise CheckpointError(event.message)
        if event.action in ("token cache", "tensorboard", KEPT_FILES):
            self._say(f"minigpt-tui: warning: {escape_controls(event.message)}")

    def _paused(self, event: Any) -> None:  # only a command from the control file pauses a headless run
        self._say(f"minigpt-tui: paused after update {event.step} through the run's control file "
                  "(an attached app, say); it waits for resume or stop")

    def _resumed(self, event: Any) -> None:
        self._say(f"minigpt-tui: resumed at update {event.step}")

    _HANDLERS: tuple[tuple[type, Any], ...] = (
        (UpdateDone, _update),
        (Refused, _refused),
        (Paused, _paused),
        (Resumed, _resumed),
    )

    @staticmethod
    def _say(line: str) -> None:
        try:
            sys.stderr.write(line + "\n")
            sys.stderr.flush()
        except OSError:
            pass


def drive(plan: Any, *, show_progress: bool, tensorboard: Path | None = None) -> dict[str, Any]:
    """Prepare and run a training session to its end (the schedule, ``until``, or Ctrl+C /
    SIGTERM, which finish the current update, save, then stop); the result as JSON-ready data.
    ``tensorboard``: also write the run's scalars as event files in that folder."""
    with graceful_stop() as stop, _progress(show_progress) as progress:
        recorder = RunRecorder(progress.advance)
        stop.preparing = True  # Ctrl+C before the first update interrupts at once, nothing written
        sink = _announcing(recorder, progress, plan.until, stop)
        session = TrainingSession(plan, sink, stop_requested=lambda: bool(stop), tensorboard=tensorboard)
        finished = session.run()
    if session.write_failure is not None:  # the run stopped at that boundary and saved what it could
        saved = recorder.log.saved
        where = f"; saved as {saved[-1]}" if saved else ""
        raise WriteRefused(f"{session.write_failure}: the run stopped after update {finished.step}{where}")
    prepared = session.prepared
    assert prepared is not None
    stopped_by = stop.signal_name if finished.reason == FinishReason.STOPPED else None
    return run_report(prepared, recorder.log, stopped_by)


def _announcing(recorder: RunRecorder, progress: "_progress", until: int | None, stop: Any) -> Any:
    """The recorder, with the preparation's progress shown while it lasts, and the progress
    bar (to ``until`` or the schedule's end) started once the run's first step is known."""
    def sink(event: Any) -> None:
        if isinstance(event, Preparing):
            progress.preparing(event.label, event.done, event.total)
            return
        if isinstance(event, RunStarted):
            stop.preparing = False  # from now on Ctrl+C finishes the current update, then stops
            progress.begin(event.step, until if until is not None else event.steps)
        if isinstance(event, EvaluationDone):
            progress.evaluated(event)
        recorder(event)

    return sink


class _progress:
    """Rich progress bars on a terminal (preparation steps, then training: updates done of
    total, rate, time left, the latest loss, and a line per scheduled evaluation); silent
    otherwise. ``console``: where to draw (default: stderr)."""

    def __init__(self, enabled: bool, console: Any = None) -> None:
        if console is None and enabled and sys.stderr.isatty():
            console = Console(stderr=True)
        self.console = console
        self.enabled = enabled and console is not None and console.is_terminal
        self.bar: Any = None
        self.task: Any = None
        self.preparation: Any = None
        self.steps: dict[str, Any] = {}  # preparation label -> its task
        self.total = 0
        self.latest: tuple[int, float] | None = None  # the last update's step and loss
        self.throttle = Throttle()

    def __enter__(self) -> "_progress":
        return self

    def preparing(self, label: str, done: int, total: int) -> None:
        if not self.enabled:
            return

        if self.preparation is None:
            self.preparation = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                        TimeElapsedColumn(), console=self.console, transient=True)
            self.preparation.__enter__()
        if label not in self.steps:
            self.steps[label] = self.preparation.add_task(label, total=max(total, 1))
        self.preparation.update(self.steps[label], completed=done, total=max(total, 1))

    def _end_preparation(self, *exc: object) -> None:
        if self.preparation is not None:
            self.preparation.__exit__(*(exc or (None, None, None)))
            self.preparation = None

    def begin(self, start: int, total: int) -> None:
        self._end_preparation()
        if not self.enabled:
            return

        self.bar = Progress(TextColumn("training"), BarColumn(), MofNCompleteColumn(), RateColumn("upd"),
                            TimeRemainingColumn(), TextColumn("loss {task.fields[loss]}"),
                            console=self.console, refresh_per_second=REFRESHES_PER_SECOND)
        self.bar.__enter__()
        self.task = self.bar.add_task("train", total=total, completed=start, loss="-")
        self.total = total

    def advance(self, step: int, loss: float) -> None:
        """Called once per update: the bar takes the latest figures a few times a second only."""
        if self.bar is None:
            return
        self.latest = (step, loss)
        if self.throttle() or step >= self.total:
            self._draw()

    def evaluated(self, event: EvaluationDone) -> None:
        """A persistent line above the bar for each evaluation."""
        if self.bar is None:
            return
        self._draw()
        record = event.record
        self.bar.console.print(evaluation_line(record.step, record.train_loss, record.validation_loss,
                                               event.best_changed), markup=False, highlight=False)
        self.bar.refresh()  # redraw the bar below the line with the figures just taken

    def _draw(self) -> None:
        if self.latest is not None:
            step, loss = self.latest
            self.bar.update(self.task, completed=step, loss=f"{loss:.4f}")

    def __exit__(self, *exc: object) -> None:
        self._end_preparation(*exc)
        if self.bar is not None:
            self._draw()  # the bar left on the screen shows where the run ended
            self.bar.__exit__(*exc)


def print_summary(result: dict[str, Any]) -> None:
    console = output_console()
    table = Table(title=Text(escape_controls(f"run {result['run_dir']}")))
    table.add_column("record", no_wrap=True)
    table.add_column("value", overflow="fold")  # a digest is compared whole: folded, never cut
    table.add_row("preset", result["preset"])
    table.add_row("parameters", f"{result['parameter_scalars']:,} in {result['parameter_tensors']} tensors")
    table.add_row("corpus", _corpus_text(result))
    table.add_row("evaluation", result["evaluation_rule"])
    table.add_row("updates", f"{result['step']} of {result['steps']}")
    _add_progress_rows(table, result)
    _add_watch_rows(table, result)
    best = _best_step_text(result)
    table.add_row("best step", best)
    table.add_row("state digest", result["state_digest"])
    for path in result["checkpoints"]:
        table.add_row("checkpoint", Text(escape_controls(path)))
    if result["stopped_by"]:
        table.add_row("stopped by", result["stopped_by"])
    console.print(table)


def _corpus_text(result: dict[str, Any]) -> Text:
    """The summary's corpus row: which text was read (the preset's or --corpus) and how much."""
    data = result["data"]
    source = escape_controls(result.get("corpus_source", ""))
    if data["mode"] == "stream":
        return Text(f"{source}: stream of {data['train_tokens']:,} train + "
                    f"{data['validation_tokens']:,} validation tokens, {data['train_windows']:,} windows")
    return Text(f"{source}: {data['train_examples']:,} train + "
                f"{data['validation_examples']:,} validation examples")


def _add_progress_rows(table: Table, result: dict[str, Any]) -> None:
    """The last batch loss, evaluation and probe score, where the run has them."""
    if result["updates"]:
        table.add_row("last batch loss", f"{result['updates'][-1]['loss']:.6f}")
    if result["evaluations"]:
        last = result["evaluations"][-1]
        val = last["validation_loss"]
        table.add_row("last evaluation", f"step {last['step']}: train {last['train_loss']:.6f}"
                      + (f", validation {val:.6f}" if val is not None else ""))
    if result["probes"]:
        last = result["probes"][-1]
        table.add_row("probes", f"step {last['step']}: {last['matched']} of {len(last['probes'])} match "
                      f"({last['source']})")


def _add_watch_rows(table: Table, result: dict[str, Any]) -> None:
    """The last sample and induction head, where the run watched them."""
    if result.get("samples") and result["samples"][-1]["samples"]:
        last = result["samples"][-1]
        first = last["samples"][0]
        table.add_row("sample", Text(f"step {last['step']}: {escape_controls(first['prompt'])!s} → "
                                     f"{escape_controls(first['greedy'])[:60]!r}"))
    if result.get("heads"):
        top = result["heads"][-1]["top"]["induction"]
        table.add_row("induction head", f"step {result['heads'][-1]['step']}: block {top['layer']} head "
                      f"{top['head']} ({top['score']:.3f})")


def _best_step_text(result: dict[str, Any]) -> str:
    if result["best_step"] is not None:
        return str(result["best_step"])
    return "none yet" if result["evaluations"] else "none (no evaluation yet)"
