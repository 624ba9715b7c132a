"""``resume``, ``inspect`` and ``verify``: continue a saved run exactly, show what a
checkpoint holds, and run the exact-resume experiment end to end in fresh processes."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from rich.table import Table
from rich.text import Text

from minigpt_tui.commands.common import (
    emit_json,
    output_console,
    runs_dir_from_args,
    setting_help,
)
from minigpt_tui.commands.inspect_output import print_inspection
from minigpt_tui.commands.task_progress import task_progress
from minigpt_tui.commands.launch import (
    add_process_arguments,
    joined_world,
    launch,
    launch_requested,
    launched_process,
)
from minigpt_tui.commands.train import (
    add_probe_arguments,
    add_tensorboard_argument,
    drive,
    print_summary,
    probe_options,
    tensorboard_folder,
)
from minigpt_tui.engine.core.config import setting_of
from minigpt_tui.engine.core.printable import escape_controls
from minigpt_tui.engine.session.checkpoint_report import InspectRequest, checkpoint_report
from minigpt_tui.engine.session.plans import ResumeRun, saved_run_config
from minigpt_tui.engine.session.runs import refuse_if_in_use, resolve_checkpoint
from minigpt_tui.engine.session.verification import EXPERIMENTS, verify_exact_resume


def register(subparsers: argparse._SubParsersAction) -> None:
    resume = subparsers.add_parser("resume", help="continue a saved run bit for bit")
    resume.add_argument("--checkpoint", required=True, help="checkpoint folder, RUN, RUN:latest, RUN:best or RUN:STEP")
    resume.add_argument("--until", type=int,
                        help="stop after this update: after the checkpoint's step, within the saved schedule")
    resume.add_argument("--json", action="store_true", help="print one JSON object at the end")
    resume.add_argument("--runs-dir", dest="runs_dir_sub", metavar="DIR", help="runs directory")
    resume.add_argument("--corpus", help="the corpus moved: read it from here (its identity must match)")
    resume.add_argument("--save-every", type=int,
                        help=f"save every N updates, {setting_of('train.save_every').span} (default: the run's setting)")
    resume.add_argument("--keep-last", type=int, help=setting_help("train.keep_last"))
    add_probe_arguments(resume)
    add_tensorboard_argument(resume)
    resume.add_argument(
        "--allow-environment-change",
        action="store_true",
        help="resume although Python/torch/platform changed; bitwise continuation is then not promised",
    )
    resume.add_argument(
        "--fork",
        action="store_true",
        help="continue in a new run folder (needed when the checkpoint sits in another run's folder)",
    )
    resume.add_argument("--device", choices=["auto", "cpu", "cuda", "mps"],
                        help="train on this device (another device kind needs --allow-environment-change)")
    resume.add_argument("--allow-world-size-change", action="store_true",
                        help="resume with another number of processes; bitwise continuation is then not promised")
    add_process_arguments(resume)
    resume.set_defaults(handler=run_resume)

    inspect = subparsers.add_parser("inspect", help="show what a checkpoint or any safetensors file holds")
    inspect.add_argument("path", help="safetensors file, checkpoint folder, run folder or RUN:latest|best|STEP")
    inspect.add_argument("--json", action="store_true", help="print one JSON object")
    inspect.add_argument("--runs-dir", dest="runs_dir_sub", metavar="DIR", help="runs directory")
    inspect.add_argument("--verify", action="store_true", help="also read the data: hashes, identities, digests")
    inspect.add_argument("--tensor", help="statistics of one tensor (reads that tensor alone)")
    inspect.add_argument("--bins", type=int, default=20, help="histogram bins for --tensor, 1 to 10,000 (default 20)")
    inspect.add_argument("--compare", metavar="OTHER", help="compare with another checkpoint")
    inspect.set_defaults(handler=run_inspect)

    verify = subparsers.add_parser("verify", help="run the exact-resume experiment in fresh processes")
    verify.add_argument("--preset", choices=sorted(EXPERIMENTS), default="tiny",
                        help="experiment: tiny, mini, stream (the mini model on a token stream), or finetune (a "
                             "random GPT-NeoX-style model with its own tokenizer.json, made here, fine-tuned)")
    verify.add_argument("--json", action="store_true", help="print one JSON object")
    verify.add_argument("--keep", metavar="DIR", help="keep the experiment's runs in DIR")
    verify.add_argument("--nproc", type=int, help="run every step of the experiment in N processes")
    verify.set_defaults(handler=run_verify)


def _resolve(spec: str, runs_dir: Path) -> Path:
    return resolve_checkpoint(spec, runs_dir)


# -- resume ---------------------------------------------------------------------------------------
def run_resume(args: argparse.Namespace) -> int:
    runs_dir = runs_dir_from_args(args)
    policy = {k: v for k, v in (("save_every", args.save_every), ("keep_last", args.keep_last)) if v is not None}
    checkpoint = _resolve(args.checkpoint, runs_dir)
    if not args.fork and not launched_process():  # rank 0 of a launch looks when it prepares
        refuse_if_in_use(checkpoint)  # before reading it: the run's trainer may prune it at any moment
    tensorboard = tensorboard_folder(args)
    device = args.device or saved_run_config(checkpoint).train.device
    if launch_requested(args):
        return launch(args, device)
    with joined_world(device) as parallel:
        plan = ResumeRun(checkpoint, runs_dir, until=args.until,
                         allow_environment_change=args.allow_environment_change, corpus=args.corpus, policy=policy,
                         fork=args.fork, parallel=parallel, allow_world_size_change=args.allow_world_size_change,
                         device=args.device, **probe_options(args))
        result = drive(plan, show_progress=not args.json and not parallel.distributed, tensorboard=tensorboard)
    if parallel.world.is_writer:
        _print_resumed(result, args.json)
    return 0


def _print_resumed(result: dict, as_json: bool) -> None:
    if as_json:
        emit_json(result)
        return
    print_summary(result)
    if not result["continuation"]["bitwise_promised"]:
        for note in result["continuation"]["notes"]:
            print(f"note: bitwise continuation not promised: {note}", file=sys.stderr)


# -- inspect --------------------------------------------------------------------------------------
def run_inspect(args: argparse.Namespace) -> int:
    request = InspectRequest(verify=args.verify, tensor=args.tensor, bins=args.bins, compare=args.compare)
    result = checkpoint_report(args.path, runs_dir_from_args(args), request)
    if args.json:
        emit_json(result)
    else:
        print_inspection(result)
        if result.get("probes"):
            _print_probes(result["probes"])
    return 0


def _print_probes(record: dict[str, Any]) -> None:
    table = Table(title=escape_controls(f"probes at step {record['step']} ({record.get('source')})"))
    for column in ("probe", "match", "expected id", "p(expected)", "rank"):
        table.add_column(column, justify="left" if column == "probe" else "right")
    for score in record.get("probes", []):
        table.add_row(Text(escape_controls(score.get("name"))), "✓" if score.get("match") else "✗", str(score.get("expected_id")),
                      f"{score.get('expected_probability', 0.0):.4g}", str(score.get("expected_rank")))
    output_console().print(table)


# -- verify ---------------------------------------------------------------------------------------
def run_verify(args: argparse.Namespace) -> int:
    with task_progress("verify: training runs", enabled=not args.json, unit="run") as advance:
        result = verify_exact_resume(args.preset, args.keep, args.nproc, advance)
    if args.json:
        emit_json(result)
    else:
        print_verify(result)
    return 0 if result["all_equal"] else 1


def print_verify(result: dict[str, Any]) -> None:
    """The experiment in words: one line per comparison, then the warm-start contrast."""
    cut, end = result["saved_after"], result["resumed_until"]
    where = f" ({result['processes']} processes each)" if result["processes"] > 1 else ""
    print(f"exact resume, preset {result['preset']}{where}: save after {cut}, exit, resume to {end} in a new process, "
          f"compare with 0 -> {end} uninterrupted")
    for c in result["comparisons"]:
        print(f"  {'true ' if c['equal'] else 'FALSE'}  {c['name']}")
    warm = result["warm_start"]
    # The learning rates as numbers are written, not as float reprs (0.0003250000000000001).
    print(f"  warm start: first update lr {warm['first_update']['lr']:.6g} batch {warm['first_update']['batch']}; "
          f"resumed: lr {warm['resumed_first_update']['lr']:.6g} batch {warm['resumed_first_update']['batch']}")
    print(f"  {warm['note']}")
