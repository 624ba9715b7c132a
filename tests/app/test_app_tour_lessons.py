"""The tour's lessons in the app, the keys pressed as a learner would: lesson 3 (pause, quit,
relaunch, resume; the tour explains each with the run's own updates and digest), lesson 7
(the head view and the heads' grid), and the Generation screen's line that counts the weights
read while a model from elsewhere opens."""

from __future__ import annotations

from minigpt_tui.app import LaunchSettings, MiniGPTApp, resolve_next_config
from minigpt_tui.widgets.candidate_table import CandidateTable
from minigpt_tui.widgets.opening_progress import OpeningProgress
from minigpt_tui.widgets.tour_panel import TourPanel
from tests.app_support import open_generation, run_async, settle
from tests.app_support import press_settled as keys
from tests.tour_support import WIDE, look, smollm_like_folder, tour_app
from tests.training_support import QUICK, key, training, wait_until


def mini_tour_app(runs, lesson: int) -> MiniGPTApp:
    settings = LaunchSettings(runs_dir=runs, preset="mini", tour=lesson)
    return MiniGPTApp(settings, next_config=resolve_next_config(settings, QUICK), preload_engine=False)


def panel_text(app: MiniGPTApp) -> str:
    app.tour.tick()
    panels = app.screen.query(TourPanel)
    return panels.first().text() if panels else ""


@run_async
async def test_lesson_3_pause_quit_relaunch_and_resume_explained_with_the_runs_own_updates(tmp_path):
    runs = tmp_path / "runs"
    first = mini_tour_app(runs, 3)
    async with first.run_test(size=WIDE) as pilot:
        screen = training(first)
        await key(pilot, "space")
        await wait_until(pilot, lambda: screen.run.step >= 20)
        await key(pilot, "space")  # a pause saves
        await wait_until(pilot, lambda: screen.run.state == "paused" and screen.unsaved_updates == 0)
        paused_at = screen.run.step
        await wait_until(pilot, lambda: "✓ 1" in panel_text(first))
        text = panel_text(first)
        assert f"paused after update {paused_at} and saved checkpoints/step-{paused_at:06d}" in text
        assert "▶ 2 press" in text
        await key(pilot, "q")
        await wait_until(pilot, lambda: first.return_code is not None)
    checkpoint = runs / screen.run.run_dir.name / "checkpoints" / f"step-{paused_at:06d}"

    second = mini_tour_app(runs, 3)  # relaunched: the tour starts the lesson again
    async with second.run_test(size=WIDE) as pilot:
        screen = training(second)
        screen.resume_from_checkpoint(checkpoint)  # as r in the resume preflight does
        # the rest of a mini run: seconds idle, a minute or more on a loaded machine
        await wait_until(pilot, lambda: screen.run.state == "finished", timeout=180.0)
        await wait_until(pilot, lambda: "Lesson done" in panel_text(second))
        text = panel_text(second)
        assert f"goes on from update {paused_at} (step-{paused_at:06d}) toward 300" in text
        assert f"finished at update 300 with state digest {screen.run.final_digest[:16]}" in text
        assert "✓ 3" in text and "minigpt-tui verify --preset mini" in text  # exact precision: said so


@run_async
async def test_lesson_7_the_head_view_and_the_grid_explained_with_the_models_own_weights(runs):
    app = tour_app(runs, lesson=7)
    async with app.run_test(size=WIDE) as pilot:
        screen = await open_generation(pilot)
        screen.query_one(CandidateTable).focus()
        await keys(pilot, "n")
        text = await look(pilot)
        assert "Lesson 7. Attention and induction heads" in text and "▶ 1 press" in text
        await keys(pilot, "h")
        text = await look(pilot, until="✓ 1")
        pattern = screen.insight.pattern
        last = pattern.weights[-1]
        assert "Block 0 head 0, at the last position" in text and "the weights add up to 1.0000" in text
        assert f"and {last[0]:.2f} on the first position" in text  # the model's own weights
        await keys(pilot, "right_square_bracket")  # the next block's head: the grid is scored meanwhile
        text = await look(pilot, until="• 2")
        assert "The grid scores every head on random tokens repeated twice. Block 1 head 0" in text
        # tiny has no induction head, and the panel says so rather than claiming one
        assert "No head of this model is an induction head yet" in text and "▶ 3 press" in text


@run_async
async def test_a_model_from_elsewhere_opens_with_its_weights_read_shown_then_lessons_8_and_9_read_it(runs, tmp_path):
    folder = smollm_like_folder(tmp_path / "smol")
    app = tour_app(runs, lesson=8)
    async with app.run_test(size=WIDE) as pilot:
        screen = await open_generation(pilot, model=str(folder), prompt="The capital of France is")
        await settle(pilot)
        line = screen.query_one(OpeningProgress)
        reads = list(line.reads)
        assert reads, "no weights read was shown"
        total = reads[-1][1]
        assert total > 0 and reads[-1] == (total, total)
        assert any(0 < done < total for done, _ in reads)  # shown tensor by tensor, not only at the end
        assert not line.has_class("-opening") and line.styles.display == "none"  # hidden once loaded
        text = await look(pilot, until="✓ 1")
        assert "You opened smol, a llama model from transformers: 2 blocks of 4 heads" in text
        screen.query_one(CandidateTable).focus()
        await keys(pilot, "n")
        text = await look(pilot, until="• 2")
        assert "After 'The capital of France is', smol is unsure" in text  # a random model knows no fact
        await keys(pilot, *["greater_than_sign"] * 4)  # the rest skipped, then lesson 9
        text = await look(pilot)
        assert "Lesson 9. Fine-tuning changes what surprises the model" in text
        await keys(pilot, "s", "enter")  # score the text on screen: the Text view, the panel beside it
        text = await look(pilot, until="✓ 1")
        assert type(app.screen).__name__ == "TextViewScreen"
        mean = app.screen.view.scored.mean_loss
        assert f"mean loss of {mean:.3f} nats" in text
