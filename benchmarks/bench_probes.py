"""Cost of scoring the bundled probes at every scheduled evaluation of a ``mini`` run.

One ``mini`` run (600 updates, an evaluation every 50, exact precision, one thread) is
driven through the trainer's schedule. At each scheduled evaluation the bundled probes are
scored greedily (match, expected first-token probability and rank). Timed separately in the
same run: the updates and evaluations (the baseline: what a run without probes does) and the
probe scoring. Reported: the probes' share of the run, and the per-evaluation probe time
against the mean time of the 50 updates before it (median, min-max).

    PYTHONPATH=. .venv/bin/python benchmarks/bench_probes.py
"""

from __future__ import annotations

import statistics
import time

from minigpt_tui.engine.config import load_config
from minigpt_tui.engine.corpus import load_corpus
from minigpt_tui.engine.generation import load_probes
from minigpt_tui.engine.probe_scores import score_probes
from minigpt_tui.engine.trainer import EvaluationRecord, Trainer, TrainingSetup, apply_precision, scheduled_work


def main() -> None:
    config = load_config("mini")
    apply_precision(config.train)
    trainer = Trainer(TrainingSetup.build(config, load_corpus(config.corpus)))
    probes = load_probes()
    run_time = 0.0
    probe_times: list[float] = []
    since_last: list[float] = []
    interval = 0.0
    matched = 0
    work = scheduled_work(trainer)
    while True:
        start = time.perf_counter()
        item = next(work, None)
        elapsed = time.perf_counter() - start
        if item is None:
            break
        run_time += elapsed
        interval += elapsed
        if isinstance(item, EvaluationRecord):
            start = time.perf_counter()
            scores = score_probes(trainer.model, trainer.tokenizer, probes)
            probe_times.append(time.perf_counter() - start)
            since_last.append(interval)
            interval = 0.0
            matched = sum(s.match for s in scores)
    total_probes = sum(probe_times)
    shares = [p / s for p, s in zip(probe_times[1:], since_last[1:])]
    print(f"mini: {config.train.steps} updates, {len(probe_times)} scheduled evaluations, "
          f"{len(probes.probes)} probes, {config.dtype_name}, one thread")
    print(f"  run (updates + evaluations)   {run_time:8.2f} s  (baseline)")
    print(f"  probe scoring, all evaluations {total_probes:7.2f} s  = {total_probes / run_time:.1%} of the run")
    print(f"  per evaluation {statistics.median(probe_times) * 1e3:.1f} ms against the 50 updates before it: "
          f"{statistics.median(shares):.1%} (min {min(shares):.1%}, max {max(shares):.1%})")
    print(f"  probes matched at the end: {matched} of {len(probes.probes)}")


if __name__ == "__main__":
    main()
