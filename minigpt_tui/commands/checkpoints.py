"""``resume``, ``inspect`` and ``verify``: continue a saved run exactly, show what a
checkpoint holds, and run the exact-resume experiment end to end in fresh processes."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from minigpt_tui.commands.common import emit_json, runs_dir_from_args
from minigpt_tui.commands.launch import add_process_arguments, joined_world, launch, launch_requested
from minigpt_tui.engine.printable import escape_controls

# The three-process experiment per preset: save after CUT updates, resume to END.
EXPERIMENTS = {"tiny": (2, 4), "mini": (300, 600)}


def register(subparsers: argparse._SubParsersAction) -> None:
    resume = subparsers.add_parser("resume", help="continue a saved run bit for bit")
    resume.add_argument("--checkpoint", required=True, help="checkpoint folder, RUN, RUN:latest, RUN:best or RUN:STEP")
    resume.add_argument("--until", type=int, help="stop after this update (within the saved schedule)")
    resume.add_argument("--json", action="store_true", help="print one JSON object at the end")
    resume.add_argument("--runs-dir", dest="runs_dir_sub", help="runs directory")
    resume.add_argument("--corpus", help="the corpus moved: read it from here (its identity must match)")
    resume.add_argument("--save-every", type=int, help="save every N updates (default: the run's setting)")
    resume.add_argument("--keep-last", type=int, help="keep the last K checkpoints plus the best")
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
    inspect.add_argument("--runs-dir", dest="runs_dir_sub", help="runs directory")
    inspect.add_argument("--verify", action="store_true", help="also read the data: hashes, identities, digests")
    inspect.add_argument("--tensor", help="statistics of one tensor (reads that tensor alone)")
    inspect.add_argument("--bins", type=int, default=20, help="histogram bins for --tensor, 1 to 10,000 (default 20)")
    inspect.add_argument("--compare", metavar="OTHER", help="compare with another checkpoint")
    inspect.set_defaults(handler=run_inspect)

    verify = subparsers.add_parser("verify", help="run the exact-resume experiment in fresh processes")
    verify.add_argument("--preset", choices=sorted(EXPERIMENTS), default="tiny")
    verify.add_argument("--json", action="store_true", help="print one JSON object")
    verify.add_argument("--keep", metavar="DIR", help="keep the experiment's runs in DIR")
    verify.add_argument("--nproc", type=int, help="run every step of the experiment in N processes")
    verify.set_defaults(handler=run_verify)


def _resolve(spec: str, runs_dir: Path) -> Path:
    from minigpt_tui.engine.runs import resolve_checkpoint

    return resolve_checkpoint(spec, runs_dir)


# -- resume ---------------------------------------------------------------------------------------
def run_resume(args: argparse.Namespace) -> int:
    from minigpt_tui.commands.train import drive, print_summary
    from minigpt_tui.engine.session.plans import ResumeRun, saved_run_config

    runs_dir = runs_dir_from_args(args)
    policy = {k: v for k, v in (("save_every", args.save_every), ("keep_last", args.keep_last)) if v is not None}
    checkpoint = _resolve(args.checkpoint, runs_dir)
    device = args.device or saved_run_config(checkpoint).train.device
    if launch_requested(args):
        return launch(args, device)
    with joined_world(device) as parallel:
        plan = ResumeRun(checkpoint, runs_dir, until=args.until,
                         allow_environment_change=args.allow_environment_change, corpus=args.corpus, policy=policy,
                         fork=args.fork, parallel=parallel, allow_world_size_change=args.allow_world_size_change,
                         device=args.device)
        result = drive(plan, show_progress=not args.json and not parallel.distributed)
    if not parallel.world.is_writer:
        return 0
    if args.json:
        emit_json(result)
    else:
        print_summary(result)
        if not result["continuation"]["bitwise_promised"]:
            for note in result["continuation"]["notes"]:
                print(f"note: bitwise continuation not promised: {note}", file=sys.stderr)
    return 0


# -- inspect --------------------------------------------------------------------------------------
def run_inspect(args: argparse.Namespace) -> int:
    from minigpt_tui.engine.checkpoint.inspect import compare_checkpoints, inspect_path, tensor_statistics

    runs_dir = runs_dir_from_args(args)
    target = _inspect_target(args.path, runs_dir)
    inspection = inspect_path(target, verify_hashes=args.verify)
    result = inspection.to_json()
    if args.verify:  # the inspected path: a run folder resolves to its latest checkpoint
        result["verified"] = _verify_fully(inspection.path, inspection.kind)
    if args.tensor:
        result["statistics"] = tensor_statistics(inspection.path, args.tensor, bins=args.bins)
    if args.compare:
        result["comparison"] = compare_checkpoints(inspection.path, _inspect_target(args.compare, runs_dir))
    if args.json:
        emit_json(result)
    else:
        _print_inspection(result)
    return 0


def _inspect_target(spec: str, runs_dir: Path) -> Path:
    from minigpt_tui.engine.files import path_exists

    path = Path(spec).expanduser()
    if len(spec) <= 4096 and path_exists(path):
        return path
    return _resolve(spec, runs_dir)


def _verify_fully(path: Path, kind: str) -> dict[str, Any]:
    """Read everything and check it: manifest hashes, identities, content digests."""
    from minigpt_tui.engine.checkpoint.directory import load_checkpoint
    from minigpt_tui.engine.checkpoint.portable import load_portable_model
    from minigpt_tui.engine.checkpoint.safetensors_io import load_file
    from minigpt_tui.engine.checkpoint.training_state import read_training_state

    if kind == "checkpoint-dir":
        loaded = load_checkpoint(path, recompute_digests=True)
        return {"ok": True, "model_identity": loaded.model_file.identity, "step": loaded.state.step}
    if kind == "portable-model":
        model = load_portable_model(path)
        return {"ok": True, "model_identity": model.identity, "tied_alias": model.tied_alias}
    if kind == "training-state":
        state = read_training_state(path)
        return {"ok": True, "step": state.step}
    loaded = load_file(path)
    return {"ok": True, "sha256": loaded.sha256}


def _short(value: Any, width: int = 72) -> Any:
    text = escape_controls(value if isinstance(value, str) else json.dumps(value))
    return _text(text if len(text) <= width else text[: width - 1] + "…")


def _text(value: Any) -> Any:
    """A cell or line of untrusted text (rich Text): control characters escaped, no markup read."""
    from rich.text import Text

    return Text(escape_controls(value))


def _print_inspection(result: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console(highlight=False)
    console.print(Text.assemble((escape_controls(result["path"]), "bold"), f"  ({result['kind']})"))
    files = Table(title="files")
    for column in ("file", "kind", "bytes", "header bytes", "tensors"):
        files.add_column(column)
    for f in result["files"]:
        files.add_row(_text(f["name"]), f["kind"], str(f["size"]), str(f["header_bytes"]), str(f["tensors"]))
    console.print(files)
    # One table per file; the name folds rather than being cut, and below 110 columns the
    # group and offset columns give their width to it.
    wide = console.width >= 110
    for file_name in dict.fromkeys(e["file"] for e in result["entries"]):
        entries = Table(title=_text(f"{file_name}: tensor entries (header only)"))
        entries.add_column("name", overflow="fold", ratio=1)
        columns = ("group", "dtype", "shape", "elements", "bytes", "offsets") if wide else (
            "dtype", "shape", "elements", "bytes")
        for column in columns:
            entries.add_column(column, no_wrap=True)
        for e in result["entries"]:
            if e["file"] != file_name:
                continue
            values = {"group": e["group"], "dtype": e["dtype"], "shape": str(e["shape"]),
                      "elements": str(e["elements"]), "bytes": str(e["bytes"]),
                      "offsets": f"{e['begin']}..{e['end']}"}
            entries.add_row(_text(e["name"]), *(_text(values[c]) for c in columns))
        console.print(entries)
    if result["aliases"]:
        aliases = Table(title="alias records")
        for column in ("name", "target", "transform", "use"):
            aliases.add_column(column)
        for a in result["aliases"]:
            aliases.add_row(*(_text(a.get(key, "")) for key in ("name", "target", "transform", "use")))
        console.print(aliases)
    for group, records in result["state"].items():
        if not records:
            continue
        table = Table(title=_text(f"state: {group}"))
        table.add_column("record")
        table.add_column("value")
        for key, value in records.items():
            table.add_row(_text(key), _short(value))
        console.print(table)
    if not result["state"] and result["metadata"]:
        table = Table(title="metadata")
        table.add_column("key")
        table.add_column("value")
        for key, value in result["metadata"].items():
            table.add_row(_text(key), _short(value))
        console.print(table)
    integrity = result.get("integrity")
    if integrity is not None and integrity["scope"] == "index":  # a transformers folder: index against shards
        verdict = "ok" if integrity.get("ok") else "PROBLEM: " + "; ".join(integrity.get("problems") or [])
        console.print(_text(f"integrity ({integrity.get('checked')}): {verdict}"))
    elif integrity is not None:
        status = "complete" if integrity["complete"] else "INCOMPLETE"
        checked = "hashes checked" if integrity.get("hashes_checked") else "sizes checked (add --verify for hashes)"
        console.print(_text(f"integrity: {status}, {'ok' if integrity['ok'] else 'PROBLEM: ' + str(integrity['problem'])}; {checked}"))
    if "verified" in result:
        console.print(_text(f"verified: {result['verified']}"))
    if "statistics" in result:
        stats = result["statistics"]
        table = Table(title=_text(f"statistics: {stats['name']} ({stats['dtype']} {stats['shape']})"))
        table.add_column("record")
        table.add_column("value")
        for key in ("elements", "min", "max", "mean", "std", "zero_fraction", "nan", "inf", "bytes_read"):
            table.add_row(key, str(stats[key]))
        console.print(table)
        counts = stats["histogram"]["counts"]
        edges = stats["histogram"]["edges"]
        peak = max(counts) if counts else 0
        for i, count in enumerate(counts):
            bar = "#" * (round(40 * count / peak) if peak else 0)
            console.print(f"  [{edges[i]: .4g}, {edges[i + 1]: .4g})  {count:6d} {bar}", highlight=False)
    if "comparison" in result:
        comparison = result["comparison"]
        console.print(_text(f"comparison with {comparison['b']}: {len(comparison['changed'])} tensors differ, "
                            f"{comparison['unchanged']} equal"))
        table = Table(title="changed tensors")
        for column in ("file", "name", "status", "max |a-b|"):
            table.add_column(column)
        for t in comparison["tensors"]:
            if t["status"] != "same":
                table.add_row(_text(t["file"]), _text(t["name"]), t["status"], str(t["max_abs_diff"]))
        console.print(table)
        table = Table(title="state records that differ")
        for column in ("group", "record", "a", "b"):
            table.add_column(column)
        for d in comparison["state_differences"]:
            table.add_row(_text(d["group"]), _text(d["record"]), _short(d["a"], 36), _short(d["b"], 36))
        console.print(table)


# -- verify ---------------------------------------------------------------------------------------
def _command(*args: str) -> list[str]:
    return [sys.executable, "-m", "minigpt_tui", *args]


def _run_json(args: list[str], env: dict[str, str], label: str) -> dict[str, Any]:
    from minigpt_tui.engine.errors import MiniGPTError

    done = subprocess.run(args, capture_output=True, text=True, env=env, timeout=900)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise MiniGPTError(f"verify: the {label} process failed: {last}")
    return json.loads(done.stdout)


def verify_experiment(preset: str, runs_dir: Path, nproc: int | None = None) -> dict[str, Any]:
    """Save after CUT updates and exit; resume to END in a new process; train 0 -> END
    without stopping in a third; warm-start from the saved weights in a fourth. ``nproc``:
    each of them in that many processes."""
    cut, end = EXPERIMENTS[preset]
    processes = ["--nproc", str(nproc)] if nproc is not None else []

    def command_line(*args: str) -> list[str]:
        return _command(*args, *processes)

    env = dict(os.environ)
    env["MINIGPT_TUI_RUNS_DIR"] = str(runs_dir)
    saved_at = f"saved:step-{cut}"
    saved = _run_json(command_line("train", "--preset", preset, "--until", str(cut), "--run", "saved", "--json"), env, "saving")
    resumed = _run_json(
        command_line("resume", "--checkpoint", saved_at, "--until", str(end), "--keep-last", "1000", "--json"), env, "resuming"
    )
    straight = _run_json(command_line("train", "--preset", preset, "--until", str(end), "--run", "straight", "--json"), env, "uninterrupted")
    warm = _run_json(
        command_line("train", "--preset", preset, "--init-from", saved_at, "--until", str(end - cut), "--run", "warm", "--json"),
        env,
        "warm-start",
    )
    after = [u for u in straight["updates"] if u["step"] > cut]
    later_evaluations = [e for e in straight["evaluations"] if e["step"] > cut]
    comparisons = [
        _same("updates 1..%d: saving run = uninterrupted run" % cut, saved["updates"], straight["updates"][:cut]),
        _same(f"updates {cut + 1}..{end}: resumed = uninterrupted", resumed["updates"], after),
        _same(
            f"evaluations after step {cut}: resumed = uninterrupted",
            [e for e in resumed["evaluations"] if e["step"] > cut],
            later_evaluations,
        ),
        _same("final weights digest", resumed["weights_digest"], straight["weights_digest"]),
        _same("final optimizer digest (moments, step)", resumed["optimizer_digest"], straight["optimizer_digest"]),
        _same("final state digest", resumed["state_digest"], straight["state_digest"]),
        _same("final progress (data, random streams, scaler, best step)", resumed["progress"], straight["progress"]),
        _same(f"next batch after update {end}", resumed["progress"]["next_batch"], straight["progress"]["next_batch"]),
        _same("best step", resumed["best_step"], straight["best_step"]),
        {
            "name": "weights-only warm start ends with different weights",
            "equal": warm["weights_digest"] != resumed["weights_digest"],
            "detail": {"warm": warm["weights_digest"][:16], "resumed": resumed["weights_digest"][:16]},
        },
    ]
    return {
        "preset": preset,
        "processes": nproc or 1,
        "saved_after": cut,
        "resumed_until": end,
        "comparisons": comparisons,
        "all_equal": all(c["equal"] for c in comparisons),
        "warm_start": {
            "note": "a weights-only warm start is a new training history: fresh optimizer moments, "
            "schedule clock, data position, random streams and loss scaler",
            "first_update": _first(warm),
            "resumed_first_update": _first(resumed),
            "updates_per_path": end - cut,
            "weights_differ": warm["weights_digest"] != resumed["weights_digest"],
        },
        "runs_dir": str(runs_dir),
    }


def _first(result: dict[str, Any]) -> dict[str, Any] | None:
    if not result["updates"]:
        return None
    u = result["updates"][0]
    return {"step": u["step"], "lr": u["lr"], "batch": u["batch"], "loss": u["loss"]}


def _same(name: str, a: Any, b: Any) -> dict[str, Any]:
    equal = a == b
    detail: Any = None
    if not equal and isinstance(a, list) and isinstance(b, list):
        first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        detail = {"first_difference_at": first, "lengths": [len(a), len(b)]}
    elif not equal:
        detail = {"a": a, "b": b}
    return {"name": name, "equal": equal, "detail": detail}


def run_verify(args: argparse.Namespace) -> int:
    from minigpt_tui.engine.files import make_folder

    if args.keep:
        runs_dir = make_folder(Path(args.keep).expanduser().resolve(), what="--keep folder")
        result = verify_experiment(args.preset, runs_dir, args.nproc)
    else:
        with tempfile.TemporaryDirectory(prefix="minigpt-verify-") as tmp:
            result = verify_experiment(args.preset, Path(tmp), args.nproc)
            result["runs_dir"] = None
    if args.json:
        emit_json(result)
    else:
        cut, end = result["saved_after"], result["resumed_until"]
        where = f" ({result['processes']} processes each)" if result["processes"] > 1 else ""
        print(f"exact resume, preset {result['preset']}{where}: save after {cut}, exit, resume to {end} in a new process, "
              f"compare with 0 -> {end} uninterrupted")
        for c in result["comparisons"]:
            print(f"  {'true ' if c['equal'] else 'FALSE'}  {c['name']}")
        warm = result["warm_start"]
        print(f"  warm start: first update lr {warm['first_update']['lr']} batch {warm['first_update']['batch']}; "
              f"resumed: lr {warm['resumed_first_update']['lr']} batch {warm['resumed_first_update']['batch']}")
        print(f"  {warm['note']}")
    return 0 if result["all_equal"] else 1
