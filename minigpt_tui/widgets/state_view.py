"""State records grouped by meaning, as a tree: one branch per group with a line saying what
the group is for, its records beneath (nested records as sub-branches)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from rich.text import Text
from textual.widgets import Tree

from minigpt_tui.engine.core.config import settings_in_use
from minigpt_tui.engine.core.printable import escape_controls
from minigpt_tui.engine.session.checkpoint_views import InspectionState, StateGroup, StateRecords
from minigpt_tui.engine.session.display import shorten

# In reading order: what the model is, then everything that decides the next update.
GROUP_MEANINGS: tuple[tuple[StateGroup, str], ...] = (
    (StateGroup.IDENTITIES, "SHA-256 identities that tie the files together: model, tokenizer, config, corpus"),
    (StateGroup.COMPOSITION,
     "how the model is assembled: token-table encoder, decoder backbone, head tied to the table"),
    (StateGroup.MODEL_CONFIG, "the model's normalized settings (family, width, heads, layers, context…)"),
    (StateGroup.CONSTANTS, "numerical settings whose exact bits matter, also stored as the F64 'constants' tensor"),
    (StateGroup.TOKENIZER, "the tokenizer saved with the model (ours: byte-level BPE, merges in 'tokenizer.merges')"),
    (StateGroup.SPECIAL_IDS, "ids with fixed meaning: BOS, EOS, where the 256 bytes and the merges start"),
    (StateGroup.PARAMETERS, "learned tensors and scalars (the tied table counted once) and their dtype"),
    (StateGroup.PROVENANCE, "where the weights came from: run and update"),
    (StateGroup.SCHEDULE, "learning-rate schedule and how far along it the run is"),
    (StateGroup.OPTIMIZER, "AdamW: per-parameter moments (exp_avg, exp_avg_sq) and step; hyperparameters per group"),
    (StateGroup.DATA_PROGRESS, "where the data stream stands: order, cursor and epoch, or the sampler; the next batch"),
    (StateGroup.RANDOMNESS, "seeds and generator states: dropout seed and counter, monitoring-sampling generator"),
    (StateGroup.LOSS_SCALING, "the loss scaler: current scale, bounds, growth and backoff, finite updates since growth"),
    (StateGroup.ACCUMULATION, "batch size, microbatches per update and microbatches pending (0 at a boundary)"),
    (StateGroup.UPDATE_POLICY, "gradient clipping and activation recomputation"),
    (StateGroup.EVALUATION, "the evaluation curve so far and the best validation step"),
    (StateGroup.ENVELOPE, "the environment the state was saved in; exact resume refuses a different one"),
    (StateGroup.CONTINUATION, "whether this history may still promise bit-for-bit continuation, and why not"),
)
MEANINGS: dict[str, str] = dict(GROUP_MEANINGS)
MAX_VALUE_CHARACTERS = 160
MAX_LIST_ITEMS = 12


def short_value(value: Any) -> str:
    """A record's value as a person reads it: yes / no for a flag, – for a value not set,
    JSON for lists and mappings, never a Python repr such as ``None`` or ``False``."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list) and len(value) > MAX_LIST_ITEMS:
        head = ", ".join(short_value(v) for v in value[:MAX_LIST_ITEMS])
        text = f"[{head}, … {len(value) - MAX_LIST_ITEMS} more] ({len(value)} items)"
    elif isinstance(value, str):
        text = value
    else:
        text = repr(value) if not isinstance(value, (list, dict)) else _compact(value)
    return shorten(escape_controls(text), MAX_VALUE_CHARACTERS)


def _compact(value: Any) -> str:
    try:
        return json.dumps(value, separators=(", ", ": "))
    except (TypeError, ValueError):
        return repr(value)


def ordered_groups(state: InspectionState) -> list[StateRecords]:
    """The groups in reading order: those with a meaning first, then the rest by name."""
    known = [group for name, _ in GROUP_MEANINGS for group in state if group.group == name]
    return known + sorted((group for group in state if group.group not in MEANINGS), key=lambda g: str(g.group))


class StateView(Tree[None]):
    DEFAULT_CSS = """
    StateView { height: 1fr; }
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__("state records", **kwargs)
        self.show_root = False
        self.guide_depth = 2

    def show_state(self, state: InspectionState) -> None:
        self.clear()
        if not state:
            self.root.add_leaf(Text("this file holds no state records (only tensors)", style="dim italic"))
            return
        for group in ordered_groups(state):
            label = Text(str(group.group), style="bold")
            meaning = MEANINGS.get(group.group)
            if meaning:
                label.append(f" — {meaning}", style="dim")
            node = self.root.add(label, expand=True)
            records = group.records
            if group.group == StateGroup.MODEL_CONFIG and isinstance(records, Mapping):
                records = settings_in_use(records)  # a setting the model's parts never read is not listed
            self._add_records(node, records)

    def _add_records(self, node: Any, records: Any) -> None:
        if not isinstance(records, Mapping):
            node.add_leaf(Text(short_value(records)))
            return
        if not records:
            node.add_leaf(Text("(none)", style="dim italic"))
        for key, value in records.items():
            if isinstance(value, dict) and value:
                self._add_records(node.add(Text(escape_controls(key), style="bold"), expand=True), value)
            else:
                line = Text(f"{escape_controls(key)}: ", style="bold")
                line.append(short_value(value) if value is not None else "–")
                node.add_leaf(line)
