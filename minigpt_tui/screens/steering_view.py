"""Steering on the Generation screen: ``e`` asks for a steering file (``generate
--save-steering``) and a coefficient, generates the prompt under the form's rule without and
with the steering on the worker, and shows each step's chosen id, piece and probability side by
side (:func:`~minigpt_tui.engine.session.generation_runs.steering_beside`).
"""

from __future__ import annotations

from typing import Any, ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen, Screen
from textual.widgets import DataTable, Label

from minigpt_tui.engine.core.errors import GenerationError
from minigpt_tui.engine.session import operations
from minigpt_tui.engine.session.generation_runs import steering_beside
from minigpt_tui.engine.session.steering import SteeringRequest
from minigpt_tui.screens.path_prompt import PathPromptScreen
from minigpt_tui.widgets.pieces import visible_piece


def steering_typed(text: str) -> SteeringRequest:
    """``FILE [COEFFICIENT]`` as typed (the coefficient 1 unless the last word is a number)."""
    words = text.strip().rsplit(maxsplit=1)
    coefficient = 1.0
    if len(words) == 2:
        try:
            coefficient = float(words[1])
        except ValueError:
            words = [text.strip()]
    if not words or not words[0]:
        raise GenerationError("type a steering file's path, and a coefficient after it if not 1")
    return SteeringRequest(file=words[0], coefficient=coefficient)


class SteeringKey(Screen):
    """The Generation screen's ``e`` (a base of :class:`GenerationScreen`, which queues the work)."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("e", "steer", "Steer", show=False)]

    def action_steer(self) -> None:
        queue: Any = getattr(self, "queue", None)
        if queue is None or queue.settings_applied is None:
            self.notify("load a model and take a decision first (n), then e steers it", title="steering",
                        severity="warning")
            return

        def chosen(text: str | None) -> None:
            if text:
                self._steer(text)

        self.app.push_screen(PathPromptScreen(
            "Steering", "A steering file (generate --save-steering) and a coefficient (default 1), "
            "e.g. green.safetensors 2: the prompt is generated without and with it, side by side.",
            placeholder="FILE [COEFFICIENT]"), chosen)

    def _steer(self, text: str) -> None:
        try:
            request = steering_typed(text)
        except GenerationError as err:
            self.notify(str(err), title="steering", severity="error")
            return

        def run(session: Any) -> str:
            stepper = session.stepper
            if stepper is None:
                raise GenerationError("take a decision first (n), then e steers it")
            beside = steering_beside(session.portable, stepper.prompt, stepper.rule, request, stepper.use_kv_cache)
            self.app.call_from_thread(self.app.push_screen, SteeringViewScreen(beside))
            return f"steered with {request.file}"

        self._enqueue(operations.Operation("steering", run, select="keep", subject=request.file))

    def _enqueue(self, operation: operations.Operation) -> None:
        raise NotImplementedError  # GenerationScreen queues it for its worker


class SteeringViewScreen(ModalScreen[None]):
    """The decisions without and with a steering, one row a step."""

    DEFAULT_CSS = """
    SteeringViewScreen { align: center middle; }
    SteeringViewScreen > Vertical { width: 90%; height: 80%; border: round $accent; padding: 0 1; }
    SteeringViewScreen DataTable { height: 1fr; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "close", "Close")]

    def __init__(self, beside: dict[str, Any]) -> None:
        super().__init__()
        self.beside = beside

    def compose(self) -> ComposeResult:
        steering = self.beside["steering"]
        with Vertical() as box:
            box.border_title = "Without and with the steering"
            box.border_subtitle = "escape closes"
            yield Label(f"{steering['coefficient']:g} x direction at {steering['site']} · positions "
                        f"{steering['positions']} · norm {steering['direction_norm']:.6g} · sha256 "
                        f"{steering['direction_sha256'][:16]}", id="steering-record", markup=False)
            yield Label(f"without: {self.beside['output']['display']!r} · with: "
                        f"{self.beside['steered_output']['display']!r}", id="steering-outputs", markup=False)
            yield DataTable(id="steering-rows", cursor_type="row", zebra_stripes=True)

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        table.add_columns("step", "without", "p", "", "with", "p")
        for row in self.beside["compared"]:
            table.add_row(str(row["step"]), *_side(row["without"]), "=" if row["same"] else "≠", *_side(row["with"]))
        table.focus()

    def action_close(self) -> None:
        self.dismiss(None)


def _side(chosen: dict[str, Any] | None) -> tuple[str, str]:
    if chosen is None:
        return "", ""
    return f"{chosen['id']} {visible_piece(chosen['piece'])}", f"{chosen['probability']:.4f}"
