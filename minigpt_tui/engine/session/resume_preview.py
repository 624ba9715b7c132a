"""Before resuming from a checkpoint: what the resume restores, what a weights-only start
(``train --init-from``) would reset instead, and anything that stops the resume.

Everything comes from an inspection's header records (no tensor is read); the engine
checks the files, identities, corpus and environment again when it restores. Each state
group has one describer in :data:`DESCRIBERS`, in the order the preview lists them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from minigpt_tui.engine.core.precision import precision_named
from minigpt_tui.engine.formats.inspection import CHECKPOINT_DIR
from minigpt_tui.engine.formats.state_groups import InspectionState, StateGroup
from minigpt_tui.engine.session.display import counted, shorten
from minigpt_tui.engine.session.file_uses import file_uses

if TYPE_CHECKING:
    from minigpt_tui.engine.formats.inspection import Inspection

HISTORY_RESET = "the history starts anew: a weights-only start is a new run, not a continuation"


@dataclass(frozen=True)
class ResumePreview:
    checkpoint: str  # as the user knows it (relative to the runs directory)
    step: int | None
    steps: int | None
    restored: tuple[str, ...]
    reset_by_weights_only: tuple[str, ...]
    blockers: tuple[str, ...]
    notes: tuple[str, ...]
    uses: tuple[str, ...] = ()  # for a file from another tool: what this tool can do with it

    @property
    def can_resume(self) -> bool:
        return not self.blockers

    @staticmethod
    def of(checkpoint: str, inspection: Inspection) -> ResumePreview:
        foreign = file_uses(inspection)
        if foreign is not None:  # its records are another tool's: nothing here is restored
            return ResumePreview(checkpoint, None, None, (), (), (foreign.why_not_resumable,), (),
                                 (*foreign.uses, foreign.convert))
        state = inspection.state
        step, steps = state.integer(StateGroup.SCHEDULE, "step"), state.integer(StateGroup.SCHEDULE, "steps")
        restored: list[str] = []
        reset: list[str] = []
        for describe in DESCRIBERS:
            more_restored, more_reset = describe(state)
            restored += more_restored
            reset += more_reset
        reset.append(HISTORY_RESET)
        return ResumePreview(checkpoint, step, steps, tuple(restored), tuple(reset),
                             tuple(_blockers(inspection, step, steps)), tuple(_notes(state)))


def short(value: Any, limit: int = 48) -> str:
    """``value`` as text, cut with an ellipsis at ``limit`` characters."""
    return shorten(str(value), limit)


def _blockers(inspection: Inspection, step: int | None, steps: int | None) -> list[str]:
    blockers = []
    if inspection.kind != CHECKPOINT_DIR:
        blockers.append("only a checkpoint folder (model + training state + manifest) can be resumed; "
                        "a single file can only warm-start a new run")
    if StateGroup.SCHEDULE not in inspection.state or StateGroup.OPTIMIZER not in inspection.state:
        blockers.append("no training state here (training.safetensors is missing)")
    integrity = inspection.integrity
    if integrity is not None and not integrity.ok:
        blockers.append(f"integrity: {integrity.problem or 'the manifest check failed'}")
    if step is not None and steps is not None and step >= steps:
        blockers.append(f"the run completed its schedule ({step} of {steps} updates): nothing left to resume")
    return blockers


def _notes(state: InspectionState) -> list[str]:
    notes = []
    continuation = state.get(StateGroup.CONTINUATION)
    if continuation and not continuation.get("bitwise_promised", True):
        notes.append("this history no longer promises bit-for-bit continuation: "
                     + "; ".join(continuation.get("notes") or []))
    envelope = state.get(StateGroup.ENVELOPE)
    saved = precision_named(envelope.get("precision"))
    if saved is not None and saved.bitwise:
        notes.append(f"{saved.name} precision: the resume is refused if Python, torch or the platform differ from "
                     f"the saved ones (torch {envelope.get('torch')}, Python {envelope.get('python')})")
    notes.append("the corpus must have the saved identity; the engine checks it when it restores")
    return notes


Lines = tuple[list[str], list[str]]  # (restored, reset by a weights-only start)


def _weights(state: InspectionState) -> Lines:
    params = state.get(StateGroup.PARAMETERS)
    if params and isinstance(params.get("scalars"), int):
        return [f"weights: {params.get('tensors')} tensors, {params['scalars']:,} scalars ({params.get('dtype')})"], []
    return ["weights: every learned tensor"], []


def _optimizer(state: InspectionState) -> Lines:
    optimizer = state.get(StateGroup.OPTIMIZER)
    if not optimizer:
        return [], []
    keys = ", ".join(optimizer.get("state_keys") or [])
    return ([f"optimizer: {optimizer.get('class', 'AdamW')} state ({keys}) for "
             f"{optimizer.get('parameters_with_state')} parameters in {optimizer.get('groups')} groups"],
            ["optimizer moments go back to zero and its step to 0 (the first updates are bias-corrected again)"])


def _schedule(state: InspectionState) -> Lines:
    if StateGroup.SCHEDULE not in state:
        return [], []
    schedule = state.get(StateGroup.SCHEDULE)
    next_lr = schedule.get("next_lr")
    return ([f"schedule: {schedule.get('kind')} at update {schedule.get('step')} of {schedule.get('steps')}"
             + (f"; next lr {next_lr:g}" if isinstance(next_lr, (int, float)) else "")],
            [f"the learning-rate schedule restarts at update 1 (warmup {schedule.get('warmup')} again)"])


def _data(state: InspectionState) -> Lines:
    data = state.get(StateGroup.DATA_PROGRESS)
    if not data:
        return [], []
    policy = data.get("policy")
    if policy == "document_order":
        where = f"order {short(data.get('order'))}, cursor {data.get('cursor')}, epoch {data.get('epoch')}"
    else:
        where = f"sampler generator state ({policy})"
    return ([f"data position: {where}; next batch {short(data.get('next_batch'))}"],
            ["the data stream starts again from its seed: examples already seen are drawn again"])


def _randomness(state: InspectionState) -> Lines:
    randomness = state.get(StateGroup.RANDOMNESS)
    if not randomness:
        return [], []
    return ([f"random streams: dropout seed {randomness.get('dropout_seed')} at counter "
             f"{randomness.get('dropout_counter')}; monitoring-sampling generator state"],
            ["dropout masks and monitoring samples restart from their seeds"])


def _loss_scaling(state: InspectionState) -> Lines:
    scaler = state.get(StateGroup.LOSS_SCALING)
    if not scaler:
        return [], []
    if not scaler.get("enabled"):
        return ["loss scaling: off"], []
    finite = counted(scaler.get("finite_updates"), "finite update")
    return ([f"loss scaling: scale {scaler.get('scale')}, {finite} since the last change"],
            ["the loss scale returns to its initial value"])


def _accumulation(state: InspectionState) -> Lines:
    accumulation = state.get(StateGroup.ACCUMULATION)
    if not accumulation:
        return [], []
    return [f"accumulation: batch {accumulation.get('batch_size')} × "
            f"{counted(accumulation.get('microbatches'), 'microbatch', 'microbatches')} per update"], []


def _evaluation(state: InspectionState) -> Lines:
    evaluation = state.get(StateGroup.EVALUATION)
    if not evaluation:
        return [], []
    best = evaluation.get("best_step")
    return ([f"evaluation curve: {counted(evaluation.get('points'), 'point')}, best step "
             f"{best if best is not None else 'none yet'}"], ["the evaluation curve and best step start empty"])


DESCRIBERS: tuple[Callable[[InspectionState], Lines], ...] = (
    _weights, _optimizer, _schedule, _data, _randomness, _loss_scaling, _accumulation, _evaluation,
)
