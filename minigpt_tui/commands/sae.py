"""``sae train`` and ``sae decompose``: sparse-autoencoder features of one site, headless.

Numbers are read here (not by argparse), so every bad value is one line and exit status 1.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from rich.table import Table
from rich.text import Text

from minigpt_tui.commands.common import emit_json, output_console, runs_dir_from_args
from minigpt_tui.commands.generate import MODEL_HELP, _prompt, add_dtype_flag
from minigpt_tui.commands.task_progress import task_progress, terminal_console
from minigpt_tui.engine.core.errors import ConfigError
from minigpt_tui.engine.core.printable import escape_controls
from minigpt_tui.engine.session.inputs import parse_number
from minigpt_tui.engine.session.sae import (
    DEFAULT_CORPUS,
    SAE_KINDS,
    DecomposeRequest,
    SAEProgress,
    SAETrainRequest,
    decompose_prompt,
    train_sae,
)

# option, default, kind, help: the numbers of ``sae train``
TRAIN_NUMBERS = (
    ("--features", None, int, "dictionary width: features in the autoencoder (required)"),
    ("--steps", None, int, "Adam updates (required)"),
    ("--k", None, int, "features kept per activation (--kind topk only)"),
    ("--l1", "0.01", float, "L1 weight on features times decoder-row norms (relu; default 0.01)"),
    ("--l0", "0.001", float, "L0 weight: features active per activation (jumprelu; default 0.001)"),
    ("--bandwidth", "0.001", float, "width of the kernel that trains the thresholds (jumprelu; default 0.001)"),
    ("--batch-size", "256", int, "activations per update (default 256)"),
    ("--lr", "0.001", float, "Adam's learning rate (default 0.001)"),
    ("--seed", "0", int, "seed of the initialization and the batch order (default 0)"),
    ("--eval-every", "0", int, "evaluate every N updates (default 0: only after the last)"),
)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("sae", help="sparse-autoencoder features of one site: train, decompose")
    actions = parser.add_subparsers(dest="sae_action", metavar="ACTION", required=True)
    train = actions.add_parser("train", help="train a sparse autoencoder on one site's activations over a corpus")
    train.add_argument("--model", required=True, help=MODEL_HELP)
    add_dtype_flag(train)
    train.add_argument("--site", required=True, help="the site read, e.g. blocks.0.hook_resid_post")
    train.add_argument("--kind", default="relu", help=f"activation: {', '.join(SAE_KINDS)} (default relu, with --l1; "
                       "topk needs --k; jumprelu uses --l0)")
    for option, default, _kind, text in TRAIN_NUMBERS:
        train.add_argument(option, default=default, metavar="N", help=text)
    train.add_argument("--corpus", default=DEFAULT_CORPUS, help=f"corpus file, folder or bundled:NAME "
                       f"(default {DEFAULT_CORPUS})")
    train.add_argument("--out", required=True, help="new folder for cfg.json and sae_weights.safetensors (SAELens)")
    train.add_argument("--json", action="store_true", help="print the report as JSON")
    train.add_argument("--runs-dir", dest="runs_dir_sub", metavar="DIR", help="runs directory")
    train.set_defaults(handler=run_sae_train)
    decompose = actions.add_parser("decompose", help="the site's value at a prompt's last position as features "
                                   "+ decoder bias + error")
    decompose.add_argument("--model", required=True, help=MODEL_HELP)
    add_dtype_flag(decompose)
    decompose.add_argument("--sae", required=True, help="a sparse autoencoder folder in SAELens' layout")
    decompose.add_argument("--prompt", required=True, help="prompt text (encoded once, BOS prepended)")
    decompose.add_argument("--top", default="10", help="features listed, by |activation| (default 10)")
    decompose.add_argument("--json", action="store_true", help="print the decomposition as JSON")
    decompose.add_argument("--runs-dir", dest="runs_dir_sub", metavar="DIR", help="runs directory")
    decompose.set_defaults(handler=run_sae_decompose)


def _train_request(args: argparse.Namespace) -> SAETrainRequest:
    numbers: dict[str, Any] = {}
    for option, _default, kind, _text in TRAIN_NUMBERS:
        numbers[option] = parse_number(getattr(args, option[2:].replace("-", "_")), option, kind)
    for option in ("--features", "--steps"):
        if numbers[option] is None:
            raise ConfigError(f"{option} needs a value")
    return SAETrainRequest(
        args.model, args.site, numbers["--features"], args.kind, numbers["--steps"], Path(args.out).expanduser(),
        numbers["--k"], numbers["--l1"], numbers["--batch-size"], numbers["--lr"], numbers["--seed"],
        numbers["--eval-every"], args.corpus, runs_dir_from_args(args), args.dtype, numbers["--l0"],
        numbers["--bandwidth"])


def run_sae_train(args: argparse.Namespace) -> int:
    request = _train_request(args)
    console = terminal_console(not args.json)  # None when stderr is not a terminal, or with --json
    with task_progress("sae train", enabled=console is not None, console=console, unit="upd") as advance:
        def listen(progress: SAEProgress) -> None:
            if progress.evaluation is not None and not args.json:
                _say(console, evaluation_text(progress.evaluation))
            elif progress.total:
                advance(progress.done, progress.total)

        report = train_sae(request, listen)
    if args.json:
        emit_json(report.to_json())
        return 0
    config = report.config
    print(f"saved {escape_controls(str(report.out))}: {config['architecture']} autoencoder, "
          f"{config['d_sae']} features over {config['d_in']} at {escape_controls(request.site)}; "
          f"{report.activations['train']} training and {report.activations['held_out']} held-out activations")
    return 0


def _say(console: Any, line: str) -> None:
    """A line on stderr: above the progress bar on a terminal, plain when piped."""
    if console is None:
        print(line, file=sys.stderr, flush=True)
    else:
        console.print(Text(line))


def evaluation_text(figures: dict[str, Any]) -> str:
    """One evaluation as a line: the update, the loss and the four figures."""
    return (f"update {figures['step']}: loss {figures['train_loss']:.6g}, mse {figures['mse']:.6g}, "
            f"explained variance {figures['explained_variance']:.4f}, L0 {figures['l0']:.2f}, "
            f"dead {figures['dead_fraction']:.1%}")


def run_sae_decompose(args: argparse.Namespace) -> int:
    top = parse_number(args.top, "--top", int)
    request = DecomposeRequest(args.model, Path(args.sae).expanduser(), _prompt(args.prompt),
                               10 if top is None else top, runs_dir_from_args(args), args.dtype)
    data = decompose_prompt(request)
    if args.json:
        emit_json(data)
    else:
        print_decomposition(data)
    return 0


def _shown(piece: str) -> str:
    return f'"{escape_controls(piece)}"'


def _tokens(entries: list[dict[str, Any]]) -> str:
    return " ".join(_shown(e["piece"]) for e in entries)


def print_decomposition(data: dict[str, Any]) -> None:
    console = output_console()
    exact = data["exact_logit"]
    console.print(Text(f"{data['site']} at the last position, chosen token {_shown(data['chosen']['piece'])} "
                       f"(id {data['chosen']['id']}); {data['active_features']} features active"))
    table = Table(title="features by |activation|")
    columns = ("feature", "activation", "logit share" if exact else "lens: chosen", "promotes", "suppresses")
    for name in columns:
        table.add_column(name, justify="left" if name in ("promotes", "suppresses") else "right")
    for f in data["features"]:
        effect = f["logit"] if exact else f["lens_chosen"]
        table.add_row(str(f["feature"]), f"{f['activation']:.6g}", "–" if effect is None else f"{effect:.6g}",
                      Text(_tokens(f["promotes"])), Text(_tokens(f["suppresses"])))
    console.print(table)
    console.print(Text(f"residual = features + decoder bias + error: largest gap {data['identity_gap']:.3g}; "
                       f"|residual| {data['residual_norm']:.6g}, |error| {data['error_norm']:.6g}"))
    if exact:
        console.print(Text(f"logit = Σ features {data['features_logit']:.10g} "
                           f"+ bias {data['bias_logit']:.10g} + error {data['error_logit']:.10g} = "
                           f"{data['total']:.10g} (the model's own: {data['logit']:.10g})"))
    else:
        console.print(Text("the chosen logit is not linear in this site: 'lens: chosen' is each decoder row "
                           "through the final norm's weight and the head, not a share of the logit"))
