"""The Training screen while a new stream-mode run prepares: the progress line says what is
being done (here: encoding, held until the test lets it go), then gives way to the run; a
stop sent meanwhile ends the run with nothing written."""

from __future__ import annotations

import threading

from minigpt_tui.engine.training import stream as stream_module
import minigpt_tui.engine.training.trainer  # noqa: F401 - it calls encode_records
from minigpt_tui.widgets.run_progress import RunProgress
from tests.app_support import run_async, static_text
from tests.training_support import SIZE, key, make_app, training, wait_until
from conftest import patch_everywhere

STREAM_RUN = {"corpus": {"mode": "stream", "source": "bundled:patterns.txt"},
              "train": {"steps": 20, "eval_every": 10, "save_every": 0, "eval_batches": 2}}


def hold_encoding(monkeypatch, release: threading.Event) -> None:
    """Encoding reports that it began, waits (on the worker thread) until ``release`` is
    set, then reports again: the report where a stop sent meanwhile ends the preparation."""
    encode = stream_module.encode_records

    def held(texts, tokenizer, *, progress=None, label="encoding"):
        if progress is not None:
            progress(label, 0, len(texts))
            release.wait(30)
            progress(label, 0, len(texts))
        return encode(texts, tokenizer, progress=progress, label=label)

    assert patch_everywhere(monkeypatch, stream_module, "encode_records", held) >= 2


async def start_and_see_encoding(pilot, screen) -> RunProgress:  # type: ignore[no-untyped-def]
    line = screen.query_one("#progress", RunProgress)
    await key(pilot, "space")
    await wait_until(pilot, lambda: "encoding train" in line.render().plain)
    return line


@run_async
async def test_the_progress_line_shows_what_a_new_run_is_preparing(tmp_path, monkeypatch):
    release = threading.Event()
    hold_encoding(monkeypatch, release)
    app = make_app(tmp_path / "runs", STREAM_RUN)
    async with app.run_test(size=SIZE) as pilot:
        screen = training(app)
        line = await start_and_see_encoding(pilot, screen)
        assert screen.run.state == "starting" and "encoding train 0/" in line.render().plain
        release.set()
        await wait_until(pilot, lambda: screen.run.state == "finished")
        assert "encoding" not in line.render().plain and "20/20" in line.render().plain
        assert screen.run.events_seen.get("Preparing", 0) >= 2


@run_async
async def test_stopping_while_a_run_prepares_ends_it_with_nothing_written(tmp_path, monkeypatch):
    release = threading.Event()
    hold_encoding(monkeypatch, release)
    runs = tmp_path / "runs"
    app = make_app(runs, STREAM_RUN)
    async with app.run_test(size=SIZE) as pilot:
        screen = training(app)
        line = await start_and_see_encoding(pilot, screen)
        await key(pilot, "x")
        # The stop must have been sent before the encoding goes on (a slow machine may not
        # have handled the key yet): the screen says "stopping" once it has.
        await wait_until(pilot, lambda: screen.run.state == "stopping")
        release.set()
        await wait_until(pilot, lambda: screen.run.state == "stopped")
        assert "encoding" not in line.render().plain
        assert screen.query_one("#events").entries[-1] == ("stopped", "while preparing; nothing was written")
    assert not runs.exists() or not any(runs.iterdir())
    cache = tmp_path / "token-cache"
    assert not cache.exists() or not any(cache.iterdir())


@run_async
async def test_the_summary_names_a_byte_level_tokenizer_without_merges(tmp_path):
    app = make_app(tmp_path / "runs", {**STREAM_RUN, "tokenizer": {"merges": 0}})
    async with app.run_test(size=SIZE) as pilot:
        screen = training(app)
        await key(pilot, "space")
        await wait_until(pilot, lambda: screen.run.state == "finished")
        text = static_text(screen, "#summary")
        assert "bytes · no merges · vocab 258" in text and "0 merges" not in text
