"""The exact-resume experiment (``verify``), end to end in fresh processes: train and save
after CUT updates, then exit; resume to END in a new process; train 0 -> END without stopping
in a third; warm-start from the saved weights in a fourth. Each process is the command line
itself (``python -m minigpt_tui ... --json``), so the experiment checks what a user runs; the
report lists every record the resumed run must share with the uninterrupted one, bit for bit.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from minigpt_tui.engine.core.errors import MiniGPTError
from minigpt_tui.engine.core.files import make_folder, refuse_inside_checkpoint
from minigpt_tui.engine.session.finetune import finetune_model

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
Progress = Callable[[int, int], None]  # progress(runs done, runs)


def verify_exact_resume(preset: str, keep: str | None = None, nproc: int | None = None,
                        progress: Progress | None = None) -> dict[str, Any]:
    """The experiment's report, its runs kept in the folder ``keep`` (made, or refused in one
    line) or else in a temporary folder removed at the end (``runs_dir`` then None)."""
    if keep:
        refuse_inside_checkpoint(keep, "--keep folder")
        runs_dir = make_folder(Path(keep).expanduser().resolve(), what="--keep folder")
        return verify_experiment(preset, runs_dir, nproc, progress)
    with tempfile.TemporaryDirectory(prefix="minigpt-verify-") as tmp:
        result = verify_experiment(preset, Path(tmp), nproc, progress)
        result["runs_dir"] = None
    return result


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
