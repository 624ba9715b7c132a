"""The tour in tests: an app that opens it at a lesson, reading its panel the way its timer
does, and a SmolLM2-shaped transformers folder (llama, byte-level tokenizer, random weights)
made here, nothing downloaded."""

from __future__ import annotations

import time
from pathlib import Path

from minigpt_tui.app import LaunchSettings, MiniGPTApp
from minigpt_tui.widgets.tour_panel import TourPanel
from tests.app_support import FROZEN_SAVED_AT, settle

WIDE, NARROW = (120, 40), (80, 24)


def tour_app(runs, lesson: int | None = None) -> MiniGPTApp:
    return MiniGPTApp(LaunchSettings(runs_dir=runs, preset="tiny", tour=lesson), preload_engine=False,
                      clock=lambda: 1000.0, wall_clock=lambda: FROZEN_SAVED_AT)


async def look(pilot, until: str | None = None, timeout: float = 30.0) -> str:
    """Let the tour observe the screens (as its timer does) and read its panel; with ``until``,
    again while a worker of a screen (the tokenizer's, say) has not yet shown what it read
    (for up to ``timeout`` seconds: a loaded machine runs workers late)."""
    deadline = time.monotonic() + timeout
    while True:
        pilot.app.tour.tick()
        await settle(pilot)
        panels = pilot.app.screen.query(TourPanel)
        assert panels, "no tour panel on the screen in front"
        text = panels.first().text()
        if until is None or until in text or time.monotonic() > deadline:
            return text
        await pilot.pause(0.1)


def smollm_like_folder(folder: Path) -> Path:
    """A random-weight llama with a GPT-2 style byte-level tokenizer, as SmolLM2 is, saved
    with save_pretrained (tokenizer trained here; nothing downloaded)."""
    import torch
    import transformers as tr

    from tests.family_support import byte_level_tokenizer, family_config

    raw = byte_level_tokenizer()
    end = raw.token_to_id("<|endoftext|>")
    torch.manual_seed(0)
    model = tr.AutoModelForCausalLM.from_config(family_config("llama", raw.get_vocab_size(), end, end))
    with torch.no_grad():
        for name, param in model.named_parameters():
            param.copy_((1.0 if "norm" in name else 0.0) + 0.3 * torch.randn_like(param))
    model.save_pretrained(folder)
    tr.PreTrainedTokenizerFast(tokenizer_object=raw, bos_token="<|endoftext|>",
                               eos_token="<|endoftext|>").save_pretrained(folder)
    return folder
