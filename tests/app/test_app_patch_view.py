"""Activation patching on the Generation screen: ``p`` asks for a corrupt prompt against the
selected decision's context, the sweep runs on the queue worker, and the grid shows exactly
the engine's ``restored`` values."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from textual.coordinate import Coordinate
from textual.widgets import Input

from minigpt_tui.engine.analysis.patching import (
    Patcher,
    one_token,
    patch_prompts,
    sweep,
)
from minigpt_tui.engine.core.tokenizer import BOS, EOS
from minigpt_tui.engine.session import operations
from minigpt_tui.engine.models.model_file import load_portable_model
from minigpt_tui.screens.generation import GenerationScreen
from minigpt_tui.screens.patch_prompt import PatchPromptScreen
from minigpt_tui.screens.patch_view import PatchViewScreen
from minigpt_tui.widgets.decision_list import DecisionList
from minigpt_tui.widgets.patch_grid import PatchGrid
from tests.app_support import (
    open_generation,
    make_app,
    record_notifications,
    run_async,
    settle,
    static_text,
)
from tests.polling import pause_until

SIZE = (80, 24)
PROMPT = "ab"



def portable(runs: Path):
    return load_portable_model(runs / "tiny-a" / "checkpoints" / "step-000004" / "model.safetensors")


def corrupt_of(tokenizer, clean: str) -> str:
    """A prompt of the clean one's token length with other ids (the tiny tokenizer merges "ab")."""
    ids = tokenizer.encode_prompt(clean)
    letters = "zyxwq"
    for candidate in [a + clean[1:] for a in letters] + list(letters) + [a + b for a in letters for b in letters]:
        other = tokenizer.encode_prompt(candidate)
        if len(other) == len(ids) and other != ids:
            return candidate
    raise AssertionError("no corrupt prompt of equal length")


async def open_dialog(pilot) -> tuple[GenerationScreen, PatchPromptScreen]:
    screen = await open_generation(pilot)
    await pilot.press("n")
    await settle(pilot)
    await pilot.press("p")
    dialog = await pause_until(pilot, lambda: isinstance(pilot.app.screen, PatchPromptScreen) and pilot.app.screen,
                               timeout=30, what="the patching dialog")
    return screen, dialog


async def next_dialog(pilot, old: PatchPromptScreen) -> PatchPromptScreen:
    """The dialog that comes back after a refusal (not the one submitted)."""
    return await pause_until(pilot, lambda: isinstance(pilot.app.screen, PatchPromptScreen)
                             and pilot.app.screen is not old and pilot.app.screen, timeout=30, what="the dialog again")


async def submit(pilot, dialog: PatchPromptScreen, **values: str) -> None:
    for name, value in values.items():
        dialog.query_one(f"#patch-{name}", Input).value = value
    dialog.query_one("#patch-corrupt", Input).focus()
    await pilot.press("enter")


async def wait_for_grid(pilot) -> PatchViewScreen:
    view = await pause_until(pilot, lambda: isinstance(pilot.app.screen, PatchViewScreen) and pilot.app.screen,
                             timeout=30, what="the patch view")
    await pause_until(pilot, lambda: view.result is not None and not view.working, timeout=60, what="the sweep")
    await settle(pilot)
    return view


@run_async
async def test_the_grid_shows_the_engines_sweep_and_per_head_view_on_the_worker(runs, monkeypatch):
    from minigpt_tui.engine.models import model as model_module

    threads: list[threading.Thread] = []
    recording = [True]  # off while the test itself runs the engine for the reference
    forward = model_module.MiniGPT.forward

    def spy_forward(self, *args, **kwargs):
        if recording[0]:
            threads.append(threading.current_thread())
        return forward(self, *args, **kwargs)

    queued: list[str] = []
    push = operations.OperationQueue.push

    def spy_push(self, operation):
        queued.append(operation.what)
        return push(self, operation)

    monkeypatch.setattr(model_module.MiniGPT, "forward", spy_forward)
    monkeypatch.setattr(operations.OperationQueue, "push", spy_push)

    reference = portable(runs)
    tokenizer = reference.tokenizer
    app = make_app(runs)
    async with app.run_test(size=SIZE) as pilot:
        screen, dialog = await open_dialog(pilot)
        decision = screen.query_one(DecisionList).selected
        # The defaults: the decision's context, its chosen id and the runner-up.
        clean = dialog.query_one("#patch-clean", Input).value
        answer = dialog.query_one("#patch-answer", Input).value
        against = dialog.query_one("#patch-against", Input).value
        assert tokenizer.encode_prompt(clean) == tokenizer.encode_prompt(PROMPT)
        assert one_token(tokenizer, answer, "A") == decision.chosen.id
        # The runner-up: the best-ranked other id whose text can be typed (printable, one token:
        # a lone UTF-8 byte or a control byte cannot).
        logits = screen.session.stepper.decisions[0].logits.tolist()
        ranked = sorted(range(len(logits)), key=lambda i: (-logits[i], i))
        typable = [i for i in ranked if i not in (decision.chosen.id, BOS, EOS)
                   and (text := tokenizer.decode([i]).display).isprintable()
                   and tokenizer.encode(text, bos=False, eos=False) == [i]]
        assert against.isprintable() and against
        assert one_token(tokenizer, against, "B") == typable[0]
        assert dialog.query_one("#patch-corrupt", Input).value == clean
        corrupt = corrupt_of(tokenizer, clean)
        await submit(pilot, dialog, corrupt=corrupt)
        view = await wait_for_grid(pilot)

        recording[0] = False
        expected = patch_prompts(reference.model, tokenizer, clean, corrupt, answer, against)
        recording[0] = True
        assert view.result.effects == expected.effects  # exactly: the same engine records
        assert view.result.clean_difference == expected.clean_difference
        assert view.result.corrupt_difference == expected.corrupt_difference
        grid = view.query_one(PatchGrid)
        layers = reference.model.config.layers
        for site, rows in (("resid", layers + 1), ("attn", layers), ("mlp", layers)):
            want = {(e.site, e.layer, e.head, e.position): e.restored for e in expected.effects if e.site == site}
            assert grid.values() == want
            assert grid.row_count == rows and len(grid.columns) == len(expected.corrupt_ids)
            if site == "resid":
                differing = [i for i, (a, b) in enumerate(zip(expected.clean_ids, expected.corrupt_ids)) if a != b]
                assert differing
                assert all(want[("resid", 0, None, p)] == 1.0 for p in differing)
                assert grid.get_cell_at(Coordinate(0, differing[0])).plain == "+1.00"
            await pilot.press("c")
            await settle(pilot)
        assert "clean" in static_text(view, "#patch-summary") and "restored" in static_text(view, "#patch-legend")
        assert "embed · position 0" in static_text(view, "#patch-cell")
        assert [grid.ordered_rows[row].label.plain for row in (0, 2)] == ["embed", "block 1 resid"]

        # Heads of the block under the cursor (the resid row "block 1 resid" leaves block 1), on
        # demand, equal the engine's head sweep.
        await pilot.press("down", "down", "h")
        await pause_until(pilot, lambda: view.heads_layer == 1 and not view.working, timeout=60,
                          what="the heads of layer 1")
        await settle(pilot)
        recording[0] = False
        patcher = Patcher(reference.model, expected.clean_ids, expected.corrupt_ids, expected.answer[0],
                          expected.against[0])
        heads = {(e.site, e.layer, e.head, e.position): e.restored for e in sweep(patcher, ["head"]) if e.layer == 1}
        recording[0] = True
        assert grid.values() == heads
        assert grid.row_count == reference.model.config.heads
        assert "block 1 head 0" in static_text(view, "#patch-cell")
        await pilot.press("h")
        await settle(pilot)
        assert view.heads_layer is None
        assert grid.cursor_coordinate.row == 2  # back on the row the heads were opened from
        await pilot.press("escape")
        await settle(pilot)
        assert pilot.app.screen is screen
    assert queued.count("patch") == 3  # the defaults, the sweep, the heads of one layer
    assert threads and all(t is not threading.main_thread() for t in threads)


@run_async
async def test_refusals_are_one_line_notifications_and_the_dialog_comes_back(runs):
    tokenizer = portable(runs).tokenizer
    app = make_app(runs)
    async with app.run_test(size=SIZE) as pilot:
        seen = record_notifications(app)
        screen = await open_generation(pilot)
        await pilot.press("p")  # no decision yet
        await settle(pilot)
        assert any("take a decision first" in message for message, _ in seen)
        await pilot.press("n")
        await settle(pilot)
        await pilot.press("p")
        dialog = await pause_until(pilot, lambda: isinstance(pilot.app.screen, PatchPromptScreen) and pilot.app.screen,
                                   timeout=30, what="the patching dialog")
        clean = dialog.query_one("#patch-clean", Input).value
        longer = clean + clean + clean
        await submit(pilot, dialog, corrupt=longer)
        dialog = await next_dialog(pilot, dialog)
        await settle(pilot)
        n_clean, n_corrupt = len(tokenizer.encode_prompt(clean)), len(tokenizer.encode_prompt(longer))
        message = (f"the clean prompt is {n_clean} ids and the corrupt one {n_corrupt}: "
                   "patching needs prompts of equal token length")
        assert (message, "error") in seen
        assert dialog.query_one("#patch-corrupt", Input).value == longer  # what was typed is kept
        pieces = tokenizer.encode("zzzq", bos=False, eos=False)
        assert len(pieces) > 1
        await submit(pilot, dialog, corrupt=corrupt_of(tokenizer, clean), answer="zzzq")
        await pause_until(pilot, lambda: any("must be one token" in m for m, _ in seen), timeout=30,
                          what="the one-token refusal", detail=lambda: (seen, pilot.app.screen_stack))
        refusal = next(m for m, _ in seen if "must be one token" in m)
        assert refusal.startswith("the answer 'zzzq' must be one token; it encodes to") and "\n" not in refusal
        assert all(repr(tokenizer.piece_text(i)) in refusal for i in pieces)
        dialog = await next_dialog(pilot, dialog)
        await submit(pilot, dialog, corrupt=clean)  # checked in the dialog: nothing to patch
        await settle(pilot)
        assert any("the corrupt prompt is the clean one" in m for m, _ in seen)
        await pilot.press("escape")
        await settle(pilot)
        assert pilot.app.screen is screen


@run_async
async def test_the_dialog_has_the_keyboard_in_the_field_to_write_first():
    """The corrupt prompt (an edit of the clean one), or the clean prompt where there is
    none yet; a key typed at once lands there."""
    from textual.app import App

    for clean, first in (("The key is", "#patch-corrupt"), ("", "#patch-clean")):
        app = App()
        async with app.run_test() as pilot:
            app.push_screen(PatchPromptScreen(clean, "a", "b"))
            await pilot.press("x")
            await pilot.pause()
            field = app.screen.query_one(first, Input)
            assert field.has_focus and field.value == clean + "x"


@run_async
async def test_the_attribution_grid_comes_first_and_a_switches_to_it(runs, monkeypatch):
    """The estimates arrive before the sweep and show at once; once both are there ``a``
    switches between them, the summary gives their agreement, and the attribution's heads
    need no sweep."""
    from minigpt_tui.engine.analysis.attribution import Attributor, agreement, attribute

    shown: list[tuple[bool, bool]] = []  # each grid shown: (before the sweep, the attribution)
    show = PatchViewScreen._show_grid

    def spy(self):
        shown.append((self.result is None, self.showing_attribution))
        show(self)

    monkeypatch.setattr(PatchViewScreen, "_show_grid", spy)
    queued: list[str] = []
    push = operations.OperationQueue.push
    monkeypatch.setattr(operations.OperationQueue, "push", lambda self, op: (queued.append(op.what), push(self, op))[1])
    reference = portable(runs)
    tokenizer = reference.tokenizer
    app = make_app(runs)
    async with app.run_test(size=SIZE) as pilot:
        _, dialog = await open_dialog(pilot)
        clean = dialog.query_one("#patch-clean", Input).value
        answer = dialog.query_one("#patch-answer", Input).value
        against = dialog.query_one("#patch-against", Input).value
        corrupt = corrupt_of(tokenizer, clean)
        await submit(pilot, dialog, corrupt=corrupt)
        view = await wait_for_grid(pilot)
        assert shown[:2] == [(True, True), (False, False)]  # the estimates at once, then the sweep
        assert not view.showing_attribution  # the exact sweep replaced it when it came
        attributor = Attributor(reference.model, tokenizer.encode_prompt(clean), tokenizer.encode_prompt(corrupt),
                                one_token(tokenizer, answer, "A"), one_token(tokenizer, against, "B"))
        expected = attribute(attributor, ("resid", "attn", "mlp", "head"))
        assert [e.key for e in view.attribution.effects] == [e.key for e in expected]
        assert [e.change for e in view.attribution.effects] == pytest.approx([e.change for e in expected], abs=1e-9)
        agreed = agreement(view.result.effects, view.attribution.effects, view.result.corrupt_difference)
        assert "agreement: Spearman" in static_text(view, "#patch-summary")
        assert f"over {agreed.cells} cells" in static_text(view, "#patch-summary")
        await pilot.press("a")
        await settle(pilot)
        grid = view.query_one(PatchGrid)
        assert view.showing_attribution and "attribution estimate" in static_text(view, "#patch-summary")
        assert grid.values() == {e.key: e.restored for e in view.attribution.effects if e.site == "resid"}
        assert "estimated patched difference" in static_text(view, "#patch-cell")
        await pilot.press("down", "h")  # block 0's heads: estimated already, no sweep queued
        await settle(pilot)
        assert view.heads_layer == 0 and queued.count("patch") == 2
        assert grid.values() == {e.key: e.restored for e in view.attribution.effects
                                 if e.site == "head" and e.layer == 0}
        await pilot.press("a")  # the exact view has no sweep of these heads: back to the layers
        await settle(pilot)
        assert not view.showing_attribution and view.heads_layer is None
        assert grid.values() == {(e.site, e.layer, e.head, e.position): e.restored for e in view.result.effects
                                 if e.site == "resid"}
