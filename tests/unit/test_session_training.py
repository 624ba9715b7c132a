"""The training session's rules, the same for the command line and the app: when a
checkpoint is due (interval, best, pause, stop), which run a resume continues in, and a
refused start leaving nothing on disk."""

from __future__ import annotations

import json

import pytest

from minigpt_tui.engine.training.checkpoints import Checkpointer
from minigpt_tui.engine.formats.checkpoint_folder import list_checkpoints
from minigpt_tui.engine.core.config import load_config
from minigpt_tui.engine.core.errors import CorpusError
from minigpt_tui.engine.session.runs import RunDirectory
from minigpt_tui.engine.session.events import (
    Command,
    EvaluationDone,
    Finished,
    Preparing,
    PreparingReports,
    RunSummary,
    Saved,
    UpdateDone,
)
from minigpt_tui.engine.session.plans import NewRun, ResumeRun, prepare
from minigpt_tui.engine.session.training import TrainingSession, improved_best
from minigpt_tui.engine.training.trainer import EvaluationRecord
from tests.checkpoint_support import make_trainer


def _evaluation(step: int, *, extra: bool = False, validation: float | None = 1.0) -> EvaluationRecord:
    return EvaluationRecord(step, 2.0, validation, 10, 5 if validation is not None else 0, extra)


def test_only_a_scheduled_evaluation_with_a_validation_loss_sets_the_best():
    assert improved_best(_evaluation(50), best_step=50)
    assert not improved_best(_evaluation(50, extra=True), best_step=50)  # extra at the best step
    assert not improved_best(_evaluation(50, validation=None), best_step=50)
    assert not improved_best(_evaluation(100), best_step=50)


def test_an_extra_evaluation_at_the_best_step_does_not_save_as_best(tmp_path):
    run = RunDirectory.create(tmp_path / "runs", "best", "mini")
    events: list = []
    session: TrainingSession

    def sink(event):
        events.append(event)
        if isinstance(event, EvaluationDone) and event.best_changed and event.record.step == 50:
            session.send(Command.EVALUATE)

    trainer = make_trainer("mini", train={"steps": 100, "save_every": 0})
    session = TrainingSession.for_trainer(lambda: trainer, sink, checkpointer=Checkpointer(run, keep_last=10))
    session.run()
    extra = [e for e in events if isinstance(e, EvaluationDone) and e.record.extra]
    assert [(e.record.step, e.best_changed) for e in extra] == [(50, False)]
    reasons = [e.reason for e in events if isinstance(e, Saved)]
    assert reasons.count("best") + reasons.count("interval+best") == sum(
        1 for e in events if isinstance(e, EvaluationDone) and e.best_changed and e.record.step > 0)


def _saved_run(tmp_path, updates: int = 2) -> RunDirectory:
    config = load_config("tiny")
    session = TrainingSession(NewRun(config, tmp_path / "runs", "first", until=updates), lambda e: None)
    session.run()
    assert session.prepared is not None and session.prepared.run is not None
    return session.prepared.run


def test_a_resumed_run_stopped_before_its_first_update_writes_nothing_new(tmp_path):
    run = _saved_run(tmp_path)
    before = [c.path for c in list_checkpoints(run.checkpoints)]
    events: list = []
    session = TrainingSession(ResumeRun(before[-1], tmp_path / "runs"), events.append, stop_requested=lambda: True)
    finished = session.run()
    assert finished.reason == "stopped" and finished.step == 2
    assert not [e for e in events if isinstance(e, Saved)]
    assert [c.path for c in list_checkpoints(run.checkpoints)] == before


def test_a_stop_after_updates_saves_them_once(tmp_path):
    events: list = []
    session: TrainingSession

    def sink(event):
        events.append(event)
        if isinstance(event, UpdateDone) and event.record.step == 3:
            session.send(Command.STOP)

    session = TrainingSession(NewRun(load_config("tiny"), tmp_path / "runs", "stopped"), sink)
    session.run()
    assert [(e.step, e.reason) for e in events if isinstance(e, Saved)] == [(3, "stop")]
    assert isinstance(events[-1], Finished) and events[-1].reason == "stopped"


def _resumed_in(checkpoint, runs_dir) -> RunDirectory:
    """The run folder a resume from ``checkpoint`` continues in, as prepared (lock released)."""
    prepared = prepare(ResumeRun(checkpoint, runs_dir))
    prepared.release()
    assert prepared.run is not None
    return prepared.run


def test_a_resume_continues_in_the_run_folder_only_when_it_is_a_run(tmp_path):
    run = _saved_run(tmp_path)
    checkpoint = list_checkpoints(run.checkpoints)[-1].path
    assert _resumed_in(checkpoint, tmp_path / "runs") == run
    (run.path / "config.json").unlink()  # checkpoints/ inside a folder that is not a run
    other = _resumed_in(checkpoint, tmp_path / "runs")
    assert other != run and other.name.startswith("resumed-tiny-")
    assert (other.path / "config.json").is_file()


def test_a_new_run_announces_its_summary_and_writes_its_identities(tmp_path):
    events: list = []
    TrainingSession(NewRun(load_config("tiny"), tmp_path / "runs", "named", until=1), events.append).run()
    preparing = [e for e in events if isinstance(e, Preparing)]
    assert events[: len(preparing)] == preparing  # preparation is reported before the summary
    summary = events[len(preparing)]
    assert isinstance(summary, RunSummary) and summary.run_name == "named" and summary.start_step == 0
    identities = json.loads((tmp_path / "runs" / "named" / "identities.json").read_text())
    assert identities["tokenizer"]["identity"] == summary.tokenizer_identity
    assert identities["corpus"]["identity"] == summary.corpus_identity


def test_a_stream_run_reports_its_preparation_in_order_before_the_summary(tmp_path):
    text = tmp_path / "text.txt"
    text.write_text("".join(f"paragraph {i} of a small text to encode\n\n" for i in range(300)), "utf-8")
    config = load_config("mini", overrides={"corpus": {"mode": "stream", "source": str(text)}})
    events: list = []
    TrainingSession(NewRun(config, tmp_path / "runs", "first", until=1), events.append).run()
    first = [e for e in events if isinstance(e, Preparing)]
    labels = list(dict.fromkeys(e.label for e in first))
    assert labels == ["training the tokenizer", "reading the token cache", "encoding train",
                      "encoding validation", "writing the token cache"]
    assert all(0 <= e.done <= e.total for e in first)
    for label in labels:  # each step reaches its end, never going back
        done = [e.done for e in first if e.label == label]
        assert done == sorted(done) and done[-1] == [e.total for e in first if e.label == label][-1]
    assert isinstance(events[len(first)], RunSummary)
    events.clear()
    TrainingSession(NewRun(config, tmp_path / "runs", "second", until=1), events.append).run()
    assert [e.label for e in events if isinstance(e, Preparing)] == [
        "training the tokenizer", "training the tokenizer", "reading the token cache", "reading the token cache"]


def test_a_stop_sent_while_preparing_ends_the_session_with_nothing_written(tmp_path):
    text = tmp_path / "text.txt"
    text.write_text("".join(f"paragraph {i} of a small text to encode\n\n" for i in range(300)), "utf-8")
    config = load_config("mini", overrides={"corpus": {"mode": "stream", "source": str(text)}})
    events: list = []

    def sink(event) -> None:
        events.append(event)
        if isinstance(event, Preparing) and event.label == "encoding train":
            session.send(Command.STOP)  # as the app does when the user stops or quits

    session = TrainingSession(NewRun(config, tmp_path / "runs", "stopped"), sink)
    finished = session.run()
    assert finished.reason == "stopped" and finished.step == 0 and events[-1] == finished
    assert not any(isinstance(e, (RunSummary, UpdateDone)) for e in events)
    assert not (tmp_path / "runs").exists()
    cache = tmp_path / "token-cache"
    assert not cache.exists() or list(cache.iterdir()) == []


def test_preparing_reports_are_throttled_but_keep_each_start_and_end():
    now = [0.0]
    seen: list = []
    report = PreparingReports(seen.append, per_second=10, clock=lambda: now[0])
    for done in range(0, 101):
        report("encoding train", done, 100)
        now[0] += 0.01  # 100 reports a second
    report("writing the token cache", 0, 3)
    done = [e.done for e in seen[:-1]]
    assert done[0] == 0 and done[-1] == 100 and 10 <= len(done) <= 12  # about 10 a second out of 100
    assert all(later - earlier >= 9 for earlier, later in zip(done[:-2], done[1:-1]))
    assert seen[-1] == Preparing("writing the token cache", 0, 3)


def test_a_refused_start_leaves_nothing_on_disk(tmp_path):
    config = load_config("tiny", overrides={"corpus": {"source": str(tmp_path / "missing.txt")}})
    with pytest.raises(CorpusError):
        TrainingSession(NewRun(config, tmp_path / "runs", "never"), lambda e: None).run()
    assert not (tmp_path / "runs" / "never").exists()



def _poisoned_trainer(**train):
    """A tiny trainer (loss scaling on) whose weights hold a NaN: every update is non-finite."""

    trainer = make_trainer("tiny", train={"steps": 400, "save_every": 2, "keep_last": 100, **train})
    return trainer, lambda: next(trainer.model.parameters()).data.fill_(float("nan"))


def test_a_diverged_run_stops_at_the_patience_naming_the_last_good_checkpoint(tmp_path):
    from minigpt_tui.engine.core.errors import TrainingDiverged

    run = RunDirectory.create(tmp_path / "runs", "nan", "tiny")
    trainer, poison = _poisoned_trainer(divergence_patience=5, monitor_tokens=3)
    events: list = []

    def sink(event):
        events.append(event)
        if isinstance(event, UpdateDone) and event.record.step == 4 and event.record.applied:
            poison()  # after update 4 (saved at 4): the monitoring sample sees NaN logits too

    session = TrainingSession.for_trainer(lambda: trainer, sink, checkpointer=Checkpointer(run, keep_last=100))
    with pytest.raises(TrainingDiverged) as raised:
        session.run()
    message = str(raised.value)
    assert message.startswith("training diverged at update 5 (loss nan") and "5 non-finite updates in a row" in message
    assert message.endswith("the last good checkpoint is step 4")
    updates = [e.record for e in events if isinstance(e, UpdateDone)]
    assert len(updates) == 4 + 5 and not any(u.applied for u in updates[4:])
    assert [c.step for c in list_checkpoints(run.checkpoints)] == [2, 4]  # nothing saved after it
    assert not any(isinstance(e, Finished) for e in events)


def test_a_stop_during_a_long_evaluation_is_honoured_between_its_batches(tmp_path):
    """The stop lands mid-evaluation: the evaluation is abandoned (nothing recorded), the
    run stops and saves at the boundary before it, and resuming evaluates that step again,
    as the run that never stopped did."""
    run = RunDirectory.create(tmp_path / "runs", "long-eval", "mini")
    trainer = make_trainer("mini", train={"steps": 100, "save_every": 0, "eval_every": 50})
    batches_seen = 0
    session: TrainingSession
    original = trainer.split_loss

    def counting(batches):  # type: ignore[no-untyped-def]
        nonlocal batches_seen
        if trainer.step == 50:
            batches_seen += 1
            session.send(Command.STOP)  # asked while the evaluation at 50 runs
        return original(batches)

    trainer.split_loss = counting  # type: ignore[method-assign]
    events: list = []
    session = TrainingSession.for_trainer(lambda: trainer, events.append, checkpointer=Checkpointer(run, keep_last=10))
    finished = session.run()
    assert finished.step == 50 and finished.reason == "stopped"
    assert [e.record.step for e in events if isinstance(e, EvaluationDone)] == [0]  # 50's was abandoned
    assert batches_seen == 1  # the validation split was never started
    assert [c.step for c in list_checkpoints(run.checkpoints)] == [50]
