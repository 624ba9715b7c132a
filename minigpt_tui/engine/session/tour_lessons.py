"""The tour's lessons 7-9: attention and induction heads, a model from elsewhere, and what
fine-tuning changes. The same kind of data as lessons 1-6 (:mod:`tour`): each step's values
are read from an :class:`Observation`, its explanation filled with them, and a claim that
does not hold on the learner's model says so. Torch-free.
"""

from __future__ import annotations

import math

from minigpt_tui.engine.session.tour_seen import (
    Lesson,
    Observation,
    PatchSeen,
    Step,
    Values,
    lens_agrees,
    lens_values,
    quoted,
)

INDUCTION_HEAD = 0.3  # an induction score from here on: the head puts this much weight where induction looks
CLEAR_ROLE = 0.3  # a role score from here on: the head does that at a good share of positions
FACT_SURE = 0.3  # the top candidate's probability from here on: the model is fairly sure of its fact
PATCH_GAP = 2.0  # nats between the clean and corrupt differences for the shares to mean something
RESTORES = 0.8  # a share restored from here on: that site alone carries the difference
FACT_PROMPT = "The capital of France is"
# The fact's country changed: the first as many pieces long as the fact is the check's corrupted prompt.
CORRUPT_PROMPTS = tuple(f"The capital of {country} is" for country in (
    "Italy", "Spain", "Japan", "Germany", "Egypt", "Peru", "Chile", "Cuba", "Iran", "Mali", "Oman", "Fiji"))
ROLE_WORDS = {"induction": "induction", "previous_token": "previous token", "duplicate_token": "duplicate token",
              "first_token": "first token"}


# lesson 7: attention and induction heads ------------------------------------------------------------
def _pattern_values(o: Observation) -> Values | None:
    i = o.insight
    if i is None or i.kind != "pattern" or i.pattern is None or not i.pattern.weights:
        return None
    p = i.pattern
    weights = p.weights
    start = 1 if len(weights) > 1 else 0
    key = max(range(start, len(weights)), key=lambda k: weights[k])
    piece = quoted(p.pieces[key]) if key < len(p.pieces) else "?"
    reads = (f"puts {weights[key]:.2f} of its attention on {piece} (position {key}) and {weights[0]:.2f} on the "
             "first position" if key else f"puts all of its attention on {piece}, the one position it may see")
    return {"layer": p.layer, "head": p.head, "query": quoted(p.pieces[-1]) if p.pieces else "?", "reads": reads,
            "positions": f"{len(weights)} position{'s' if len(weights) > 1 else ''}", "row_sum": sum(weights)}


def _top_words(heads: object) -> str:
    return "; ".join(f"{word}: block {layer} head {head} ({score:.2f})" for role, word in ROLE_WORDS.items()
                     for layer, head, score in (heads.top(role),))  # type: ignore[attr-defined]


def _no_induction_why(blocks: int, more: str = "") -> str:
    if blocks == 1:
        return ("a model of one block cannot have one: the head that notes the previous token and the head "
                "that uses it sit in different blocks.")
    return ("an induction head forms only after many updates on text that repeats itself, and these scores use "
            "random ids repeated: ids the training text never used keep their first, random embeddings, so a model "
            f"of a small alphabet may score low here; a model trained on varied text (lesson 8's) shows them{more}.")


def _grid_values(o: Observation) -> Values | None:
    h, i = o.heads, o.insight
    if h is None or i is None or i.pattern is None:
        return None
    shown = h.of(i.pattern.layer, i.pattern.head)
    if shown is None:
        return None
    layer, head, induction = h.top("induction")
    return {"layer": i.pattern.layer, "head": i.pattern.head, "induction": shown["induction"],
            "previous": shown["previous_token"], "duplicate": shown["duplicate_token"], "first": shown["first_token"],
            "tops": _top_words(h), "chance": h.chance, "top_layer": layer, "top_head": head, "top_induction": induction,
            "why": _no_induction_why(h.layers, "; step 3 watches a run for it")}


def _moved_to_another_head(o: Observation) -> bool:
    h, i = o.heads, o.insight
    return (h is not None and i is not None and i.pattern is not None
            and ((i.pattern.layer, i.pattern.head) != (0, 0) or h.layers * h.heads == 1))


def _bump_values(o: Observation) -> Values | None:
    t = o.training
    if t is None or len(t.induction) < 2:
        return None
    strongest = max(t.induction, key=lambda p: (p[3], -p[0]))
    if t.state not in ("finished", "stopped") and strongest[3] < INDUCTION_HEAD:
        return None
    first, last = t.induction[0], t.induction[-1]
    rises = [(after[3] - before[3], before[0], after[0]) for before, after in zip(t.induction, t.induction[1:])]
    rise, bump_from, bump_to = max(rises, key=lambda r: (r[0], -r[1]))
    validation = {e.step: e.validation for e in t.evaluations}
    return {"run": t.run, "first_step": first[0], "first_score": first[3], "last_step": last[0], "last_score": last[3],
            "best_step": strongest[0], "best_score": strongest[3], "best_layer": strongest[1],
            "best_head": strongest[2], "rise": rise, "bump_from": bump_from, "bump_to": bump_to,
            "val_from": validation.get(bump_from, math.nan), "val_to": validation.get(bump_to, math.nan),
            "why": _no_induction_why(t.blocks), "induction_head": INDUCTION_HEAD}


LESSON_ATTENTION = Lesson(7, "Attention and induction heads", (
    "Each head of a block reads the positions before it: a softmax over them says how much of "
    "each it adds to the stream. Some heads learn a job: an induction head, at a token seen "
    "before, looks at what followed that earlier copy, so a repeat becomes easy to predict."), (
    Step("h", "On the Generation screen, with a decision selected (n takes one), press h for the head view.",
         "the pattern: a row per query position, a column per position it reads",
         "Block {layer} head {head}, at the last position ({query}), {reads}. Its row is a softmax over the "
         "{positions} it may see, itself and those before it, never a later one: the weights add up to "
         "{row_sum:.4f}.",
         values=_pattern_values,
         holds=lambda v: math.isclose(v["row_sum"], 1.0, abs_tol=1e-3),
         otherwise="The weights of block {layer} head {head} at the last position add up to {row_sum:.4f}, not 1."),
    Step("] } o", "Move to other heads (] the next block, } the next head, [ and the opening curly bracket "
         "back; j types one) and press o to cycle the grid's roles.",
         "the grid of every head's score for one role, the shown head bracketed",
         "The grid scores every head on random tokens repeated twice. Block {layer} head {head}: induction "
         "{induction:.2f}, previous token {previous:.2f}, duplicate token {duplicate:.2f}, first token "
         "{first:.2f}. The strongest of each role: {tops}. A head spreading its weight evenly would score "
         "about {chance:.2f} for induction; block {top_layer} head {top_head} scores {top_induction:.2f}: an "
         "induction head.",
         values=_grid_values, seen=_moved_to_another_head,
         holds=lambda v: v["top_induction"] >= INDUCTION_HEAD,
         otherwise="The grid scores every head on random tokens repeated twice. Block {layer} head {head}: "
                   "induction {induction:.2f}, previous token {previous:.2f}, duplicate token {duplicate:.2f}, "
                   "first token {first:.2f}. The strongest of each role: {tops}. No head of this model is an "
                   "induction head yet (the strongest scores {top_induction:.2f}; spreading evenly scores about "
                   "{chance:.2f}): {why}",
         long_run=True),
    Step("t, n, space", "On the Training screen start a text run (n, preset text; your own text as the corpus) "
         "and let it go: the Watch panel scores the heads at each evaluation.",
         "the Watch panel's induction row and its sparkline, and the loss plot beside it",
         "Your run {run}'s strongest induction score went from {first_score:.2f} at update {first_step} to "
         "{best_score:.2f} at update {best_step} (block {best_layer} head {best_head}). The bump: it rose most, "
         "by {rise:.2f}, between updates {bump_from} and {bump_to}, while the validation loss went from "
         "{val_from:.3f} to {val_to:.3f}. Once a head copies what followed an earlier copy, every repeat in "
         "the text is cheap to predict.",
         values=_bump_values,
         holds=lambda v: v["best_score"] >= INDUCTION_HEAD,
         otherwise="No induction head appeared on your run {run}: the strongest induction score went from "
                   "{first_score:.2f} at update {first_step} to {last_score:.2f} at update {last_step} (its "
                   "highest {best_score:.2f}; {induction_head:.1f} or more makes an induction head). On your run, {why}",
         long_run=True),
))


# lesson 8: a model from elsewhere -------------------------------------------------------------------
def _model_values(o: Observation) -> Values | None:
    m = o.model
    if o.screen != "generation" or m is None:
        return None
    return {"name": m.name, "source": m.source, "family": m.family, "layers": m.layers, "heads": m.heads,
            "vocab": m.vocab, "cells": m.layers * m.heads}


def _fact_values(o: Observation) -> Values | None:
    d = o.decision
    if o.model is None or d is None or len(d.candidates) < 2:
        return None
    first, second = d.candidates[0], d.candidates[1]
    return {"prompt": repr(d.prompt), "top": quoted(first.piece), "top_p": first.raw,
            "second": quoted(second.piece), "second_p": second.raw, "name": o.model.name}


def _model_lens_values(o: Observation) -> Values | None:
    values = lens_values(o) if o.model is not None else None
    return None if values is None else {**values, "name": o.model.name}  # type: ignore[union-attr]


def _strongest_values(o: Observation) -> Values | None:
    h = o.heads
    if o.model is None or h is None:
        return None
    best = max((h.top(role) + (word,) for role, word in ROLE_WORDS.items()), key=lambda t: t[2])
    return {"name": o.model.name, "tops": _top_words(h), "cells": h.layers * h.heads, "best_role": best[3],
            "best_layer": best[0], "best_head": best[1], "best_score": best[2], "chance": h.chance}


def _restoring(p: PatchSeen) -> tuple[tuple[str, int, int, float], str, float]:
    """The residual-stream patch at a changed position that restores most, what the last
    position shows, and the best share anywhere."""
    resid = [r for r in p.restored if r[0] == "resid"] or list(p.restored)
    at_diff = [r for r in resid if r[2] in p.differing] or resid
    early = max(at_diff, key=lambda r: (r[3], -r[1]))
    return early, _moved_words([r for r in resid if r[2] == p.last]), max(r[3] for r in resid)


def _moved_words(at_last: list[tuple[str, int, int, float]]) -> str:
    """From which block patching the last position alone restores the difference."""
    late = [r for r in at_last if r[3] >= RESTORES]
    if not late:
        return "no block restores it alone at the last position"
    moved = min(late, key=lambda r: r[1])
    return f"at the last position it restores {moved[3]:.0%} from block {moved[1]} on, where the information has moved"


def _patch_values(o: Observation) -> Values | None:
    p = o.patching
    if p is None or not p.restored:
        return None
    early, moved, best = _restoring(p)
    return {"clean": repr(p.clean), "corrupt": repr(p.corrupt), "answer": quoted(p.answer),
            "against": quoted(p.against), "clean_difference": p.clean_difference,
            "corrupt_difference": p.corrupt_difference, "gap": p.clean_difference - p.corrupt_difference,
            "early_layer": early[1], "early_position": early[2], "early_share": early[3], "moved": moved,
            "best_share": best, "restores": RESTORES, "patch_gap": PATCH_GAP}


LESSON_ELSEWHERE = Lesson(8, "A model from elsewhere", (
    "The instruments read any model the app opens: a GGUF file or a transformers folder (SmolLM2, "
    "Llama, Qwen2, GPT-2...). A fact it knows, where in its blocks the answer appears, its "
    "strongest heads, and which parts carry the fact when the prompt is corrupted."), (
    Step("g, enter", "On the Generation screen type the path of a GGUF file or a transformers folder in the "
         "model field and press enter (the line under the form counts the weights read).",
         "the title: the model's name; the decisions' heading: its shape",
         "You opened {name}, a {family} model from {source}: {layers} blocks of {heads} heads ({cells} heads in "
         "all), {vocab} ids in its vocabulary. Everything the app shows reads it as it reads its own models.",
         values=_model_values,
         holds=lambda v: v["source"] in ("transformers", "gguf"),
         otherwise="{name} is one of this app's own models ({source}); this lesson opens a model from elsewhere: "
                   "type the path of a GGUF file or a transformers folder."),
    Step("n", f"Set the prompt to a fact, such as '{FACT_PROMPT}' (no space at the end: lesson 5), and take a "
         "decision.",
         "the candidate table",
         "After {prompt}, {name} puts p {top_p:.3f} on {top} and {second_p:.3f} on {second}: the fact is in its "
         "weights.",
         values=_fact_values,
         holds=lambda v: v["top_p"] >= FACT_SURE,
         otherwise="After {prompt}, {name} is unsure: its top candidate {top} has p {top_p:.3f}, the next "
                   "{second} {second_p:.3f}. A small or random model knows few facts; try a well-known one, "
                   "stated the way its training text would."),
    Step("l", "Press l for the lens of that decision.",
         "the rank of the chosen id block by block",
         "The answer {chosen_piece} is rank {first_rank} after {first_site} and first ranks 1 at {top_site}; "
         "at {last_site} it is rank {last_rank}, p {last_p:.4f}, the decision's own numbers: the early blocks "
         "gather the context, the later ones turn it into the answer.",
         values=_model_lens_values,
         holds=lens_agrees,
         otherwise="The lens's last row (rank {last_rank}, p {last_p:.4f}) is not the decision's own "
                   "(rank {decision_rank}, p {decision_p:.4f})."),
    Step("h, o", "Press h for the head view and o to cycle the grid's roles over every head.",
         "the grid: the brightest cells are the strongest heads",
         "The strongest head of each role in {name}'s {cells} heads: {tops}. The clearest is block "
         "{best_layer} head {best_head}, a {best_role} head at {best_score:.2f}.",
         values=_strongest_values,
         holds=lambda v: v["best_score"] >= CLEAR_ROLE,
         otherwise="No head of {name} does a role clearly: the strongest of each: {tops}. A random or barely "
                   "trained model has no jobs shared out yet."),
    Step("p", "Press p, type a corrupted prompt (one word changed, such as 'The capital of Italy is') and the "
         "answers to compare, and let the sweep run.",
         "the summary: the two prompts' differences, then the grid of shares restored",
         "The clean prompt {clean} prefers {answer} over {against} by {clean_difference:.2f} nats, the corrupt "
         "{corrupt} by {corrupt_difference:.2f}: {gap:.2f} apart. Putting the clean run's stream into the "
         "corrupt one at the changed word in block {early_layer} restores {early_share:.0%} of that; {moved}.",
         values=_patch_values,
         holds=lambda v: v["gap"] >= PATCH_GAP and v["best_share"] >= RESTORES,
         otherwise="The clean prompt {clean} and the corrupt {corrupt} give differences {clean_difference:.2f} "
                   "and {corrupt_difference:.2f} nats, {gap:.2f} apart, and the best site restores "
                   "{best_share:.0%}: the shares mean something when the prompts are {patch_gap:g} nats or more "
                   "apart and a site restores {restores:.0%}; choose a corrupt prompt that changes the answer."),
))


# lesson 9: fine-tuning changes what surprises the model ------------------------------------------
def _scored_values(o: Observation) -> Values | None:
    s = o.scores
    if s is None or not s.tokens:
        return None
    worst = max(s.tokens, key=lambda t: t[1])
    return {"model": s.model, "mean": s.mean, "perplexity": math.exp(s.mean), "count": len(s.tokens),
            "worst": quoted(worst[0]), "worst_loss": worst[1], "worst_p": math.exp(-worst[1])}


def _finetune_values(o: Observation) -> Values | None:
    t = o.training
    if t is None or t.preset != "finetune" or t.state not in ("finished", "stopped") or len(t.evaluations) < 2:
        return None
    first, last = t.evaluations[0], t.evaluations[-1]
    return {"run": t.run, "step": t.step, "first_step": first.step, "first_val": first.validation,
            "last_step": last.step, "last_val": last.validation}


def _compared_values(o: Observation) -> Values | None:
    s = o.scores
    if s is None or s.second is None or s.second_mean is None or len(s.second_losses) != len(s.tokens):
        return None
    gains = sorted(((b - a, piece) for (piece, a), b in zip(s.tokens, s.second_losses)), reverse=True)[:3]
    return {"tuned": s.model, "original": s.second, "after": s.mean, "before": s.second_mean,
            "fell": s.second_mean - s.mean, "ratio": math.exp(s.second_mean - s.mean),
            "gains": ", ".join(f"{quoted(piece)} {gain:+.2f}" for gain, piece in gains)}


LESSON_FINETUNE = Lesson(9, "Fine-tuning changes what surprises the model", (
    "A token's loss is -ln p: how surprised the model was by it. Fine-tuning goes on training a "
    "model on your own text; afterwards the same text surprises it less, most where the text is "
    "most its own."), (
    Step("s", "On the Generation screen, with the model of lesson 8 loaded, press s and score a text file (a few "
         "paragraphs of the text you will fine-tune on).",
         "the Text view: each token coloured by its loss",
         "{model} reads your {count} tokens with a mean loss of {mean:.3f} nats (perplexity {perplexity:.1f}: "
         "as unsure as a choice among that many ids). The most surprising is {worst}: {worst_loss:.2f} nats, "
         "p {worst_p:.4f}.",
         values=_scored_values),
    Step("t, n", "On the Training screen press n, choose the finetune preset, the model in the model field and "
         "your text as the corpus, and let it run (space).",
         "the validation column of the evaluation rows",
         "Your fine-tune {run} ran {step} updates: validation loss {first_val:.3f} at update {first_step}, "
         "{last_val:.3f} at update {last_step}.",
         values=_finetune_values,
         holds=lambda v: v["last_val"] < v["first_val"],
         otherwise="Your fine-tune {run} ran {step} updates, but its validation loss went from {first_val:.3f} to "
                   "{last_val:.3f}: it did not fall; a smaller learning rate, or a text with more of itself to "
                   "learn, helps."),
    Step("g, m, s", "On the Generation screen load the fine-tuned run (RUN:latest), press m for the original "
         "model as the second model, then s to score the same text.",
         "the Text view's two mean losses, and d for the change per token",
         "The same text: {before:.3f} nats a token before the fine-tune ({original}), {after:.3f} after "
         "({tuned}): {fell:.3f} less, so each token is on average {ratio:.2f} times likelier. Least surprising "
         "now, by the most: {gains}.",
         values=_compared_values,
         holds=lambda v: v["after"] < v["before"],
         otherwise="The same text: {before:.3f} nats a token with {original}, {after:.3f} with {tuned}: the "
                   "fine-tuned model (loaded first, A) is not less surprised; score a text like the one it "
                   "trained on."),
))
