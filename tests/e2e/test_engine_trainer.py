"""The trainer: loss weighting, schedule, scaler, digests, session equivalence."""

from __future__ import annotations

import json
import math
import subprocess
import threading

import pytest
import torch

from minigpt_tui.engine.core.config import load_config
from minigpt_tui.engine.training.corpus import load_corpus
from minigpt_tui.engine.core.errors import CaptureRefused
from minigpt_tui.engine.session.events import Command, EvaluationDone, Finished, Paused, UpdateDone
from minigpt_tui.engine.session.training import TrainingSession
from minigpt_tui.engine.training.trainer import (
    LossScaler,
    TrainingSetup,
    Trainer,
    apply_precision,
    scheduled_lr,
    scheduled_work,
    target_loss_sum,
)
from tests.conftest import cli_command, cli_env
from tests.polling import wait_until


def trainer_from_preset(preset: str = "mini", **train: object) -> Trainer:
    """A trainer from ``preset`` with its train settings changed by ``train``."""
    config = load_config(preset)
    if train:
        config = config.replace(train=train)
    apply_precision(config.train)
    return Trainer(TrainingSetup.build(config, load_corpus(config.corpus)))


def test_loss_is_weighted_per_valid_target_not_per_record():
    # Record A has two targets with losses 1 and 3, record B one target with loss 5.
    def logits_for(loss: float) -> list[float]:
        p = math.exp(-loss)
        return [math.log(p), math.log(1 - p)]

    logits = torch.tensor(
        [[logits_for(1.0), logits_for(3.0)], [logits_for(5.0), [0.0, 0.0]]], dtype=torch.float64
    )
    targets = torch.tensor([[0, 0], [0, -1]])
    total = target_loss_sum(logits, targets)
    assert float(total) / 3 == pytest.approx(3.0, abs=1e-12)  # not (2 + 5) / 2 = 3.5


def test_accumulated_update_loss_is_the_mean_over_all_targets_of_the_update():
    trainer = trainer_from_preset("mini", microbatches=2, batch_size=3)
    batch = trainer.next_batch()
    examples = [trainer.train_examples[i] for mb in batch for i in mb]
    assert len({len(e.ids) for e in examples}) > 1  # rows and microbatches of different sizes
    model = trainer.model
    losses = []
    with torch.no_grad():
        for e in examples:
            logits = model(torch.tensor([e.ids[:-1]])).logits[0]
            losses += torch.nn.functional.cross_entropy(logits, torch.tensor(e.ids[1:]), reduction="none").tolist()
    record = trainer.update()
    assert record.batch == batch
    assert record.valid_targets == len(losses)
    assert record.loss == pytest.approx(sum(losses) / len(losses), rel=1e-12)


def test_seed_000_schedule_is_one_based():
    train = load_config("tiny").train
    values = [scheduled_lr(train, s) for s in range(1, 5)]
    assert values[0] == 0.001
    assert values[1] == pytest.approx(0.000775, rel=1e-15)
    assert values[2] == 0.0003250000000000001
    assert values[3] == 0.0001


def test_loss_scaler_grows_after_interval_and_stays_within_bounds():
    scaler = LossScaler(load_config("tiny").train)  # 8 within [1, 32], growth every 3
    seen = []
    for finite in (True, True, True, True, True, True, True, True, True):
        seen.append(scaler.scale)
        scaler.update(finite)
    assert seen == [8, 8, 8, 16, 16, 16, 32, 32, 32]
    assert scaler.scale == 32  # clamped at the maximum
    for _ in range(10):
        scaler.update(False)
    assert scaler.scale == 1 and scaler.finite_updates == 0


def test_tiny_run_follows_seed_000_update_state():
    trainer = trainer_from_preset("tiny")
    records = list(scheduled_work(trainer))
    assert [r.step for r in records] == [1, 2, 3, 4]
    assert [r.batch for r in records] == [[[2], [0]], [[1], [2]], [[0], [1]], [[2], [0]]]
    assert [r.loss_scale for r in records] == [8, 8, 8, 16]
    assert records[2].next_loss_scale == 16
    assert records[1].data_progress == {"order": [2, 0, 1], "cursor": 1, "epoch": 1}
    counters = [r.dropout_counter for r in records]
    assert counters == sorted(counters) and counters[0] > 0
    assert all(len(r.monitoring_ids) == 1 for r in records)


def test_capture_is_refused_with_pending_gradients_and_leaves_them():
    trainer = trainer_from_preset("tiny")
    trainer.update()
    trainer.require_update_boundary()  # a complete boundary: no error
    param = trainer.model.token_embedding.weight
    param.grad = torch.ones_like(param)
    with pytest.raises(CaptureRefused, match="hold gradients"):
        trainer.require_update_boundary()
    assert torch.equal(param.grad, torch.ones_like(param))


def test_mini_evaluates_complete_splits_at_scheduled_steps_and_picks_the_first_minimum():
    trainer = trainer_from_preset("mini", steps=100)
    evaluations = [r for r in scheduled_work(trainer) if not hasattr(r, "batch")]
    assert [e.step for e in evaluations] == [0, 50, 100]
    assert all(e.validation_targets > 0 for e in evaluations)
    best = min(evaluations, key=lambda e: (e.validation_loss, e.step))
    assert trainer.best_step == best.step


def run_session(trainer_factory, script, hold=lambda event: None) -> tuple[list, list]:
    """Run a session on a thread while ``script`` drives it from this one; ``hold`` sees
    each event on the session's thread before the session goes on."""
    events: list = []
    lock = threading.Lock()

    def sink(event):
        with lock:
            events.append(event)
        hold(event)

    controller = TrainingSession.for_trainer(trainer_factory, sink)
    thread = threading.Thread(target=controller.run_reporting_failures)
    thread.start()
    script(controller, events)
    thread.join(60)
    assert not thread.is_alive()
    return events, controller


def test_pause_evaluate_and_resume_in_process_equal_never_pausing():
    plain_events, plain = run_session(lambda: trainer_from_preset("mini", steps=60), lambda c, e: None)

    pause_sent = threading.Event()

    def hold_after_update_7(event):
        """The session waits after update 7 until the pause is sent: it lands mid-run
        however late this thread sees the update (60 updates last a fraction of a second)."""
        if isinstance(event, UpdateDone) and event.record.step == 7:
            pause_sent.wait(30)

    def script(controller, events):
        wait_until(lambda: any(isinstance(x, UpdateDone) and x.record.step >= 7 for x in events), timeout=30,
                   what="update 7", interval=0.01)
        controller.send(Command.PAUSE)
        pause_sent.set()
        wait_until(lambda: any(isinstance(x, Paused) for x in events), timeout=30, what="the pause", interval=0.01)
        controller.send(Command.EVALUATE)
        controller.send(Command.EVALUATE)
        controller.send(Command.RESUME)

    paused_events, paused = run_session(lambda: trainer_from_preset("mini", steps=60), script, hold_after_update_7)
    plain_updates = [x.record.exact_fields() for x in plain_events if isinstance(x, UpdateDone)]
    paused_updates = [x.record.exact_fields() for x in paused_events if isinstance(x, UpdateDone)]
    assert len(plain_updates) == 60
    assert paused_updates == plain_updates
    extra = [x.record for x in paused_events if isinstance(x, EvaluationDone) and x.record.extra]
    assert len(extra) == 2 and [x.step for x in paused_events if isinstance(x, Paused)] == [7]
    assert plain_events[-1] == paused_events[-1]  # Finished with the same digest
    assert isinstance(plain_events[-1], Finished)
    assert paused.trainer.best_step == plain.trainer.best_step


def test_same_seed_gives_the_same_digest_in_two_processes(tmp_path):
    outputs = []
    for _ in range(2):
        done = subprocess.run(cli_command("train", "--preset", "mini", "--steps", "40", "--json"),
                              capture_output=True, text=True, env=cli_env(tmp_path), timeout=120)
        assert done.returncode == 0, done.stderr
        outputs.append(json.loads(done.stdout))
    a, b = outputs
    assert a["state_digest"] == b["state_digest"]
    assert a["updates"] == b["updates"]
    assert a["parameter_tensors"] == 20 and a["steps"] == 40
    assert a["updates"][0]["batch"] == [[15, 19, 1, 22, 7, 15, 5, 3]]
    different = subprocess.run(cli_command("train", "--preset", "mini", "--steps", "40", "--seed", "5", "--json"),
                               capture_output=True, text=True, env=cli_env(tmp_path), timeout=120)
    assert json.loads(different.stdout)["state_digest"] != a["state_digest"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--preset", "huge"], "unknown preset 'huge'"),
        (["--corpus", "/no/such/corpus.txt"], "corpus not found"),
        (["--steps", "0"], "train.steps must be at least 1"),
        (["--corpus", "EMPTY"], "has no records"),
        (["--config", "BADCONFIG"], "model.dropout must be a number"),
        (["--precision", "exact", "--seed", "-3"], "--seed must be an unsigned 64-bit integer"),
    ],
)
def test_cli_bad_inputs_exit_non_zero_with_one_line(tmp_path, args, message):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n")
    bad = tmp_path / "bad.toml"
    bad.write_text("[model]\ndropout = 'high'\n")
    args = [str(empty) if a == "EMPTY" else str(bad) if a == "BADCONFIG" else a for a in args]
    done = subprocess.run(cli_command("train", *args), capture_output=True, text=True,
                          env=cli_env(tmp_path), timeout=60)
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], done.stderr
    assert "Traceback" not in done.stderr
