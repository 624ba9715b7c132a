"""How a training session's run is prepared: a new run (optionally warm-started from saved
weights) or the continuation of a saved one. One rule each for creating a run folder,
writing its identities and finding the run a checkpoint belongs to.

Preparing builds everything that can fail (corpus, tokenizer, model, restored state)
before anything is written, so a refused start leaves nothing on disk.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from minigpt_tui.engine.core.config import (
    ModelConfig,
    RunConfig,
    estimated_parameters,
    load_config,
)
from minigpt_tui.engine.core.errors import CheckpointError, ConfigError, ResumeRefused
from minigpt_tui.engine.core.memory import require_memory_for_training
from minigpt_tui.engine.formats.gguf_file import read_gguf_header
from minigpt_tui.engine.formats.portable import TRAINING_ONLY_SETTINGS
from minigpt_tui.engine.formats.safetensors_read import read_header
from minigpt_tui.engine.session.events import RunSummary
from minigpt_tui.engine.session.inputs import BUNDLED_PREFIX
from minigpt_tui.engine.session.opening import (
    is_gguf_file,
    is_torch_checkpoint,
    is_transformers_folder,
    open_model,
    peek_model,
)
from minigpt_tui.engine.session.runs import (
    RunDirectory,
    RunLock,
    lock_rank,
    owning_run,
    refuse_if_in_use,
    resolve_model_file,
)
from minigpt_tui.engine.session.watching import PROMPTS, corpus_prompts
from minigpt_tui.engine.training.chat_data import (
    ChatTemplate,
    chat_template_of,
    gguf_chat_template,
    hf_chat_template,
)
from minigpt_tui.engine.training.corpus import CorpusLoading

if TYPE_CHECKING:
    from minigpt_tui.engine.analysis.generation import ProbeSet
    from minigpt_tui.engine.core.config import RunConfig
    from minigpt_tui.engine.session.runs import RunDirectory, RunLock
    from minigpt_tui.engine.training.checkpoints import Checkpointer
    from minigpt_tui.engine.training.distributed import (
        CommandAgreement,
        DataParallel,
        WriterCheckpointer,
    )
    from minigpt_tui.engine.models.model_file import PortableModel
    from minigpt_tui.engine.training.stream import Progress
    from minigpt_tui.engine.training.trainer import Trainer, TrainingSetup

FINETUNE_PRESET = "finetune"
WARM_START_NOTE = (
    "weights-only warm start: a new training history (fresh optimizer moments, schedule clock, "
    "data position, random streams and loss scaler); not a resume, so it does not continue the saved run"
)


@dataclass(frozen=True)
class NewRun:
    """A new run from a resolved config in ``runs_dir`` (folder name: ``name`` or
    PRESET-TIMESTAMP); ``init_from`` warm-starts its weights from a saved model."""

    config: RunConfig
    runs_dir: Path
    name: str | None = None
    until: int | None = None
    init_from: str | None = None
    probes: str | None = None  # a probes file; None: the bundled probes on a bundled corpus, else none
    score_probes: bool = True  # score the probes after every scheduled evaluation
    parallel: DataParallel | None = None  # this process's rank when several train together
    sample_prompts: str | None = None  # a probes file whose prompts are continued at evaluations
    watch: bool = True  # samples and head roles after every scheduled evaluation


@dataclass(frozen=True)
class ResumeRun:
    """Continue the run saved in a checkpoint folder exactly where it stopped (``fork``:
    in a new run folder, as a checkpoint outside any run folder does)."""

    checkpoint: Path
    runs_dir: Path
    until: int | None = None
    allow_environment_change: bool = False
    corpus: str | None = None
    policy: Mapping[str, int] | None = None
    fork: bool = False
    probes: str | None = None
    score_probes: bool = True
    parallel: DataParallel | None = None
    allow_world_size_change: bool = False
    device: str | None = None  # run on this device instead of the saved config's
    sample_prompts: str | None = None
    watch: bool = True


RunPlan = NewRun | ResumeRun


@dataclass(frozen=True)
class WarmStart:
    """Where a warm start's weights came from (written to ``warm_start.json``)."""

    source: Path
    model_identity: str
    tokenizer_identity: str

    def to_json(self) -> dict[str, Any]:
        return {"from": str(self.source), "model_identity": self.model_identity,
                "tokenizer_identity": self.tokenizer_identity, "note": WARM_START_NOTE}


@dataclass
class PreparedRun:
    """A trainer ready for its first update, and where its run writes (None: nowhere)."""

    trainer: Trainer
    run: RunDirectory | None = None  # None on every rank but 0: rank 0 alone writes
    checkpointer: Checkpointer | WriterCheckpointer | None = None
    until: int | None = None
    summary: RunSummary | None = None
    resumed_from: Path | None = None
    warm_start: WarmStart | None = None
    lock: RunLock | None = None  # held while the session writes to ``run``; released at its end
    probes: ProbeSet | None = None  # scored after every scheduled evaluation
    sample_prompts: list[str] | None = None  # continued after every scheduled evaluation; None: not watched
    agreement: CommandAgreement | None = None  # several processes: commands agreed by all ranks

    def release(self) -> None:
        if self.lock is not None:
            self.lock.release()


def _placed(trainer: Trainer, run: RunDirectory | None) -> dict[str, Any]:
    """A prepared run's checkpointer and command agreement for the trainer's world: with
    several processes every rank saves together and rank 0 alone writes."""
    from minigpt_tui.engine.training.checkpoints import (  # deferred: imports torch
        Checkpointer,
    )
    from minigpt_tui.engine.training.distributed import (  # deferred: imports torch
        CommandAgreement,
        WriterCheckpointer,
    )

    parallel = trainer.parallel
    inner = Checkpointer(run, run_id=run.run_id) if run is not None else None
    if not parallel.distributed:
        return {"checkpointer": inner}
    return {"checkpointer": WriterCheckpointer(parallel, inner), "agreement": CommandAgreement(parallel, trainer.device)}


def prepare(plan: RunPlan, progress: Progress | None = None) -> PreparedRun:
    """The plan's trainer and run folder; ``progress`` hears about long preparation work
    (tokenizer training, encoding, cache writing)."""
    # A bad probes or sample-prompts file is refused before anything is built or written.
    probes = _run_probes(plan)
    chosen = _chosen_prompts(plan)
    prepared = _prepare_resume(plan, progress) if isinstance(plan, ResumeRun) else _prepare_new(plan, progress)
    _hold_on_every_rank(prepared)
    if plan.probes is None and not prepared.trainer.config.corpus.source.startswith(BUNDLED_PREFIX):
        probes = None  # the bundled probes ask about the bundled texts: nothing to learn from your own
    prepared.probes = probes
    if plan.watch:
        prepared.sample_prompts = chosen or _default_prompts(prepared.trainer, probes)
    return prepared


def _chosen_prompts(plan: RunPlan) -> list[str] | None:
    from minigpt_tui.engine.analysis.generation import (  # deferred: imports torch
        load_probes,
    )

    if not plan.watch or plan.sample_prompts is None:
        return None
    return [probe.prompt for probe in load_probes(plan.sample_prompts).probes][:8]


def _default_prompts(trainer: Trainer, probes: ProbeSet | None) -> list[str]:
    """The probes' first prompts, else the first words of a few validation records (from
    the token arrays in stream mode, so the text is not read again)."""
    if probes is not None:
        return [probe.prompt for probe in probes.probes][:PROMPTS]
    if trainer.stream_mode:
        return corpus_prompts(_stream_records(trainer))
    corpus = trainer.setup.corpus
    return corpus_prompts(list(corpus.validation) or list(corpus.train))


def _stream_records(trainer: Trainer) -> list[str]:
    """The texts of the first records in the stream's token arrays (validation, else
    training), split at the tokenizer's bos and eos ids."""
    tokens = trainer.validation_examples.tokens
    tokens = tokens if tokens.size else trainer.train_examples.tokens
    head = [int(t) for t in tokens[:2048]]
    markers = {getattr(trainer.tokenizer, "bos_id", None), *getattr(trainer.tokenizer, "eos_ids", ())}
    records, current = [], []
    for token in head:
        if token not in markers:
            current.append(token)
            continue
        if current:
            records.append(trainer.tokenizer.decode(current).display)
        current = []
    if current:
        records.append(trainer.tokenizer.decode(current).display)
    return records


def _hold_on_every_rank(prepared: PreparedRun) -> None:
    """With several processes, every rank holds a lock on the run rank 0 writes, so no other
    writer (a resume) can start while any process of this run lives."""
    parallel = prepared.trainer.parallel
    if not parallel.distributed:
        return
    folder = parallel.from_writer(str(prepared.run.path) if prepared.run is not None else None)
    if folder is not None and not parallel.world.is_writer:
        prepared.lock = lock_rank(Path(folder), parallel.rank)


def _run_probes(plan: RunPlan) -> ProbeSet | None:
    from minigpt_tui.engine.analysis.generation import (  # deferred: imports torch
        load_probes,
    )

    return load_probes(plan.probes) if plan.score_probes else None


def _prepare_new(plan: NewRun, progress: Progress | None = None) -> PreparedRun:
    _check_new_plan(plan)
    single = plan.parallel is None or not plan.parallel.distributed  # a launcher checked its processes together
    portable, config = _start_from(plan, plan.config, single)
    if single:
        require_memory_for_training(config, portable.tokenizer.vocab_size if portable is not None else None)
    # Reading and hashing the corpus run while torch and the trainer are imported.
    loading = CorpusLoading(config.corpus)
    from minigpt_tui.engine.training.trainer import (  # deferred: imports torch
        Trainer,
        TrainingSetup,
        apply_precision,
    )

    apply_precision(config.train)
    corpus = loading.result()
    setup = TrainingSetup.build(config, corpus, portable.tokenizer if portable is not None else None,
                                progress=progress)
    initial = {n: p.detach() for n, p in portable.model.named_parameters()} if portable is not None else None
    trainer = Trainer(setup, initial_weights=initial, parallel=plan.parallel)
    files: dict[str, Any] = {"config.json": config.to_dict(), "identities.json": identities(setup)}
    warm = _warm_start_record(portable, files)
    if not trainer.parallel.world.is_writer:  # rank 0 alone writes
        return PreparedRun(trainer, None, until=plan.until, warm_start=warm, **_placed(trainer, None))
    run = RunDirectory.create(plan.runs_dir, plan.name, config.preset, files)  # whole or not at all
    lock = run.lock()
    lock.announce()
    return PreparedRun(trainer, run, until=plan.until, summary=summarize(trainer, run), warm_start=warm,
                       lock=lock, **_placed(trainer, run))


def _check_new_plan(plan: NewRun) -> None:
    """Refuse an --until outside the schedule, and the finetune preset without a model."""
    config = plan.config
    if plan.until is not None and not 1 <= plan.until <= config.train.steps:
        raise ConfigError(f"--until must be between 1 and {config.train.steps}")
    if config.preset == FINETUNE_PRESET and not plan.init_from:
        raise ConfigError("the finetune preset trains a model you already have: give it with --init-from MODEL "
                          "(a checkpoint, a transformers folder or a GGUF file)", field="model")


def _start_from(plan: NewRun, config: RunConfig, single: bool) -> tuple[PortableModel | None, RunConfig]:
    """The model a new run starts from (None: fresh weights) and the config fitted to it."""
    if not plan.init_from:
        return None, config
    if single:
        _require_memory_to_start_from(plan.init_from, config)  # before the model is read
    portable = _warm_start_model(plan.init_from, plan.runs_dir, config)
    fitted = fitted_config(config, portable, plan.init_from)
    return portable, with_model_chat_template(fitted, plan.init_from, plan.runs_dir)


def with_model_chat_template(config: RunConfig, spec: str, runs_dir: Path) -> RunConfig:
    """The run's config with the chat template of the model it starts from (unless one was
    set): chat records are rendered as that model renders them, and a resume, which reads
    the template from the saved config, renders them the same."""
    if config.corpus.chat_template:
        return config
    template = model_chat_template(spec, runs_dir)
    return config if template is None else config.replace(corpus=template.settings())


def model_chat_template(spec: str, runs_dir: Path) -> ChatTemplate | None:
    """A model's chat template: a transformers folder's, a GGUF file's, or the one that the
    run which saved one of our checkpoints rendered its chat records with; None: none."""
    path = Path(spec).expanduser()
    if is_transformers_folder(spec):
        return hf_chat_template(path)
    if is_gguf_file(spec):
        return gguf_chat_template(read_gguf_header(path).metadata)
    if is_torch_checkpoint(spec):
        return None
    try:
        return chat_template_of(saved_run_config(resolve_model_file(spec, runs_dir).parent).corpus)
    except (CheckpointError, ConfigError):  # a model file alone, outside a checkpoint: no saved config
        return None


def _warm_start_record(portable: PortableModel | None, files: dict[str, Any]) -> WarmStart | None:
    """The warm start of a run from ``portable``, added to the run's ``files``."""
    if portable is None:
        return None
    warm = WarmStart(Path(portable.path), portable.identity, portable.tokenizer.identity)
    files["warm_start.json"] = warm.to_json()
    return warm


def _require_memory_to_start_from(spec: str, config: RunConfig) -> None:
    """Refuse, before a model from elsewhere is read, a run from it that would not fit: its
    training (weights, gradients, AdamW moments, activations) and the copy it is read into."""
    peeked = peek_model(spec)
    if peeked is None:
        return
    model, vocab = peeked
    data = config.to_dict()
    data["model"] = {**model.declared(), "dropout": config.model.dropout}
    data["train"]["context"] = min(config.train.context, model.context)
    try:
        fitted = type(config).from_dict(data)
    except Exception:  # a setting the model refuses is named later, when the model is read
        return
    element = config.train.precision_kind.bytes_per_element
    require_memory_for_training(fitted, vocab, extra_bytes=estimated_parameters(model, vocab) * element,
                                what=f"fine-tuning {spec}")


def _warm_start_model(spec: str, runs_dir: Path, config: RunConfig) -> PortableModel:
    """The model a run starts from (its weights, architecture and tokenizer): one of ours,
    a transformers folder, a GGUF file or a nanoGPT checkpoint, as the Generation screen
    opens them."""
    portable = open_model(spec, runs_dir, dtype=config.dtype_name)
    if getattr(portable.tokenizer, "kind", "tokenizers") != "tokenizers":  # ours have no kind
        raise ConfigError(
            f"--init-from {spec}: its tokenizer ({portable.tokenizer.kind}) cannot be saved with a run; "
            "fine-tuning takes models with a tokenizer.json or a GGUF vocabulary", field="model"
        )
    return portable


def fitted_config(config: RunConfig, portable: PortableModel, spec: str) -> RunConfig:
    """The run's config with the architecture and tokenizer of the model it starts from.
    A model or tokenizer setting the user chose (one that differs from the preset's) that
    would change them is refused, naming the field; the training window is at most the
    model's context (a preset's longer window is shortened to it)."""
    try:
        preset: RunConfig | None = load_config(config.preset)
    except ConfigError:
        preset = None
    model = portable.config

    def chosen(section: str, name: str) -> bool:
        return preset is None or getattr(getattr(config, section), name) != getattr(getattr(preset, section), name)

    _refuse_model_changes(config, model, spec, chosen)
    merges = len(portable.tokenizer.merges)
    if config.tokenizer.merges != merges and chosen("tokenizer", "merges"):
        raise ConfigError(f"--init-from {spec}: tokenizer.merges = {config.tokenizer.merges} would change the "
                          "model's tokenizer; the tokenizer comes from the model", field="model")
    window = _fitted_window(config, model, spec, chosen)
    data = config.to_dict()
    data["model"] = {**model.declared(), **{name: getattr(config.model, name) for name in TRAINING_ONLY_SETTINGS}}
    data["tokenizer"]["merges"] = merges
    data["train"]["context"] = 0 if window == model.context else window
    return RunConfig.from_dict(data)


def _refuse_model_changes(config: RunConfig, model: ModelConfig, spec: str,
                          chosen: Callable[[str, str], bool]) -> None:
    """Refuse a model setting the user chose that differs from the model started from."""
    for field in dataclasses.fields(ModelConfig):
        mine, theirs = getattr(config.model, field.name), getattr(model, field.name)
        if field.name not in TRAINING_ONLY_SETTINGS and mine != theirs and chosen("model", field.name):
            raise ConfigError(f"--init-from {spec}: model.{field.name} = {mine!r} would change the model "
                              f"(its {field.name} is {theirs!r}); the architecture comes from the model",
                              field="model")


def _fitted_window(config: RunConfig, model: ModelConfig, spec: str, chosen: Callable[[str, str], bool]) -> int:
    """The training window, at most the model's context (a chosen longer one is refused)."""
    window = config.train.context
    if window > model.context:
        if chosen("train", "context"):
            raise ConfigError(f"--init-from {spec}: train.context = {window} is longer than the model's context "
                              f"of {model.context}", field="model")
        window = model.context
    return window


def _prepare_resume(plan: ResumeRun, progress: Progress | None = None) -> PreparedRun:
    folder = Path(plan.checkpoint)
    writer = plan.parallel is None or plan.parallel.world.is_writer
    if writer and not plan.fork:  # a run another process trains is refused before its manifest is read
        refuse_if_in_use(folder)  # (its retention may remove the folder at any moment)
    run = owning_run(folder, fork=plan.fork)  # None: a new run folder once the restore succeeds
    # The run is held before its checkpoint is read, so a second writer is refused at once
    # (by rank 0 alone when several processes train: one writer per run).
    lock = run.lock() if run is not None and writer else None
    try:
        return _restore_into(plan, folder, run, lock, progress)
    except BaseException:
        if lock is not None:
            lock.release()
        raise


def _restore_into(plan: ResumeRun, folder: Path, run: RunDirectory | None, lock: RunLock | None,
                  progress: Progress | None = None) -> PreparedRun:
    from minigpt_tui.engine.training.checkpoints import (  # deferred: imports torch
        restore_trainer,
    )
    from minigpt_tui.engine.training.trainer import (  # deferred: imports torch
        apply_precision,
    )

    trainer = restore_trainer(folder, allow_environment_change=plan.allow_environment_change,
                              corpus_path_override=plan.corpus, policy_overrides=dict(plan.policy or {}) or None,
                              parallel=plan.parallel, allow_world_size_change=plan.allow_world_size_change,
                              device=plan.device, progress=progress)
    steps = trainer.config.train.steps
    if trainer.finished:
        raise ConfigError(
            f"the checkpoint at step {trainer.step} has completed its schedule of {steps} updates; "
            f"to train further start a new history: train --init-from {plan.checkpoint}"
        )
    if plan.until is not None:
        if plan.until > steps:
            raise ResumeRefused(
                f"--until {plan.until} is beyond the saved schedule of {steps} updates; continuing past it is "
                f"a weights-only warm start with a new schedule: train --init-from {plan.checkpoint}"
            )
        if plan.until <= trainer.step:
            raise ConfigError(f"--until {plan.until} is not after the checkpoint's step {trainer.step}")
    apply_precision(trainer.config.train)
    if not trainer.parallel.world.is_writer:  # rank 0 alone writes
        return PreparedRun(trainer, None, until=plan.until, resumed_from=folder, **_placed(trainer, None))
    if run is None:
        config = trainer.config
        run = RunDirectory.create(plan.runs_dir, None, f"resumed-{config.preset}", {"config.json": config.to_dict()})
        lock = run.lock()
    assert lock is not None
    lock.announce()
    run.append_metric({"kind": "resume", "from": str(folder), "step": trainer.step})
    return PreparedRun(trainer, run, until=plan.until, summary=summarize(trainer, run, resumed_from=folder),
                       resumed_from=folder, lock=lock, **_placed(trainer, run))


def identities(setup: TrainingSetup) -> dict[str, Any]:
    """The ``identities.json`` of a new run: its corpus and tokenizer."""
    tokenizer = setup.tokenizer
    return {
        "corpus": setup.corpus_summary(),
        "tokenizer": {"identity": tokenizer.identity, "vocab_size": tokenizer.vocab_size,
                      "merges": len(tokenizer.merges)},
    }


def summarize(trainer: Trainer, run: RunDirectory | None, resumed_from: Path | None = None) -> RunSummary:
    config = trainer.config
    tensors, scalars = trainer.parameter_counts
    corpus = trainer.setup.corpus
    return RunSummary(
        run_name=run.name if run is not None else "",
        run_dir=run.path if run is not None else None,
        preset=config.preset,
        parameter_tensors=tensors,
        parameter_scalars=scalars,
        corpus_source=corpus.source,
        corpus_identity=corpus.identity,
        train_records=corpus.counts.train_records,
        validation_records=corpus.counts.validation_records,
        tokenizer_identity=trainer.tokenizer.identity,
        vocab_size=trainer.tokenizer.vocab_size,
        merges=len(trainer.tokenizer.merges),
        precision=config.train.precision,
        dtype=config.dtype_name,
        threads=config.train.effective_threads.count,
        steps=config.train.steps,
        start_step=trainer.step,
        resumed_from=resumed_from,
        corpus_mode=config.corpus.mode,
        train_tokens=trainer.data_summary().get("train_tokens", 0),
        validation_tokens=trainer.data_summary().get("validation_tokens", 0),
        evaluation_rule=trainer.evaluation_rule,
        tokenizer_kind=getattr(trainer.tokenizer, "kind", ""),
    )


def saved_run_config(checkpoint: Path) -> RunConfig:
    """The RunConfig saved in a checkpoint's training state, from its header alone (no torch)."""
    path = Path(checkpoint) / "training.safetensors"
    if not path.is_file():
        raise CheckpointError(f"{checkpoint} holds no training.safetensors: it cannot be resumed")
    try:
        return RunConfig.from_dict(json.loads(read_header(path).metadata["config"]))
    except (KeyError, ValueError, TypeError) as err:
        raise CheckpointError(f"{path}: no readable run config ({type(err).__name__})") from None
