"""What the Training screen says when a key is pressed on a paused run: a paused run is at
an update boundary already, so a save or a stop happens at once and the note says so."""

from __future__ import annotations

from tests.app_support import record_notifications, run_async
from tests.test_app_training import SIZE, UNSAVED_RUN, key, make_app, training, wait_until


@run_async
async def test_save_and_stop_on_a_paused_run_say_now(tmp_path):
    app = make_app(tmp_path / "runs", UNSAVED_RUN)
    async with app.run_test(size=SIZE) as pilot:
        seen = record_notifications(app)
        screen = training(app)
        await key(pilot, "space")
        await wait_until(pilot, lambda: screen.run.step >= 3)
        await key(pilot, "space")
        await wait_until(pilot, lambda: screen.run.state == "paused")
        paused_at = screen.run.step
        before = len(seen)
        await key(pilot, "s")
        assert ("saving now", "information") in seen
        run_dir = screen.run.run_dir
        await wait_until(pilot, lambda: (run_dir / "checkpoints" / f"step-{paused_at:06d}" / "manifest.json").is_file())
        await key(pilot, "x")
        assert ("stopping now", "information") in seen
        await wait_until(pilot, lambda: screen.run.state == "stopped")
        assert screen.run.step == paused_at
        assert not [m for m, _ in seen[before:] if "next update boundary" in m or "next complete update" in m]


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
