"""``score`` (per-token loss over a text) and ``patch`` (activation patching)."""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from minigpt_tui.commands.common import emit_json, output_console
from minigpt_tui.commands.generate import (
    MODEL_HELP,
    _prompt,
    add_dtype_flag,
    load_model,
)
from minigpt_tui.commands.task_progress import stage_progress, task_progress
from minigpt_tui.engine.core.errors import GenerationError
from minigpt_tui.engine.core.printable import escape_controls
from minigpt_tui.engine.session.head_role_view import score_model_heads
from minigpt_tui.engine.session.view_names import HEAD_LEGEND, HEAD_ROLES, SITE_LEGEND, patch_site_name
from minigpt_tui.engine.session.patching import (
    agreement_of,
    attribute_prompts_of,
    cell_name,
    patch_json,
    patch_prompts_of,
)
from minigpt_tui.engine.session.text_scores import (
    ComparedText,
    compare_model_text,
    read_text_file,
    score_model_text,
)

DEFAULT_TOP_HEADS = 5
# What each role's score measures, under its table's title.
ROLE_MEANINGS = {
    "induction": "from a repeated token to the token after its earlier copy (what an induction head does)",
    "previous_token": "from each token to the one before it",
    "duplicate_token": "from a repeated token to its earlier copy",
    "first_token": "from every token to the first (an attention sink: where a head parks unused weight)",
}


def register(subparsers: argparse._SubParsersAction) -> None:
    score = subparsers.add_parser("score", help="every token's loss, probability, rank and alternatives over a text")
    score.add_argument("--model", required=True, help=MODEL_HELP)
    score.add_argument("--text", required=True, metavar="FILE", help="a UTF-8 text file to score")
    score.add_argument("--compare", metavar="MODEL", help="a second model (same tokenizer): which tokens it "
                                                          "predicts better or worse")
    score.add_argument("--stride", type=int, help="ids a window advances by, for a text longer than the context "
                                                  "(default: half the context)")
    score.add_argument("--json", action="store_true", help="print the scores as JSON")
    score.add_argument("--runs-dir", dest="runs_dir_sub", metavar="DIR", help="runs directory")
    add_dtype_flag(score)
    score.set_defaults(handler=run_score)

    heads = subparsers.add_parser("heads", help="score every head as induction, previous-token, duplicate-token "
                                                "and first-token on repeated random sequences")
    heads.add_argument("--model", required=True, help=MODEL_HELP)
    heads.add_argument("--top", type=int, default=DEFAULT_TOP_HEADS, metavar="N",
                       help=f"list the N heads of highest score for each role (default {DEFAULT_TOP_HEADS})")
    heads.add_argument("--all", action="store_true", help="list every head for each role, highest score first")
    heads.add_argument("--json", action="store_true", help="print every head's scores as JSON, in model order")
    heads.add_argument("--runs-dir", dest="runs_dir_sub", metavar="DIR", help="runs directory")
    add_dtype_flag(heads)
    heads.set_defaults(handler=run_heads)

    patch = subparsers.add_parser("patch", help="activation patching: which site restores the clean answer")
    patch.add_argument("--model", required=True, help=MODEL_HELP)
    patch.add_argument("--clean", required=True, metavar="TEXT", help="the prompt whose answer is A")
    patch.add_argument("--corrupt", required=True, metavar="TEXT", help="a prompt of the same token length")
    patch.add_argument("--answer", required=True, metavar="A", help="one token: the clean prompt's answer")
    patch.add_argument("--against", required=True, metavar="B", help="one token: the answer it is measured against")
    patch.add_argument("--sites", default="resid,attn,mlp", help="comma-separated: resid, attn, mlp, head "
                                                                 "(default: resid,attn,mlp)")
    patch.add_argument("--json", action="store_true", help="print the effects as JSON")
    _add_attribution_flags(patch)
    patch.add_argument("--runs-dir", dest="runs_dir_sub", metavar="DIR", help="runs directory")
    add_dtype_flag(patch)
    patch.set_defaults(handler=run_patch)


def _add_attribution_flags(patch: argparse.ArgumentParser) -> None:
    patch.add_argument("--attribution", action="store_true",
                       help="also estimate every cell from gradients (attribution patching: one clean forward, "
                            "one corrupt forward, one backward) and print how it agrees with the exact sweep; "
                            "JSON adds 'attribution' {method, steps, clean_difference, corrupt_difference, "
                            "estimates: [{site, layer, head, position, name, change, difference, restored}]} and "
                            "'agreement' {cells, spearman, k, top_exact, top_attributed, shared}")
    patch.add_argument("--attribution-only", action="store_true",
                       help="the attribution grid alone, without the exact sweep (JSON: no 'effects', "
                            "no 'agreement')")
    patch.add_argument("--ig-steps", type=int, metavar="N",
                       help="attribution by integrated gradients: the gradient averaged over N points from the "
                            "corrupt to the clean activations at each site (implies --attribution)")


def run_score(args: argparse.Namespace) -> int:
    text = read_text_file(args.text)
    first = _opened(args.model, args)
    with task_progress("scoring", enabled=not args.json, unit="window") as advance:
        scored = score_model_text(first, text, stride=args.stride, progress=advance)
    data: dict[str, Any] = {"model": str(first.path), **scored.to_json()}
    compared = None
    if args.compare:
        second = _opened(args.compare, args)
        with task_progress("scoring the second model", enabled=not args.json, unit="window") as advance:
            compared = compare_model_text(first, second, scored, text, progress=advance)
        data["compare"] = compared.to_json(str(second.path))
    if args.json:
        emit_json(data)
        return 0
    _print_scores(scored, compared)
    return 0


def _opened(spec: str, args: argparse.Namespace) -> Any:
    """The model ``spec`` names, a transient line on a terminal while it opens (a large file
    from elsewhere takes a while)."""
    with stage_progress(f"opening {spec}", enabled=not args.json):
        return load_model(spec, args)


def _print_scores(scored: Any, compared: ComparedText | None) -> None:
    console = output_console()
    loss = scored.mean_loss
    console.print(Text(f"{len(scored.tokens)} tokens scored in {scored.windows} window(s) of {scored.window} ids "
                       f"(stride {scored.stride}): mean loss {loss:.4f} nats, perplexity {math.exp(loss):.3g}"))
    table = Table(title="the most surprising tokens", title_justify="left")
    for column in ("position", "piece", "loss", "p", "rank", "the model expected"):
        table.add_column(column)
    for token in sorted(scored.tokens, key=lambda t: -t.loss)[:12]:
        expected = "  ".join(f"'{escape_controls(p)}' {q:.2f}" for _, p, q in token.top[:3])
        table.add_row(str(token.position), f"'{escape_controls(token.piece)}'", f"{token.loss:.3f}",
                      f"{token.probability:.3g}", str(token.rank), expected)
    console.print(table)
    if compared is not None and compared.tokens:
        better, worse = compared.most_changed()
        for title, rows in (("predicted better by the second model", better), ("predicted worse", worse)):
            table = Table(title=title, title_justify="left")
            for column in ("position", "piece", "loss A", "loss B", "change"):
                table.add_column(column)
            for t in rows:
                table.add_row(str(t.position), f"'{escape_controls(t.piece)}'", f"{t.loss_a:.3f}", f"{t.loss_b:.3f}",
                              f"{t.change:+.3f}")
            console.print(table)


def run_patch(args: argparse.Namespace) -> int:
    sites = [s.strip() for s in args.sites.split(",") if s.strip()]
    if args.ig_steps is not None and args.ig_steps < 1:
        raise GenerationError(f"--ig-steps must be at least 1, got {args.ig_steps}")
    prompts = (_prompt(args.clean), _prompt(args.corrupt), _prompt(args.answer), _prompt(args.against))
    portable = _opened(args.model, args)
    attribution, result = _patching_runs(args, portable, prompts, sites)
    if args.json:
        emit_json(patch_json(result, attribution))
        return 0
    _print_patching(result or attribution, portable.tokenizer, result is not None)
    if attribution is not None:
        _print_attribution(attribution, result, portable.tokenizer)
    return 0


def _patching_runs(args: argparse.Namespace, portable: Any, prompts: tuple[str, str, str, str],
                   sites: list[str]) -> tuple[Any, Any]:
    """The attribution grid (None unless asked for: it comes first, being quick) and the
    exact sweep (None with --attribution-only)."""
    attribution = result = None
    if args.attribution or args.attribution_only or args.ig_steps is not None:
        with task_progress("attribution", enabled=not args.json, unit="pass") as advance:
            attribution = attribute_prompts_of(portable, *prompts, sites, args.ig_steps, progress=advance)
    if not args.attribution_only:
        with task_progress("patching", enabled=not args.json, unit="run") as advance:
            result = patch_prompts_of(portable, *prompts, sites, progress=advance)
    return attribution, result


def _print_patching(result: Any, tokenizer: Any, effects: bool = True) -> None:
    """The metric at both ends, and the sweep's grid when ``effects``."""
    console = output_console()
    answer, against = (escape_controls(piece) for piece in (result.answer[1], result.against[1]))
    console.print(Text(f"logit difference '{answer}' − '{against}': clean "
                       f"{result.clean_difference:.4f}, corrupt {result.corrupt_difference:.4f}"))
    if effects:
        _print_grid(result.effects, tokenizer, result.corrupt_ids, "share of the clean difference restored")


def _print_grid(cells: Sequence[Any], tokenizer: Any, ids: Sequence[int], what: str) -> None:
    console = output_console()
    pieces = [escape_controls(tokenizer.piece_text(i)) for i in ids]
    for site in dict.fromkeys(e.site for e in cells):
        console.print(_site_table(site, [e for e in cells if e.site == site], pieces, what))


def _print_attribution(attribution: Any, result: Any, tokenizer: Any) -> None:
    """The attribution grid, and its agreement with the sweep when the sweep ran."""
    method = ("the gradient at the corrupt run" if attribution.steps is None
              else f"integrated gradients over {attribution.steps} steps")
    _print_grid(attribution.estimates, tokenizer, attribution.corrupt_ids,
                f"attribution estimate ({method}) of the share restored")
    if result is None:
        return
    agreement = agreement_of(result, attribution)
    rho = "undefined (one side is constant)" if agreement.spearman is None else f"{agreement.spearman:.3f}"
    output_console().print(Text(
        f"agreement over {agreement.cells} cells: Spearman rank correlation {rho}; top {agreement.k} by |change|, "
        f"exact: {', '.join(cell_name(k) for k in agreement.top_exact)}; attributed: "
        f"{', '.join(cell_name(k) for k in agreement.top_attributed)}; {agreement.shared} shared"))


def _site_table(site: str, effects: list[Any], pieces: list[str], what: str) -> Group:
    """One patched site: a row per block (per head, at the heads), a column per position,
    between its title and the legend of its row names."""
    table = Table()
    table.add_column("site")
    for position, piece in enumerate(pieces):
        table.add_column(f"{position} '{piece}'"[:12], justify="right")
    for layer, head in dict.fromkeys((e.layer, e.head) for e in effects):
        table.add_row(*_effect_row(effects, layer, head))
    return Group(Text(f"{site}: {what}, site × position"), table,
                 Text(SITE_LEGEND if site != "head" else HEAD_LEGEND, style="dim"))


def _effect_row(effects: list[Any], layer: int, head: int | None) -> list[str]:
    """The label of one layer (or head) and the share it restores at each position (– where unknown)."""
    row = [e for e in effects if (e.layer, e.head) == (layer, head)]
    cells = ("–" if e.restored is None else f"{e.restored:.2f}" for e in row)
    return [patch_site_name(row[0].site, layer, head), *cells]


def run_heads(args: argparse.Namespace) -> int:
    if args.top < 1:
        raise GenerationError(f"--top must be at least 1, got {args.top}")
    portable = _opened(args.model, args)
    layers = portable.model.config.layers
    with stage_progress(f"scoring the heads of {layers} layers on repeated random sequences", enabled=not args.json):
        roles = score_model_heads(portable)
    if args.json:
        emit_json({"model": str(portable.path), "heads": [{"name": r.name, **r.to_json()} for r in roles]})
        return 0
    print_head_roles(roles, None if args.all else args.top)
    return 0


def print_head_roles(roles: Sequence[Any], top: int | None) -> None:
    """A table per role: its ``top`` heads (None: all) by score, highest first (equal scores
    keep the model's order)."""
    console = output_console()
    console.print(Text(f"head roles: mean attention weight on repeated random sequences, near 1 where a head "
                       f"does it at nearly every position\n{HEAD_LEGEND}"))
    for role in HEAD_ROLES:
        ranked = sorted(roles, key=lambda r: -getattr(r, role))
        shown = ranked if top is None else ranked[:top]
        console.print(Text(f"\n{role.replace('_', '-')}: {ROLE_MEANINGS[role]}", style="bold"))
        table = Table()
        table.add_column("head")
        table.add_column("score", justify="right")
        for r in shown:
            table.add_row(r.name, f"{getattr(r, role):.3f}")
        console.print(table)
        if len(shown) < len(ranked):
            console.print(Text(f"{len(ranked) - len(shown)} more heads: --all lists them", style="dim"))
