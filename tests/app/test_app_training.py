"""The app shell and the Training screen on the real engine: start, pause, resume, evaluate
now, save now, stop, quit (asking first), relaunch and resume from a checkpoint, the
new-run form and every error path, screens and help, overlay and CSV export, and that the
first frame never waits for torch."""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
from types import SimpleNamespace

import pytest
from textual.app import App, ComposeResult
from textual.widgets import Input

from minigpt_tui.app import MiniGPTApp
from minigpt_tui.messages import EngineEventsReady, RunFeed
from minigpt_tui.screens.confirm_quit import ConfirmQuitScreen
from minigpt_tui.screens.help import HelpScreen
from minigpt_tui.screens.new_run import NewRunScreen
from minigpt_tui.screens.overlay import OverlayScreen
from minigpt_tui.screens.training import TrainingScreen
from minigpt_tui.screens.training_plot import PLOT_KEYS_HINT
from minigpt_tui.widgets.loss_plot import LossPlot, bucket_means, whole_ticks
from minigpt_tui.widgets.loss_table import BEST_MARK, EXTRA_MARK, LossTable
from tests.app_support import record_notifications, run_async
from tests.training_support import (
    QUICK,
    SIZE,
    UNSAVED_RUN,
    app_records,
    assert_matches_reference,
    key,
    make_app,
    press_button,
    reference_run,
    start_then_pause,
    training,
    wait_until,
)


@run_async
async def test_pause_and_resume_give_the_records_of_a_run_never_paused(tmp_path):
    app = make_app(tmp_path / "runs", QUICK)
    async with app.run_test(size=SIZE) as pilot:
        screen = training(app)
        paused_at = await start_then_pause(pilot, screen, after=20)
        assert 20 <= paused_at < 300
        await pilot.pause(0.3)
        assert screen.run.step == paused_at  # a pause holds at a complete update
        await key(pilot, "space")
        await wait_until(pilot, lambda: screen.run.state == "finished")
        run_dir = screen.run.run_dir
        digest = screen.run.final_digest
        kinds = [kind for kind, _ in app.screen.query_one("#events").entries]
        assert "paused" in kinds and "resumed" in kinds and "finished" in kinds
        assert screen.query_one(LossTable).rows[-1].cells[0] == "eval 300"
    assert_matches_reference(run_dir, digest)


@run_async
async def test_evaluate_now_is_extra_save_now_says_the_paused_update_is_saved_and_stop_ends_at_an_update(tmp_path):
    overrides = {"train": {"steps": 400, "eval_every": 50, "save_every": 0}}
    app = make_app(tmp_path / "runs", overrides)
    async with app.run_test(size=SIZE) as pilot:
        screen = training(app)
        step = await start_then_pause(pilot, screen, after=60)
        table = screen.query_one(LossTable)
        best_before = [row.cells[0] for row in table.rows if row.mark == BEST_MARK]
        await key(pilot, "e")
        await wait_until(pilot, lambda: EXTRA_MARK in table.marks().values())
        extra = [row for row in table.rows if row.mark == EXTRA_MARK]
        assert extra[0].cells[0] == f"eval {step}"
        assert [row.cells[0] for row in table.rows if row.mark == BEST_MARK] == best_before
        seen = record_notifications(app)
        await key(pilot, "s")  # the pause saved this update: saying so, nothing saved again
        await wait_until(pilot, lambda: (f"update {step} is already saved", "information") in seen)
        assert not any("(manual)" in m for k, m in screen.query_one("#events").entries)
        assert (screen.run.run_dir / "checkpoints" / f"step-{step:06d}" / "manifest.json").is_file()
        await key(pilot, "x")
        await wait_until(pilot, lambda: screen.run.state == "stopped")
        assert screen.run.step == step
        run_dir, digest = screen.run.run_dir, screen.run.final_digest
    # The extra evaluation and the save changed nothing: the records and state equal a run
    # that went straight to that update.
    updates, evaluations, reference_digest = reference_run(overrides, until=step)
    got_updates, got_evaluations = app_records(run_dir)
    assert got_updates == updates and got_evaluations == evaluations
    assert digest == reference_digest


@run_async
async def test_a_run_paused_saved_quit_relaunched_and_resumed_equals_one_never_paused(tmp_path):
    runs = tmp_path / "runs"
    first = make_app(runs, QUICK)
    async with first.run_test(size=SIZE) as pilot:
        screen = training(first)
        await key(pilot, "space")
        await wait_until(pilot, lambda: screen.run.step >= 20)
        await key(pilot, "space")  # pausing saves the run's unsaved updates
        await wait_until(pilot, lambda: screen.run.state == "paused" and screen.unsaved_updates == 0)
        paused_at = screen.run.step
        run_dir = screen.run.run_dir
        await key(pilot, "q")  # nothing unsaved: quits without asking
        await wait_until(pilot, lambda: first.return_code is not None)
    checkpoint = run_dir / "checkpoints" / f"step-{paused_at:06d}"
    assert (checkpoint / "manifest.json").is_file()

    second = make_app(runs, QUICK)
    async with second.run_test(size=SIZE) as pilot:
        screen = training(second)
        screen.resume_from_checkpoint(checkpoint)
        await wait_until(pilot, lambda: screen.run.state == "finished")
        assert screen.run.summary.resumed_from == checkpoint
        digest = screen.run.final_digest
        # The history before the checkpoint is shown too, once, in order, with one best mark.
        await wait_until(pilot, lambda: len(screen.query_one(LossPlot).updates) == 300)
        table = screen.query_one(LossTable)
        steps = [row.cells[0] for row in table.rows]
        assert steps[:2] == ["eval 0", "1"] and steps[-1] == "eval 300"
        assert [s for s in steps if not s.startswith("eval")] == [str(i) for i in range(1, 301)]
        assert list(table.marks().values()) == [BEST_MARK]
        assert [step for step, _ in screen.query_one(LossPlot).updates] == list(range(1, 301))
    assert_matches_reference(run_dir, digest)




async def quit_during_a_run(pilot, app: MiniGPTApp) -> TrainingScreen:  # type: ignore[no-untyped-def]
    """Start a run that saves nothing by itself, let it make 5 updates, then press q."""
    screen = training(app)
    await key(pilot, "space")
    await wait_until(pilot, lambda: screen.run.step >= 5)
    await key(pilot, "q")
    # Pushed is not yet composed: wait until the dialog's labels and buttons are there.
    await wait_until(pilot, lambda: isinstance(app.screen, ConfirmQuitScreen) and app.screen.is_mounted)
    return screen


@run_async
async def test_quit_asks_while_a_run_has_unsaved_updates(tmp_path):
    app = make_app(tmp_path / "runs", UNSAVED_RUN)
    async with app.run_test(size=SIZE) as pilot:
        screen = await quit_during_a_run(pilot, app)
        await press_button(pilot, "#stay")
        await pilot.pause()
        assert app.screen is screen and screen.run.state == "running"
        await key(pilot, "q")
        await wait_until(pilot, lambda: isinstance(app.screen, ConfirmQuitScreen))
        await press_button(pilot, "#discard")
        await wait_until(pilot, lambda: app.return_code is not None)
        assert screen.run.state == "stopped"
        run_dir = screen.run.run_dir
    assert not list((run_dir / "checkpoints").glob("step-*"))  # quitting without saving saved nothing


@run_async
async def test_the_quit_dialog_counts_the_updates_made_while_it_is_open(tmp_path):
    app = make_app(tmp_path / "runs", UNSAVED_RUN)
    async with app.run_test(size=SIZE) as pilot:
        screen = await quit_during_a_run(pilot, app)
        dialog = app.screen
        asked_at = dialog.unsaved_updates

        def shown() -> str:
            return str(dialog.query_one("#unsaved").render())

        assert f"{asked_at} unsaved update" in shown()
        # Training goes on behind the dialog; the count it shows follows the run's.
        await wait_until(pilot, lambda: dialog.unsaved_updates >= asked_at + 20)
        assert f"{dialog.unsaved_updates} unsaved updates" in shown()
        await wait_until(pilot, lambda: abs(screen.unsaved_updates - dialog.unsaved_updates) <= 20)
        await press_button(pilot, "#discard")
        await wait_until(pilot, lambda: app.return_code is not None)


@run_async
async def test_a_count_given_while_the_quit_dialog_mounts_is_the_one_it_shows():
    """The Training screen passes the count on at each refresh, also between the dialog's
    compose and the end of its mount: the label must not keep the count it was composed with."""

    class CountedWhileMounting(ConfirmQuitScreen):
        def on_mount(self) -> None:  # after the dialog's own mount handlers (Textual calls each class's)
            self.show_unsaved(9, active=True)

    app = App()
    async with app.run_test(size=SIZE) as pilot:
        dialog = CountedWhileMounting(5)
        await app.push_screen(dialog)
        await pilot.pause()
        assert "with 9 unsaved updates" in str(dialog.query_one("#unsaved").render())


@run_async
async def test_save_and_quit_saves_the_last_update(tmp_path):
    app = make_app(tmp_path / "runs", UNSAVED_RUN)
    async with app.run_test(size=SIZE) as pilot:
        screen = await quit_during_a_run(pilot, app)
        await press_button(pilot, "#save")
        await wait_until(pilot, lambda: app.return_code is not None)
        step, run_dir = screen.run.step, screen.run.run_dir
    assert [p.name for p in (run_dir / "checkpoints").glob("step-*")] == [f"step-{step:06d}"]


# -- the new-run form and errors ----------------------------------------------------------------
@run_async
async def test_new_run_form_starts_a_named_run_with_one_seed(tmp_path):
    from minigpt_tui.engine.core.config import SeedConfig

    app = make_app(tmp_path / "runs", preset="tiny")
    async with app.run_test(size=SIZE) as pilot:
        screen = training(app)
        await pilot.press("n")
        await pilot.pause()
        form = app.screen
        assert isinstance(form, NewRunScreen)
        form.query_one("#name", Input).value = "seeded"
        form.query_one("#steps", Input).value = "3"
        form.query_one("#seed", Input).value = "7"
        form.query_one("#save_every", Input).value = "2"
        await press_button(pilot, "#start")
        await wait_until(pilot, lambda: screen.run is not None and screen.run.state == "finished")
        assert screen.run.summary.run_name == "seeded"
    config = json.loads((tmp_path / "runs" / "seeded" / "config.json").read_text())
    derived = SeedConfig.derive(7)
    assert config["seeds"] == {k: getattr(derived, k) for k in ("init", "data", "dropout", "sampling", "evaluation")}
    assert config["train"]["steps"] == 3 and config["train"]["save_every"] == 2
    assert (tmp_path / "runs" / "seeded" / "checkpoints" / "step-000002").is_dir()


@pytest.mark.parametrize("field, value, reason", [
    ("steps", "abc", "updates must be a whole number, got 'abc'"),
    ("steps", "0", "train.steps must be at least 1"),
    ("corpus", "/no/such/corpus.txt", "corpus not found: /no/such/corpus.txt"),
    ("name", "bad name!", "invalid run name 'bad name!'"),
    ("init", "-1", "seeds.init must be an unsigned 64-bit integer"),
])
@run_async
async def test_an_invalid_form_value_is_refused_with_its_reason(tmp_path, field, value, reason):
    app = make_app(tmp_path / "runs", preset="tiny")
    notes = record_notifications(app)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("n")
        await pilot.pause()
        form = app.screen
        form.query_one(f"#{field}", Input).value = value
        await pilot.click("#start")
        await pilot.pause()
        assert app.screen is form  # the form stays open for a correction
        assert any(reason in message and severity == "error" for message, severity in notes), notes
        assert training(app).run is None
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


@run_async
async def test_the_watch_panel_shows_samples_and_head_roles_and_plots_a_role(tmp_path):
    from minigpt_tui.widgets.watch_panel import WatchPanel

    app = make_app(tmp_path / "runs", {"train": {"steps": 100, "eval_every": 50, "save_every": 0}})
    async with app.run_test(size=(140, 40)) as pilot:
        screen = training(app)
        await pilot.press("space")
        await wait_until(pilot, lambda: screen.run is not None and screen.run.state == "finished", timeout=60)
        await pilot.press("h")
        await pilot.pause()
        panel = screen.query_one(WatchPanel)
        assert panel.display and not screen.query_one(LossTable).display and app.focused is panel
        assert list(panel.roles) == ["induction", "previous_token", "duplicate_token", "first_token"]
        assert [p[0] for p in panel.roles["induction"]] == [0, 50, 100]
        assert panel.row_count == 4 + 2 * len(panel.samples.samples) and panel.samples.step == 100
        assert panel.border_subtitle == "update 100"
        plot = screen.widgets.plot
        assert plot.probe == ("induction head", tuple((p[0], p[1]) for p in panel.roles["induction"]))  # as named
        await pilot.press("down")
        await pilot.pause()
        assert plot.probe[0] == "previous token head"
        await pilot.press("h")  # back to the loss table; the plot draws no role
        await pilot.pause()
        assert not panel.display and plot.probe is None
    records = [json.loads(line) for line in (screen.run.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if r["kind"] == "heads"] == [0, 50, 100]


@run_async
async def test_the_form_fine_tunes_the_model_it_is_given(tmp_path):
    from family_support import make_family_folder, training_text
    from textual.widgets import Select

    from minigpt_tui.engine.session.opening import open_model

    folder = make_family_folder("gpt2", tmp_path / "gpt2")
    corpus = tmp_path / "notes.txt"
    corpus.write_text("\n\n".join(training_text() * 3), encoding="utf-8")
    app = make_app(tmp_path / "runs", preset="tiny")
    notes = record_notifications(app)
    async with app.run_test(size=SIZE) as pilot:
        screen = training(app)
        await pilot.press("n")
        await pilot.pause()
        form = app.screen
        form.query_one("#preset", Select).value = "finetune"
        await pilot.pause()
        form.query_one("#corpus", Input).value = str(corpus)
        form.query_one("#steps", Input).value = "2"
        await pilot.click("#start")
        await pilot.pause()
        assert app.screen is form and form.focused is form.query_one("#model", Input)  # no model: refused
        assert any("the finetune preset trains a model you already have" in m for m, _ in notes), notes
        form.query_one("#model", Input).value = str(folder)
        form.query_one("#name", Input).value = "tuned"
        await press_button(pilot, "#start")
        await wait_until(pilot, lambda: screen.run is not None and screen.run.state == "finished", timeout=60)
        original = open_model(str(folder), tmp_path).model
        assert screen.run.summary.parameter_scalars == sum(p.numel() for p in original.parameters())
    warm = json.loads((tmp_path / "runs" / "tuned" / "warm_start.json").read_text())
    assert warm["from"] == str(folder)


@run_async
async def test_one_seed_and_stream_seeds_together_are_refused(tmp_path):
    app = make_app(tmp_path / "runs", preset="tiny")
    notes = record_notifications(app)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("n")
        await pilot.pause()
        app.screen.query_one("#seed", Input).value = "5"
        app.screen.query_one("#data", Input).value = "6"
        await pilot.click("#start")
        await pilot.pause()
        assert any("one seed or separate stream seeds, not both" in m for m, _ in notes)


@run_async
async def test_an_unusable_corpus_fails_the_run_with_one_line_and_writes_nothing(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n   \n")
    runs = tmp_path / "runs"
    app = make_app(runs, preset="tiny")
    notes = record_notifications(app)
    async with app.run_test(size=SIZE) as pilot:
        screen = training(app)
        await pilot.press("n")
        await pilot.pause()
        app.screen.query_one("#corpus", Input).value = str(empty)
        await press_button(pilot, "#start")
        await wait_until(pilot, lambda: screen.run is not None and screen.run.state == "failed")
        assert any(f"corpus {empty} has no records" in m and s == "error" for m, s in notes), notes
        # The app keeps running: the same screen takes the next command.
        failed = screen.run
        await key(pilot, "space")
        await wait_until(pilot, lambda: screen.run is not failed and screen.run.state == "failed")
    assert not runs.exists() or not any(runs.iterdir())


@run_async
async def test_resuming_a_folder_that_is_no_checkpoint_is_refused(tmp_path):
    folder = tmp_path / "not-a-checkpoint"
    folder.mkdir()
    app = make_app(tmp_path / "runs", preset="tiny")
    notes = record_notifications(app)
    async with app.run_test(size=SIZE) as pilot:
        screen = training(app)
        screen.resume_from_checkpoint(folder)
        await pilot.pause()
        await wait_until(pilot, lambda: bool(notes))
        assert notes[0][1] == "error" and str(folder) in notes[0][0]
        assert screen.run is None or not screen.run.active
    assert list(folder.iterdir()) == []


def test_the_command_line_refuses_an_unknown_preset_before_opening_the_app(tmp_path):
    done = subprocess.run([sys.executable, "-m", "minigpt_tui", "--runs-dir", str(tmp_path), "--preset", "huge"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.strip().startswith("minigpt-tui: error: unknown preset 'huge'")
    assert "Traceback" not in done.stderr


def test_the_command_line_refuses_a_missing_corpus_before_opening_the_app(tmp_path):
    done = subprocess.run([sys.executable, "-m", "minigpt_tui", "--runs-dir", str(tmp_path), "--corpus",
                           str(tmp_path / "nope.txt")], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "corpus not found" in done.stderr and "Traceback" not in done.stderr


# -- screens, help, palette ---------------------------------------------------------------------
@run_async
async def test_keys_switch_screens_and_the_palette_lists_each_screen(tmp_path):
    app = make_app(tmp_path / "runs", preset="tiny")
    async with app.run_test(size=SIZE) as pilot:
        assert isinstance(app.screen, TrainingScreen)
        await pilot.press("c")
        await pilot.pause()
        assert type(app.screen).__name__ == "CheckpointsScreen"
        await pilot.press("g")
        await pilot.pause()
        assert type(app.screen).__name__ == "GenerationScreen"
        # Arriving, the keyboard is on the screen's keys, never in the model field.
        assert app.screen.focused is not app.screen.query_one("#model")
        await pilot.press("t")
        await pilot.pause()
        assert isinstance(app.screen, TrainingScreen)
        titles = [command.title for command in app.get_system_commands(app.screen)]
        assert {"Training screen", "Checkpoints screen", "Generation screen", "Help", "New run"} <= set(titles)


@run_async
async def test_help_explains_every_record_of_the_training_screen(tmp_path):
    app = make_app(tmp_path / "runs", preset="tiny")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        text = app.screen.markdown
        for record in ("batch loss", "lr", "grad norm", "loss scale", "tokens/s", "validation", "★ best",
                       "extra", "ETA", "corpus", "tokenizer", "precision", "parameters", "Events", "`q`", "`c`"):
            assert record in text, record
        await pilot.press("escape")
        await pilot.pause()
        assert isinstance(app.screen, TrainingScreen)


@run_async
async def test_clicking_a_key_in_the_key_bar_presses_it_and_v_switches_table_and_plot(tmp_path):
    from minigpt_tui.widgets.key_bar import KeyBar

    app = make_app(tmp_path / "runs", preset="tiny")
    async with app.run_test(size=(80, 24)) as pilot:
        screen = training(app)
        bar = screen.query_one(KeyBar)
        await pilot.pause()
        help_span = next(span for span in bar.spans if span.key == "question_mark")
        await pilot.click(KeyBar, offset=(help_span.start, 0))
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        await pilot.pause()
        table, plot = screen.query_one(LossTable), screen.query_one(LossPlot)
        assert table.display and not plot.display and table.border_subtitle == "v: plot"
        await pilot.press("v")
        await pilot.pause()
        assert plot.display and not table.display and plot.border_subtitle == f"v: table · {PLOT_KEYS_HINT}"
        await pilot.resize_terminal(130, 40)
        await pilot.pause()
        assert plot.display and table.display and not table.border_subtitle and plot.border_subtitle == PLOT_KEYS_HINT


# -- overlay and export -------------------------------------------------------------------------
@run_async
async def test_overlay_another_run_and_export_metrics_to_csv(tmp_path):
    from minigpt_tui.engine.session.runs import RunDirectory

    runs = tmp_path / "runs"
    other = RunDirectory.create(runs, "other", "mini")
    other.write_json("config.json", {})
    for step, loss in ((1, 4.0), (2, 3.5)):
        other.append_metric({"kind": "update", "step": step, "loss": loss})
    other.append_metric({"kind": "evaluation", "step": 2, "train_loss": 3.4, "validation_loss": 3.6,
                         "train_targets": 1, "validation_targets": 1, "extra": False})
    app = make_app(runs, {"train": {"steps": 60, "eval_every": 50, "save_every": 0}})
    async with app.run_test(size=SIZE) as pilot:
        screen = training(app)
        await key(pilot, "space")
        await wait_until(pilot, lambda: screen.run.state == "finished")
        await key(pilot, "o")
        await pilot.pause()
        assert isinstance(app.screen, OverlayScreen)
        await pilot.press("enter")
        await wait_until(pilot, lambda: screen.query_one(LossPlot).overlay is not None)
        curve = screen.query_one(LossPlot).overlay
        assert curve.name == "other" and curve.updates == ((1, 4.0), (2, 3.5))
        assert curve.validation == ((2, 3.6),)
        await key(pilot, "w")
        run_dir = screen.run.run_dir
        await wait_until(pilot, lambda: (run_dir / "metrics.csv").exists())
    rows = list(csv.DictReader((run_dir / "metrics.csv").open()))
    kinds = [row["kind"] for row in rows]
    # 60 updates, the evaluations after updates 0, 50 and 60, each followed by the 10 probes
    assert (kinds.count("update"), kinds.count("evaluation"), kinds.count("probe")) == (60, 3, 30)
    assert kinds[:12] == ["evaluation"] + ["probe"] * 10 + ["update"] and rows[11]["step"] == "1"
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    first_update = next(line for line in lines if line["kind"] == "update")
    assert float(rows[11]["loss"]) == first_update["loss"]
    assert {"samples", "heads"} <= {line["kind"] for line in lines} and "samples" not in kinds  # jsonl only


# -- widgets and plumbing -------------------------------------------------------------------------
def fake_update(step: int, loss: float = 1.0, applied: bool = True) -> SimpleNamespace:
    return SimpleNamespace(step=step, loss=loss, lr=0.01, grad_norm=0.5, loss_scale=1.0,
                           tokens_per_second=1000.0, applied=applied)


def fake_evaluation(step: int, validation: float | None, extra: bool = False) -> SimpleNamespace:
    return SimpleNamespace(step=step, train_loss=1.0, validation_loss=validation, extra=extra)


class TableApp(App):
    def compose(self) -> ComposeResult:
        yield LossTable(max_rows=50)


@run_async
async def test_loss_table_stays_bounded_and_marks_one_best_row():
    app = TableApp()
    async with app.run_test(size=(80, 20)) as pilot:
        table = app.query_one(LossTable)
        table.add_records([(fake_update(i), None) for i in range(1, 41)])
        table.add_records([(fake_evaluation(40, 2.0), 40)])
        table.add_records([(fake_evaluation(40, 2.5, extra=True), 40)])
        table.add_records([(fake_update(41, applied=False), None)])
        table.add_records([(fake_evaluation(50, 1.5), 50)])
        assert sorted(table.marks().values()) == sorted([BEST_MARK, EXTRA_MARK, "skip"])
        assert [r.cells[0] for r in table.rows if r.mark == BEST_MARK] == ["eval 50"]
        table.add_records([(fake_update(i), None) for i in range(51, 200)])
        await pilot.pause()
        assert len(table.rows) == 50
        assert table.rows[-1].cells[0] == "199"
        assert table.scroll_y == table.max_scroll_y  # it follows the newest row


def test_run_feed_posts_once_until_drained():
    posted = []
    feed = RunFeed(posted.append)
    for i in range(1000):
        feed(i)
    assert len(posted) == 1 and isinstance(posted[0], EngineEventsReady)
    assert feed.drain() == list(range(1000))
    feed("next")
    assert len(posted) == 2


def test_plot_buckets_keep_the_last_step_exact():
    points = [(i, float(i)) for i in range(1, 1001)]
    shown = bucket_means(points, 100)
    assert len(shown) <= 100 and shown[-1][0] == 1000
    assert bucket_means(points[:10], 100) == points[:10]


def test_whole_ticks_are_round_whole_numbers_within_the_range():
    assert whole_ticks(1, 251, 6) == [50, 100, 150, 200, 250]
    assert whole_ticks(1, 300, 4) == [100, 200, 300]
    assert whole_ticks(47, 53, 6) == [48, 50, 52]
    assert whole_ticks(1, 7, 2) == [1, 7]  # no round step fits twice: the ends
    assert whole_ticks(5, 5, 4) == [5]


class PlotApp(App):
    """A loss plot alone, redrawn whenever asked."""

    def compose(self) -> ComposeResult:
        yield LossPlot(max_redraws_per_second=1000.0)


def x_labels(plot: LossPlot) -> list[str]:
    lines = [line.rstrip() for line in str(plot.render()).splitlines()]
    axis = next(i for i, line in enumerate(lines) if "└" in line)
    return lines[axis + 1].split()


@pytest.mark.parametrize("last_step", [3, 251, 4001])
@run_async
async def test_plot_x_labels_are_whole_update_counts(last_step):
    app = PlotApp()
    async with app.run_test(size=(80, 20)) as pilot:
        plot = app.query_one(LossPlot)
        for step in range(1, last_step + 1):
            plot.add_update(step, 5.0 - step / last_step)
        plot.add_evaluation(last_step, 4.0, 4.1)
        plot.redraw()
        await pilot.pause()
        labels = x_labels(plot)
        assert len(labels) >= 2
        assert all(re.fullmatch(r"\d+", label) for label in labels), labels
        assert 1 <= int(labels[0]) and int(labels[-1]) <= last_step


@run_async
async def test_a_plot_drawn_while_hidden_gets_the_labels_of_its_width_when_shown():
    """While the table is shown the plot has no width; its last draw then has two labels, and
    showing it must redraw for its real width (it showed 0 and 500 for 600 updates)."""
    app = PlotApp()
    async with app.run_test(size=(80, 20)) as pilot:
        plot = app.query_one(LossPlot)
        plot.display = False
        await pilot.pause()
        for step in range(1, 601):
            plot.add_update(step, 5.0 - step / 600)
        plot.add_evaluation(600, 4.0, 4.1)
        plot.redraw()
        plot.display = True
        await pilot.pause()
        await pilot.pause()
        assert x_labels(plot) == ["100", "200", "300", "400", "500", "600"]


def test_the_app_modules_never_import_torch_and_the_first_frame_does_not_wait_for_it(tmp_path):
    code = (
        "import asyncio, sys\n"
        "from pathlib import Path\n"
        "from minigpt_tui.app import LaunchSettings, MiniGPTApp\n"
        "import minigpt_tui.screens.training, minigpt_tui.screens.new_run, minigpt_tui.screens.help\n"
        "import minigpt_tui.screens.overlay, minigpt_tui.screens.confirm_quit, minigpt_tui.engine.session.training\n"
        "assert 'torch' not in sys.modules, 'imported torch'\n"
        f"app = MiniGPTApp(LaunchSettings(runs_dir=Path({str(tmp_path)!r})), preload_engine=False)\n"
        "async def main():\n"
        "    async with app.run_test(size=(80, 24)) as pilot:\n"
        "        await pilot.pause()\n"
        "        assert type(app.screen).__name__ == 'TrainingScreen'\n"
        "        print('torch' in sys.modules)\n"
        "asyncio.run(main())\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


@run_async
async def test_probes_table_follows_the_evaluations_and_p_draws_a_probe_on_the_plot(tmp_path):
    from minigpt_tui.widgets.probes_table import ProbesTable

    app = make_app(tmp_path / "runs", {"train": {"steps": 100, "eval_every": 50, "save_every": 0}})
    async with app.run_test(size=(80, 24)) as pilot:
        screen = training(app)
        await key(pilot, "space")
        await wait_until(pilot, lambda: screen.run is not None and screen.run.state == "finished")
        await pilot.pause()
        probes, table, plot = screen.query_one(ProbesTable), screen.query_one(LossTable), screen.query_one(LossPlot)
        assert not probes.display and table.display
        assert probes.row_count == 10 and probes.last_step == 100
        assert all([p.step for p in points] == [0, 50, 100] for points in probes.history.values())
        await pilot.press("p")
        await pilot.pause()
        assert probes.display and not table.display
        first = next(iter(probes.history))
        assert plot.probe is not None and plot.probe[0] == first
        assert [step for step, _ in plot.probe[1]] == [0, 50, 100]
        await pilot.press("down")
        await pilot.pause()
        assert plot.probe[0] == list(probes.history)[1]
        row = probes.get_row_at(1)
        last = probes.history[plot.probe[0]][-1]
        assert row[1].plain in "✓✗" and row[3].plain == str(last.rank)
        assert len(row[4].plain) == 3  # one glyph per evaluation
        await pilot.press("p")
        await pilot.pause()
        assert table.display and not probes.display and plot.probe is None
    records = [json.loads(line) for line in (screen.run.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if r["kind"] == "probes"] == [0, 50, 100]


@run_async
async def test_save_evaluate_and_stop_on_an_idle_screen_say_why_nothing_happens(tmp_path):
    app = make_app(tmp_path / "runs", QUICK)
    seen = record_notifications(app)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert isinstance(app.screen, TrainingScreen)
        for key in ("s", "e", "x"):
            await pilot.press(key)
            await pilot.pause()
        idle = [message for message, severity in seen if "no run is active" in message and severity == "warning"]
        assert len(idle) == 3, seen
        assert app.screen.run is None  # nothing started
