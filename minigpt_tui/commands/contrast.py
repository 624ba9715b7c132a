"""``contrast``: two models on one path, position by position (KL, top-1 agreement, ranks)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from rich.table import Table
from rich.text import Text

from minigpt_tui.commands.common import emit_json, output_console
from minigpt_tui.commands.generate import (
    MODEL_HELP,
    _add_rule_arguments,
    _check_output,
    _prompt,
    _write_json,
    add_dtype_flag,
    load_model,
    rules_from_args,
)
from minigpt_tui.engine.core.errors import GenerationError
from minigpt_tui.engine.core.printable import escape_controls
from minigpt_tui.engine.session.generation_runs import contrast_pair


def register(subparsers: argparse._SubParsersAction) -> None:
    contrast = subparsers.add_parser(
        "contrast", help="two models on the same path: KL(A||B), top-1 agreement, ranks per position")
    contrast.add_argument("--model", action="append", required=True,
                          help=MODEL_HELP + " (give exactly two: A, then B)")
    add_dtype_flag(contrast)
    contrast.add_argument("--prompt", required=True, help="prompt text (encoded once, BOS prepended)")
    _add_rule_arguments(contrast, several_temperatures=False)
    contrast.add_argument("--continuation", metavar="TEXT",
                          help="follow this text after the prompt instead of A's own choices under the rule")
    contrast.add_argument("--json", action="store_true", help="print the contrast as JSON")
    contrast.add_argument("--out", metavar="FILE", help="also write the contrast as JSON to FILE (a new file unless --force)")
    contrast.add_argument("--force", action="store_true", help="replace an existing --out file")
    contrast.add_argument("--runs-dir", dest="runs_dir_sub", metavar="DIR", help="runs directory")
    contrast.set_defaults(handler=run_contrast)


def _rule_given(args: argparse.Namespace) -> bool:
    return bool(args.greedy or args.temperature or args.top_k or args.top_p or args.forbid
                or args.max_new_tokens != "24" or args.seed != "31415")


def run_contrast(args: argparse.Namespace) -> int:
    if len(args.model) != 2:
        raise GenerationError(f"contrast takes exactly two --model options (A and B), got {len(args.model)}")
    if args.continuation is not None and _rule_given(args):
        raise GenerationError("--continuation fixes the path: leave out the rule options")
    rule = None if args.continuation is not None else rules_from_args(args)[0]
    prompt = _prompt(args.prompt)
    continuation = None if args.continuation is None else _prompt(args.continuation)
    _check_output(args.out, args.force)
    first, second = (load_model(spec, args) for spec in args.model)
    result = contrast_pair(first, second, prompt, rule=rule, continuation=continuation)
    data = result.to_json()
    if args.out:
        _write_json(args.out, data, args.force)
    if args.json:
        emit_json(data)
    else:
        print_contrast(result, args.model)
    return 0


def print_contrast(result: Any, specs: list[str]) -> None:
    def shown(piece: str) -> str:
        return json.dumps(piece, ensure_ascii=False)

    console = output_console()
    console.print(Text(f"A {escape_controls(specs[0])}\nB {escape_controls(specs[1])}"))
    source = "A's choices · " + result.rule.label if result.path_source == "a" else "the given continuation"
    table = Table(title=f"contrast · path: {source}")
    # Numbers are never wrapped or cut: at 80 columns the piece column gives way (it wraps),
    # and four significant digits keep the nine columns within the width.
    for name in ("step", "id", "piece", "KL(A‖B)", "top-1", "rank A", "rank B", "p A", "p B"):
        if name == "piece":
            table.add_column(name, justify="left", min_width=6, overflow="fold")
        else:
            table.add_column(name, justify="right", no_wrap=True)
    most = result.most_changed
    for p in result.positions:
        agree = "same" if p.top1_agree else f"{p.top1_a}≠{p.top1_b}"
        table.add_row(str(p.step), str(p.id), Text(shown(p.piece)), f"{p.kl:.4g}", agree, str(p.rank_a),
                      str(p.rank_b), f"{p.probability_a:.3g}", f"{p.probability_b:.3g}",
                      style="bold" if p.step == most else "")
    console.print(table)
    console.print(Text(f"top-1 agreement {result.agreement:.1%} · mean KL {result.mean_kl:.6g} nats · "
                       f"most changed: step {most}"))
