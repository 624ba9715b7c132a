"""What the Training screen says and where the keyboard goes: a paused run is at an update
boundary already, so a save or a stop happens at once and the note says so, and a save of
an update already saved says so instead of saving it again; a resumed run says so within 80
columns; a stream run's header counts tokens, attached or not; a refused value in the
new-run form takes the keyboard to its field."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.app_support import record_notifications, run_async
from tests.training_support import SIZE, UNSAVED_RUN, key, make_app, start_then_pause, training, wait_until


@run_async
async def test_save_right_after_a_pause_says_the_update_is_saved_and_a_stop_is_at_once(tmp_path):
    """A paused run is at an update boundary and its pause saved that update: `s` says so
    and saves nothing (it saved the same update again), `x` stops at once."""
    app = make_app(tmp_path / "runs", UNSAVED_RUN)
    async with app.run_test(size=SIZE) as pilot:
        seen = record_notifications(app)
        screen = training(app)
        paused_at = await start_then_pause(pilot, screen, after=3)  # the pause saves the update

        def saves() -> list[str]:
            return [text for kind, text in screen.query_one("#events").entries if kind == "saved"]

        await wait_until(pilot, lambda: len(saves()) == 1)
        assert "(pause)" in saves()[0]
        await key(pilot, "s")
        await pilot.pause(0.5)
        assert (f"update {paused_at} is already saved", "information") in seen
        log = screen.query_one("#events")
        assert ("asked", "saving now") not in log.entries
        assert len(saves()) == 1 and screen.run.requested_saves == 0
        before = len(log.entries)
        await key(pilot, "x")
        assert ("asked", "stopping now") in log.entries  # in the events, not a toast over them
        await wait_until(pilot, lambda: screen.run.state == "stopped")
        assert screen.run.step == paused_at
        assert not [m for _, m in log.entries[before:] if "next update boundary" in m or "next complete update" in m]
        checkpoints = screen.run.run_dir / "checkpoints"
        assert [p.name for p in checkpoints.iterdir()] == [f"step-{paused_at:06d}"]
        assert len(saves()) == 1


@run_async
async def test_save_while_running_saves_at_the_next_update_boundary(tmp_path):
    app = make_app(tmp_path / "runs", UNSAVED_RUN)
    async with app.run_test(size=SIZE) as pilot:
        seen = record_notifications(app)
        screen = training(app)
        await key(pilot, "space")
        await wait_until(pilot, lambda: screen.run.step >= 3)
        await key(pilot, "s")
        events = screen.query_one("#events")
        assert ("asked", "saving at the next update boundary") in events.entries
        assert ("saving at the next update boundary", "information") not in seen
        await wait_until(pilot, lambda: any("(manual)" in text for kind, text in events.entries if kind == "saved"))
        await key(pilot, "x")
        await wait_until(pilot, lambda: screen.run.state == "stopped")


@run_async
async def test_an_attached_stream_run_counts_its_corpus_in_tokens_as_the_app_does(tmp_path):
    from minigpt_tui.app import LaunchSettings, MiniGPTApp
    from tests.app_support import static_text

    runs = tmp_path / "runs"
    stream = {"corpus": {"mode": "stream", "source": "bundled:patterns.txt"},
              "train": {"steps": 4, "eval_every": 0, "save_every": 0, "eval_batches": 2, "batch_policy": "replacement"}}
    app = make_app(runs, stream, preset="tiny")
    async with app.run_test(size=(120, 40)) as pilot:
        screen = training(app)
        await key(pilot, "space")
        await wait_until(pilot, lambda: screen.run is not None and screen.run.state == "finished")
        run_dir = screen.run.run_dir
        started = static_text(screen, "#summary").splitlines()
    attached_app = MiniGPTApp(LaunchSettings(runs_dir=runs, attach=run_dir), preload_engine=False)
    async with attached_app.run_test(size=(120, 40)) as pilot:
        screen = attached_app.training_screen
        await wait_until(pilot, lambda: screen.run is not None and screen.run.summary is not None)
        await pilot.pause()
        attached = static_text(screen, "#summary").splitlines()
    corpus = [line for line in started if line.startswith("corpus")]
    assert corpus and " · stream of " in corpus[0] and " val tokens · id " in corpus[0]
    assert [line for line in attached if line.startswith("corpus")] == corpus  # said "N train / M val records"


@run_async
async def test_a_resumed_run_says_so_within_80_columns(tmp_path):
    from tests.app_support import build_saved_runs, make_app as make_runs_app

    runs = build_saved_runs(tmp_path / "saved").copy_to(tmp_path / "work")
    app = make_runs_app(runs)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = training(app)
        screen.resume_from_checkpoint(runs / "tiny-a" / "checkpoints" / "step-000002")
        await wait_until(pilot, lambda: screen.run is not None and screen.run.state == "finished")
        await pilot.pause()
        lines = [strip.text for strip in app.screen._compositor.render_strips()]
        run_line = next(line for line in lines if line.lstrip().startswith("run "))
        assert "tiny-a · resumed at update 2 · preset tiny" in run_line


@pytest.mark.parametrize("field, value", [
    ("steps", "abc"), ("steps", "0"), ("corpus", "/no/such/corpus.txt"), ("name", "bad name!"),
    ("init", "-1"), ("save_every", "x"), ("sampling", "1.5"),
])
@run_async
async def test_a_refused_form_value_takes_the_keyboard_to_its_field(tmp_path, field, value):
    from textual.widgets import Input

    from minigpt_tui.screens.new_run import NewRunScreen

    app = make_app(tmp_path / "runs", preset="tiny")
    seen = record_notifications(app)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("n")
        await pilot.pause()
        form = app.screen
        assert isinstance(form, NewRunScreen)
        form.query_one(f"#{field}", Input).value = value
        await pilot.click("#start")
        await pilot.pause()
        assert app.screen is form and any(severity == "error" for _, severity in seen)
        assert form.focused is form.query_one(f"#{field}", Input)


def test_every_form_field_a_refusal_can_name_exists():
    from minigpt_tui.engine.core.errors import ConfigError
    from minigpt_tui.screens.new_run import FIELD_INPUTS, NewRunForm, refused_field

    assert set(FIELD_INPUTS.values()) == {
        "name", "steps", "save_every", "seed", "init", "data", "dropout", "sampling", "corpus", "threads", "model"}
    with pytest.raises(ConfigError) as both:
        NewRunForm("text", seed="5", data="3").resolve()
    assert str(both.value) == "give one seed or separate stream seeds, not both (also set: data)"
    assert refused_field(both.value) == "seed"
    assert refused_field(ConfigError("something else entirely")) is None


@run_async
async def test_a_notification_echoing_a_huge_value_is_cut_in_the_middle(tmp_path):
    from minigpt_tui.app import NOTIFICATION_LIMIT, LaunchSettings, MiniGPTApp

    app = MiniGPTApp(LaunchSettings(runs_dir=tmp_path / "runs"), preload_engine=False)
    async with app.run_test(size=(80, 24)) as pilot:
        app.notify("x" * 10_000_000 + " the end", title="refused", severity="error", markup=False)
        await pilot.pause()
        (note,) = [n for n in app._notifications if n.title == "refused"]
        assert len(note.message) <= NOTIFICATION_LIMIT and note.message.endswith("the end") and "…" in note.message


def test_the_overlay_takes_a_run_name_as_the_list_shows_it(tmp_path, monkeypatch):
    from minigpt_tui.screens.overlay import OverlayScreen

    runs = tmp_path / "runs"
    (runs / "mini-a").mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    screen = OverlayScreen(runs, None, has_overlay=False)
    assert screen.typed_path("mini-a") == runs / "mini-a"  # said "no metrics.jsonl in mini-a" before
    (elsewhere / "mine").mkdir()
    assert screen.typed_path("mine") == Path("mine")  # a folder here is a path, as typed
    assert screen.typed_path("~/x/metrics.jsonl") == Path("~/x/metrics.jsonl").expanduser()
