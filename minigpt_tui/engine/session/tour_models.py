"""The headless check's observations for lessons 7-9 (:mod:`tour_lessons`): a short ``text`` run
watched for an induction head, its heads read as the Generation screen's head view reads
them, and a model from elsewhere opened, asked a fact, looked inside, patched, scored,
fine-tuned and scored again. Each observation is made from the engine views the app shows."""

from __future__ import annotations

from collections.abc import Callable, Collection
from importlib import resources
from pathlib import Path
from typing import Any

from minigpt_tui.engine.analysis.generation_rule import GenerationRule
from minigpt_tui.engine.core.errors import MiniGPTError
from minigpt_tui.engine.session.events import Finished, FinishReason
from minigpt_tui.engine.session.generation import GenerationSession, GenerationSettings
from minigpt_tui.engine.session.head_role_view import head_roles_view
from minigpt_tui.engine.session.inputs import RunChoices
from minigpt_tui.engine.session.patching import PatchRequest, run_patching
from minigpt_tui.engine.session.plans import NewRun
from minigpt_tui.engine.session.text_scores import score_for_view
from minigpt_tui.engine.session.tour_lessons import CORRUPT_PROMPTS, FACT_PROMPT
from minigpt_tui.engine.session.tour_seen import (
    Observation,
    decision_seen,
    heads_seen,
    insight_seen,
    model_seen,
    patch_seen,
    scores_seen,
    training_seen,
)
from minigpt_tui.engine.session.training import TrainingSession

TEXT_RUN = "tour-text"
TEXT_STEPS = 100  # kept short: `make test` runs the check; an induction head needs far more
# The text preset made small and quick: two blocks (an induction head needs two), evaluations
# every 25 updates with the heads scored at each.
TEXT_SETTINGS = {"model": {"width": 64, "layers": 2, "heads": 4, "kv_heads": 4, "ffn": 256},
                 "train": {"eval_every": 25, "eval_batches": 2, "batch_size": 8, "lr": 0.003, "final_lr": 0.0003,
                           "warmup": 10, "save_every": TEXT_STEPS}}
TEXT_PROMPT = "The key is pink. Answer:"
FINETUNE_RUN = "tour-finetune"
FINETUNE_STEPS = 20
FINETUNE_CORPUS = "bundled:patterns.txt"
SCORED_RECORDS = 8  # the first records of the fine-tune corpus: the text scored before and after
Say = Callable[[str], None]


def _ended(session: TrainingSession) -> tuple[Finished, str]:
    ended: Finished = session.run()
    return ended, "finished" if ended.reason == FinishReason.COMPLETED else "stopped"


# lesson 7 -------------------------------------------------------------------------------------------------
def text_run_observations(runs_dir: Path, say: Say) -> list[Observation]:
    """Lesson 7: a head's pattern and the heads' grid on a short text run's model, then that
    run's strongest induction score at each evaluation."""
    say(f"training text ({TEXT_STEPS} updates, 2 blocks) as run '{TEXT_RUN}', scoring the heads at each evaluation")
    config = RunChoices("text", steps=TEXT_STEPS).resolve(TEXT_SETTINGS)
    ended, state = _ended(TrainingSession(NewRun(config, runs_dir, TEXT_RUN), lambda event: None))
    trained = training_seen(TEXT_RUN, runs_dir / TEXT_RUN, state, ended.step, config.train.steps,
                            preset=config.preset, precision=config.train.precision)
    session = GenerationSession(runs_dir)
    session.load(f"{TEXT_RUN}:latest")
    greedy = GenerationRule.greedy()
    session.configure(GenerationSettings(TEXT_PROMPT, greedy))
    session.step()
    view = session.view()
    decision = decision_seen(view, view.decisions[0], greedy, TEXT_PROMPT)
    first = Observation("generation", decision=decision, insight=insight_seen("pattern", session.inspect(1, 0, 0)))
    heads = _heads(session)
    layer, head = _moved_head(heads)
    moved = Observation("generation", decision=decision, heads=heads,
                        insight=insight_seen("pattern", session.inspect(1, layer, head)))
    return [first, moved, Observation("training", training=trained)]


def _heads(session: GenerationSession) -> Any:
    portable: Any = session.portable
    return heads_seen(head_roles_view(session), int(portable.model.config.context),
                      getattr(portable.tokenizer, "bos_id", None) is not None)


def _moved_head(heads: Any) -> tuple[int, int]:
    """Where the learner goes with j: the strongest induction head (another than the first one shown)."""
    if heads is None:
        return 0, 0
    layer, head, _ = heads.top("induction")
    if (layer, head) == (0, 0) and heads.layers * heads.heads > 1:
        return (0, 1) if heads.heads > 1 else (1, 0)
    return layer, head


# lessons 8 and 9 ------------------------------------------------------------------------------------------
def model_observations(model: str, runs_dir: Path, wanted: Collection[int], say: Say) -> dict[int, list[Observation]]:
    """Lessons 8 and 9 (those of ``wanted``) on ``model``, a GGUF file or a transformers folder."""
    session = GenerationSession(runs_dir)
    say(f"opening {model}")
    session.load(model)
    seen = model_seen(session.portable, Path(model).name)
    out: dict[int, list[Observation]] = {}
    if 8 in wanted:
        out[8] = _elsewhere_observations(session, seen, say)
    if 9 in wanted:
        out[9] = _finetune_observations(session, model, runs_dir, say)
    return out


def _elsewhere_observations(session: GenerationSession, seen: Any, say: Say) -> list[Observation]:
    greedy = GenerationRule.greedy()
    say(f"asking it a fact: {FACT_PROMPT!r}")
    session.configure(GenerationSettings(FACT_PROMPT, greedy))
    session.step()
    view = session.view()
    decision = decision_seen(view, view.decisions[0], greedy, FACT_PROMPT)
    opened = Observation("generation", model=seen)
    asked = Observation("generation", decision=decision, model=seen)
    lens = Observation("generation", decision=decision, model=seen,
                       insight=insight_seen("lens", session.inspect(1, 0, 0)))
    say("scoring every head's roles")
    heads = Observation("generation", decision=decision, model=seen, heads=_heads(session))
    return [opened, asked, lens, heads, Observation("generation", model=seen, patching=_patched(session, say))]


def _patched(session: GenerationSession, say: Say) -> Any:
    """The fact's prompt patched from a corrupted one (a country changed, as many pieces long):
    its answer against the corrupted prompt's, each the most probable candidate that is one
    token as typed; None (said) when it cannot be."""
    portable: Any = session.portable
    tokenizer = portable.tokenizer
    length = len(tokenizer.encode_prompt(FACT_PROMPT))
    corrupt = next((c for c in CORRUPT_PROMPTS if len(tokenizer.encode_prompt(c)) == length), None)
    if corrupt is None:
        say(f"no country of the corrupted prompts gives as many pieces as {FACT_PROMPT!r}: patching left out")
        return None
    answer = _typable_answer(session, FACT_PROMPT)
    against = _typable_answer(session, corrupt, answer)
    if answer is None or against is None:
        say("no candidate of the fact's prompts is one token as typed: patching left out")
        return None
    say(f"patching {FACT_PROMPT!r} from {corrupt!r}: {answer!r} against {against!r}")
    try:
        return patch_seen(run_patching(session, PatchRequest(FACT_PROMPT, corrupt, answer, against, ("resid",))))
    except MiniGPTError as err:
        say(f"patching refused: {err}")
        return None


def _typable_answer(session: GenerationSession, prompt: str, other_than: str | None = None) -> str | None:
    """The most probable next id after ``prompt`` whose text encodes back to that one id."""
    tokenizer: Any = session.portable.tokenizer  # type: ignore[union-attr]
    session.configure(GenerationSettings(prompt, GenerationRule.greedy()))
    session.step()
    for candidate in session.view().decisions[0].candidates:
        text = tokenizer.decode([candidate.id]).display
        if text and text != other_than and tokenizer.encode(text, bos=False, eos=False) == [candidate.id]:
            return text
    return None


def _scored_text() -> str:
    text = resources.files("minigpt_tui").joinpath("assets/corpus/patterns.txt").read_text("utf-8")
    return "\n".join(text.splitlines()[:SCORED_RECORDS]) + "\n"


def _finetune_observations(session: GenerationSession, model: str, runs_dir: Path, say: Say) -> list[Observation]:
    """Lesson 9: a text scored, a short fine-tune on the corpus it comes from, the same text
    scored by the fine-tuned model beside the original."""
    text = _scored_text()
    say(f"scoring the first {SCORED_RECORDS} records of {FINETUNE_CORPUS}")
    before = Observation("generation", scores=scores_seen(score_for_view(session, text)))
    portable: Any = session.portable
    context = min(256, int(portable.model.config.context))
    config = RunChoices("finetune", corpus=FINETUNE_CORPUS, steps=FINETUNE_STEPS).resolve(
        {"train": {"eval_every": FINETUNE_STEPS // 2, "eval_batches": 2, "save_every": FINETUNE_STEPS,
                   "context": context}})
    say(f"fine-tuning it for {FINETUNE_STEPS} updates on {FINETUNE_CORPUS} as run '{FINETUNE_RUN}'")
    ended, state = _ended(TrainingSession(NewRun(config, runs_dir, FINETUNE_RUN, init_from=model),
                                          lambda event: None))
    tuned = training_seen(FINETUNE_RUN, runs_dir / FINETUNE_RUN, state, ended.step, config.train.steps,
                          preset=config.preset)
    session.load(f"{FINETUNE_RUN}:latest")
    session.load_second(model)
    say("scoring the same text with the fine-tuned model, the original beside it")
    after = Observation("generation", scores=scores_seen(score_for_view(session, text)))
    return [before, Observation("training", training=tuned), after]
