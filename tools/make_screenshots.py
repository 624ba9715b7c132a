"""Regenerate the README's pictures: each screen of the app, driven by its keys as a person
would, saved as SVG in ``assets/``. Run with ``make screenshots``.

A mini run is trained in the app (space), then the Checkpoints screen opens its newest
checkpoint, and the Generation screen loads it, runs a greedy continuation and shows the
logit lens, and the tour's panel beside it explains that lens with the run's own numbers
(lesson 6). Last, the Generation screen opens a GGUF file (a random-weight llama written
here with the gguf package, Q8_0, with a byte-level BPE tokenizer trained here) and shows
a decision's lens. Everything happens in a temporary folder; nothing is downloaded.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

from minigpt_tui.app import LaunchSettings, MiniGPTApp

SIZE = (120, 40)


async def _until(pilot, condition, seconds: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"make_screenshots: timed out waiting for {what}")
        await pilot.pause(0.1)
    await pilot.pause(0.5)


async def capture(out: Path, runs_dir: Path, gguf: Path) -> list[Path]:
    app = MiniGPTApp(LaunchSettings(runs_dir=runs_dir, preset="mini"))
    saved: list[Path] = []

    def shot(name: str) -> None:
        saved.append(Path(app.save_screenshot(filename=f"{name}.svg", path=str(out))))

    async with app.run_test(size=SIZE) as pilot:
        screen = app.training_screen
        await pilot.press("space")
        await _until(pilot, lambda: screen.run.state == "finished", 180, "the mini run to finish")
        shot("training")
        await pilot.press("h")  # samples and head roles at the latest evaluation, the induction score on the plot
        await pilot.pause(1.0)
        shot("training-heads")
        await pilot.press("h")
        await pilot.pause(0.5)
        await pilot.press("c")
        await pilot.pause(2.0)  # the runs scan and the newest checkpoint's header, on workers
        shot("checkpoints")
        await pilot.press("g")
        await pilot.pause(1.0)
        await pilot.press("n")  # load the suggested model (the newest run's latest checkpoint), one decision
        await pilot.pause(3.0)
        await pilot.press("r")
        await pilot.pause(3.0)
        await pilot.press("l")
        await pilot.pause(2.0)
        shot("generation")
        await show_tour(pilot, app)
        shot("tour")
        app.tour.close()
        from textual.widgets import Input

        generation = app.screen
        field = generation.query_one("#model", Input)
        field.value = str(gguf)
        field.focus()
        await pilot.press("enter")
        await pilot.pause(3.0)  # loaded; this tokenizer adds no BOS, so the prompt field has the keyboard
        generation.query_one("#prompt", Input).value = "The json module"
        generation.query_one("#prompt", Input).focus()
        await pilot.press("enter")
        await pilot.pause(2.0)
        await pilot.press("escape", "n", "n", "n")
        await pilot.pause(2.0)
        await pilot.press("l")
        await pilot.pause(2.0)
        shot("generation-gguf")
    return saved


async def show_tour(pilot, app: MiniGPTApp) -> None:  # type: ignore[no-untyped-def]
    """The tour beside the Generation screen at lesson 6, its first step explained with the lens
    on screen (T opens it on any screen): the lens of decision 7, where the model chose a colour."""
    await pilot.press(*["up"] * 8)  # the decisions list has the keyboard while the lens shows
    await pilot.pause(2.0)
    app.tour.open(6)

    def explained() -> bool:
        app.tour.tick()
        panels = app.screen.query("TourPanel")
        return bool(panels) and "✓ 1" in panels.first().text()

    await _until(pilot, explained, 30, "the tour to explain the lens")


def make_gguf(folder: Path) -> Path:
    """A random-weight llama (SmolLM-like, small) as a Q8_0 GGUF file."""
    import torch
    import transformers as tr

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from family_support import byte_level_tokenizer, family_config
    from gguf_support import write_gguf

    raw = byte_level_tokenizer(vocab=1000)
    end = raw.token_to_id("<|endoftext|>")
    torch.manual_seed(0)
    config = family_config("llama", raw.get_vocab_size(), end, end, hidden_size=128, intermediate_size=256,
                           num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=4)
    model = tr.AutoModelForCausalLM.from_config(config).eval()
    return write_gguf(model, raw, "llama", folder / "smol-random-Q8_0.gguf", quant="Q8_0")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="assets", help="folder for the SVG files (default: assets)")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="minigpt-screenshots-") as tmp:
        for path in asyncio.run(capture(out, Path(tmp) / "runs", make_gguf(Path(tmp)))):
            print(path)


if __name__ == "__main__":
    main()
