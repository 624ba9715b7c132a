"""What the tour sees and how a step is judged: the observations of the app (or of the headless
check) as plain frozen records, the builders that make them from the engine's own views, and
the :class:`Step` / :class:`Lesson` data the lessons (:mod:`tour`, :mod:`tour_lessons`) are
written in. Torch-free.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from minigpt_tui.engine.core.errors import ConfigError
from minigpt_tui.engine.session.history import load_history, read_metrics

Values = dict[str, Any]


# -- what the tour sees ---------------------------------------------------------------------------
@dataclass(frozen=True)
class EvaluationSeen:
    step: int
    train: float
    validation: float


@dataclass(frozen=True)
class TrainingSeen:
    """The run on the Training screen: its state and its scheduled evaluations so far."""

    run: str
    state: str  # starting, running, paused, stopping, finished, stopped, failed
    step: int
    steps: int
    evaluations: tuple[EvaluationSeen, ...] = ()
    best_step: int | None = None
    start_step: int = 0
    resumed_from: str | None = None  # the checkpoint folder a resumed run left from
    saved_step: int | None = None  # the update of its newest checkpoint
    digest: str = ""  # the state digest it finished with
    precision: str = ""
    straight_digest: str = ""  # a run never stopped's digest, where one was trained (the headless check)
    preset: str = ""
    # (update, block, head, score) of the strongest induction head at each evaluation that scored heads
    induction: tuple[tuple[int, int, int, float], ...] = ()
    blocks: int = 0  # the model's blocks, where the head records say


@dataclass(frozen=True)
class CandidateSeen:
    piece: str
    rank: int
    logit: float
    raw: float  # softmax of the logits
    selection: float  # what the rule draws from


@dataclass(frozen=True)
class DecisionSeen:
    """The selected decision on the Generation screen and the generation it belongs to."""

    step: int
    rule: str  # greedy or sample
    temperature: float
    top_k: int | None
    top_p: float | None
    chosen: CandidateSeen
    candidates: tuple[CandidateSeen, ...]  # by rank, the first few
    chosen_ranks: tuple[int, ...]  # of every decision made
    output: str  # the generated text as the screen shows it
    prompt: str = ""


@dataclass(frozen=True)
class LensSeen:
    site: str
    rank: int
    probability: float


@dataclass(frozen=True)
class InsightSeen:
    """The lens or the contributions shown for a decision."""

    kind: str  # lens, contributions or pattern
    step: int
    piece: str
    lens: tuple[LensSeen, ...] = ()
    logit: float = 0.0
    total: float = 0.0
    agrees: bool = False
    parts: tuple[tuple[str, float], ...] = ()  # every part, in model order
    pattern: PatternSeen | None = None  # the head view's head


@dataclass(frozen=True)
class PatternSeen:
    """One head's attention at the decision's last position: a weight per piece of the prefix."""

    layer: int
    head: int
    pieces: tuple[str, ...]
    weights: tuple[float, ...]


@dataclass(frozen=True)
class HeadsSeen:
    """The head view's grid: every head's role scores on repeated random tokens."""

    layers: int
    heads: int
    scores: tuple[tuple[int, int, dict[str, float]], ...]  # (block, head, {role: score}), model order
    chance: float  # about what a head that spreads its weight evenly scores for induction

    def top(self, role: str) -> tuple[int, int, float]:
        """(block, head, score) of the strongest head for ``role`` (ties: the earlier head)."""
        layer, head, scores = max(self.scores, key=lambda s: (s[2][role], -s[0], -s[1]))
        return layer, head, scores[role]

    def of(self, layer: int, head: int) -> dict[str, float] | None:
        return next((s for b, h, s in self.scores if (b, h) == (layer, head)), None)


@dataclass(frozen=True)
class ModelSeen:
    """The model the Generation screen loaded: where it comes from and its shape."""

    name: str
    source: str  # transformers, gguf, nanogpt, or minigpt-tui (ours)
    family: str
    layers: int
    heads: int
    vocab: int

    @property
    def foreign(self) -> bool:
        return self.source in ("transformers", "gguf")


@dataclass(frozen=True)
class PatchSeen:
    """A patching sweep's outcome, as the patch view shows it."""

    clean: str
    corrupt: str
    answer: str
    against: str
    clean_difference: float
    corrupt_difference: float
    differing: tuple[int, ...]  # positions where the prompts differ
    last: int  # the last position
    # (site, block, position, share restored) of every residual-stream patch, in sweep order
    restored: tuple[tuple[str, int, int, float], ...]


@dataclass(frozen=True)
class ScoresSeen:
    """A text scored in the Text view: model A's losses, and model B's beside them when loaded."""

    model: str
    mean: float
    tokens: tuple[tuple[str, float], ...]  # (piece, loss) per scored token
    second: str | None = None
    second_mean: float | None = None
    second_losses: tuple[float, ...] = ()  # B's loss per scored token, where B is comparable


@dataclass(frozen=True)
class TokensSeen:
    """The tokenizer panel: its tokenizer and the pieces of the text typed in its field."""

    vocab_size: int
    merges: int
    text: str = ""
    pieces: tuple[str, ...] = ()
    trimmed_pieces: tuple[str, ...] = ()  # of the text without its trailing spaces


@dataclass(frozen=True)
class FileSeen:
    name: str
    size: int
    tensors: int


@dataclass(frozen=True)
class AliasSeen:
    name: str
    target: str
    transform: str
    target_shape: tuple[int, ...]
    target_bytes: int


@dataclass(frozen=True)
class CheckpointSeen:
    """The checkpoint open on the Checkpoints screen and the panel shown (tensors, aliases, state...)."""

    path: str  # resolved
    kind: str
    tab: str
    files: tuple[FileSeen, ...]
    aliases: tuple[AliasSeen, ...]
    learned_bytes: int  # the model file's learned weights
    moments: int  # optimizer tensors that are moments (exp_avg, exp_avg_sq)
    optimizer_tensors: int
    optimizer_bytes: int
    state_groups: tuple[str, ...]  # training.safetensors' other groups

    def file(self, name: str) -> FileSeen | None:
        return next((f for f in self.files if f.name == name), None)


@dataclass(frozen=True)
class Observation:
    screen: str = ""  # training, checkpoints or generation
    training: TrainingSeen | None = None
    decision: DecisionSeen | None = None
    insight: InsightSeen | None = None
    tokens: TokensSeen | None = None
    checkpoint: CheckpointSeen | None = None
    generating_from: str | None = None  # the model file the Generation screen loaded (resolved)
    model: ModelSeen | None = None
    heads: HeadsSeen | None = None
    patching: PatchSeen | None = None
    scores: ScoresSeen | None = None


# -- building observations from the engine's own views ------------------------------------------
def training_seen(run: str, run_dir: Path | None, state: str, step: int, steps: int, **more: Any) -> TrainingSeen:
    """What the tour sees of a run: its scheduled evaluations read back from ``metrics.jsonl``;
    ``more``: TrainingSeen's other fields (start_step, resumed_from, saved_step, digest...)."""
    seen = None if run_dir is None else _metrics_seen_now(run_dir)
    if seen is None:  # no run, or no metrics written yet
        return TrainingSeen(run, state, step, steps, **more)
    evaluations, best_step, induction, blocks = seen
    return TrainingSeen(run, state, step, steps, evaluations, best_step, induction=induction, blocks=blocks,
                        **more)


def _metrics_seen_now(run_dir: Path) -> tuple[Any, ...] | None:
    """:func:`_metrics_seen` of the run's ``metrics.jsonl`` as it is now (read again only
    when it changed: the tour looks twice a second)."""
    try:
        stat = (run_dir / "metrics.jsonl").stat()
    except OSError:
        return None
    return _metrics_seen(run_dir, stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=4)
def _metrics_seen(run_dir: Path, _mtime_ns: int, _size: int) -> tuple[Any, ...] | None:
    """The evaluations, the best step, the induction records and the blocks of a run's
    metrics (None: none written yet); the file's time and size key the cache."""
    try:
        history = load_history(run_dir, until_step=2**62)
    except ConfigError:
        return None
    evaluations = tuple(EvaluationSeen(e.step, e.train_loss, e.validation_loss) for e in history.evaluations
                        if not e.extra and e.train_loss is not None and e.validation_loss is not None)
    return (evaluations, history.best_step, *_induction_records(run_dir))


def _induction_records(run_dir: Path) -> tuple[tuple[tuple[int, int, int, float], ...], int]:
    """The strongest induction head at each ``heads`` record of ``metrics.jsonl``, and the
    model's blocks (the records' highest block + 1); a record not as written is left out."""
    points, blocks = [], 0
    try:
        records = read_metrics(run_dir)
    except ConfigError:
        return (), 0
    for record in records:
        heads = record.get("heads") if isinstance(record, dict) and record.get("kind") == "heads" else None
        try:
            scored = [(int(h["layer"]), int(h["head"]), float(h["induction"])) for h in heads or ()]
            if scored:
                layer, head, score = max(scored, key=lambda s: (s[2], -s[0], -s[1]))
                points.append((int(record["step"]), layer, head, score))
                blocks = max(blocks, 1 + max(s[0] for s in scored))
        except (KeyError, TypeError, ValueError):
            continue
    return tuple(points), blocks


def checkpoint_seen(inspection: Any, tab: str) -> CheckpointSeen:
    """An Inspection (header-only) as the tour reads it, with the panel the screen shows."""
    entries = inspection.entries

    def in_group(group: str) -> list[Any]:
        return [e for e in entries if e.group == group]

    by_name = {e.name: e for e in entries}
    aliases = []
    for alias in inspection.aliases:
        target = by_name.get(str(alias.get("target", "")))
        aliases.append(AliasSeen(str(alias.get("name", "")), str(alias.get("target", "")),
                                 str(alias.get("transform", "none")), target.shape if target else (),
                                 target.bytes if target else 0))
    optimizer = in_group("optimizer")
    training_groups = dict.fromkeys(e.group for e in entries if e.file == "training.safetensors")
    return CheckpointSeen(
        str(Path(inspection.path).resolve()), str(inspection.kind), tab,
        tuple(FileSeen(f.name, f.size, f.tensors) for f in inspection.files), tuple(aliases),
        sum(e.bytes for e in in_group("learned")),
        sum(e.name.endswith((".exp_avg", ".exp_avg_sq")) for e in optimizer), len(optimizer),
        sum(e.bytes for e in optimizer), tuple(g for g in training_groups if g != "optimizer"))


def _candidate(view: Any) -> CandidateSeen:
    return CandidateSeen(view.piece, view.rank, view.logit, view.raw_probability, view.selection_probability)


def decision_seen(view: Any, selected: Any, rule: Any, prompt: str = "") -> DecisionSeen | None:
    """A StepperView's selected DecisionView under its GenerationRule (and the prompt typed), as
    the tour reads it."""
    if view is None or selected is None or rule is None:
        return None
    candidates = tuple(_candidate(c) for c in selected.candidates[:3])
    return DecisionSeen(selected.step, rule.kind, float(rule.temperature), rule.top_k, rule.top_p,
                        _candidate(selected.chosen), candidates,
                        tuple(d.chosen.rank for d in view.decisions), view.output.display, prompt)


def insight_seen(kind: str | None, insight: Any) -> InsightSeen | None:
    """An InsightView shown as the lens or the contributions."""
    if insight is None or kind not in ("lens", "contributions", "pattern"):
        return None
    lens = tuple(LensSeen(row.site, row.chosen_rank, row.chosen_probability) for row in insight.lens)
    if kind == "pattern":
        p = insight.pattern
        last = tuple(float(w) for w in p.weights[-1]) if p.weights else ()
        return InsightSeen("pattern", insight.step, insight.chosen_piece, lens,
                           pattern=PatternSeen(p.layer, p.head, tuple(p.pieces)[:len(last)], last))
    if kind == "lens" or not insight.contributions:
        return InsightSeen("lens", insight.step, insight.chosen_piece, lens)
    parts = insight.contributions[0]
    return InsightSeen("contributions", insight.step, insight.chosen_piece, lens, parts.logit, parts.total,
                       parts.agrees, tuple((p.name, p.value) for p in parts.parts()))


def tokens_seen(tokenizer: Any, text: str) -> TokensSeen:
    """The pieces of ``text`` (and of it without trailing spaces) under ``tokenizer``."""

    def pieces(of: str) -> tuple[str, ...]:
        if not of:
            return ()
        return tuple(tokenizer.piece_text(i) for i in tokenizer.encode(of, bos=False, eos=False))

    return TokensSeen(tokenizer.vocab_size, len(tokenizer.merges), text, pieces(text), pieces(text.rstrip(" ")))



FOREIGN_SOURCES = ("transformers", "gguf", "nanogpt")


def model_seen(portable: Any, name: str) -> ModelSeen:
    """An opened model (a PortableModel) as the tour reads it; ``name`` as the screen shows it."""
    source = (getattr(portable, "metadata", None) or {}).get("source")
    config = portable.model.config
    return ModelSeen(name, source if source in FOREIGN_SOURCES else "minigpt-tui", str(config.family),
                     int(config.layers), int(config.heads), int(portable.model.vocab_size))


def induction_chance(context: int, bos: bool) -> float:
    """About what a head spreading its weight evenly over the positions it sees scores for
    induction on the head roles' repeated sequences (R of k ids twice, BOS first when there is one)."""
    start = 1 if bos else 0
    k = min(48, (context - start) // 2)
    queries = [start + k + j for j in range(max(k - 1, 0))]
    return sum(1 / (q + 1) for q in queries) / len(queries) if queries else 0.0


def heads_seen(view: Any, context: int, bos: bool) -> HeadsSeen | None:
    """A HeadRolesView (the head view's grid) as the tour reads it; None without scores."""
    if view is None or not view.roles:
        return None
    roles = ("induction", "previous_token", "duplicate_token", "first_token")
    scores = tuple((r.layer, r.head, {role: float(getattr(r, role)) for role in roles}) for r in view.roles)
    return HeadsSeen(view.layers, view.heads, scores, induction_chance(context, bos))


def patch_seen(view: Any) -> PatchSeen | None:
    """A PatchingView (the patch view's sweep) as the tour reads it."""
    if view is None:
        return None
    restored = tuple((e.site, e.layer, e.position, float(e.restored)) for e in view.effects
                     if e.head is None and e.restored is not None)
    return PatchSeen(view.request.clean, view.request.corrupt, view.answer_piece, view.against_piece,
                     float(view.clean_difference), float(view.corrupt_difference), tuple(sorted(view.differing)),
                     len(view.clean_pieces) - 1, restored)


def scores_seen(view: Any) -> ScoresSeen | None:
    """A TextScoresView (the Text view) as the tour reads it."""
    if view is None or not view.tokens:
        return None
    tokens = tuple((t.piece, float(t.loss)) for t in view.tokens)
    mean = sum(loss for _, loss in tokens) / len(tokens)
    if not view.compared:
        return ScoresSeen(view.model_label, mean, tokens, view.second_label)
    return ScoresSeen(view.model_label, mean, tokens, view.second_label, view.second_mean_loss,
                      tuple(float(t.loss_b) for t in view.compared))

# -- lessons as data -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Step:
    key: str  # what to press
    do: str
    look: str
    explain: str  # a template of the values' names
    values: Callable[[Observation], Values | None]
    holds: Callable[[Values], bool] = lambda values: True
    otherwise: str = ""  # said instead of ``explain`` when the claim does not hold on this run
    seen: Callable[[Observation], bool] | None = None  # done sooner than its values show (None: when they do)
    # What a longer run than the headless check's shows (an induction head forming): the check
    # prints the step's honest words when the claim does not hold, without counting a failure.
    long_run: bool = False

    def done(self, observation: Observation) -> bool:
        """Whether the app has seen the step done: its own test, else its values are there."""
        return self.seen(observation) if self.seen is not None else self.values(observation) is not None


@dataclass(frozen=True)
class Lesson:
    number: int
    title: str
    intro: str
    steps: tuple[Step, ...]


@dataclass(frozen=True)
class Finding:
    text: str
    holds: bool


def finding(step: Step, observation: Observation) -> Finding | None:
    """The step's explanation filled with this observation's values (None: not there yet)."""
    values = step.values(observation)
    if values is None:
        return None
    holds = bool(step.holds(values))
    template = step.explain if holds or not step.otherwise else step.otherwise
    return Finding(template.format(**values), holds)


def shown_pieces(pieces: Sequence[str]) -> str:
    """Pieces as the screens draw them: a space as ·, pieces apart."""
    return " ".join(piece.replace(" ", "·") for piece in pieces) or "nothing"


def quoted(piece: str) -> str:
    return f"'{piece.replace(' ', '·')}'"


def lens_values(o: Observation) -> Values | None:
    """The lens shown for the selected decision: where its chosen id first ranks 1."""
    i, d = o.insight, o.decision
    if i is None or i.kind != "lens" or not i.lens or d is None:
        return None
    first, last = i.lens[0], i.lens[-1]
    top = next((row.site for row in i.lens if row.rank == 1), None)
    return {"chosen_piece": quoted(i.piece), "first_site": first.site, "first_rank": first.rank,
            "first_p": first.probability, "top_site": top or "no layer", "last_site": last.site,
            "last_rank": last.rank, "last_p": last.probability, "decision_rank": d.chosen.rank,
            "decision_p": d.chosen.raw}


def lens_agrees(v: Values) -> bool:
    return v["last_rank"] == v["decision_rank"] and math.isclose(v["last_p"], v["decision_p"], rel_tol=1e-6,
                                                                  abs_tol=1e-9)
