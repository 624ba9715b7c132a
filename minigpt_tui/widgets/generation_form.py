"""The generation form: the prompt, the model to load, the rule (greedy or sample), the
sampling settings (enabled only for sample) and the budget of decisions.

The prompt comes first, on screen and for tab: the keyboard arriving in the form is in the
field a learner means to type in, never at the end of the model's path."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Input, Label, Select

from minigpt_tui.engine.session.generation import DEFAULT_BUDGET, DEFAULT_SEED, GenerationSettings, parse_settings

SAMPLING_FIELDS = ("temperature", "top_k", "top_p", "seed")


class GenerationForm(Vertical):
    DEFAULT_CSS = """
    GenerationForm { height: auto; padding: 0 1; background: $boost; }
    GenerationForm .form-row { height: 1; }
    GenerationForm .form-row Label { padding: 0 1 0 0; color: $text-muted; }
    GenerationForm .form-row Input { margin-right: 1; }
    GenerationForm #model { width: 1fr; }
    GenerationForm #prompt { width: 1fr; }
    GenerationForm #rule { width: 10; margin-right: 1; }
    GenerationForm #temperature, GenerationForm #top_p { width: 6; }
    GenerationForm #top_k, GenerationForm #budget { width: 5; }
    GenerationForm #seed { width: 1fr; max-width: 22; }
    """

    def compose(self) -> ComposeResult:
        with Horizontal(classes="form-row"):
            yield Label("prompt")
            # Tabbing in keeps the prompt and the model: what is typed next is added at the end.
            yield Input(placeholder="text the model continues", compact=True, select_on_focus=False, id="prompt")
            yield Label("model")
            yield Input(placeholder="checkpoint, model.safetensors or RUN:latest / RUN:best",
                        compact=True, select_on_focus=False, id="model")
        with Horizontal(classes="form-row"):
            yield Label("rule")
            yield Select([("greedy", "greedy"), ("sample", "sample")], value="greedy", allow_blank=False,
                         compact=True, id="rule")
            yield Label("temp")
            yield Input(placeholder="1.0", compact=True, id="temperature", disabled=True)
            yield Label("top-k")
            yield Input(placeholder="all", compact=True, id="top_k", disabled=True)
            yield Label("top-p")
            yield Input(placeholder="1", compact=True, id="top_p", disabled=True)
            yield Label("seed")
            yield Input(placeholder=str(DEFAULT_SEED), compact=True, id="seed", disabled=True)
            yield Label("budget")
            yield Input(placeholder=str(DEFAULT_BUDGET), compact=True, id="budget")

    def text(self, name: str) -> str:
        return self.query_one(f"#{name}", Input).value

    @property
    def spec(self) -> str:
        """The model field, stripped."""
        return self.text("model").strip()

    def settings(self) -> GenerationSettings:
        """The form as settings; a malformed number or a value the rule refuses raises the
        engine's GenerationError."""
        return parse_settings(self.text("prompt"), str(self.query_one("#rule", Select).value),
                              self.text("temperature"), self.text("top_k"), self.text("top_p"),
                              self.text("seed"), self.text("budget"))

    @property
    def sampling(self) -> bool:
        return self.query_one("#rule", Select).value == "sample"

    def toggle_rule(self) -> str:
        """Switch the rule between greedy and sample; the rule now chosen."""
        rule = "greedy" if self.sampling else "sample"
        self.query_one("#rule", Select).value = rule
        self._enable_sampling(rule == "sample")
        return rule

    @on(Select.Changed, "#rule")
    def _rule_changed(self, event: Select.Changed) -> None:
        self._enable_sampling(event.value == "sample")

    def _enable_sampling(self, sampling: bool) -> None:
        for name in SAMPLING_FIELDS:
            self.query_one(f"#{name}", Input).disabled = not sampling
        # Greedy leaves the sampling fields dimmed: the rule field says how to choose sampling.
        self.query_one("#rule", Select).tooltip = ("u (or this field) switches to sampling" if not sampling
                                                   else "u (or this field) switches back to greedy")
