"""Watching a run learn: samples and head roles at every scheduled evaluation.

After each scheduled evaluation a run continues a few prompts twice, greedily and by a
seeded sample at temperature 1, and scores every attention head's role (induction,
previous-token, duplicate-token, first-token; see :mod:`head_roles`). The prompts come from
``--sample-prompts FILE`` (the probes format), else from the run's probes, else from the
first words of the corpus's first validation records (training records without a
validation split).

Both read the model in evaluation mode without gradients, and each prompt's sample draws
from a generator of its own (seeded from ``seeds.sampling``, the step and the prompt's
place, :func:`sample_seed`), never from a training stream: a run with them and one without
have the same records and the same state digest. All the continuations are the rows of
one batch once their texts are the same length (:func:`_continue_rows`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from minigpt_tui.engine.core.errors import GenerationError
from minigpt_tui.engine.session.events import HeadsScored, Sample, SamplesTaken

if TYPE_CHECKING:
    import torch

PROMPTS = 3
PROMPT_WORDS = 4
SAMPLE_TOKENS = 24


def corpus_prompts(texts: list[str], count: int = PROMPTS, words: int = PROMPT_WORDS) -> list[str]:
    """The first words of the first ``count`` non-empty records."""
    prompts = []
    for text in texts:
        head = " ".join(text.split()[:words])
        if head:
            prompts.append(head)
        if len(prompts) == count:
            break
    return prompts


def _continue(model: Any, tokenizer: Any, ids: list[int], steps: int, eligible: "torch.Tensor",
              generator: "torch.Generator | None") -> list[int]:
    """One continuation of ``ids``: greedy (``generator`` None) or drawn from ``generator``."""
    return _continue_rows(model, tokenizer, [ids], steps, eligible, [generator])[0]


@dataclass
class _Batch:
    """Rows whose texts have one length, fed as one batch: their key/value cache holds the
    first ``fed`` positions of each (``fed`` None: past the context, no cache)."""

    rows: list[int]
    cache: list[Any] = field(default_factory=list)
    fed: int | None = 0


def _continue_rows(model: Any, tokenizer: Any, starts: list[list[int]], steps: int, eligible: "torch.Tensor",
                   generators: "list[torch.Generator | None]") -> list[list[int]]:
    """Continue each ``starts[r]`` by ``steps`` ids, greedily (``generators[r]`` None) or
    drawn at temperature 1 with ``steps`` uniform numbers from its generator (the first id
    whose cumulative probability passes the draw), stopping at an end id.

    Rows whose texts have the same length share one forward call (a small model's time is
    mostly its calls, not its arithmetic): the shortest batch steps first, and batches that
    reach the same length with the same positions cached merge, their caches side by side.
    Only a row's own logits and its own draws choose its ids, so they are those of
    continuing it alone (tested)."""
    import torch  # deferred: imports torch

    device = next(model.parameters()).device
    context = model.config.context
    eos = set(getattr(tokenizer, "eos_ids", ()) or ())
    outs: list[list[int]] = [[] for _ in starts]
    if steps <= 0:
        return outs
    if not bool(eligible.any()):
        raise GenerationError("no token id is eligible")
    last_eligible = int(torch.nonzero(eligible).max())
    # A sampled row's uniform draws, all at once: its k-th id takes its k-th draw, however
    # the rows are batched.
    uniforms = {row: torch.rand(steps, generator=generator, dtype=torch.float64).tolist()
                for row, generator in enumerate(generators) if generator is not None}

    def length(batch: _Batch) -> int:
        return len(starts[batch.rows[0]]) + len(outs[batch.rows[0]])

    batches: list[_Batch] = []

    def join(batch: _Batch) -> None:
        for other in batches:
            if length(other) == length(batch) and other.fed == batch.fed:
                other.cache = [(torch.cat((a[0], b[0])), torch.cat((a[1], b[1]))) for a, b in zip(other.cache, batch.cache)]
                other.rows += batch.rows
                return
        batches.append(batch)

    for row in range(len(starts)):
        join(_Batch([row]))
    while batches:
        batch = min(batches, key=length)
        batches.remove(batch)
        texts = [starts[r] + outs[r] for r in batch.rows]
        if batch.fed is not None and len(texts[0]) <= context:  # only the ids the cache does not hold yet
            logits = model(torch.tensor([t[batch.fed:] for t in texts], device=device), cache=batch.cache).logits
            batch.fed = len(texts[0])
        else:  # past the context: the last window, whole
            logits = model(torch.tensor([t[-context:] for t in texts], device=device)).logits
            batch.cache, batch.fed = [], None
        newest = logits[:, -1]
        last = newest.to("cpu", torch.float64).masked_fill(~eligible, float("-inf"))
        # One call per decision kind for the whole batch: the highest eligible logit (argmax
        # takes the first, so a tie goes to the smaller id), and for the sampled rows the
        # first id whose cumulative probability passes the row's next uniform draw.
        finite = torch.isfinite(newest).all(dim=1).tolist()
        best = last.argmax(dim=1).tolist()
        drawn = [index for index, row in enumerate(batch.rows) if generators[row] is not None]
        picks: dict[int, int] = {}
        if drawn:
            cumulative = torch.softmax(last[drawn], dim=-1).cumsum(dim=-1)
            targets = torch.tensor([[uniforms[batch.rows[i]][len(outs[batch.rows[i]])]] for i in drawn],
                                   dtype=torch.float64) * cumulative[:, -1:]
            found = torch.searchsorted(cumulative, targets, right=True).clamp(max=last_eligible).flatten()
            picks = dict(zip(drawn, found.tolist()))
        going = []
        for index, row in enumerate(batch.rows):
            if not finite[index]:
                continue  # a diverged model samples nothing
            choice = picks.get(index, best[index])
            outs[row].append(choice)
            if choice not in eos and len(outs[row]) < steps:
                going.append(index)
        if going:
            if len(going) < len(batch.rows):
                keep = torch.tensor(going, device=device)
                batch.cache = [(k.index_select(0, keep), v.index_select(0, keep)) for k, v in batch.cache]
                batch.rows = [batch.rows[i] for i in going]
            join(batch)
    return outs


def sample_seed(seed: int, step: int, place: int) -> int:
    """The seed of the sampled continuation of the prompt at ``place`` at ``step``."""
    digest = hashlib.sha256(f"{seed}:{step}:{place}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def take_samples(model: Any, tokenizer: Any, prompts: list[str], step: int, seed: int,
                 steps: int = SAMPLE_TOKENS) -> SamplesTaken:
    """Each prompt continued greedily and by a seeded sample (see the module doc)."""
    import torch  # deferred: imports torch

    from minigpt_tui.engine.analysis.generation import (  # deferred: imports torch
        eligibility_mask,
    )

    bos = getattr(tokenizer, "bos_id", 0)
    eligible = eligibility_mask(tokenizer.vocab_size, bos_id=bos, eos_ids=tuple(getattr(tokenizer, "eos_ids", ())))
    samples = []
    was_training = model.training
    model.eval()
    try:
        kept = [(prompt, ids) for prompt in prompts
                if (ids := tokenizer.encode_prompt(prompt)) and len(ids) < model.config.context]
        starts = [ids for _, ids in kept for _ in (0, 1)]  # each prompt twice: greedy, then sampled
        generators = [None if kind == 0 else torch.Generator().manual_seed(sample_seed(seed, step, place))
                      for place in range(len(kept)) for kind in (0, 1)]
        with torch.inference_mode():
            outs = _continue_rows(model, tokenizer, starts, steps, eligible, generators)
        for place, (prompt, _) in enumerate(kept):
            greedy, sampled = outs[2 * place], outs[2 * place + 1]
            samples.append(Sample(prompt, tokenizer.decode(greedy).display, tokenizer.decode(sampled).display,
                                  tuple(greedy), tuple(sampled)))
    finally:
        if was_training:
            model.train()
    return SamplesTaken(step, tuple(samples))


def score_heads_at(model: Any, tokenizer: Any, step: int) -> HeadsScored | None:
    """The head roles now, or None where the context is too short for them."""
    from minigpt_tui.engine.analysis.head_roles import (  # deferred: imports torch
        score_heads,
    )

    try:
        return HeadsScored(step, score_heads(model, tokenizer))
    except GenerationError:
        return None
