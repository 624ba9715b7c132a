"""``generate --lens / --contributions / --candidate / --layer --head``: what a decision looked like inside.

The views come from the session's :class:`InsightRequest`; this module reads the options,
refuses bad ones with one line, and prints the views as text when ``--json`` is not given.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from minigpt_tui.commands.common import generation_number, output_console
from minigpt_tui.engine.core.errors import GenerationError
from minigpt_tui.engine.session.generation_runs import DEFAULT_PARTS, NO_INSIGHT, InsightRequest
from minigpt_tui.engine.session.insight import largest_parts
from minigpt_tui.engine.session.view_names import LENS_LEGEND


def add_insight_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--lens", action="store_true",
                        help="logit lens: each layer's residual at the last position (layer 0 the embeddings) "
                             "through the final norm and head: its --top ids, the chosen id's rank and probability")
    parser.add_argument("--contributions", action="store_true",
                        help="split the chosen id's logit into the embedding, each attention head, each "
                             "feed-forward block and, in gpt2, each attention output bias and the final norm's "
                             "bias; the final norm's scale is taken at the final residual (and in gpt2 each "
                             "part is centered on its own), so the parts add up to the logit")
    parser.add_argument("--parts", default=str(DEFAULT_PARTS), metavar="N",
                        help=f"with --contributions: list the N parts of largest |contribution| (default "
                             f"{DEFAULT_PARTS}; 'all': every part); the others are summed in one row")
    parser.add_argument("--model-order", action="store_true",
                        help="with --contributions: list the parts in the order they enter the residual stream "
                             "instead of the largest first")
    parser.add_argument("--candidate", action="append", default=[], metavar="ID",
                        help="also split this id's logit at every decision (repeatable)")
    parser.add_argument("--layer", metavar="L",
                        help="with --head: the whole attention pattern of block L (0-based), query x key")
    parser.add_argument("--head", metavar="H", help="with --layer: which head of that block (0-based)")


def insight_request_from_args(args: argparse.Namespace) -> InsightRequest:
    layer = generation_number(args.layer, "--layer", int)
    head = generation_number(args.head, "--head", int)
    if (layer is None) != (head is None):
        raise GenerationError("--layer and --head go together: give both to see one head's pattern")
    candidates = tuple(generation_number(value, "--candidate", int) for value in args.candidate)
    return InsightRequest(args.lens, args.contributions, candidates, None if layer is None else (layer, head),
                          _parts_count(args.parts), args.model_order)


def _parts_count(text: str) -> int | None:
    """``--parts``: a count of at least 1, or ``all`` (None)."""
    if text.strip().lower() == "all":
        return None
    count = generation_number(text, "--parts", int)
    if count < 1:
        raise GenerationError(f"--parts must be at least 1 or 'all', got {count}")
    return count


def _shown(piece: str) -> str:
    return json.dumps(piece, ensure_ascii=False)


def print_insights(decisions: Sequence[Any], insights: Sequence[Any], request: InsightRequest | None = None) -> None:
    """Per decision: the lens as a table by stream, contributions as signed parts (the largest
    first unless the request asks for the model's order), the pattern as a grid."""
    request = request or NO_INSIGHT
    console = output_console()
    for decision, insight in zip(decisions, insights):
        chosen = f"step {decision.step} · chosen {decision.chosen.id} {_shown(decision.chosen.piece.text)}"
        if insight.lens is not None:
            console.print(_lens_table(insight.lens, chosen))
        for parts in insight.contributions:
            console.print(_contributions_table(decision.step, parts, request.parts, request.model_order))
        if getattr(insight, "contributions_refused", ""):  # a model whose logit is not a sum of parts
            console.print(Text(insight.contributions_refused))
        if insight.pattern is not None:
            console.print(_pattern_table(insight.pattern, chosen))


def _lens_table(lens: Sequence[Any], chosen: str) -> Group:
    table = Table(title=f"lens · {chosen}")
    for name in ("stream", "chosen rank", "chosen p", "top ids (p)"):
        table.add_column(name, justify="left" if name in ("stream", "top ids (p)") else "right")
    for row in lens:
        top = ", ".join(f"{_shown(e.piece)} {e.probability:.3g}" for e in row.top)
        table.add_row(row.site, str(row.chosen_rank), f"{row.chosen_probability:.3g}", Text(top))
    return Group(table, Text(LENS_LEGEND))


def _contributions_table(step: int, parts: Any, count: int | None = None, model_order: bool = False) -> Group:
    """One id's logit as its signed parts, named as everywhere (embed, block N head H, block N
    attn bias, block N mlp, final norm bias): the ``count`` largest by |contribution| (None:
    all), listed largest first or in the order they enter the residual stream; a last row
    sums the parts left out, so the rows still add up to the logit."""
    every = parts.parts()
    shown, left = _chosen_parts(every, count, model_order)
    order = "in model order" if model_order else "largest |contribution| first"
    which = f"all {len(every)} parts" if len(shown) == len(every) else \
        f"the {len(shown)} largest of {len(every)} parts (--parts all: every one)"
    title = Text(f"contributions · step {step} · {parts.id} {_shown(parts.piece)}: {which}, {order}")
    table = Table()
    table.add_column("part")
    table.add_column("logit", justify="right")
    for part in shown:
        table.add_row(part.name, f"{part.value:+.6f}")
    if left:
        rest = sum(part.value for part in left)
        table.add_row(Text(f"the other {len(left)} parts", style="dim"), Text(f"{rest:+.6f}", style="dim"))
    return Group(title, table, Text(_contributions_caption(parts)))


def _chosen_parts(every: list[Any], count: int | None, model_order: bool) -> tuple[list[Any], list[Any]]:
    """The ``count`` largest parts by |contribution| (None: all), largest first or in model
    order, and the parts left out (in model order)."""
    largest = largest_parts(every)
    shown = largest if count is None else largest[:count]
    kept = {id(part) for part in shown}
    if model_order:
        shown = [part for part in every if id(part) in kept]
    return shown, [part for part in every if id(part) not in kept]


def _contributions_caption(parts: Any) -> str:
    caption = f"logit {parts.logit:.9f} · sum of parts {parts.total:.9f}"
    if parts.dtype != "float64" and parts.agrees:  # a float32 model's logit is rounded to float32
        caption += f", equal to {parts.dtype} rounding"
    return caption


def _pattern_table(pattern: Any, chosen: str) -> Table:
    table = Table(title=f"attention · block {pattern.layer} head {pattern.head} · {chosen} · query x key")
    table.add_column("query")
    for _, piece in pattern.tokens:
        table.add_column(Text(_shown(piece)), justify="right")
    for (_, piece), row in zip(pattern.tokens, pattern.weights.tolist()):
        table.add_row(Text(_shown(piece)), *(f"{value:.2f}" for value in row))
    return table
