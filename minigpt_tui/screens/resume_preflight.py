"""Before resuming training from a checkpoint: what the resume restores, what a weights-only
start (``train --init-from``) would reset instead, and anything that stops the resume.

Everything listed comes from the checkpoint's header records (no tensor is read); the
engine checks the files, identities, corpus and environment again when it restores.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Static


@dataclass(frozen=True)
class ResumePreflight:
    checkpoint: str
    step: int | None
    steps: int | None
    restored: tuple[str, ...]
    reset_by_weights_only: tuple[str, ...]
    blockers: tuple[str, ...]
    notes: tuple[str, ...]

    @property
    def can_resume(self) -> bool:
        return not self.blockers


def _get(state: dict[str, dict[str, Any]], group: str, key: str, default: Any = None) -> Any:
    values = state.get(group) or {}
    return values.get(key, default) if isinstance(values, dict) else default


def preflight(checkpoint: str, kind: str, state: dict[str, dict[str, Any]],
              integrity: dict[str, Any] | None) -> ResumePreflight:
    """The preflight lists from an inspection's kind, state records and integrity."""
    blockers: list[str] = []
    if kind != "checkpoint-dir":
        blockers.append("only a checkpoint folder (model + training state + manifest) can be resumed; "
                        "a single file can only warm-start a new run")
    if "schedule" not in state or "optimizer" not in state:
        blockers.append("no training state here (training.safetensors is missing)")
    if integrity is not None and not integrity.get("ok", False):
        blockers.append(f"integrity: {integrity.get('problem') or 'the manifest check failed'}")
    step = _get(state, "schedule", "step")
    steps = _get(state, "schedule", "steps")
    if isinstance(step, int) and isinstance(steps, int) and step >= steps:
        blockers.append(f"the run completed its schedule ({step} of {steps} updates): nothing left to resume")

    restored: list[str] = []
    reset: list[str] = []
    params = state.get("parameters") or {}
    if params:
        restored.append(f"weights: {params.get('tensors')} tensors, {params.get('scalars'):,} scalars "
                        f"({params.get('dtype')})" if isinstance(params.get("scalars"), int)
                        else "weights: every learned tensor")
    else:
        restored.append("weights: every learned tensor")
    optimizer = state.get("optimizer") or {}
    if optimizer:
        keys = ", ".join(optimizer.get("state_keys") or [])
        restored.append(f"optimizer: {optimizer.get('class', 'AdamW')} state ({keys}) for "
                        f"{optimizer.get('parameters_with_state')} parameters in {optimizer.get('groups')} groups")
        reset.append("optimizer moments go back to zero and its step to 0 (the first updates are bias-corrected again)")
    if "schedule" in state:
        next_lr = _get(state, "schedule", "next_lr")
        restored.append(f"schedule: {_get(state, 'schedule', 'kind')} at update {step} of {steps}"
                        + (f"; next lr {next_lr:g}" if isinstance(next_lr, (int, float)) else ""))
        reset.append(f"the learning-rate schedule restarts at update 1 (warmup {_get(state, 'schedule', 'warmup')} again)")
    data = state.get("data_progress") or {}
    if data:
        policy = data.get("policy")
        if policy == "document_order":
            where = f"order {short(data.get('order'))}, cursor {data.get('cursor')}, epoch {data.get('epoch')}"
        else:
            where = f"sampler generator state ({policy})"
        restored.append(f"data position: {where}; next batch {short(data.get('next_batch'))}")
        reset.append("the data stream starts again from its seed: examples already seen are drawn again")
    randomness = state.get("randomness") or {}
    if randomness:
        restored.append(f"random streams: dropout seed {randomness.get('dropout_seed')} at counter "
                        f"{randomness.get('dropout_counter')}; monitoring-sampling generator state")
        reset.append("dropout masks and monitoring samples restart from their seeds")
    scaler = state.get("loss_scaling") or {}
    if scaler:
        if scaler.get("enabled"):
            restored.append(f"loss scaling: scale {scaler.get('scale')}, {scaler.get('finite_updates')} finite "
                            "updates since the last change")
            reset.append("the loss scale returns to its initial value")
        else:
            restored.append("loss scaling: off")
    accumulation = state.get("accumulation") or {}
    if accumulation:
        restored.append(f"accumulation: batch {accumulation.get('batch_size')} × "
                        f"{accumulation.get('microbatches')} microbatches per update")
    evaluation = state.get("evaluation") or {}
    if evaluation:
        restored.append(f"evaluation curve: {evaluation.get('points')} points, best step "
                        f"{evaluation.get('best_step') if evaluation.get('best_step') is not None else 'none yet'}")
        reset.append("the evaluation curve and best step start empty")
    reset.append("the history starts anew: a weights-only start is a new run, not a continuation")

    notes: list[str] = []
    continuation = state.get("continuation") or {}
    if continuation and not continuation.get("bitwise_promised", True):
        notes.append("this history no longer promises bit-for-bit continuation: "
                     + "; ".join(continuation.get("notes") or []))
    envelope = state.get("envelope") or {}
    if envelope.get("precision") == "exact":
        notes.append(f"exact precision: the resume is refused if Python, torch or the platform differ from "
                     f"the saved ones (torch {envelope.get('torch')}, Python {envelope.get('python')})")
    notes.append("the corpus must have the saved identity; the engine checks it when it restores")
    return ResumePreflight(checkpoint, step if isinstance(step, int) else None,
                           steps if isinstance(steps, int) else None,
                           tuple(restored), tuple(reset), tuple(blockers), tuple(notes))


def short(value: Any, limit: int = 48) -> str:
    text = str(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _section(title: str, mark: str, lines: tuple[str, ...], style: str = "") -> list[Any]:
    """A heading and its lines, each wrapped with a hanging indent under its mark."""
    table = Table.grid(padding=(0, 1))
    table.add_column(no_wrap=True, style=style)
    table.add_column(style=style)
    for line in lines:
        table.add_row(f" {mark}", line)
    return [Text(""), Text(title, style="bold" if not style else f"bold {style}"), table]


def preflight_renderable(check: ResumePreflight) -> Group:
    parts: list[Any] = [Text(check.checkpoint, style="bold")]
    if check.blockers:
        parts += _section("Cannot resume:", "✗", check.blockers, "red")
    parts += _section("Resuming restores, so the next update is the one the run would have made:", "✓",
                      check.restored)
    parts += _section("A weights-only start (train --init-from) would instead reset:", "↺",
                      check.reset_by_weights_only)
    if check.notes:
        parts += _section("Notes:", "•", check.notes, "dim")
    return Group(*parts)


class ResumePreflightScreen(ModalScreen[bool]):
    """Dismisses with True when the user confirms the resume."""

    DEFAULT_CSS = """
    ResumePreflightScreen { align: center middle; }
    ResumePreflightScreen #preflight {
        width: 100; max-width: 100%; height: 90%; max-height: 40;
        border: round $primary; background: $surface; padding: 0 1;
    }
    ResumePreflightScreen #preflight-body { height: 1fr; }
    ResumePreflightScreen .buttons { height: 1; margin-top: 1; align-horizontal: right; }
    ResumePreflightScreen Button { margin-left: 2; }
    """

    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, check: ResumePreflight) -> None:
        super().__init__()
        self.check = check

    def compose(self) -> ComposeResult:
        with Vertical(id="preflight") as box:
            box.border_title = "Resume training?"
            box.border_subtitle = "enter resumes · escape cancels"
            with VerticalScroll(id="preflight-body"):
                yield Static(preflight_renderable(self.check))
            with Horizontal(classes="buttons"):
                yield Button("Resume", id="resume", variant="primary", compact=True,
                             disabled=not self.check.can_resume)
                yield Button("Cancel", id="cancel", compact=True)

    def on_mount(self) -> None:
        self.query_one("#resume" if self.check.can_resume else "#cancel", Button).focus()

    @on(Button.Pressed, "#resume")
    def _resume(self) -> None:
        self.dismiss(True)

    @on(Button.Pressed, "#cancel")
    def action_cancel(self) -> None:
        self.dismiss(False)
