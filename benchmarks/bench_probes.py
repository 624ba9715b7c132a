"""Cost of scoring the bundled probes at every scheduled evaluation of a ``mini`` run.

A whole ``mini`` run (600 updates, an evaluation every 50, exact precision, one thread, no
run folder) through the training session, with the bundled probes scored after each
scheduled evaluation, against the same run without probes (the baseline). Rounds
interleave the two; each round builds a fresh trainer. Reported: median run time of each,
the per-round ratio (median, min-max), and the probe scoring's own time inside the run
(from each evaluation's event to its probes' event), which the run-to-run noise hides.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_probes.py
"""

from __future__ import annotations

import statistics
import time

from minigpt_tui.engine.core.config import load_config
from minigpt_tui.engine.training.corpus import load_corpus
from minigpt_tui.engine.analysis.generation import load_probes
from minigpt_tui.engine.session.events import EvaluationDone, ProbesScored
from minigpt_tui.engine.session.plans import PreparedRun
from minigpt_tui.engine.session.training import TrainingSession
from minigpt_tui.engine.training.trainer import Trainer, TrainingSetup

ROUNDS = 3


def main() -> None:
    config = load_config("mini")
    corpus = load_corpus(config.corpus)
    probes = load_probes()

    scoring: list[float] = []  # seconds from each EvaluationDone to its ProbesScored

    def one_run(with_probes: bool) -> tuple[float, int]:
        trainer = Trainer(TrainingSetup.build(config, corpus))
        scored: list[ProbesScored] = []
        evaluated_at = [0.0]

        def sink(event: object) -> None:
            if isinstance(event, EvaluationDone):
                evaluated_at[0] = time.perf_counter()
            elif isinstance(event, ProbesScored):
                scoring.append(time.perf_counter() - evaluated_at[0])
                scored.append(event)

        session = TrainingSession(lambda: PreparedRun(trainer, probes=probes if with_probes else None), sink)
        start = time.perf_counter()
        session.run()
        return time.perf_counter() - start, len(scored)

    one_run(True)  # warm up
    scoring.clear()
    with_times, without_times = [], []
    evaluations = 0
    for _ in range(ROUNDS):
        seconds, evaluations = one_run(True)
        with_times.append(seconds)
        without_times.append(one_run(False)[0])
    ratios = [w / b for w, b in zip(with_times, without_times)]
    print(f"mini: {config.train.steps} updates, {evaluations} scheduled evaluations scored, "
          f"{len(probes.probes)} probes, {config.dtype_name}, one thread, {ROUNDS} interleaved rounds")
    print(f"  run with probes     {statistics.median(with_times):7.2f} s")
    print(f"  run without probes  {statistics.median(without_times):7.2f} s  (baseline)")
    print(f"  ratio {statistics.median(ratios):.3f}x (min {min(ratios):.3f}x, max {max(ratios):.3f}x): "
          f"probes cost {statistics.median(ratios) - 1:+.1%} of the run")
    per_run = sum(scoring) / ROUNDS
    print(f"  scoring inside the run: {per_run:.3f} s per run = {per_run / statistics.median(without_times):.1%} "
          f"of the baseline ({statistics.median(scoring) * 1e3:.1f} ms per evaluation)")


if __name__ == "__main__":
    main()
