"""``generate --lens / --contributions / --candidate / --layer --head``: what a decision looked like inside.

The views come from the engine's lens module; this module reads the options, refuses bad
ones with one line, and prints the views as text when ``--json`` is not given.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rich.table import Table
from rich.text import Text

from minigpt_tui.commands.common import generation_number, output_console
from minigpt_tui.engine.core.errors import GenerationError


def add_insight_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--lens", action="store_true",
                        help="logit lens: each layer's residual at the last position (layer 0 the embeddings) "
                             "through the final norm and head: its --top ids, the chosen id's rank and probability")
    parser.add_argument("--contributions", action="store_true",
                        help="split the chosen id's logit into the embedding, each attention head, each "
                             "feed-forward block and, in gpt2, each attention output bias and the final norm's "
                             "bias; the final norm's scale is taken at the final residual (and in gpt2 each "
                             "part is centered on its own), so the parts add up to the logit")
    parser.add_argument("--candidate", action="append", default=[], metavar="ID",
                        help="also split this id's logit at every decision (repeatable)")
    parser.add_argument("--layer", metavar="L",
                        help="with --head: the whole attention pattern of block L (0-based), query x key")
    parser.add_argument("--head", metavar="H", help="with --layer: which head of that block (0-based)")


@dataclass(frozen=True)
class InsightRequest:
    """Which views of each decision to add: lens, contributions (chosen, candidates), a pattern."""

    lens: bool
    contributions: bool
    candidates: tuple[int, ...]
    pattern: tuple[int, int] | None

    @property
    def wanted(self) -> bool:
        return self.lens or self.contributions or bool(self.candidates) or self.pattern is not None

    def check(self, model: Any) -> None:
        """Refuse an unknown block, head or candidate before any decision is made."""
        from minigpt_tui.engine.analysis.lens import (  # deferred: imports torch
            check_head,
            check_token_id,
        )

        if self.pattern is not None:
            check_head(model, *self.pattern)
        for token_id in self.candidates:
            check_token_id(model, token_id)

    def inspect(self, stepper: Any, top: int) -> list[Any]:
        """One insight per decision the stepper made (none when no view was asked for)."""
        from minigpt_tui.engine.analysis.lens import (  # deferred: imports torch
            inspect_decision,
        )

        if not self.wanted:
            return []
        return [inspect_decision(stepper.model, stepper.tokenizer, d.prefix_ids, d.chosen.id, lens=self.lens,
                                 lens_top=top, contributions=self.contributions, candidate_ids=self.candidates,
                                 pattern=self.pattern)
                for d in stepper.decisions]


def insight_request_from_args(args: argparse.Namespace) -> InsightRequest:
    layer = generation_number(args.layer, "--layer", int)
    head = generation_number(args.head, "--head", int)
    if (layer is None) != (head is None):
        raise GenerationError("--layer and --head go together: give both to see one head's pattern")
    candidates = tuple(generation_number(value, "--candidate", int) for value in args.candidate)
    return InsightRequest(args.lens, args.contributions, candidates, None if layer is None else (layer, head))


def _shown(piece: str) -> str:
    return json.dumps(piece, ensure_ascii=False)


def print_insights(decisions: Sequence[Any], insights: Sequence[Any]) -> None:
    """Per decision: the lens as a layer table, contributions as signed parts, the pattern as a grid."""
    console = output_console()
    for decision, insight in zip(decisions, insights):
        chosen = f"step {decision.step} · chosen {decision.chosen.id} {_shown(decision.chosen.piece.text)}"
        if insight.lens is not None:
            console.print(_lens_table(insight.lens, chosen))
        for parts in insight.contributions:
            console.print(_contributions_table(decision.step, parts))
        if insight.pattern is not None:
            console.print(_pattern_table(insight.pattern, chosen))


def _lens_table(lens: Sequence[Any], chosen: str) -> Table:
    table = Table(title=f"lens · {chosen}")
    for name in ("layer", "stream", "chosen rank", "chosen p", "top ids (p)"):
        table.add_column(name, justify="left" if name in ("stream", "top ids (p)") else "right")
    for row in lens:
        top = ", ".join(f"{_shown(e.piece)} {e.probability:.3g}" for e in row.top)
        table.add_row(str(row.layer), row.stream, str(row.chosen_rank), f"{row.chosen_probability:.3g}",
                      Text(top))
    return table


def _contributions_table(step: int, parts: Any) -> Table:
    """One id's logit as its signed parts: the embedding, then each block's heads, attention
    bias (where it has one) and feed-forward, then the final norm's bias (where it has one)."""
    caption = f"logit {parts.logit:.9f} · sum of parts {parts.total:.9f}"
    if parts.dtype != "float64" and parts.agrees:  # a float32 model's logit is rounded to float32
        caption += f", equal to {parts.dtype} rounding"
    table = Table(title=f"contributions · step {step} · {parts.id} {_shown(parts.piece)}", caption=caption)
    table.add_column("part")
    table.add_column("logit", justify="right")
    table.add_row("embedding", f"{parts.embedding:+.6f}")
    for layer, heads in enumerate(parts.heads):
        _add_block_parts(table, parts, layer, heads)
    if parts.norm_bias:
        table.add_row("final norm bias", f"{parts.norm_bias:+.6f}")
    return table


def _add_block_parts(table: Table, parts: Any, layer: int, heads: Sequence[float]) -> None:
    for head, value in enumerate(heads):
        table.add_row(f"block {layer} head {head}", f"{value:+.6f}")
    if parts.attention_bias[layer]:
        table.add_row(f"block {layer} attention bias", f"{parts.attention_bias[layer]:+.6f}")
    table.add_row(f"block {layer} feed-forward", f"{parts.ffn[layer]:+.6f}")


def _pattern_table(pattern: Any, chosen: str) -> Table:
    table = Table(title=f"attention · block {pattern.layer} head {pattern.head} · {chosen} · query x key")
    table.add_column("query")
    for _, piece in pattern.tokens:
        table.add_column(Text(_shown(piece)), justify="right")
    for (_, piece), row in zip(pattern.tokens, pattern.weights.tolist()):
        table.add_row(Text(_shown(piece)), *(f"{value:.2f}" for value in row))
    return table
