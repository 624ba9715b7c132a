"""What a decision's record costs on a 49,152-id vocabulary (SmolLM2's), beside the forward.

A small llama (2 blocks, width 64, vocabulary 49,152, random weights) is saved as a
transformers folder and opened as ``generate`` opens it. Its logits for 30 decisions are
computed once; then, per decision, building the record and serialising it as ``--json`` does
(``json.dumps``, indent 2) is timed with the forward left out, side by side in rounds whose
order rotates:

- version 1 record: the records as they were before trace version 2, rebuilt here from the
  full-vocabulary reference functions (raw and selection vectors, the full sort of the
  order under sampling, retained and ineligible ids as Python lists, the three vectors);
- record, default: the stepper's record and ``to_json()``;
- record, --full-logits: the same record with ``to_json(full_logits=True)``;
- forward alone: the KV-cache forwards of the same decisions, for scale (a 135M model's is
  about 0.1-0.4 s here).

Rules: greedy; t=0.8 top-k 50; t=1.0 top-p 0.9; t=1.0 (no cut). Then the size of a 30-token
``generate --json`` trace from the command line, with and without ``--full-logits`` (EOS
forbidden, so all 30 decisions are made), and the command's wall time. OpenMP waits without
spinning, as in ``generate`` (unless the environment sets a policy).

    .venv/bin/python benchmarks/bench_records.py [--rounds 3] [--decisions 10]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from minigpt_tui.engine.core.threads import wait_without_spinning

wait_without_spinning()  # as generate runs: before torch starts OpenMP
import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from timing import Timing, interleaved, ratio  # noqa: E402

from minigpt_tui.engine.analysis.generation import (  # noqa: E402
    DecisionStepper,
    GenerationRule,
    entropy_nats,
    greedy_choice,
    raw_probabilities,
    sample_choice,
    selection_distribution,
    selection_order,
    token_rank,
    top_ranked,
)

ROOT = Path(__file__).resolve().parents[1]
VOCAB = 49_152
PROMPT = "The capital of France is"
TOP = 3  # generate's default --top
RULES = {
    "greedy": GenerationRule("greedy"),
    "t=0.8 top-k 50": GenerationRule.sample(0.8, top_k=50),
    "t=1.0 top-p 0.9": GenerationRule.sample(1.0, top_p=0.9),
    "t=1.0": GenerationRule.sample(1.0),
}


def make_model(root: Path) -> Path:
    """A small llama with SmolLM2's vocabulary, as a transformers folder."""
    import transformers as tr
    from family_support import byte_level_tokenizer

    config = tr.LlamaConfig(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, intermediate_size=128,
                            num_hidden_layers=2, vocab_size=VOCAB, max_position_embeddings=256,
                            tie_word_embeddings=True)
    torch.manual_seed(0)
    folder = root / "llama-49152"
    tr.AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    tr.PreTrainedTokenizerFast(tokenizer_object=byte_level_tokenizer(vocab=2000)).save_pretrained(folder)
    return folder


class Replay(DecisionStepper):
    """A stepper whose forward is replaced by logits computed beforehand (the record alone)."""

    def __init__(self, portable, rule: GenerationRule, script: list[torch.Tensor]) -> None:
        super().__init__(portable.model, portable.tokenizer, PROMPT, rule, top_n=TOP)
        self.script = script

    def _last_logits(self, prefix: list[int]) -> tuple[torch.Tensor, None]:
        return self.script[len(self._steps)], None


def version_1_record(stepper: DecisionStepper, prefix: list[int], logits: torch.Tensor,
                     generator: torch.Generator) -> dict:
    """A decision's JSON record as before trace version 2 (the same figures, built the same
    way: full-vocabulary vectors, Python lists of the retained and ineligible ids)."""
    rule, eligible = stepper.rule, stepper.eligible
    raw = raw_probabilities(logits)
    selection = selection_distribution(logits, eligible, rule)
    draw = None
    if rule.kind == "greedy":
        choice = greedy_choice(logits, eligible)
    else:
        draw = float(torch.rand((), generator=generator, dtype=torch.float64))
        choice = sample_choice(selection, selection_order(logits, eligible, rule.temperature), draw)
    ranking = top_ranked(logits, TOP)
    shown = [*ranking, choice]
    columns = [values[shown].tolist() for values in (logits, raw, selection, eligible)]
    kept = eligible.clone()

    def row(i: int, rank: int) -> dict:
        at, piece = shown.index(i), stepper._piece(i)
        return {"id": i, "piece": piece.text, "bytes": list(piece.bytes), "logit": columns[0][at],
                "raw_probability": columns[1][at], "selection_probability": columns[2][at], "rank": rank,
                "eligible": columns[3][at]}

    return {"step": len(prefix) - len(stepper.prompt_ids) + 1, "prefix_length": len(prefix), "prefix_ids": prefix,
            "prefix_pieces": [stepper._piece(i).to_json() for i in prefix],
            "chosen": row(choice, token_rank(logits, choice)), "rule_choice": choice, "forced": False, "draw": draw,
            "entropy_nats": entropy_nats(raw),
            "ineligible_ids": [int(i) for i in torch.nonzero(~kept, as_tuple=False).flatten()],
            "retained_ids": [int(i) for i in torch.nonzero(selection > 0, as_tuple=False).flatten()],
            "alternatives": [row(i, r) for r, i in enumerate(ranking, start=1)],
            "logits": logits.tolist(), "raw_probabilities": raw.tolist(),
            "selection_probabilities": selection.tolist()}


def sides(portable, rule: GenerationRule, script: list[torch.Tensor]) -> dict:
    """The three ways to record ``script``'s decisions, each a callable doing them all."""
    def current(full: bool):
        def run() -> None:
            stepper = Replay(portable, rule, script)
            for _ in script:
                json.dumps(stepper.step().to_json(full_logits=full), indent=2)
        return run

    def version_1() -> None:
        stepper = Replay(portable, rule, script)  # for its eligibility and pieces
        prefix = list(stepper.prompt_ids)
        generator = torch.Generator().manual_seed(rule.seed)
        for logits in script:
            record = version_1_record(stepper, prefix, logits, generator)
            json.dumps(record, indent=2)
            prefix = [*prefix, record["chosen"]["id"]]
    return {"version 1 record": version_1, "record, default": current(False), "record, --full-logits": current(True)}


def real_decisions(portable, count: int) -> tuple[list[torch.Tensor], list[int]]:
    """The logits and chosen ids of ``count`` greedy decisions of the model (KV cache)."""
    stepper = DecisionStepper(portable.model, portable.tokenizer, PROMPT,
                              GenerationRule("greedy", max_new_tokens=count), use_kv_cache=True, top_n=TOP)
    stepper.run()
    return [d.logits for d in stepper.decisions], stepper.generated_ids


def forwards(portable, chosen: list[int]):
    """The forwards alone of those decisions (KV cache, last position), for scale."""
    def run() -> None:
        stepper = DecisionStepper(portable.model, portable.tokenizer, PROMPT, GenerationRule("greedy"),
                                  use_kv_cache=True)
        prefix = list(stepper.prompt_ids)
        for token_id in chosen:
            stepper._last_logits(prefix)
            prefix.append(token_id)
    return run


def trace_sizes(folder: Path, eos_id: int) -> None:
    """A 30-token ``generate --json`` trace from the command line, default and --full-logits."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "minigpt_tui", "generate", "--model", str(folder), "--prompt", PROMPT,
               "--max-new-tokens", "30", "--forbid", str(eos_id), "--json"]
    for extra in ([], ["--full-logits"], [], ["--full-logits"]):
        start = time.perf_counter()
        done = subprocess.run(command + extra, capture_output=True, env=env, check=True)
        seconds = time.perf_counter() - start
        decisions = len(json.loads(done.stdout)["decisions"])
        print(f"  generate --json {' '.join(extra) or '(default)':<14} {len(done.stdout) / 1e6:9.3f} MB "
              f"for {decisions} decisions, command {seconds:.1f} s")


def main() -> None:
    from minigpt_tui.engine.models.hf_models import open_hf_model

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--decisions", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as root:
        folder = make_model(Path(root))
        portable = open_hf_model(folder)
        script, chosen = real_decisions(portable, args.decisions)
        print(f"llama (2 blocks, width 64), vocabulary {portable.model.vocab_size}, {torch.get_num_threads()} "
              f"thread(s); per decision, record built and serialised (the forward apart, for scale), "
              f"{args.rounds} rounds after a warm-up, order rotating:")
        for label, rule in RULES.items():
            work = {**sides(portable, rule, script), "forward alone (KV cache)": forwards(portable, chosen)}
            timings = interleaved(work, args.rounds, warmup=1)
            per = {n: Timing(n, tuple(t / len(script) for t in timing.seconds)) for n, timing in timings.items()}
            print(f" {label}:")
            for timing in per.values():
                print("  " + timing.line())
            for name in ("record, default", "record, --full-logits"):
                print("  " + ratio(per[name], per["version 1 record"]))
        print("trace size, 30 decisions:")
        trace_sizes(folder, portable.tokenizer.eos_ids[0])


if __name__ == "__main__":
    main()
