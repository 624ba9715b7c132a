"""The ideas behind the numbers the screens show, one short entry each. A screen's help (?)
ends with the entries whose word its help text uses; the guide's glossary holds the same
entries (a test keeps them equal)."""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Concept:
    term: str  # as the glossary heads it
    words: tuple[str, ...]  # lower-case words whose presence in a help text calls for it
    text: str


CONCEPTS: tuple[Concept, ...] = (
    Concept("Attention head", ("head",),
            "one of several attention patterns a block computes side by side. Each head has its "
            "own query, key and value projections: it reads earlier positions in the proportions "
            "its pattern gives and adds what it read to the residual stream. \"block 3 head 6\" "
            "(L3 H6) counts both from 0."),
    Concept("Induction head", ("induction",),
            "a head that, at a token seen before, attends to the token that followed the earlier "
            "copy, so the model can predict it again (A B … A → B). When one forms during "
            "training, the loss on repeated text drops quickly: the induction bump."),
    Concept("Residual stream", ("residual",),
            "the running sum each block reads and adds to: the embeddings, then every attention "
            "and feed-forward output. The logit lens and the contributions read it."),
    Concept("Nats and perplexity", ("loss", "nats", "entropy"),
            "losses are cross-entropies in nats (natural logarithms). A loss of L nats means the "
            "right token got probability e^-L on average (a geometric mean); the perplexity e^L "
            "is how many equally likely choices would be as uncertain. A uniform guess over V "
            "tokens has loss ln V (5.5 nats for 256)."),
    Concept("Validation loss and overfitting", ("validation",),
            "the loss on records the run never trains on. While it falls with the training loss "
            "the model is learning what generalises; when the training loss keeps falling and "
            "the validation loss rises, the model is memorising its training text. The best step "
            "is where validation was lowest."),
    Concept("Activation patching", ("patch",),
            "run a clean prompt and a corrupt one that differs in one detail; copy one site's "
            "activation from the clean run into the corrupt run and measure how much of the "
            "clean answer's logit difference comes back (1 = all of it). The sites that restore "
            "most are where the detail travels."),
    Concept("KL divergence", ("kl",),
            "KL(A||B) = Σ p_A · ln(p_A / p_B), in nats: how much B's next-token distribution "
            "loses against A's. It is 0 exactly when the two agree, and not symmetric."),
)


def concepts_in(text: str) -> tuple[Concept, ...]:
    """The entries whose words appear in ``text`` (as whole words or word starts)."""
    lowered = text.lower()
    return tuple(c for c in CONCEPTS if any(re.search(rf"\b{re.escape(w)}", lowered) for w in c.words))


def concepts_markdown(concepts: tuple[Concept, ...]) -> str:
    return "\n".join(f"- **{c.term}**: {c.text}" for c in concepts)
