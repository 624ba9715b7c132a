"""Watching a run learn: samples and head roles at every scheduled evaluation.

After each scheduled evaluation a run continues a few prompts twice, greedily and by a
seeded sample at temperature 1, and scores every attention head's role (induction,
previous-token, duplicate-token, first-token; see :mod:`head_roles`). The prompts come from
``--sample-prompts FILE`` (the probes format), else from the run's probes, else from the
first words of the corpus's first validation records (training records without a
validation split).

Both read the model in evaluation mode without gradients, and the sample draws from a
generator of its own (seeded from ``seeds.sampling`` and the step), never from a training
stream: a run with them and one without have the same records and the same state digest.
"""

from __future__ import annotations

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
    import torch  # deferred: imports torch

    from minigpt_tui.engine.analysis.generation import (  # deferred: imports torch
        greedy_choice,
    )

    device = next(model.parameters()).device
    context = model.config.context
    eos = set(getattr(tokenizer, "eos_ids", ()) or ())
    out: list[int] = []
    cache: list[Any] = []  # keys and values of the ids fed so far, while the whole text fits the context
    fed = 0
    for _ in range(steps):
        text = ids + out
        if len(text) <= context:  # only the ids the cache does not hold yet
            logits = model(torch.tensor([text[fed:]], device=device), cache=cache).logits
            fed = len(text)
        else:  # past the context: the last window, whole
            logits = model(torch.tensor([text[-context:]], device=device)).logits
        logits = logits[0, -1].to("cpu", torch.float64)
        if not bool(torch.isfinite(logits).all()):
            break  # a diverged model samples nothing
        if generator is None:
            choice = greedy_choice(logits, eligible)
        else:
            probabilities = torch.softmax(logits.masked_fill(~eligible, float("-inf")), dim=-1)
            choice = int(torch.multinomial(probabilities, 1, generator=generator))
        out.append(choice)
        if choice in eos:
            break
    return out


def take_samples(model: Any, tokenizer: Any, prompts: list[str], step: int, seed: int,
                 steps: int = SAMPLE_TOKENS) -> SamplesTaken:
    """Each prompt continued greedily and by a seeded sample (see the module doc)."""
    import torch  # deferred: imports torch

    from minigpt_tui.engine.analysis.generation import (  # deferred: imports torch
        eligibility_mask,
    )

    bos = getattr(tokenizer, "bos_id", 0)
    eligible = eligibility_mask(tokenizer.vocab_size, bos_id=bos, eos_ids=tuple(getattr(tokenizer, "eos_ids", ())))
    generator = torch.Generator().manual_seed((seed * 1_000_003 + step) % 2**63)
    samples = []
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for prompt in prompts:
                ids = tokenizer.encode_prompt(prompt)
                if not ids or len(ids) >= model.config.context:
                    continue
                greedy = _continue(model, tokenizer, ids, steps, eligible, None)
                sampled = _continue(model, tokenizer, ids, steps, eligible, generator)
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
