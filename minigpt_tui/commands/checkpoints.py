"""``resume``, ``inspect`` and ``verify``: continue a saved run exactly, show what a
checkpoint holds, and run the exact-resume experiment end to end in fresh processes."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

from rich.table import Table
from rich.text import Text
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

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
from minigpt_tui.engine.core.config import ModelConfig, setting_of
from minigpt_tui.engine.core.errors import ConfigError, MiniGPTError
from minigpt_tui.engine.core.files import make_folder, refuse_inside_checkpoint
from minigpt_tui.engine.core.library_tokenizer import LibraryTokenizer
from minigpt_tui.engine.core.printable import escape_controls
from minigpt_tui.engine.formats.checkpoint_folder import STEP_DIR
from minigpt_tui.engine.formats.compare import compare_checkpoints
from minigpt_tui.engine.formats.gguf_inspect import verify_gguf
from minigpt_tui.engine.formats.inspect import inspect_path, tensor_statistics
from minigpt_tui.engine.formats.inspection import InspectionKind
from minigpt_tui.engine.formats.portable import save_portable_model
from minigpt_tui.engine.formats.safetensors_read import load_file
from minigpt_tui.engine.session.history import probe_records
from minigpt_tui.engine.session.plans import ResumeRun, saved_run_config
from minigpt_tui.engine.session.runs import checkpoint_target, refuse_if_in_use, resolve_checkpoint
from minigpt_tui.engine.training.corpus import parse_records
from minigpt_tui.engine.training.training_state import read_training_state

# The three-process experiment per preset: save after CUT updates, resume to END.
EXPERIMENTS = {"tiny": (2, 4), "mini": (300, 600), "stream": (30, 60), "finetune": (3, 6)}
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
    runs_dir = runs_dir_from_args(args)
    target = checkpoint_target(args.path, runs_dir)
    inspection = inspect_path(target, verify_hashes=args.verify)
    result = inspection.to_json()
    if args.verify:  # the inspected path: a run folder resolves to its latest checkpoint
        result["verified"] = _verify_fully(inspection.path, inspection.kind)
    if args.tensor:
        result["statistics"] = tensor_statistics(inspection.path, args.tensor, bins=args.bins)
    if args.compare:
        result["comparison"] = compare_checkpoints(inspection.path, checkpoint_target(args.compare, runs_dir))
    if inspection.kind == "checkpoint-dir":
        result["probes"] = _probes_at_checkpoint(inspection.path)
    if args.json:
        emit_json(result)
    else:
        print_inspection(result)
        if result.get("probes"):
            _print_probes(result["probes"])
    return 0


def _probes_at_checkpoint(folder: Path) -> dict[str, Any] | None:
    """The run's last probes record at or before the checkpoint's step (None outside a run
    folder, or when the run scored none)."""
    match = STEP_DIR.match(folder.name)
    run_dir = folder.parent.parent
    if match is None or folder.parent.name != "checkpoints" or not (run_dir / "metrics.jsonl").is_file():
        return None
    try:
        records = probe_records(run_dir, until_step=int(match.group(1)))
    except ConfigError:
        return None
    return records[-1] if records else None


def _print_probes(record: dict[str, Any]) -> None:
    table = Table(title=escape_controls(f"probes at step {record['step']} ({record.get('source')})"))
    for column in ("probe", "match", "expected id", "p(expected)", "rank"):
        table.add_column(column, justify="left" if column == "probe" else "right")
    for score in record.get("probes", []):
        table.add_row(Text(escape_controls(score.get("name"))), "✓" if score.get("match") else "✗", str(score.get("expected_id")),
                      f"{score.get('expected_probability', 0.0):.4g}", str(score.get("expected_rank")))
    output_console().print(table)


def _verify_fully(path: Path, kind: str) -> dict[str, Any]:
    """Read everything and check it: manifest hashes, identities, content digests."""
    from minigpt_tui.engine.training.checkpoints import (  # deferred: imports torch
        load_checkpoint,
    )
    from minigpt_tui.engine.models.model_file import (  # deferred: imports torch
        load_portable_model,
    )

    if kind == "checkpoint-dir":
        loaded = load_checkpoint(path, recompute_digests=True)
        return {"ok": True, "model_identity": loaded.model_file.identity, "step": loaded.state.step}
    if kind == "portable-model":
        model = load_portable_model(path)
        return {"ok": True, "model_identity": model.identity, "tied_alias": model.tied_alias}
    if kind == "training-state":
        state = read_training_state(path)
        return {"ok": True, "step": state.step}
    if kind == InspectionKind.GGUF:  # no manifest: its header, readable types and SHA-256
        return verify_gguf(path)
    loaded = load_file(path)
    return {"ok": True, "sha256": loaded.sha256}


# -- verify ---------------------------------------------------------------------------------------
def _command(*args: str) -> list[str]:
    return [sys.executable, "-m", "minigpt_tui", *args]


def _run_json(args: list[str], env: dict[str, str], label: str) -> dict[str, Any]:
    done = subprocess.run(args, capture_output=True, text=True, env=env, timeout=900)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise MiniGPTError(f"verify: the {label} process failed: {last}")
    return json.loads(done.stdout)


VERIFY_RUNS = 4  # saving, resuming, uninterrupted, warm start


def verify_experiment(preset: str, runs_dir: Path, nproc: int | None = None,
                      progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Save after CUT updates and exit; resume to END in a new process; train 0 -> END
    without stopping in a third; warm-start from the saved weights in a fourth. ``nproc``:
    each of them in that many processes. ``progress`` is told ``(runs done, runs)`` after each."""
    cut, end = EXPERIMENTS[preset]
    processes = ["--nproc", str(nproc)] if nproc is not None else []
    told = progress or (lambda _done, _total: None)
    told(0, VERIFY_RUNS)

    def command_line(*args: str) -> list[str]:
        return _command(*args, *processes)

    env = _experiment_env(runs_dir)
    setting = _experiment_setting(preset, runs_dir)
    saved_at = f"saved:step-{cut}"
    saved = _run_json(command_line("train", *setting, "--until", str(cut), "--run", "saved", "--json"), env, "saving")
    told(1, VERIFY_RUNS)
    resumed = _run_json(
        command_line("resume", "--checkpoint", saved_at, "--until", str(end), "--keep-last", "1000", "--json"), env, "resuming"
    )
    told(2, VERIFY_RUNS)
    straight = _run_json(command_line("train", *setting, "--until", str(end), "--run", "straight", "--json"), env, "uninterrupted")
    told(3, VERIFY_RUNS)
    warm = _run_json(
        command_line("train", *_warm_setting(setting), "--init-from", saved_at, "--until", str(end - cut),
                     "--run", "warm", "--json"),
        env,
        "warm-start",
    )
    told(4, VERIFY_RUNS)
    comparisons = _comparisons(cut, end, saved, resumed, straight, warm)
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


def _experiment_env(runs_dir: Path) -> dict[str, str]:
    """This environment, with the experiment's runs and token cache under ``runs_dir``."""
    env = dict(os.environ)
    env["MINIGPT_TUI_RUNS_DIR"] = str(runs_dir)
    env["MINIGPT_TUI_CACHE_DIR"] = str(runs_dir / "token-cache")
    return env


def _experiment_setting(preset: str, runs_dir: Path) -> list[str]:
    """The options every training of the experiment gets (writing the stream config, or the
    model to fine-tune, under ``runs_dir`` where the preset needs one)."""
    setting = ["--preset", preset]
    if preset == "stream":
        runs_dir.mkdir(parents=True, exist_ok=True)
        (runs_dir / "stream.toml").write_text(STREAM_EXPERIMENT, "utf-8")
        setting = ["--preset", "mini", "--config", str(runs_dir / "stream.toml")]
    if preset == "finetune":
        model = finetune_model(runs_dir / "model-to-tune")
        setting = ["--preset", "finetune", "--init-from", str(model), "--precision", "exact",
                   "--corpus", "bundled:patterns.txt"]
    return setting


def _warm_setting(setting: list[str]) -> list[str]:
    """``setting`` without its ``--init-from`` and value: the warm start starts from the saved weights instead."""
    return [item for i, item in enumerate(setting) if "--init-from" not in (item, setting[i - 1] if i else "")]


def _comparisons(cut: int, end: int, saved: dict[str, Any], resumed: dict[str, Any], straight: dict[str, Any],
                 warm: dict[str, Any]) -> list[dict[str, Any]]:
    """Each thing the resumed run must equal in the uninterrupted one, and the warm start must not."""
    after = [u for u in straight["updates"] if u["step"] > cut]
    later_evaluations = [e for e in straight["evaluations"] if e["step"] > cut]
    return [
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


def finetune_model(folder: Path) -> Path:
    """A random-weight GPT-NeoX-style model (parallel residual, partial rotary, its own head)
    with a byte-level BPE tokenizer.json trained here on the bundled teaching corpus, saved
    as a model file: what the finetune experiment starts from."""
    import torch  # deferred: imports torch

    from minigpt_tui.engine.models.model import MiniGPT  # deferred: imports torch

    text = resources.files("minigpt_tui").joinpath("assets/corpus/teaching.txt").read_text("utf-8")
    raw = Tokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    raw.train_from_iterator(parse_records(text), trainers.BpeTrainer(
        vocab_size=320, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    end = raw.token_to_id("<|endoftext|>")
    tokenizer = LibraryTokenizer.from_text(raw.to_str(), None, bos_id=end, eos_ids=(end,), source="verify")
    config = ModelConfig(family="gpt_neox", width=32, heads=4, kv_heads=4, ffn=64, layers=2, context=64,
                         rotary_fraction=0.5, tied_head=False, gelu_approximation="none")
    model = MiniGPT(config, tokenizer.vocab_size, torch.float64)
    model.initialize(20261201)
    folder.mkdir(parents=True, exist_ok=True)
    save_portable_model(model, tokenizer, folder / "model.safetensors")
    return folder / "model.safetensors"


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
        refuse_inside_checkpoint(args.keep, "--keep folder")
        runs_dir = make_folder(Path(args.keep).expanduser().resolve(), what="--keep folder")
        with task_progress("verify: training runs", enabled=not args.json, unit="run") as advance:
            result = verify_experiment(args.preset, runs_dir, args.nproc, advance)
    else:
        with tempfile.TemporaryDirectory(prefix="minigpt-verify-") as tmp, \
                task_progress("verify: training runs", enabled=not args.json, unit="run") as advance:
            result = verify_experiment(args.preset, Path(tmp), args.nproc, advance)
            result["runs_dir"] = None
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
