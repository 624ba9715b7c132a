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

# The three-process experiment per preset: save after CUT updates, resume to END.
EXPERIMENTS = {"tiny": (2, 4), "mini": (300, 600), "stream": (30, 60)}
# The stream experiment: the mini model on the bundled patterns corpus as a token stream,
# windows drawn at random offsets, bounded evaluation of fixed batches every 10 updates.
STREAM_EXPERIMENT = """\
[corpus]
source = "bundled:patterns.txt"
mode = "stream"
[train]
eval_every = 10
eval_batches = 2
"""


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
    resume.set_defaults(handler=run_resume)

    inspect = subparsers.add_parser("inspect", help="show what a checkpoint or any safetensors file holds")
    inspect.add_argument("path", help="safetensors file, checkpoint folder, run folder or RUN:latest|best|STEP")
    inspect.add_argument("--json", action="store_true", help="print one JSON object")
    inspect.add_argument("--runs-dir", dest="runs_dir_sub", help="runs directory")
    inspect.add_argument("--verify", action="store_true", help="also read the data: hashes, identities, digests")
    inspect.add_argument("--tensor", help="statistics of one tensor (reads that tensor alone)")
    inspect.add_argument("--bins", type=int, default=20, help="histogram bins for --tensor (default 20)")
    inspect.add_argument("--compare", metavar="OTHER", help="compare with another checkpoint")
    inspect.set_defaults(handler=run_inspect)

    verify = subparsers.add_parser("verify", help="run the exact-resume experiment in fresh processes")
    verify.add_argument("--preset", choices=sorted(EXPERIMENTS), default="tiny",
                        help="experiment: tiny, mini, or stream (the mini model on a token stream)")
    verify.add_argument("--json", action="store_true", help="print one JSON object")
    verify.add_argument("--keep", metavar="DIR", help="keep the experiment's runs in DIR")
    verify.set_defaults(handler=run_verify)


def _resolve(spec: str, runs_dir: Path) -> Path:
    from minigpt_tui.engine.runs import resolve_checkpoint

    return resolve_checkpoint(spec, runs_dir)


# -- resume ---------------------------------------------------------------------------------------
def run_resume(args: argparse.Namespace) -> int:
    from minigpt_tui.commands.train import drive, print_summary
    from minigpt_tui.engine.checkpoint.directory import Checkpointer, continuation_record, restore_trainer
    from minigpt_tui.engine.errors import ConfigError, ResumeRefused
    from minigpt_tui.engine.trainer import apply_precision

    runs_dir = runs_dir_from_args(args)
    folder = _resolve(args.checkpoint, runs_dir)
    policy = {}
    if args.save_every is not None:
        policy["save_every"] = args.save_every
    if args.keep_last is not None:
        policy["keep_last"] = args.keep_last
    trainer = restore_trainer(
        folder,
        allow_environment_change=args.allow_environment_change,
        corpus_path_override=args.corpus,
        policy_overrides=policy or None,
    )
    steps = trainer.config.train.steps
    if trainer.finished:
        raise ConfigError(
            f"the checkpoint at step {trainer.step} has completed its schedule of {steps} updates; "
            f"to train further start a new history: train --init-from {args.checkpoint}"
        )
    if args.until is not None:
        if args.until > steps:
            raise ResumeRefused(
                f"--until {args.until} is beyond the saved schedule of {steps} updates; continuing past it is "
                f"a weights-only warm start with a new schedule: train --init-from {args.checkpoint}"
            )
        if args.until <= trainer.step:
            raise ConfigError(f"--until {args.until} is not after the checkpoint's step {trainer.step}")
    apply_precision(trainer.config.train)
    run = _run_for(folder, runs_dir, trainer)
    run.append_metric({"kind": "resume", "from": str(folder), "step": trainer.step})
    checkpointer = Checkpointer(run, args.keep_last)
    result = drive(trainer, run, until=args.until, show_progress=not args.json, checkpointer=checkpointer)
    result["run_dir"] = str(run.path)
    result["resumed_from"] = str(folder)
    result["continuation"] = continuation_record(trainer)
    if args.json:
        emit_json(result)
    else:
        print_summary(result)
        if not result["continuation"]["bitwise_promised"]:
            for note in result["continuation"]["notes"]:
                print(f"note: bitwise continuation not promised: {note}", file=sys.stderr)
    return 0


def _run_for(folder: Path, runs_dir: Path, trainer: Any) -> Any:
    """The run a checkpoint belongs to (``RUN/checkpoints/step-N``); a loose checkpoint
    continues in a new run folder."""
    from minigpt_tui.engine.runs import RunDirectory

    if folder.parent.name == "checkpoints" and folder.parent.parent.is_dir():
        return RunDirectory(folder.parent.parent)
    run = RunDirectory.create(runs_dir, None, f"resumed-{trainer.config.preset}")
    run.write_json("config.json", trainer.config.to_dict())
    return run


# -- inspect --------------------------------------------------------------------------------------
def run_inspect(args: argparse.Namespace) -> int:
    from minigpt_tui.engine.checkpoint.inspect import compare_checkpoints, inspect_path, tensor_statistics

    runs_dir = runs_dir_from_args(args)
    target = _inspect_target(args.path, runs_dir)
    inspection = inspect_path(target, verify_hashes=args.verify)
    result = inspection.to_json()
    if args.verify:
        result["verified"] = _verify_fully(target, inspection.kind)
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
    path = Path(spec).expanduser()
    if path.exists():
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


def _short(value: Any, width: int = 72) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def _print_inspection(result: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    console.print(f"[bold]{result['path']}[/bold]  ({result['kind']})")
    files = Table(title="files")
    for column in ("file", "kind", "bytes", "header bytes", "tensors"):
        files.add_column(column)
    for f in result["files"]:
        files.add_row(f["name"], f["kind"], str(f["size"]), str(f["header_bytes"]), str(f["tensors"]))
    console.print(files)
    # One table per file; the name folds rather than being cut, and below 110 columns the
    # group and offset columns give their width to it.
    wide = console.width >= 110
    for file_name in dict.fromkeys(e["file"] for e in result["entries"]):
        entries = Table(title=f"{file_name}: tensor entries (header only)")
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
            entries.add_row(e["name"], *(values[c] for c in columns))
        console.print(entries)
    if result["aliases"]:
        aliases = Table(title="alias records")
        for column in ("name", "target", "transform", "use"):
            aliases.add_column(column)
        for a in result["aliases"]:
            aliases.add_row(a.get("name", ""), a.get("target", ""), a.get("transform", ""), a.get("use", ""))
        console.print(aliases)
    for group, records in result["state"].items():
        if not records:
            continue
        table = Table(title=f"state: {group}")
        table.add_column("record")
        table.add_column("value")
        for key, value in records.items():
            table.add_row(str(key), _short(value))
        console.print(table)
    if not result["state"] and result["metadata"]:
        table = Table(title="metadata")
        table.add_column("key")
        table.add_column("value")
        for key, value in result["metadata"].items():
            table.add_row(key, _short(value))
        console.print(table)
    integrity = result.get("integrity")
    if integrity is not None and "complete" not in integrity:  # a transformers folder: index against shards
        verdict = "ok" if integrity.get("ok") else "PROBLEM: " + "; ".join(integrity.get("problems") or [])
        console.print(f"integrity ({integrity.get('checked')}): {verdict}")
    elif integrity is not None:
        status = "complete" if integrity["complete"] else "INCOMPLETE"
        checked = "hashes checked" if integrity.get("hashes_checked") else "sizes checked (add --verify for hashes)"
        console.print(f"integrity: {status}, {'ok' if integrity['ok'] else 'PROBLEM: ' + str(integrity['problem'])}; {checked}")
    if "verified" in result:
        console.print(f"verified: {result['verified']}")
    if "statistics" in result:
        stats = result["statistics"]
        table = Table(title=f"statistics: {stats['name']} ({stats['dtype']} {stats['shape']})")
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
        console.print(f"comparison with {comparison['b']}: {len(comparison['changed'])} tensors differ, {comparison['unchanged']} equal")
        table = Table(title="changed tensors")
        for column in ("file", "name", "status", "max |a-b|"):
            table.add_column(column)
        for t in comparison["tensors"]:
            if t["status"] != "same":
                table.add_row(t["file"], t["name"], t["status"], str(t["max_abs_diff"]))
        console.print(table)
        table = Table(title="state records that differ")
        for column in ("group", "record", "a", "b"):
            table.add_column(column)
        for d in comparison["state_differences"]:
            table.add_row(d["group"], d["record"], _short(d["a"], 36), _short(d["b"], 36))
        console.print(table)


# -- verify ---------------------------------------------------------------------------------------
def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "minigpt_tui", *args]


def _run_json(args: list[str], env: dict[str, str], label: str) -> dict[str, Any]:
    from minigpt_tui.engine.errors import MiniGPTError

    done = subprocess.run(args, capture_output=True, text=True, env=env, timeout=900)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise MiniGPTError(f"verify: the {label} process failed: {last}")
    return json.loads(done.stdout)


def verify_experiment(preset: str, runs_dir: Path) -> dict[str, Any]:
    """Save after CUT updates and exit; resume to END in a new process; train 0 -> END
    without stopping in a third; warm-start from the saved weights in a fourth."""
    cut, end = EXPERIMENTS[preset]
    env = dict(os.environ)
    env["MINIGPT_TUI_RUNS_DIR"] = str(runs_dir)
    env["MINIGPT_TUI_CACHE_DIR"] = str(runs_dir / "token-cache")
    setting = ["--preset", preset]
    if preset == "stream":
        runs_dir.mkdir(parents=True, exist_ok=True)
        (runs_dir / "stream.toml").write_text(STREAM_EXPERIMENT, "utf-8")
        setting = ["--preset", "mini", "--config", str(runs_dir / "stream.toml")]
    saved_at = f"saved:step-{cut}"
    saved = _run_json(_cli("train", *setting, "--until", str(cut), "--run", "saved", "--json"), env, "saving")
    resumed = _run_json(
        _cli("resume", "--checkpoint", saved_at, "--until", str(end), "--keep-last", "1000", "--json"), env, "resuming"
    )
    straight = _run_json(_cli("train", *setting, "--until", str(end), "--run", "straight", "--json"), env, "uninterrupted")
    warm = _run_json(
        _cli("train", *setting, "--init-from", saved_at, "--until", str(end - cut), "--run", "warm", "--json"),
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
    if args.keep:
        runs_dir = Path(args.keep).expanduser().resolve()
        runs_dir.mkdir(parents=True, exist_ok=True)
        result = verify_experiment(args.preset, runs_dir)
    else:
        with tempfile.TemporaryDirectory(prefix="minigpt-verify-") as tmp:
            result = verify_experiment(args.preset, Path(tmp))
            result["runs_dir"] = None
    if args.json:
        emit_json(result)
    else:
        cut, end = result["saved_after"], result["resumed_until"]
        print(f"exact resume, preset {result['preset']}: save after {cut}, exit, resume to {end} in a new process, "
              f"compare with 0 -> {end} uninterrupted")
        for c in result["comparisons"]:
            print(f"  {'true ' if c['equal'] else 'FALSE'}  {c['name']}")
        warm = result["warm_start"]
        print(f"  warm start: first update lr {warm['first_update']['lr']} batch {warm['first_update']['batch']}; "
              f"resumed: lr {warm['resumed_first_update']['lr']} batch {warm['resumed_first_update']['batch']}")
        print(f"  {warm['note']}")
    return 0 if result["all_equal"] else 1
