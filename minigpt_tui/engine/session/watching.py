"""Watching a run learn: samples and head roles at every scheduled evaluation.

After each scheduled evaluation a run continues a few prompts twice, greedily and by a
seeded sample at temperature 1, and scores every attention head's role (induction,
previous-token, duplicate-token, first-token; see :mod:`..analysis.head_roles`). The prompts come from
``--sample-prompts FILE`` (the probes format), else from the run's probes, else from the
first words of the corpus's first validation records (training records without a
validation split).

Both read the model in evaluation mode without gradients, and each prompt's sample draws
from a generator of its own (seeded from ``seeds.sampling``, the step and the prompt's
place, :func:`sample_seed`), never from a training stream: a run with them and one without
have the same records and the same state digest. All the continuations are the rows of
one batch (:func:`_continue_rows`, through the decoding loop that the decision stepper
uses too), and what every evaluation reads the same way is
prepared once a run (:class:`Watcher`).
"""

from __future__ import annotations

import hashlib
import math
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


def _continue_rows(model: Any, tokenizer: Any, starts: list[list[int]], steps: int, eligible: "torch.Tensor",
                   generators: "list[torch.Generator | None]") -> list[list[int]]:
    """Continue each ``starts[r]`` by ``steps`` ids, greedily (``generators[r]`` None) or
    drawn at temperature 1 with ``steps`` uniform numbers from its generator (the first id
    whose cumulative probability passes the draw), stopping at an end id.

    Every row is fed in one forward call per step (a small model's time is mostly its
    calls, not its arithmetic) by the decoding loop's :class:`Decoder`: with the key/value
    cache a call feeds each row up to the length of the shortest text, the rows whose text
    is that long choose their next id, and the longer ones ride along feeding their own
    known ids until the shorter ones have caught up; past the context every row feeds its
    last window, whole. Only a row's own logits and its own draws choose its ids, so they
    are those of continuing it alone (tested)."""
    from minigpt_tui.engine.analysis.decoding import (  # deferred: imports torch
        Decoder,
    )

    outs: list[list[int]] = [[] for _ in starts]
    if steps <= 0:
        return outs
    last_eligible, ineligible = _last_eligible(eligible), ~eligible
    uniforms = _uniform_draws(generators, steps)
    eos = set(getattr(tokenizer, "eos_ids", ()) or ())
    decoder = Decoder(model, use_cache=True, last_only=False)
    rows = list(range(len(starts)))
    while rows:
        fed = decoder.feed([starts[r] + outs[r] for r in rows])
        picks = _choose(_newest(fed, ineligible), [rows[i] for i in fed.deciding], outs, uniforms, last_eligible)
        going = _going_on(fed.deciding, picks, rows, outs, steps, eos, fed.every_row_decides)
        if len(going) < len(rows):
            decoder.keep(going)
            rows = [rows[i] for i in going]
    return outs


def _last_eligible(eligible: "torch.Tensor") -> int:
    """The highest id a row may take; refused in one line when none may be taken."""
    import torch  # deferred: imports torch

    if not bool(eligible.any()):
        raise GenerationError("no token id is eligible")
    return int(torch.nonzero(eligible).max())


def _uniform_draws(generators: "list[torch.Generator | None]", steps: int) -> dict[int, list[float]]:
    """A sampled row's uniform draws, all at once: its k-th id takes its k-th draw, however
    the rows are batched."""
    import torch  # deferred: imports torch

    return {row: torch.rand(steps, generator=generator, dtype=torch.float64).tolist()
            for row, generator in enumerate(generators) if generator is not None}


def _newest(fed: Any, ineligible: "torch.Tensor") -> "torch.Tensor":
    """The deciding rows' last logits [rows, V], float64 on the CPU, ineligible ids at -inf."""
    import torch  # deferred: imports torch

    logits = fed.output.logits
    newest = logits[:, -1] if fed.every_row_decides else logits[list(fed.deciding), -1]
    return newest.to("cpu", torch.float64).masked_fill(ineligible, float("-inf"))


def _going_on(deciding: tuple[int, ...], picks: "list[int | None]", rows: list[int], outs: list[list[int]],
              steps: int, eos: set[int], every: bool) -> list[int]:
    """Each deciding row's pick appended to its ids; the places in ``rows`` (ascending) of
    the rows that go on: those riding along, and the deciders that picked an id that is
    not an end id and have room for more."""
    going = [] if every else sorted(set(range(len(rows))) - set(deciding))  # riding along
    for index, choice in zip(deciding, picks):
        if choice is None:
            continue  # a diverged model samples nothing
        row = rows[index]
        outs[row].append(choice)
        if choice not in eos and len(outs[row]) < steps:
            going.append(index)
    return sorted(going)


def _choose(last: "torch.Tensor", rows: list[int], outs: list[list[int]], uniforms: dict[int, list[float]],
            last_eligible: int) -> "list[int | None]":
    """The next id of each of ``rows`` from its eligible logits, a row of ``last`` [rows, V]
    (float64, ineligible ids at -inf); None where its highest eligible logit is not finite
    (a NaN, an overflow). One call per decision kind for the whole batch: the highest logit
    (max takes the first, so a tie goes to the smaller id), and for the sampled rows the
    first id whose cumulative probability passes the row's next uniform draw."""
    import torch  # deferred: imports torch

    highest, best_ids = last.max(dim=1)
    picks: list[int | None] = best_ids.tolist()
    for index, value in enumerate(highest.tolist()):
        if not math.isfinite(value):
            picks[index] = None
    drawn = [index for index, row in enumerate(rows) if row in uniforms and picks[index] is not None]
    if drawn:
        # The sampled rows after the greedy ones are a slice of ``last``, not a gather.
        tail = drawn == list(range(drawn[0], len(rows)))
        cumulative = torch.softmax(last[drawn[0]:] if tail else last[drawn], dim=-1).cumsum(dim=-1)
        totals = cumulative[:, -1].tolist()
        targets = torch.tensor([[uniforms[rows[i]][len(outs[rows[i]])] * total] for i, total in zip(drawn, totals)],
                               dtype=torch.float64)
        found = torch.searchsorted(cumulative, targets, right=True).flatten().tolist()
        for index, choice in zip(drawn, found):
            picks[index] = min(choice, last_eligible)
    return picks


def sample_seed(seed: int, step: int, place: int) -> int:
    """The seed of the sampled continuation of the prompt at ``place`` at ``step``."""
    digest = hashlib.sha256(f"{seed}:{step}:{place}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


class Watcher:
    """A run's samples and head scores. What every evaluation reads the same way is
    prepared once, when the watcher is made at the run's first evaluation: the prompts'
    ids, the ids a sample may take, and the sequences the heads are scored on (a run's
    model, tokenizer, vocabulary and context do not change)."""

    def __init__(self, model: Any, tokenizer: Any, prompts: list[str]) -> None:
        from minigpt_tui.engine.analysis.generation import (  # deferred: imports torch
            eligibility_mask,
        )
        from minigpt_tui.engine.analysis.head_roles import (  # deferred: imports torch
            role_sequences,
        )

        self.model, self.tokenizer = model, tokenizer
        self.eligible = eligibility_mask(tokenizer.vocab_size, bos_id=getattr(tokenizer, "bos_id", 0),
                                         eos_ids=tuple(getattr(tokenizer, "eos_ids", ())))
        self.prompts = [(prompt, ids) for prompt in prompts
                        if (ids := tokenizer.encode_prompt(prompt)) and len(ids) < model.config.context]
        try:
            self.sequences = role_sequences(model, tokenizer)
        except GenerationError:
            self.sequences = None  # the context is too short for them

    def samples(self, step: int, seed: int, steps: int = SAMPLE_TOKENS) -> SamplesTaken:
        """Each prompt continued greedily and by a seeded sample (see the module doc)."""
        import torch  # deferred: imports torch

        from minigpt_tui.engine.models.model import (  # deferred: imports torch
            evaluating,
        )

        model, tokenizer, kept = self.model, self.tokenizer, self.prompts
        starts = [ids for _, ids in kept] * 2  # each prompt twice: the greedy rows, then the sampled ones
        generators = [None] * len(kept) + [torch.Generator().manual_seed(sample_seed(seed, step, place))
                                           for place in range(len(kept))]
        with evaluating(model), torch.inference_mode():
            outs = _continue_rows(model, tokenizer, starts, steps, self.eligible, generators)
        samples = []
        for place, (prompt, _) in enumerate(kept):
            greedy, sampled = outs[place], outs[len(kept) + place]
            samples.append(Sample(prompt, tokenizer.decode(greedy).display, tokenizer.decode(sampled).display,
                                  tuple(greedy), tuple(sampled)))
        return SamplesTaken(step, tuple(samples))

    def heads(self, step: int) -> HeadsScored | None:
        """The head roles now, or None where the context is too short for them."""
        from minigpt_tui.engine.analysis.head_roles import (  # deferred: imports torch
            score_heads,
        )

        if self.sequences is None:
            return None
        return HeadsScored(step, score_heads(self.model, self.tokenizer, sequences=self.sequences))
