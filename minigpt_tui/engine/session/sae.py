"""Sparse-autoencoder features as the command line runs them (``sae train``, ``sae
decompose``): a model opened as for inference (:mod:`.opening`), a corpus read as training
reads it, the autoencoder trained on one site's activations and saved in SAELens' layout;
or a saved one opened and a decision decomposed through its features.

Torch-free at import: the engine is imported inside the functions that run it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from minigpt_tui.engine.core.config import CorpusConfig
from minigpt_tui.engine.core.errors import ConfigError
from minigpt_tui.engine.core.files import check_new_output
from minigpt_tui.engine.session.inputs import corpus_source
from minigpt_tui.engine.session.opening import open_model
from minigpt_tui.engine.training.corpus import load_corpus

SAE_KINDS = ("relu", "topk", "jumprelu")
DEFAULT_CORPUS = "bundled:teaching.txt"


@dataclass(frozen=True)
class SAETrainRequest:
    """One ``sae train``: the model, its site, the autoencoder's kind and width, the
    training settings, the corpus and the new folder it is saved in."""

    model: str
    site: str
    features: int
    kind: str
    steps: int
    out: Path
    k: int | None = None
    l1: float = 1e-2
    batch_size: int = 256
    learning_rate: float = 1e-3
    seed: int = 0
    eval_every: int = 0
    corpus: str = DEFAULT_CORPUS
    runs_dir: Path | None = None
    dtype: str | None = None
    l0: float = 1e-3
    bandwidth: float = 1e-3

    def check(self) -> None:
        """Refuse settings that cannot train, in one line, before anything is opened."""
        if self.kind not in SAE_KINDS:
            raise ConfigError(f"--kind must be one of {', '.join(SAE_KINDS)}, got '{self.kind}'")
        if (self.k is not None) != (self.kind == "topk"):
            raise ConfigError("--k is needed with --kind topk, and only with it")
        self._check_counts()
        if not (self.l1 >= 0 and self.l0 >= 0) or not (self.learning_rate > 0 and self.bandwidth > 0):
            raise ConfigError("--l1 and --l0 must be 0 or more, --lr and --bandwidth more than 0")

    def _check_counts(self) -> None:
        for label, value, least in (("--features", self.features, 1), ("--steps", self.steps, 1),
                                    ("--batch-size", self.batch_size, 1), ("--eval-every", self.eval_every, 0),
                                    ("--seed", self.seed, 0)):
            if value < least:
                raise ConfigError(f"{label} must be at least {least}, got {value}")
        if self.k is not None and not 1 <= self.k <= self.features:
            raise ConfigError(f"--k must be from 1 to --features ({self.features}), got {self.k}")


@dataclass(frozen=True)
class SAEProgress:
    """What a long ``sae train`` reports: a stage, and (while training) the update reached,
    the total and the last loss; an evaluation's figures when one was made."""

    stage: str
    done: int = 0
    total: int = 0
    loss: float | None = None
    evaluation: dict[str, Any] | None = None


@dataclass(frozen=True)
class SAETrainReport:
    """A finished ``sae train``: where it was saved, what it read and every evaluation."""

    out: Path
    config: dict[str, Any]
    activations: dict[str, int]
    evaluations: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"out": str(self.out), "config": self.config, "activations": self.activations,
                "evaluations": self.evaluations}


Listener = Callable[[SAEProgress], None]


def _unheard(_progress: SAEProgress) -> None:
    pass


def train_sae(request: SAETrainRequest, listen: Listener = _unheard) -> SAETrainReport:
    """Open the model, read the site over the corpus, train, save (see the module doc)."""
    from minigpt_tui.engine.analysis.sae_features import (  # deferred: imports torch
        TrainingSettings,
        check_site,
        train_autoencoder,
    )
    from minigpt_tui.engine.models.sae import (  # deferred: imports torch
        SAEConfig,
        write_saelens,
    )

    request.check()
    check_new_output(request.out)
    listen(SAEProgress("opening the model"))
    portable = open_model(request.model, request.runs_dir, dtype=request.dtype)
    check_site(portable.model, request.site)
    train, held_out = _corpus_activations(portable, request, listen)
    config = SAEConfig(request.kind, int(train.shape[1]), request.features, request.site, request.k,
                       portable.identity)
    settings = TrainingSettings(request.steps, request.batch_size, request.learning_rate, request.l1, request.seed,
                                request.eval_every, request.l0, request.bandwidth)
    sae, evaluations = train_autoencoder(
        config, settings, train, held_out,
        on_step=lambda step, loss: listen(SAEProgress("training", step, request.steps, loss)),
        on_evaluation=lambda e: listen(SAEProgress("evaluated", e.step, request.steps, e.train_loss, e.to_json())))
    listen(SAEProgress("saving"))
    out = write_saelens(sae, request.out)
    return SAETrainReport(out, config.to_json(), {"train": int(train.shape[0]), "held_out": int(held_out.shape[0])},
                          [e.to_json() for e in evaluations])


def _corpus_activations(portable: Any, request: SAETrainRequest, listen: Listener) -> tuple[Any, Any]:
    """The site's activations over the corpus's training records and over its validation
    records (the training ones again where the corpus has no validation split)."""
    from minigpt_tui.engine.analysis.sae_features import (  # deferred: imports torch
        site_activations,
    )

    corpus = load_corpus(CorpusConfig(source=corpus_source(request.corpus)))
    context = portable.model.config.context
    parts = []
    for name, texts in (("training", corpus.train), ("validation", corpus.validation)):
        sequences = [ids[:context] for ids in map(portable.tokenizer.encode_prompt, texts) if ids]
        parts.append(site_activations(portable.model, sequences, request.site,
                                      lambda done, total, name=name: listen(
                                          SAEProgress(f"reading {name} activations", done, total)))
                     if sequences else None)
    train, held_out = parts
    return train, train if held_out is None else held_out


# -- decompose ------------------------------------------------------------------------------
@dataclass(frozen=True)
class DecomposeRequest:
    """One ``sae decompose``: the model, the autoencoder's folder, the prompt, features listed."""

    model: str
    sae: Path
    prompt: str
    top: int = 10
    runs_dir: Path | None = None
    dtype: str | None = None


def decompose_prompt(request: DecomposeRequest) -> dict[str, Any]:
    """The decision after the prompt, decomposed through the autoencoder's features, as JSON."""
    from minigpt_tui.engine.analysis.sae_features import decompose  # deferred: imports torch
    from minigpt_tui.engine.models.sae import (  # deferred: imports torch
        read_saelens,
    )

    if request.top < 1:
        raise ConfigError(f"--top must be at least 1, got {request.top}")
    sae = read_saelens(request.sae)
    portable = open_model(request.model, request.runs_dir, dtype=request.dtype)
    ids = portable.tokenizer.encode_prompt(request.prompt)
    result = decompose(portable.model, sae, ids, request.top)
    return decomposition_json(result, portable.tokenizer)


def decomposition_json(result: Any, tokenizer: Any) -> dict[str, Any]:
    def tokens(pairs: Any) -> list[dict[str, Any]]:
        return [{"id": i, "piece": tokenizer.piece_text(i), "value": v} for i, v in pairs]

    features = [{"feature": p.index, "activation": p.activation, "logit": p.logit, "lens_chosen": p.lens_chosen,
                 "promotes": tokens(p.promotes), "suppresses": tokens(p.suppresses)} for p in result.parts]
    return {
        "site": result.site, "chosen": {"id": result.chosen_id, "piece": tokenizer.piece_text(result.chosen_id)},
        "exact_logit": result.exact, "active_features": result.active, "features": features,
        "identity_gap": result.gap, "residual_norm": result.residual_norm, "error_norm": result.error_norm,
        "features_logit": result.features_logit, "bias_logit": result.bias_logit,
        "error_logit": result.error_logit, "total": result.total, "logit": result.logit,
    }
