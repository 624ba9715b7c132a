"""The done-when figures of "fast on the models people bring" (issue 40) in one run, each as a
ratio with its spread, idle and with one and two competing busy processes
(``python -c "while True: pass"``, one per busy core, started before the figure and killed
after it):

- ``decision``: a decision with the key/value cache (16 decisions of ``DecisionStepper``)
  against transformers' ``generate(max_new_tokens=16)``, per token (targets: at most 1.0x
  idle, 1.2x with a busy core);
- ``open``: opening a transformers folder and deciding once against transformers'
  ``from_pretrained`` and its first forward (target 0.5x); ``gguf`` the same for the Q8_0
  GGUF file against transformers' GGUF loading (slow: about 20 s a round);
- ``heads``: a head key (``[``/``]``) in the head view of the app (headless Textual, 120x40,
  at decision 8) to the screen, as the excess over a key bound to nothing (Pilot's own cost),
  against the 50 ms target;
- ``frame``: process start to first frame of ``minigpt-tui`` against a bare Textual app in
  tmux (target 1.5x).

The model is a SmolLM2-135M shape with random weights (benchmarks/bench_models.py makes it),
float32, 2 threads; torch starts with ``OMP_WAIT_POLICY=PASSIVE`` as the app's inference does.
Sides are interleaved in rotating order (benchmarks/timing.py). A table of every figure ends
the output.

    .venv/bin/python benchmarks/bench_day.py [--rounds 3] [--loads idle,one,two]
                                             [--figures decision,open,gguf,heads,frame]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch: the app's inference does the same

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from timing import Timing, interleaved  # noqa: E402

LOADS = {"idle": 0, "one": 1, "two": 2}  # busy processes competing for the 2 cores
FIGURES = ("decision", "open", "gguf", "heads", "frame")
PROMPT_IDS = list(range(1000, 1016))
DECISIONS = 16
HEAD_TARGET_S = 0.050


@dataclass(frozen=True)
class Figure:
    name: str
    load: str
    ratio: float  # the median of the per-round ratios
    low: float
    high: float
    target: str
    detail: str


def per_round(side: Timing, baseline: Timing) -> tuple[float, float, float]:
    ratios = [a / b for a, b in zip(side.seconds, baseline.seconds)]
    return statistics.median(ratios), min(ratios), max(ratios)


@dataclass
class Context:
    root: Path
    folder: Path  # the transformers folder
    gguf: Path
    rounds: int


def busy_loops(count: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]


# -- the figures ---------------------------------------------------------------------------
def decision_figure(ctx: Context, load: str) -> list[Figure]:
    import torch
    import transformers as tr

    from minigpt_tui.engine.analysis.generation import DecisionStepper
    from minigpt_tui.engine.analysis.generation_rule import GenerationRule
    from minigpt_tui.engine.models.hf_models import open_hf_model

    portable = open_hf_model(ctx.folder)
    model = tr.AutoModelForCausalLM.from_pretrained(ctx.folder, dtype=torch.float32).eval()
    prompt = torch.tensor([PROMPT_IDS])
    rule = GenerationRule("greedy", max_new_tokens=DECISIONS)

    def ours() -> None:
        stepper = DecisionStepper(portable.model, portable.tokenizer, "x", rule, use_kv_cache=True)
        stepper.prompt_ids = tuple(PROMPT_IDS)
        for _ in range(DECISIONS):
            stepper.step()

    def theirs() -> None:
        with torch.no_grad():
            model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=DECISIONS,
                           do_sample=False, eos_token_id=None, pad_token_id=0)

    timings = interleaved({"ours": ours, "transformers": theirs}, ctx.rounds)
    ratio, low, high = per_round(timings["ours"], timings["transformers"])
    detail = (f"ours {timings['ours'].median / DECISIONS * 1e3:.1f} ms, transformers "
              f"{timings['transformers'].median / DECISIONS * 1e3:.1f} ms per token")
    target = "<= 1.0x idle" if load == "idle" else "<= 1.2x busy"
    return [Figure("decision vs generate, per token", load, ratio, low, high, target, detail)]


def _open_sides(path: Path, opener: Callable, theirs_folder: Path, **theirs_kwargs) -> dict[str, Callable]:
    import torch
    import transformers as tr

    from minigpt_tui.engine.analysis.generation import DecisionStepper
    from minigpt_tui.engine.analysis.generation_rule import GenerationRule

    rule = GenerationRule("greedy", max_new_tokens=DECISIONS)
    prompt = torch.tensor([PROMPT_IDS])

    def ours() -> None:
        portable = opener(path)
        stepper = DecisionStepper(portable.model, portable.tokenizer, "x", rule)
        stepper.prompt_ids = tuple(PROMPT_IDS)
        stepper.step()

    def theirs() -> None:
        model = tr.AutoModelForCausalLM.from_pretrained(theirs_folder, dtype=torch.float32, **theirs_kwargs).eval()
        with torch.no_grad():
            model(prompt).logits[0, -1].argmax()

    return {"ours": ours, "transformers": theirs}


def _open_figure(name: str, sides: dict[str, Callable], rounds: int, load: str) -> list[Figure]:
    timings = interleaved(sides, rounds)
    ratio, low, high = per_round(timings["ours"], timings["transformers"])
    detail = f"ours {timings['ours'].median:.2f} s, transformers {timings['transformers'].median:.2f} s"
    return [Figure(name, load, ratio, low, high, "<= 0.5x", detail)]


def open_figure(ctx: Context, load: str) -> list[Figure]:
    from minigpt_tui.engine.models.hf_models import open_hf_model

    return _open_figure("open + first decision, folder", _open_sides(ctx.folder, open_hf_model, ctx.folder),
                        ctx.rounds, load)


def gguf_figure(ctx: Context, load: str) -> list[Figure]:
    from minigpt_tui.engine.models.gguf_models import open_gguf_model

    sides = _open_sides(ctx.gguf, open_gguf_model, ctx.gguf.parent, gguf_file=ctx.gguf.name)
    return _open_figure("open + first decision, Q8_0 GGUF", sides, ctx.rounds, load)


def heads_figure(ctx: Context, load: str) -> list[Figure]:
    from bench_app_decisions import app_head_keys

    pressed, idle = app_head_keys(ctx.folder, ctx.root / "runs-heads", 8, ctx.rounds * 4)
    excess = [max(p - i, 0.0) for p, i in zip(pressed, idle)]  # pairs in press order
    ratios = [e / HEAD_TARGET_S for e in excess]
    detail = (f"head key {statistics.median(pressed) * 1e3:.0f} ms, a key bound to nothing "
              f"{statistics.median(idle) * 1e3:.0f} ms")
    return [Figure("head key to screen / 50 ms", load, statistics.median(ratios), min(ratios), max(ratios),
                   "<= 1.0x", detail)]


def frame_figure(ctx: Context, load: str) -> list[Figure]:
    import shutil

    if shutil.which("tmux") is None:
        print("frame: tmux is not installed; the first frame needs a real terminal")
        return []
    from bench_app import TMUX, Pane, first_frame_times

    keeper = Pane("sleep 3600", "bench-day-keeper")  # the tmux server outlives the measured sessions
    try:
        bare, app, _ = first_frame_times(max(ctx.rounds, 3), ctx.root)
    finally:
        keeper.close()
        subprocess.run([*TMUX, "kill-server"], capture_output=True)
    ratio, low, high = per_round(Timing("app", tuple(app)), Timing("bare", tuple(bare)))
    detail = f"minigpt-tui {statistics.median(app) * 1e3:.0f} ms, bare Textual {statistics.median(bare) * 1e3:.0f} ms"
    return [Figure("first frame vs a bare Textual app", load, ratio, low, high, "<= 1.5x", detail)]


MEASURES: dict[str, Callable[[Context, str], list[Figure]]] = {
    "decision": decision_figure, "open": open_figure, "gguf": gguf_figure, "heads": heads_figure,
    "frame": frame_figure,
}


def table(figures: list[Figure]) -> str:
    lines = [f"{'figure':<36} {'load':<5} {'ratio':>8}  {'rounds':<17} {'target':<13} detail"]
    for f in figures:
        spread = f"{f.low:.3g}-{f.high:.3g}x"
        lines.append(f"{f.name:<36} {f.load:<5} {f.ratio:>7.3g}x  {spread:<17} {f.target:<13} {f.detail}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--loads", default=",".join(LOADS), help="comma-separated: " + ", ".join(LOADS))
    parser.add_argument("--figures", default=",".join(FIGURES), help="comma-separated: " + ", ".join(FIGURES))
    args = parser.parse_args()
    loads, figures = args.loads.split(","), args.figures.split(",")
    unknown = [name for name in loads if name not in LOADS] + [name for name in figures if name not in MEASURES]
    if unknown:
        raise SystemExit(f"bench_day: unknown load or figure: {', '.join(unknown)}")
    import torch

    from bench_models import make_models

    torch.set_num_threads(2)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, OMP_WAIT_POLICY="
          f"{os.environ['OMP_WAIT_POLICY']}, {os.cpu_count()} cores, {args.rounds} rounds")
    results: list[Figure] = []
    with tempfile.TemporaryDirectory(prefix="bench-day-") as tmp:
        root = Path(tmp)
        folder = make_models(root, names=("smollm2-135M",))["smollm2-135M"]
        ctx = Context(root, folder, root / "smollm2-135M-Q8_0.gguf", args.rounds)
        for load in loads:
            for name in figures:
                loops = busy_loops(LOADS[load])
                try:
                    found = MEASURES[name](ctx, load)
                finally:
                    for loop in loops:
                        loop.kill()
                        loop.wait()
                for figure in found:
                    print(f"[{load}] {figure.name}: {figure.ratio:.3g}x (rounds {figure.low:.3g}-{figure.high:.3g}); "
                          f"{figure.detail}", flush=True)
                results.extend(found)
    print()
    print(table(results))


if __name__ == "__main__":
    main()
