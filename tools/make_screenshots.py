"""Regenerate the README's pictures: each screen of the app, driven by its keys as a person
would, saved as SVG in ``assets/``. Run with ``make screenshots``.

A mini run is trained in the app (space), then the Checkpoints screen opens its newest
checkpoint, and the Generation screen loads it, runs a greedy continuation and shows the
logit lens. Everything happens in a temporary runs directory.
"""

from __future__ import annotations

import argparse
import asyncio
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


async def capture(out: Path, runs_dir: Path) -> list[Path]:
    app = MiniGPTApp(LaunchSettings(runs_dir=runs_dir, preset="mini"))
    saved: list[Path] = []

    def shot(name: str) -> None:
        saved.append(Path(app.save_screenshot(filename=f"{name}.svg", path=str(out))))

    async with app.run_test(size=SIZE) as pilot:
        screen = app.training_screen
        await pilot.press("space")
        await _until(pilot, lambda: screen.run.state == "finished", 180, "the mini run to finish")
        shot("training")
        await pilot.press("c")
        await pilot.pause(2.0)  # the runs scan and the newest checkpoint's header, on workers
        shot("checkpoints")
        await pilot.press("g")
        await pilot.pause(1.0)
        await pilot.press("enter")  # load the model named in the form (the newest run's latest checkpoint)
        await pilot.pause(3.0)
        await pilot.press("escape", "r")
        await pilot.pause(3.0)
        await pilot.press("l")
        await pilot.pause(2.0)
        shot("generation")
    return saved


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="assets", help="folder for the SVG files (default: assets)")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="minigpt-screenshots-") as tmp:
        for path in asyncio.run(capture(out, Path(tmp) / "runs")):
            print(path)


if __name__ == "__main__":
    main()
