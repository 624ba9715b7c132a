"""The Training screen in the Pilot: an app on a runs folder, keys as a terminal sends them,
waits that say what the run was doing, and the reference run it must equal."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from minigpt_tui.app import LaunchSettings, MiniGPTApp, resolve_next_config
from minigpt_tui.screens.training import TrainingScreen
from tests.polling import pause_until

SIZE = (100, 30)
# mini: a few seconds at most, long enough that a pause sent after update 20 lands mid-run.
QUICK = {"train": {"steps": 300, "eval_every": 50, "save_every": 0}}


def make_app(runs_dir: Path, overrides: dict[str, dict[str, Any]] | None = None, preset: str = "mini") -> MiniGPTApp:
    settings = LaunchSettings(runs_dir=runs_dir, preset=preset)
    config = resolve_next_config(settings, overrides)
    return MiniGPTApp(settings, next_config=config, preload_engine=False)


async def wait_until(pilot, predicate, timeout: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    """Wait in the Pilot until ``predicate`` holds; a failure says what the run was doing."""

    def run_seen() -> str:
        screen = pilot.app.training_screen
        run = screen.run if screen is not None else None
        seen = (run.state, run.step, run.events_seen, screen.query_one("#events").entries[-6:]) if run else None
        return f"run: {seen}"

    await pause_until(pilot, predicate, timeout=timeout, what="the condition", detail=run_seen)


async def start_then_pause(pilot, screen, after: int) -> int:  # type: ignore[no-untyped-def]
    """Start the run, pause it once it has made ``after`` updates; the step it paused at."""
    await key(pilot, "space")
    await wait_until(pilot, lambda: screen.run.step >= after)
    await key(pilot, "space")
    await wait_until(pilot, lambda: screen.run.state == "paused")
    return screen.run.step


async def key(pilot, name: str, character: str | None = None) -> None:  # type: ignore[no-untyped-def]
    """Press a key as the terminal driver would. ``pilot.press`` waits for the process to go
    idle after each key (up to a second), which never happens while a run trains."""
    from textual import events

    if character is None and len(name) == 1:
        character = name
    pilot.app.post_message(events.Key(name, " " if name == "space" else character))
    await pilot.pause(0.05)


async def press_button(pilot, selector: str) -> None:  # type: ignore[no-untyped-def]
    from textual.widgets import Button

    pilot.app.screen.query_one(selector, Button).press()
    await pilot.pause(0.05)


def reference_run(overrides: dict[str, dict[str, Any]], until: int | None = None, preset: str = "mini"):
    """The same run never paused, in this process: its records and final state digest."""
    from minigpt_tui.engine.core.config import load_config
    from minigpt_tui.engine.training.corpus import load_corpus
    from minigpt_tui.engine.training.trainer import (
        Trainer,
        TrainingSetup,
        apply_precision,
        scheduled_work,
    )

    config = load_config(preset, None, overrides)
    apply_precision(config.train)
    trainer = Trainer(TrainingSetup.build(config, load_corpus(config.corpus)))
    updates, evaluations = [], []
    for item in scheduled_work(trainer, until):
        if hasattr(item, "exact_fields"):
            updates.append(json.loads(json.dumps(item.exact_fields())))
        else:
            evaluations.append(json.loads(json.dumps(asdict(item))))
    return updates, evaluations, trainer.state_digest()


def app_records(run_dir: Path) -> tuple[list[dict], list[dict]]:
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    updates = [{k: v for k, v in r.items() if k not in ("kind", "seconds", "tokens_per_second")}
               for r in records if r["kind"] == "update"]
    evaluations = [{k: v for k, v in r.items() if k != "kind"} for r in records
                   if r["kind"] == "evaluation" and not r["extra"]]
    return updates, evaluations


def assert_matches_reference(run_dir, digest: str) -> None:
    """The app's run recorded the updates, evaluations and final digest of a run that was
    never paused, saved or resumed."""
    updates, evaluations, reference_digest = reference_run(QUICK)
    got_updates, got_evaluations = app_records(run_dir)
    assert got_updates == updates
    assert got_evaluations == evaluations
    assert digest == reference_digest


def training(app: MiniGPTApp) -> TrainingScreen:
    screen = app.training_screen
    assert isinstance(screen, TrainingScreen)
    return screen


UNSAVED_RUN = {"train": {"steps": 100_000, "eval_every": 0, "save_every": 0}}  # never saves by itself
