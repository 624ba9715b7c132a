"""The new-run form: preset, the model to start from, corpus, updates, precision, seeds and
save interval.

The form resolves the configuration itself (``load_config`` does not import torch), so an
invalid value is refused with the engine's one-line reason while the form stays open.
The keyboard starts in the first field (the preset). The fields a run always has (corpus,
updates, threads, save interval) hold the preset's values as text to edit; changing the preset
replaces those still as shown. A blank field keeps the preset's value.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Select

from minigpt_tui.engine.core.config import (
    CorpusConfig,
    load_config,
    preset_names,
    setting_of,
)
from minigpt_tui.engine.core.errors import ConfigError, MiniGPTError
from minigpt_tui.engine.session.inputs import SEED_STREAMS, RunChoices, parse_number, parse_threads
from minigpt_tui.engine.session.runs import check_run_name

# The form's field for each setting a refusal can carry (MiniGPTError.field): the keyboard
# goes there, so the value can be fixed at once.
FIELD_INPUTS: dict[str, str] = {
    "name": "name", "model": "model", "train.steps": "steps", "train.warmup": "steps",
    "train.save_every": "save_every", "train.threads": "threads", "seeds": "seed",
    **{f"seeds.{name}": name for name in SEED_STREAMS},
    **{f"corpus.{item.name}": "corpus" for item in fields(CorpusConfig)},
}


def refused_field(err: MiniGPTError) -> str | None:
    """The id of the form's field that ``err`` refuses, if it refuses one."""
    return FIELD_INPUTS.get(err.field or "")


@dataclass(frozen=True)
class NewRunRequest:
    config: Any  # a resolved RunConfig
    name: str | None  # the run's folder name; None: PRESET-TIMESTAMP
    init_from: str | None = None  # the model whose weights, architecture and tokenizer it starts from


@dataclass(frozen=True)
class NewRunForm:
    """The form's text fields as typed; :meth:`resolve` turns them into a RunConfig."""

    preset: str
    name: str = ""
    model: str = ""
    corpus: str = ""
    steps: str = ""
    precision: str = ""
    threads: str = ""
    seed: str = ""
    init: str = ""
    data: str = ""
    dropout: str = ""
    sampling: str = ""
    save_every: str = ""

    def request(self, runs_dir: Path) -> NewRunRequest:
        """The resolved run, or a MiniGPTError naming the first invalid field."""
        name = self.name.strip() or None
        if name is not None:
            check_run_name(name)
            if (runs_dir / name).exists():
                raise ConfigError(f"run '{name}' already exists in {runs_dir}", field="name")
        model = self.model.strip() or None
        if model is None and self.preset == "finetune":
            raise ConfigError("model: the finetune preset trains a model you already have (a checkpoint, "
                              "a transformers folder or a GGUF file)", field="model")
        return NewRunRequest(self.resolve(), name, model)

    def resolve(self) -> Any:
        return RunChoices(
            self.preset,
            corpus=self.corpus or None,
            steps=parse_number(self.steps, "updates", int, field="train.steps"),
            save_every=parse_number(self.save_every, "save interval", int, field="train.save_every"),
            precision=self.precision or None,
            threads=parse_threads(self.threads, "threads"),
            seed=parse_number(self.seed, "seed", int, field="seeds"),
            stream_seeds={name: parse_number(getattr(self, name), f"{name} seed", int, field=f"seeds.{name}")
                          for name in SEED_STREAMS},
        ).resolve()


def threads_hint(threads: int) -> str:
    """The threads field's placeholder: the preset's choice, and what may be typed."""
    return ("auto" if threads == 0 else str(threads)) + " (auto or a number; fast precision)"


def save_every_hint(save_every: int) -> str:
    """The save-interval field's placeholder: the preset's interval, and what 0 means."""
    return f"{save_every} (0: {setting_of('train.save_every').zero})"


def shown_values(config: Any) -> dict[str, str]:
    """The text each always-set field holds for ``config`` (a RunConfig): its values, not hints."""
    threads = config.train.threads
    return {"corpus": config.corpus.source, "steps": str(config.train.steps),
            "threads": "auto" if threads == 0 else str(threads), "save_every": str(config.train.save_every)}


class NewRunScreen(ModalScreen[NewRunRequest | None]):
    """Dismisses with a :class:`NewRunRequest`, or None when cancelled."""

    BINDINGS = [Binding("escape", "cancel", "Cancel"), Binding("ctrl+s", "start", "Start")]
    # The first field, focused as the form is composed, before any key typed ahead is handled
    # (a focus set in on_mount comes later: a tab typed with the key that opened the form went elsewhere).
    AUTO_FOCUS = "#preset"

    def __init__(self, current: Any, runs_dir: Path) -> None:
        super().__init__()
        self.current = current
        self.runs_dir = runs_dir
        self._shown = shown_values(current)  # what the always-set fields held when last filled

    def compose(self) -> ComposeResult:
        current = self.current
        with Vertical(id="new-run") as box:
            box.border_title = "New run"
            box.border_subtitle = "ctrl+s (or enter in a text field) starts · escape cancels"
            with Grid(id="new-run-fields"):
                yield Label("preset")
                yield Select([(name, name) for name in preset_names()], value=current.preset,
                             allow_blank=False, compact=True, id="preset")
                yield Label("model")
                yield Input(placeholder="none, or a checkpoint, transformers folder, .gguf",
                            compact=True, id="model")
                yield Label("run name")
                yield Input(placeholder=f"{current.preset}-YYYYMMDD-HHMMSS", compact=True, id="name")
                yield Label("corpus")
                yield Input(self._shown["corpus"], placeholder=current.corpus.source, compact=True, id="corpus")
                yield Label("updates")
                yield Input(self._shown["steps"], placeholder=str(current.train.steps), compact=True, id="steps")
                yield Label("precision")
                yield Select([("exact (float64, 1 thread)", "exact"), ("fast (float32)", "fast")],
                             value=current.train.precision, allow_blank=False, compact=True, id="precision")
                yield Label("threads")
                yield Input(self._shown["threads"], placeholder=threads_hint(current.train.threads), compact=True,
                            id="threads", tooltip="auto or a number of threads (fast precision; exact uses 1)")
                yield Label("one seed")
                yield Input(placeholder="derives every stream seed", compact=True, id="seed")
                for name in SEED_STREAMS:
                    yield Label(f"{name} seed")
                    yield Input(placeholder=str(getattr(current.seeds, name)), compact=True, id=name)
                yield Label("save every")
                yield Input(self._shown["save_every"], placeholder=save_every_hint(current.train.save_every),
                            compact=True, id="save_every", tooltip=f"0: {setting_of('train.save_every').zero}")
            with Horizontal(classes="buttons"):
                yield Button("Start", id="start", variant="primary", compact=True)
                yield Button("Cancel", id="cancel", compact=True)

    @on(Select.Changed, "#preset")
    def _preset_changed(self, event: Select.Changed) -> None:
        try:
            config = load_config(str(event.value))
        except MiniGPTError:
            return
        self.query_one("#name", Input).placeholder = f"{config.preset}-YYYYMMDD-HHMMSS"
        self.query_one("#corpus", Input).placeholder = config.corpus.source
        self.query_one("#steps", Input).placeholder = str(config.train.steps)
        self.query_one("#threads", Input).placeholder = threads_hint(config.train.threads)
        self.query_one("#save_every", Input).placeholder = save_every_hint(config.train.save_every)
        for name in SEED_STREAMS:
            self.query_one(f"#{name}", Input).placeholder = str(getattr(config.seeds, name))
        self.query_one("#precision", Select).value = config.train.precision
        shown = shown_values(config)
        for name, value in shown.items():
            field = self.query_one(f"#{name}", Input)
            if field.value == self._shown[name]:  # as filled, not edited: the new preset's value
                field.value = value
        self._shown = shown

    def form(self) -> NewRunForm:
        def text(field: str) -> str:
            return self.query_one(f"#{field}", Input).value

        return NewRunForm(
            preset=str(self.query_one("#preset", Select).value),
            name=text("name"),
            model=text("model"),
            corpus=text("corpus"),
            steps=text("steps"),
            precision=str(self.query_one("#precision", Select).value),
            threads=text("threads"),
            seed=text("seed"),
            init=text("init"),
            data=text("data"),
            dropout=text("dropout"),
            sampling=text("sampling"),
            save_every=text("save_every"),
        )

    @on(Input.Submitted)
    @on(Button.Pressed, "#start")
    def action_start(self) -> None:
        try:
            request = self.form().request(self.runs_dir)
        except MiniGPTError as err:
            self.notify(str(err), title="invalid value", severity="error", markup=False)
            field = refused_field(err)
            if field is not None:
                self.query_one(f"#{field}", Input).focus()
            return
        self.dismiss(request)

    @on(Button.Pressed, "#cancel")
    def action_cancel(self) -> None:
        self.dismiss(None)
