"""The tour: short lessons beside the live screens, as data. Each step says what to do (a key),
where to look, and explains what happened with the learner's own numbers: a template filled
with values read from an :class:`Observation` of the app (or of the headless check), and a
predicate that says the step is done. A claim that does not hold on the learner's run is said
in the step's ``otherwise`` template instead.

One source, three readers: the app's tour panel, ``minigpt-tui tour --check`` (the same
observations made headless) and the guide's page (:func:`guide_markdown`). Lessons 1-6 are
here, 7-9 in :mod:`tour_lessons`; what the tour sees is in :mod:`tour_seen`. Torch-free.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from pathlib import Path

from minigpt_tui.engine.core.errors import ConfigError
from minigpt_tui.engine.core.precision import precision_named
from minigpt_tui.engine.session.tour_lessons import LESSON_ATTENTION, LESSON_ELSEWHERE, LESSON_FINETUNE
from minigpt_tui.engine.session.tour_seen import (  # re-exported: the app, the check and tests read them here
    AliasSeen,
    CandidateSeen,
    CheckpointSeen,
    DecisionSeen,
    EvaluationSeen,
    FileSeen,
    Finding,
    HeadsSeen,
    InsightSeen,
    Lesson,
    LensSeen,
    ModelSeen,
    Observation,
    PatchSeen,
    PatternSeen,
    ScoresSeen,
    Step,
    TokensSeen,
    TrainingSeen,
    Values,
    checkpoint_seen,
    decision_seen,
    finding,
    heads_seen,
    insight_seen,
    lens_values,
    model_seen,
    patch_seen,
    scores_seen,
    shown_pieces,
    tokens_seen,
    training_seen,
)
from minigpt_tui.engine.session.tour_seen import quoted as _quoted

OVERFITTING_MARGIN = 0.05  # nats the validation loss must rise above its lowest to call it overfitting
TRAILING_SPACE_PROMPT = "The key is"

__all__ = ["AliasSeen", "CandidateSeen", "CheckpointSeen", "DecisionSeen", "EvaluationSeen", "FileSeen", "Finding",
           "HeadsSeen", "InsightSeen", "Lesson", "LensSeen", "ModelSeen", "Observation", "PatchSeen", "PatternSeen",
           "ScoresSeen", "Step", "TokensSeen", "TrainingSeen", "Values", "checkpoint_seen", "decision_seen",
           "finding", "heads_seen", "insight_seen", "model_seen", "patch_seen", "scores_seen", "shown_pieces",
           "tokens_seen", "training_seen", "LESSONS", "MODEL_LESSONS", "lesson", "guide_markdown", "TRAILING_SPACE_PROMPT",
           "OVERFITTING_MARGIN"]


# lesson 1: a distribution over next tokens -------------------------------------------------------
def _softmax_values(o: Observation) -> Values | None:
    d = o.decision
    if d is None or len(d.candidates) < 2:
        return None
    first, second = d.candidates[0], d.candidates[1]
    difference = first.logit - second.logit
    return {"top_piece": _quoted(first.piece), "top_logit": first.logit, "top_p": first.raw,
            "second_piece": _quoted(second.piece), "second_logit": second.logit, "second_p": second.raw,
            "logit_gap": difference, "factor": math.exp(difference),
            "p_ratio": first.raw / second.raw if second.raw else math.inf}


def _greedy_values(o: Observation) -> Values | None:
    d = o.decision
    if d is None or d.rule != "greedy" or len(d.chosen_ranks) < 3:
        return None
    return {"decisions": len(d.chosen_ranks), "output": repr(d.output),
            "not_first": sum(rank != 1 for rank in d.chosen_ranks)}


def _temperature_values(sharper: bool) -> Callable[[Observation], Values | None]:
    def values(o: Observation) -> Values | None:
        d = o.decision
        if d is None or d.rule != "sample" or (d.temperature < 1) != sharper or d.temperature == 1:
            return None
        top = d.candidates[0]
        return {"temperature": d.temperature, "top_piece": _quoted(top.piece), "raw_p": top.raw,
                "selection_p": top.selection, "filters": d.top_k is not None or d.top_p is not None}

    return values


def _sharpens(v: Values) -> bool:
    return v["selection_p"] >= v["raw_p"] and not v["filters"]


def _flattens(v: Values) -> bool:
    return v["selection_p"] <= v["raw_p"] and not v["filters"]


LESSON_DISTRIBUTION = Lesson(1, "A model's output is a distribution", (
    "Each decision gives every id of the vocabulary a logit; softmax turns the logits into "
    "probabilities, and a rule picks one id."), (
    Step("g, n", "On the Generation screen, load a model and take one decision: n loads the newest run "
         "(type a prompt first, such as 'The key is '). No run yet? t, then space, trains one in seconds.",
         "the candidate table: each id's logit, raw p and selection p",
         "Softmax turns logits into probabilities that sum to 1. Your top candidate {top_piece} has logit "
         "{top_logit:.3f} and p {top_p:.4f}; the next, {second_piece}, logit {second_logit:.3f} and p "
         "{second_p:.4f}. {logit_gap:.3f} more logit makes an id e^{logit_gap:.3f} = {factor:.3f} times "
         "likelier, and the table's ratio of the two is {p_ratio:.3f}.",
         seen=lambda o: o.decision is not None, values=_softmax_values,
         holds=lambda v: math.isclose(v["p_ratio"], v["factor"], rel_tol=1e-6),
         otherwise="The ratio of your top two probabilities, {p_ratio:.3f}, is not e^{logit_gap:.3f} = "
                   "{factor:.3f}: these are not softmax probabilities of these logits."),
    Step("n", "Take a few more decisions with the rule greedy (n, or r to run to the end).",
         "the ▶ in the candidate table and the output below",
         "Greedy took rank 1 at each of your {decisions} decisions and wrote {output}: the same prompt "
         "gives the same text every time.",
         values=_greedy_values,
         holds=lambda v: v["not_first"] == 0,
         otherwise="{not_first} of your {decisions} decisions did not take rank 1: a forced id (f) replaces "
                   "the rule's choice."),
    Step("tab, ctrl+r, n", "In the form choose sample, set temperature to 0.5 (leave top-k and top-p "
         "empty), ctrl+r to start over, n for a decision.",
         "raw p beside selection p",
         "At temperature {temperature:g} the logits are divided by {temperature:g} before softmax: your top "
         "candidate {top_piece} goes from raw p {raw_p:.4f} to selection p {selection_p:.4f}. Below 1 the "
         "distribution sharpens "
         "toward greedy.",
         values=_temperature_values(True),
         holds=_sharpens,
         otherwise="Your top candidate {top_piece} has selection p {selection_p:.4f} against raw p "
                   "{raw_p:.4f}: top-k or top-p change it as well; empty them to see temperature alone."),
    Step("tab, ctrl+r, n", "Now set temperature to 2, ctrl+r, n.",
         "raw p beside selection p",
         "At temperature {temperature:g} your top candidate {top_piece} falls from raw p {raw_p:.4f} to "
         "selection p "
         "{selection_p:.4f}: above 1 the distribution flattens and unlikely ids are drawn more often.",
         values=_temperature_values(False),
         holds=_flattens,
         otherwise="Your top candidate {top_piece} has selection p {selection_p:.4f} against raw p "
                   "{raw_p:.4f}: top-k or top-p change it as well; empty them to see temperature alone."),
))


# lesson 2: training lowers the loss; validation tells the truth -----------------------------------
def _started_values(o: Observation) -> Values | None:
    t = o.training
    if t is None or t.step < 1:
        return None
    return {"run": t.run, "steps": t.steps}


def _falling_values(o: Observation) -> Values | None:
    t = o.training
    if t is None or len(t.evaluations) < 2:
        return None
    first, last = t.evaluations[0], t.evaluations[-1]
    return {"first_update": first.step, "first_train": first.train, "first_val": first.validation,
            "last_update": last.step, "last_train": last.train, "last_val": last.validation,
            "mean_p": math.exp(-last.train)}


def _overfitting_values(o: Observation) -> Values | None:
    t = o.training
    if t is None or t.state not in ("finished", "stopped") or len(t.evaluations) < 2:
        return None
    best = min(t.evaluations, key=lambda e: (e.validation, e.step))
    last = t.evaluations[-1]
    return {"run": t.run, "best_step": best.step, "best_val": best.validation, "last_step": last.step,
            "last_val": last.validation, "last_train": last.train, "rise": last.validation - best.validation}


LESSON_TRAINING = Lesson(2, "Training lowers the loss; validation tells the truth", (
    "The training loss is measured on the text the model learns from; the validation loss on "
    "records it never trains on. Only the second says whether it learned something general."), (
    Step("t, space", "On the Training screen, press space to start a run (mini: 600 updates in seconds).",
         "the loss table: one row per update, its batch loss in nats",
         "Your run {run} trains {steps} updates. Each row's batch loss is the mean of -ln p(right token) "
         "over one batch.",
         values=_started_values),
    Step("v", "Watch the evaluation rows (train and validation over the whole splits); v shows the plot "
         "on a narrow terminal.",
         "the train and val columns of the evaluation rows",
         "Your training loss fell from {first_train:.3f} nats at update {first_update} to {last_train:.3f} "
         "at update {last_update}: the right token now gets p = e^-{last_train:.3f} = {mean_p:.2f} on "
         "average (a geometric mean). Validation went from {first_val:.3f} to {last_val:.3f}.",
         values=_falling_values,
         holds=lambda v: v["last_train"] < v["first_train"],
         otherwise="Your training loss went from {first_train:.3f} to {last_train:.3f}: it has not fallen yet; "
                   "let the run go on."),
    Step("space", "Let the run finish (or stop it with x).",
         "the validation column after its lowest value, and the ★",
         "Your validation loss was lowest at update {best_step} ({best_val:.3f} nats) and has risen to "
         "{last_val:.3f} by update {last_step}, while the training loss fell to {last_train:.3f}: the model "
         "memorises its training text. That is overfitting; {run}:best is update {best_step}.",
         values=_overfitting_values,
         holds=lambda v: v["best_step"] < v["last_step"] and v["rise"] > OVERFITTING_MARGIN,
         otherwise="On your run validation kept falling (lowest {best_val:.3f} at update {best_step}, "
                   "{last_val:.3f} at the last evaluation, update {last_step}): no overfitting yet; try "
                   "more updates (n, then updates)."),
    Step("c", "Open the Checkpoints screen.",
         "the runs tree: ★ marks the best checkpoint",
         "★ marks update {best_step} in {run}: {run}:best names it wherever a model is asked for (the "
         "Generation screen's model field, generate --model); {run}:latest is update {last_step}.",
         seen=lambda o: o.screen == "checkpoints" and _overfitting_values(o) is not None,
         values=_overfitting_values),
))


# lesson 3: stopping and resuming exactly ------------------------------------------------------------
def _checkpoint_name(step: int | None) -> str:
    return f"step-{step:06d}" if step is not None else "none"


def _paused_values(o: Observation) -> Values | None:
    t = o.training
    if t is None or not (t.state == "paused" or t.resumed_from is not None):
        return None
    step = t.step if t.resumed_from is None else t.start_step
    saved = t.saved_step if t.resumed_from is None else t.start_step
    return {"run": t.run, "step": step, "next_step": step + 1, "saved_step": saved,
            "checkpoint": t.resumed_from or _checkpoint_name(saved)}


def _resumed_values(o: Observation) -> Values | None:
    t = o.training
    if t is None or t.resumed_from is None:
        return None
    return {"run": t.run, "start_step": t.start_step, "checkpoint": t.resumed_from, "steps": t.steps}


def _exact_values(o: Observation) -> Values | None:
    t = o.training
    if t is None or t.resumed_from is None or t.state != "finished" or not t.digest:
        return None
    kind = precision_named(t.precision)
    exact = kind is not None and kind.bitwise
    if t.straight_digest:
        same = t.straight_digest == t.digest
        compared = (f"The same run trained without stopping ends with {t.straight_digest[:16]}…: "
                    f"{'equal, bit for bit' if same else 'a different digest'}.")
    else:
        same = True
        compared = ("In exact precision a run never stopped ends with this same digest: `minigpt-tui "
                    "verify --preset mini` trains both in fresh processes and compares them, and "
                    "`minigpt-tui tour --check` does it for mini.")
    why = ("the continuation was not exact." if not same else
           f"your run trains in {t.precision or 'an unknown'} precision, and only exact precision (float64, "
           "one thread, deterministic algorithms) promises the same bits as a run never stopped.")
    return {"run": t.run, "step": t.step, "start_step": t.start_step, "digest": t.digest[:16],
            "compared": compared, "exact": exact and same, "why": why}


LESSON_RESUME = Lesson(3, "Stopping and resuming exactly", (
    "A checkpoint taken between two updates holds everything that decides the next one. Resumed "
    "from it, even in another process, a run goes on as if it had never stopped."), (
    Step("space", "During a run on the Training screen (t, then space starts one; n, then updates, makes a "
         "run longer), press space to pause it.",
         "the events log: paused, and saved (pause)",
         "Your run {run} paused after update {step} and saved checkpoints/{checkpoint}: a pause saves, so "
         "you may quit now (q) and come back later (minigpt-tui tour --lesson 3).",
         values=_paused_values,
         holds=lambda v: v["saved_step"] == v["step"],
         otherwise="Your run {run} paused after update {step}, but its newest checkpoint is update {saved_step}: "
                   "the save was refused (see the events log); s saves by hand."),
    Step("c, r", "On the Checkpoints screen choose that checkpoint in the tree and press r; the preflight "
         "lists what is restored.",
         "the preflight's list, then the run's title on the Training screen: resumed at update N",
         "Your run {run} goes on from update {start_step} ({checkpoint}) toward {steps}: the weights, Adam's "
         "moments and step, the schedule position, the data cursor and the random streams came back from the "
         "checkpoint; nothing was recomputed or guessed.",
         values=_resumed_values),
    Step("space", "Let the resumed run finish.",
         "the events log's last line: finished at update N; state digest …",
         "Your resumed run finished at update {step} with state digest {digest}…, a SHA-256 over every "
         "weight and optimizer tensor. {compared}",
         values=_exact_values,
         holds=lambda v: v["exact"],
         otherwise="Your resumed run finished at update {step} with state digest {digest}…; {why}"),
))


# lesson 4: what a checkpoint holds ------------------------------------------------------------------
def _opened_values(o: Observation) -> Values | None:
    c = o.checkpoint
    if o.screen != "checkpoints" or c is None or c.kind != "checkpoint-dir":
        return None
    model, training = c.file("model.safetensors"), c.file("training.safetensors")
    if model is None or training is None:
        return None
    return {"folder": Path(c.path).name, "model_size": model.size, "model_tensors": model.tensors,
            "training_size": training.size, "training_tensors": training.tensors,
            "learned_bytes": c.learned_bytes, "ratio": training.size / model.size if model.size else 0.0}


def _on_tab(tab: str, more: Callable[[CheckpointSeen], Values]) -> Callable[[Observation], Values | None]:
    def values(o: Observation) -> Values | None:
        opened = _opened_values(o)
        if opened is None or o.checkpoint is None or o.checkpoint.tab != tab:
            return None
        return {**opened, **more(o.checkpoint)}

    return values


def _alias_values(c: CheckpointSeen) -> Values:
    first = c.aliases[0] if c.aliases else AliasSeen("none", "none", "none", (), 0)
    return {"alias_count": len(c.aliases), "alias": first.name, "target": first.target,
            "transform": first.transform, "shape": "x".join(map(str, first.target_shape)) or "?",
            "target_bytes": first.target_bytes}


def _moment_values(c: CheckpointSeen) -> Values:
    return {"moments": c.moments, "optimizer_tensors": c.optimizer_tensors, "optimizer_bytes": c.optimizer_bytes,
            "groups": ", ".join(g.replace("_", " ") for g in c.state_groups) or "no other"}


def _inference_values(o: Observation) -> Values | None:
    c, loaded = o.checkpoint, o.generating_from
    if o.screen != "generation" or c is None or loaded is None or Path(loaded).parent != Path(c.path):
        return None
    opened = _opened_values(Observation("checkpoints", checkpoint=c))
    return None if opened is None else {**opened, "loaded": Path(loaded).name}


LESSON_CHECKPOINT = Lesson(4, "What a checkpoint holds", (
    "A checkpoint folder is two files and a manifest: model.safetensors is what a model is, "
    "training.safetensors is what the training was doing; manifest.json, written last, holds "
    "each file's SHA-256."), (
    Step("c", "On the Checkpoints screen, choose a checkpoint of your run in the tree.",
         "the tensors table: each entry's file and group",
         "Your checkpoint {folder}: model.safetensors is {model_size} bytes in {model_tensors} tensors (the "
         "learned weights, {learned_bytes} bytes, then the constants and the tokenizer); training.safetensors "
         "is {training_size} bytes in {training_tensors} tensors, {ratio:.1f} times the model.",
         values=_opened_values),
    Step("3", "Press 3 for the aliases.",
         "the alias record: name, target, transform, use",
         "Your model has {alias_count} alias record: {alias} is {target} ({transform}). The output head and "
         "the token embedding are one {shape} table, stored once: {target_bytes} bytes that a second copy "
         "would double (and safetensors refuses to save a tensor shared under two names).",
         values=_on_tab("aliases", _alias_values),
         holds=lambda v: v["alias_count"] > 0,
         otherwise="Your model has no alias record: its output head is a table of its own, so every entry is "
                   "stored under its own name."),
    Step("4", "Press 4 for the state records.",
         "the optimizer group, then the others",
         "Adam keeps two moments per weight tensor (exp_avg, exp_avg_sq): your training.safetensors holds "
         "{moments} of them among {optimizer_tensors} optimizer tensors, {optimizer_bytes} bytes against the "
         "weights' {learned_bytes}, with the {groups} records beside them.",
         values=_on_tab("state", _moment_values),
         holds=lambda v: v["moments"] > 0,
         otherwise="Your training.safetensors holds no optimizer moments ({optimizer_tensors} optimizer "
                   "tensors): this optimizer keeps none."),
    Step("p", "Press p to generate with this checkpoint.",
         "the model field of the Generation screen",
         "The Generation screen loaded {loaded} alone: its {model_tensors} tensors ({model_size} bytes) are "
         "enough to generate. Resume needs the {training_size} bytes of training.safetensors too: without the "
         "moments, the schedule, the data position and the random streams the next update would not be the "
         "one a run never stopped makes.",
         values=_inference_values,
         holds=lambda v: v["loaded"] == "model.safetensors",
         otherwise="The Generation screen loaded {loaded} from {folder}."),
))


# lesson 5: tokens -----------------------------------------------------------------------------------
def _tokenizer_values(o: Observation) -> Values | None:
    k = o.tokens
    return None if k is None else {"vocab": k.vocab_size, "merges": k.merges}


def _typed_values(o: Observation) -> Values | None:
    k = o.tokens
    if k is None or not k.text.strip() or k.text.endswith(" "):
        return None
    return {"text": repr(k.text), "piece_count": len(k.pieces), "pieces": shown_pieces(k.pieces)}


def _trailing_values(o: Observation) -> Values | None:
    k = o.tokens
    if k is None or not k.text.strip() or not k.text.endswith(" "):
        return None
    common = 0
    while common < min(len(k.pieces), len(k.trimmed_pieces)) and k.pieces[common] == k.trimmed_pieces[common]:
        common += 1
    return {"text": repr(k.text), "pieces_with": shown_pieces(k.pieces),
            "pieces_without": shown_pieces(k.trimmed_pieces), "count_with": len(k.pieces),
            "count_without": len(k.trimmed_pieces), "end_with": shown_pieces(k.pieces[common:]),
            "end_without": shown_pieces(k.trimmed_pieces[common:]),
            "only_added": list(k.pieces) == [*k.trimmed_pieces, *([" "] * (len(k.pieces) - len(k.trimmed_pieces)))]}


LESSON_TOKENS = Lesson(5, "Tokens", (
    "A model never sees characters: the tokenizer cuts text into pieces, each an id. Where the "
    "pieces fall decides what the model reads."), (
    Step("c, 7", "On the Checkpoints screen, with a checkpoint open, press 7 for the tokenizer panel.",
         "the summary line and the merges table",
         "Your tokenizer has {vocab} ids: 2 specials, 256 bytes and {merges} merges learned from the "
         "training text; each merge joins two pieces into a new one.",
         seen=lambda o: o.tokens is not None, values=_tokenizer_values),
    Step("type", f"Type '{TRAILING_SPACE_PROMPT}' in the panel's field, with no space at the end.",
         "the pieces under the field",
         "{text} is {piece_count} pieces: {pieces}.",
         values=_typed_values),
    Step("space", "Now add one space at the end.",
         "how the last pieces change",
         "With the space, {text} is {count_with} pieces: {pieces_with}; without it, {count_without}: "
         "{pieces_without}. The space did not just add a piece: {end_without} became {end_with}. A prompt "
         "that stops inside a piece the training text always continues asks the model about a split it rarely saw: "
         "end a prompt where the training text would go on.",
         values=_trailing_values,
         holds=lambda v: not v["only_added"],
         otherwise="On your tokenizer the space only added a piece ({pieces_with}): the earlier pieces stay; "
                   "try a text ending in a word the corpus uses often."),
))


# lesson 6: where a decision comes from -------------------------------------------------------------
def _contribution_values(o: Observation) -> Values | None:
    i = o.insight
    if i is None or i.kind != "contributions" or not i.parts:
        return None
    largest = sorted(i.parts, key=lambda part: -abs(part[1]))[:3]
    return {"chosen_piece": _quoted(i.piece), "logit": i.logit, "total": i.total,
            "off_by": abs(i.total - i.logit),
            "part_count": len(i.parts), "agrees": i.agrees,
            "largest": ", ".join(f"{name} {value:+.3f}" for name, value in largest)}


LESSON_INSIDE = Lesson(6, "Where a decision comes from", (
    "The residual stream is a running sum: the embeddings, then what every head and feed-forward "
    "block adds. The logit lens reads it after each block; the contributions split the chosen "
    "logit into those parts."), (
    Step("l", "On the Generation screen, select a decision and press l for the logit lens.",
         "each layer's rank and p of the chosen id",
         "The lens reads the stream after each block through the final norm and the unembedding. Your "
         "chosen {chosen_piece} is rank {first_rank} at {first_site} (p {first_p:.4f}) and first ranks 1 at "
         "{top_site}. The last row, {last_site}, is what the model outputs: rank {last_rank}, p "
         "{last_p:.4f}, as the decision shows (rank {decision_rank}, p {decision_p:.4f}).",
         values=lens_values,
         holds=lambda v: v["last_rank"] == v["decision_rank"] and math.isclose(v["last_p"], v["decision_p"],
                                                                                rel_tol=1e-6, abs_tol=1e-9),
         otherwise="The lens's last row (rank {last_rank}, p {last_p:.4f}) is not the decision's own "
                   "(rank {decision_rank}, p {decision_p:.4f})."),
    Step("x", "Press x for the contributions.",
         "the signed bars, one per part",
         "The logit of {chosen_piece}, {logit:.4f}, splits into {part_count} parts that add up to "
         "{total:.4f} (off by {off_by:.1e}, rounding). The largest: {largest}.",
         values=_contribution_values,
         holds=lambda v: v["agrees"],
         otherwise="The {part_count} parts add up to {total:.4f}, not the logit {logit:.4f}: off by {off_by:.1e}."),
))

LESSONS: tuple[Lesson, ...] = (LESSON_DISTRIBUTION, LESSON_TRAINING, LESSON_RESUME, LESSON_CHECKPOINT,
                               LESSON_TOKENS, LESSON_INSIDE, LESSON_ATTENTION, LESSON_ELSEWHERE, LESSON_FINETUNE)
MODEL_LESSONS = (LESSON_ELSEWHERE.number, LESSON_FINETUNE.number)  # the check takes them on a --model only


def lesson(number: int) -> Lesson:
    for candidate in LESSONS:
        if candidate.number == number:
            return candidate
    known = ", ".join(str(known.number) for known in LESSONS)
    raise ConfigError(f"there is no lesson {number}: the tour has lessons {known}")


# -- the guide's page -------------------------------------------------------------------------------
PLACEHOLDER = re.compile(r"\{(\w+)[^}]*\}")


def _generic(template: str) -> str:
    """A template with each value shown as its name in italics (the guide has no run)."""
    return PLACEHOLDER.sub(lambda m: f"*{m.group(1).replace('_', ' ')}*", template)


def guide_markdown() -> str:
    """The guide's page of the tour, from the same lessons the app and the check use."""
    lines = ["# The tour", "",
             "`minigpt-tui tour` opens the app with short lessons in a panel beside the screens (`T` "
             "opens and closes it on any screen; `ctrl+p` lists every lesson). Each step says what to "
             "press and where to look; when the app sees it done, the panel explains it with your own "
             "numbers and moves on (`>` skips a step, `<` goes back). Where your run does not show what "
             "a lesson claims, it says so. `minigpt-tui tour --check` takes every step headless on a "
             "`mini` run (lesson 7 on a short `text` run) in a temporary folder and prints what it saw; "
             "lessons 8 and 9 read a model from elsewhere, so `minigpt-tui tour --check --model PATH` takes "
             "them on that GGUF file or transformers folder (without `--model` they are skipped). A step "
             "whose claim needs a longer run than the check's (an induction head forming) prints what the "
             "short run showed without failing the check.", "",
             "Below, each value the panel fills in from your run is in *italics*.", ""]
    for item in LESSONS:
        lines += [f"## {item.number}. {item.title}", "", item.intro, ""]
        for index, step in enumerate(item.steps, 1):
            lines.append(f"{index}. **`{step.key}`**: {step.do} Look at {step.look}.")
            lines.append(f"    {_generic(step.explain)}")
            if step.otherwise:
                lines.append(f"    When your run does not show it: {_generic(step.otherwise)}")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"
