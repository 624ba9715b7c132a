"""Model, tokenizer, corpus, seed and training settings; bundled presets; TOML overrides.

A :class:`RunConfig` is frozen and fully resolved: every field the engine reads is here,
so that its normalized form (``to_dict``) identifies the run and can be written beside it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from importlib import resources
from pathlib import Path
from typing import Any

from minigpt_tui.engine.core.devices import DEVICE_CHOICES
from minigpt_tui.engine.core.errors import ConfigError
from minigpt_tui.engine.core.files import path_exists, require_regular_file
from minigpt_tui.engine.core.tokenizer import FIRST_MERGE_ID

FAMILIES = ("llama", "gpt2", "qwen2", "gpt_neo", "gpt_neox")  # each a setting of the parts (FAMILY_PARTS)
NORMS = ("layernorm", "rmsnorm")
POSITION_KINDS = ("learned", "rotary")
ATTENTION_BIASES = ("none", "qkv", "out", "all")  # which projections carry a bias
ATTENTION_SCALES = ("inverse_sqrt", "none")  # scores times 1/sqrt(head width), or as they are
FFN_KINDS = ("gelu", "swiglu")
RESIDUALS = ("sequential", "parallel")
# exact: float64, one thread, deterministic. fast: float32. bf16 / fp16: autocast over float32
# master weights (fp16 with the bounded loss scaler always on).
PRECISIONS = ("exact", "fast", "bf16", "fp16")
BATCH_POLICIES = ("replacement", "document_order")
CORPUS_MODES = ("records", "stream")
SCHEDULES = ("constant", "cosine")
GELU_APPROXIMATIONS = ("tanh", "none")
U64_MAX = 2**64 - 1


@dataclass(frozen=True)
class ModelConfig:
    family: str = "llama"
    width: int = 16
    heads: int = 2
    kv_heads: int = 2
    ffn: int = 64
    layers: int = 1
    context: int = 64
    dropout: float = 0.0
    rope_base: float = 10000.0
    norm_eps: float = 1e-5
    gelu_approximation: str = "tanh"
    init_std: float = 0.02
    # The model's parts. None takes the family's own setting (FAMILY_PARTS), so a family is
    # a setting of the parts and any part can be set on its own.
    norm: str | None = None  # layernorm (weight and bias) | rmsnorm (weight)
    norm_bias: bool = True  # a LayerNorm's bias (nanoGPT's bias=False has none)
    positions: str | None = None  # learned table | rotary (rotate-half)
    rotary_fraction: float = 1.0  # the leading share of each head's width that is rotated
    attention_bias: str | None = None  # none | qkv | out | all
    attention_scale: str | None = None  # inverse_sqrt | none
    attention_window: int = 0  # 0: every earlier position; W: the last W positions ...
    local_layers: tuple[int, ...] = ()  # ... in these blocks only
    ffn_kind: str | None = None  # gelu (up, activation, down) | swiglu (silu(gate) * up, down)
    ffn_bias: bool | None = None
    residual: str = "sequential"  # sequential: x + attn, then + ffn | parallel: x + attn(x) + ffn(x)
    tied_head: bool = True  # the head is the token table transposed, or a table of its own

    def __post_init__(self) -> None:
        for name, value in FAMILY_PARTS.get(self.family, {}).items():
            if getattr(self, name) is None:
                object.__setattr__(self, name, value)

    @property
    def head_dim(self) -> int:
        return self.width // self.heads

    @property
    def rotary_dims(self) -> int:
        """How many leading dimensions of each head rotary positions turn (even)."""
        if self.positions != "rotary":
            return 0
        return int(self.head_dim * self.rotary_fraction) // 2 * 2

    def biased(self, projection: str) -> bool:
        """Whether the attention projection ``q``, ``k``, ``v`` or ``o`` has a bias."""
        kind = self.attention_bias
        return kind == "all" or (kind == "qkv" and projection != "o") or (kind == "out" and projection == "o")

    def window_of(self, layer: int) -> int:
        """How many positions block ``layer`` attends over (0: all earlier ones)."""
        return self.attention_window if layer in self.local_layers else 0

    def declared(self) -> dict[str, Any]:
        """The settings as stored, with each part left out where it is the family's own or
        the setting before parts were declared: a model's identity does not move with the
        spelling of its family."""
        data = dataclasses.asdict(self)
        for name, value in {**PART_DEFAULTS, **FAMILY_PARTS.get(self.family, {})}.items():
            if data.get(name) == value or (name == "local_layers" and data.get(name) == list(value)):
                data.pop(name, None)
        return data


# Each family as a setting of the parts (the rest of ModelConfig's fields are shared).
FAMILY_PARTS: dict[str, dict[str, Any]] = {
    "llama": {"norm": "rmsnorm", "positions": "rotary", "attention_bias": "none",
              "attention_scale": "inverse_sqrt", "ffn_kind": "swiglu", "ffn_bias": False},
    "qwen2": {"norm": "rmsnorm", "positions": "rotary", "attention_bias": "qkv",
              "attention_scale": "inverse_sqrt", "ffn_kind": "swiglu", "ffn_bias": False},
    "gpt2": {"norm": "layernorm", "positions": "learned", "attention_bias": "all",
             "attention_scale": "inverse_sqrt", "ffn_kind": "gelu", "ffn_bias": True},
    "gpt_neo": {"norm": "layernorm", "positions": "learned", "attention_bias": "out",
                "attention_scale": "none", "ffn_kind": "gelu", "ffn_bias": True},
    "gpt_neox": {"norm": "layernorm", "positions": "rotary", "attention_bias": "all",
                 "attention_scale": "inverse_sqrt", "ffn_kind": "gelu", "ffn_bias": True},
}
# Parts whose value does not come from the family, at the value every model had before.
PART_DEFAULTS: dict[str, Any] = {"norm_bias": True, "rotary_fraction": 1.0, "attention_window": 0, "local_layers": (),
                                 "residual": "sequential", "tied_head": True}


@dataclass(frozen=True)
class TokenizerConfig:
    merges: int = 32
    # Learn the merges from the leading training records up to this many UTF-8 bytes
    # (whole records; at least one); 0: from the whole training split.
    train_bytes: int = 0


@dataclass(frozen=True)
class CorpusConfig:
    # "bundled:NAME" for a file in the package's assets/corpus, else a path.
    source: str = "bundled:teaching.txt"
    # Record i (1-based, in file order) is validation when i % val_every == 0; 0: none.
    val_every: int = 4
    # records: one padded example (or several windows) per record. stream: every record
    # joined as BOS text EOS into one token array per split; examples are full windows.
    mode: str = "records"
    # A folder corpus reads the links in it only where they stay inside the folder, unless this.
    follow_links: bool = False
    # The field of each JSON Lines object (a .jsonl file) that holds its record's text.
    text_field: str = "text"


@dataclass(frozen=True)
class SeedConfig:
    init: int = 1729
    data: int = 101
    dropout: int = 0
    sampling: int = 31415
    evaluation: int = 0  # draws the fixed batches of bounded evaluation

    @staticmethod
    def derive(seed: int) -> "SeedConfig":
        """Independent stream seeds from one user seed (SHA-256 of seed and name)."""
        values = {}
        for name in ("init", "data", "dropout", "sampling", "evaluation"):
            digest = hashlib.sha256(f"minigpt-tui/{name}/{seed}".encode()).digest()
            values[name] = int.from_bytes(digest[:8], "little")
        return SeedConfig(**values)


@dataclass(frozen=True)
class TrainConfig:
    steps: int = 600
    batch_policy: str = "replacement"
    document_order: tuple[int, ...] = ()
    batch_size: int = 8
    microbatches: int = 1
    schedule: str = "constant"
    lr: float = 0.01
    final_lr: float = 0.01
    warmup: int = 0
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 0.0
    clip: float = 0.0
    recompute: bool = False
    loss_scale: bool = False
    loss_scale_init: float = 65536.0
    loss_scale_min: float = 1.0
    loss_scale_max: float = 2.0**24
    loss_scale_growth_interval: int = 2000
    loss_scale_growth_factor: float = 2.0
    loss_scale_backoff_factor: float = 0.5
    # Training windows of this many tokens (at most the model's context); 0: the model's context.
    context: int = 0
    eval_every: int = 50
    eval_batch_size: int = 8
    # 0: evaluate the complete splits. N: N fixed batches per split, drawn once from
    # seeds.evaluation; a split that N batches would cover anyway is evaluated completely.
    eval_batches: int = 0
    monitor_tokens: int = 0
    precision: str = "exact"
    threads: int = 1
    device: str = "cpu"  # auto | cpu | cuda | mps (auto: cuda, then mps, then cpu)
    save_every: int = 0
    keep_last: int = 3
    # Consecutive updates with a non-finite loss or gradient (skipped, with loss scaling)
    # after which the run stops as diverged; 0: never.
    divergence_patience: int = 20


@dataclass(frozen=True)
class RunConfig:
    preset: str
    model: ModelConfig = field(default_factory=ModelConfig)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    corpus: CorpusConfig = field(default_factory=CorpusConfig)
    seeds: SeedConfig = field(default_factory=SeedConfig)
    train: TrainConfig = field(default_factory=TrainConfig)

    def to_dict(self) -> dict[str, Any]:
        """Every setting, the model's parts only where they differ from its family's."""
        return json.loads(json.dumps({**dataclasses.asdict(self), "model": self.model.declared()}))

    @staticmethod
    def from_dict(data: dict[str, Any]) -> "RunConfig":
        return _build(str(data.get("preset", "custom")), data)

    def replace(self, **sections: dict[str, Any]) -> "RunConfig":
        """A copy with some fields of some sections changed, validated like a user file."""
        data = self.to_dict()
        for section, values in sections.items():
            if section not in _SECTIONS:
                raise ConfigError(f"unknown config section '{section}'")
            data[section].update(values)
        return _build(self.preset, data)

    @property
    def window(self) -> int:
        """How many tokens a training or evaluation window holds."""
        return self.train.context or self.model.context

    @property
    def dtype_name(self) -> str:
        return "float64" if self.train.precision == "exact" else "float32"


# Settings added after checkpoints were first written, with the value that reproduces the
# earlier behaviour. At that value they are left out of a config's identity, so a checkpoint
# saved before they existed keeps its identity and still resumes.
LATER_SETTINGS: dict[tuple[str, str], Any] = {
    ("corpus", "mode"): "records",
    ("tokenizer", "train_bytes"): 0,
    ("seeds", "evaluation"): 0,
    ("train", "eval_batches"): 0,
    ("corpus", "follow_links"): False,
    ("train", "context"): 0,
    ("corpus", "text_field"): "text",
}


def identity_form(config: dict[str, Any]) -> dict[str, Any]:
    """A resolved config as its identity sees it: later settings at their earlier value dropped."""
    data = json.loads(json.dumps(config))
    if isinstance(data.get("model"), dict) and data["model"].get("family") in FAMILY_PARTS:
        model = data["model"]
        for name, value in {**PART_DEFAULTS, **FAMILY_PARTS[model["family"]]}.items():
            if model.get(name, value) == (list(value) if isinstance(value, tuple) else value):
                model.pop(name, None)
    for (section, name), value in LATER_SETTINGS.items():
        if data.get(section, {}).get(name, value) == value:
            data.get(section, {}).pop(name, None)
    return data


_SECTIONS: dict[str, type] = {
    "model": ModelConfig,
    "tokenizer": TokenizerConfig,
    "corpus": CorpusConfig,
    "seeds": SeedConfig,
    "train": TrainConfig,
}


def preset_names() -> list[str]:
    return list(_load_presets())


def _load_presets() -> dict[str, Any]:
    text = resources.files("minigpt_tui").joinpath("assets/presets.toml").read_text("utf-8")
    return tomllib.loads(text)


def load_config(
    preset: str = "mini",
    config_file: Path | None = None,
    overrides: dict[str, dict[str, Any]] | None = None,
) -> RunConfig:
    """Resolve a preset, then a user's TOML file, then explicit overrides, and validate."""
    presets = _load_presets()
    if preset not in presets:
        raise ConfigError(f"unknown preset '{preset}' (choose from {', '.join(presets)})")
    data: dict[str, Any] = {name: dict(presets[preset].get(name, {})) for name in _SECTIONS}
    if config_file is not None:
        _apply_user_file(data, config_file)
    for section, values in (overrides or {}).items():
        data[section].update({k: v for k, v in values.items() if v is not None})
    return _build(preset, data)


def _apply_user_file(data: dict[str, Any], config_file: Path) -> None:
    """Lay the sections of a user's TOML file over ``data``, refusing unknown or non-table sections."""
    user = _read_toml(Path(config_file))
    for section, values in user.items():
        if section not in _SECTIONS:
            raise ConfigError(f"{config_file}: unknown config section '{section}'")
        if not isinstance(values, dict):
            raise ConfigError(f"{config_file}: section '{section}' must be a table")
        data[section].update(values)


def _read_toml(path: Path) -> dict[str, Any]:
    if path_exists(path):
        require_regular_file(path, "a config file")
    try:
        return tomllib.loads(path.read_text("utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"cannot read config file {path}: {err}") from None
    except RecursionError:
        raise ConfigError(f"config file {path} nests too deep to be a config") from None
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"config file {path} is not valid TOML: {err}") from None


def _as_bool(where: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{where} must be true or false, got {value!r}")
    return value


def _as_int(where: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{where} must be an integer, got {value!r}")
    return value


def _as_float(where: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{where} must be a number, got {value!r}")
    return float(value)


def _as_str(where: str, value: Any) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"{where} must be a string, got {value!r}")
    return value


def _as_float_pair(where: str, value: Any) -> tuple[float, ...]:
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise ConfigError(f"{where} must be a list of two numbers, got {value!r}")
    return tuple(_as_float(where, v) for v in value)


def _as_ints(where: str, value: Any) -> tuple[int, ...]:
    if not isinstance(value, (list, tuple)):
        raise ConfigError(f"{where} must be a list of integers, got {value!r}")
    return tuple(_as_int(where, v) for v in value)


# A setting's declared type, as its annotation spells it -> the check that reads a TOML value
# as that type: a scalar by its name, a tuple by the start of its annotation.
_SCALARS: dict[str, Callable[[str, Any], Any]] = {"bool": _as_bool, "int": _as_int, "float": _as_float, "str": _as_str}
_TUPLES: tuple[tuple[str, Callable[[str, Any], Any]], ...] = (("tuple[float", _as_float_pair), ("tuple[int", _as_ints))


def _coerce(section: str, name: str, kind: Any, value: Any) -> Any:
    where = f"{section}.{name}"
    text = kind.__name__ if isinstance(kind, type) else str(kind)
    text = text.removesuffix(" | None")
    if text in _SCALARS:
        return _SCALARS[text](where, value)
    for start, coerce in _TUPLES:
        if start in text:
            return coerce(where, value)
    raise ConfigError(f"{where}: unsupported setting type")  # pragma: no cover


def _build(preset: str, data: dict[str, Any]) -> RunConfig:
    sections: dict[str, Any] = {}
    for section, cls in _SECTIONS.items():
        values = data.get(section, {}) or {}
        known = {f.name: f for f in fields(cls)}
        kwargs = {}
        for name, value in values.items():
            if name not in known:
                raise ConfigError(f"unknown setting {section}.{name}")
            kwargs[name] = _coerce(section, name, known[name].type, value)
        sections[section] = cls(**kwargs)
    config = RunConfig(preset=preset, **sections)
    validate(config)
    return config


def _need(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


def validate(config: RunConfig) -> None:
    _validate_model(config.model)
    _validate_data(config)
    _validate_train(config.train, config.model)
    check_bounds(config)


def _validate_model(m: ModelConfig) -> None:
    need = _need
    need(m.family in FAMILIES, f"model.family must be one of {FAMILIES}, got '{m.family}'")
    for name in ("width", "heads", "kv_heads", "ffn", "layers", "context"):
        need(getattr(m, name) >= 1, f"model.{name} must be at least 1")
    need(m.width % m.heads == 0, "model.width must be a multiple of model.heads")
    need(m.heads % m.kv_heads == 0, "model.heads must be a multiple of model.kv_heads")
    need(m.positions != "rotary" or m.head_dim % 2 == 0, "rotary positions need an even head width")
    need(m.norm in NORMS, f"model.norm must be one of {NORMS}, got '{m.norm}'")
    need(m.positions in POSITION_KINDS, f"model.positions must be one of {POSITION_KINDS}, got '{m.positions}'")
    need(0.0 < m.rotary_fraction <= 1.0, "model.rotary_fraction must be in (0, 1]")
    need(m.positions != "rotary" or m.rotary_dims >= 2, "model.rotary_fraction leaves no rotated dimensions")
    need(m.attention_bias in ATTENTION_BIASES, f"model.attention_bias must be one of {ATTENTION_BIASES}")
    need(m.attention_scale in ATTENTION_SCALES, f"model.attention_scale must be one of {ATTENTION_SCALES}")
    need(m.attention_window >= 0, "model.attention_window must be 0 (every position) or positive")
    need(all(0 <= layer < m.layers for layer in m.local_layers),
         "model.local_layers must name blocks of the model (0 to layers - 1)")
    need(m.ffn_kind in FFN_KINDS, f"model.ffn_kind must be one of {FFN_KINDS}, got '{m.ffn_kind}'")
    need(m.residual in RESIDUALS, f"model.residual must be one of {RESIDUALS}, got '{m.residual}'")
    need(0.0 <= m.dropout < 1.0, "model.dropout must be in [0, 1)")
    need(m.norm_eps > 0, "model.norm_eps must be positive")
    need(m.rope_base > 0, "model.rope_base must be positive")
    need(m.gelu_approximation in GELU_APPROXIMATIONS, "model.gelu_approximation: tanh or none")


def _validate_data(config: RunConfig) -> None:
    need, t, s, c = _need, config.train, config.seeds, config.corpus
    need(config.tokenizer.merges >= 0, "tokenizer.merges must be 0 or more")
    need(config.tokenizer.train_bytes >= 0, "tokenizer.train_bytes must be 0 (all) or positive")
    need(c.val_every >= 0 and c.val_every != 1, "corpus.val_every must be 0 (none) or at least 2")
    need(isinstance(c.text_field, str) and 0 < len(c.text_field) <= 200,
         "corpus.text_field must name a JSON field (1 to 200 characters)")
    need(c.mode in CORPUS_MODES, f"corpus.mode must be one of {CORPUS_MODES}, got '{c.mode}'")
    need(
        c.mode != "stream" or t.batch_policy == "replacement",
        "corpus.mode = \"stream\" draws windows with replacement: set train.batch_policy = \"replacement\"",
    )
    for name in ("init", "data", "dropout", "sampling", "evaluation"):
        value = getattr(s, name)
        need(0 <= value <= U64_MAX, f"seeds.{name} must be an unsigned 64-bit integer")


def _validate_train(t: TrainConfig, m: ModelConfig) -> None:
    need = _need
    need(t.steps >= 1, f"train.steps must be at least 1, got {t.steps}")
    need(t.batch_policy in BATCH_POLICIES, f"train.batch_policy must be one of {BATCH_POLICIES}")
    need(t.batch_size >= 1, "train.batch_size must be at least 1")
    need(t.microbatches >= 1, "train.microbatches must be at least 1")
    need(t.schedule in SCHEDULES, f"train.schedule must be one of {SCHEDULES}")
    need(t.lr > 0, "train.lr must be positive")
    need(t.final_lr >= 0, "train.final_lr must be 0 or more")
    need(0 <= t.warmup, f"train.warmup must be 0 or more, got {t.warmup}")
    need(
        t.warmup <= t.steps,
        f"train.warmup ({t.warmup} updates) is longer than train.steps ({t.steps}): train at least "
        f"{t.warmup} updates, or set a shorter warmup ([train] warmup = N in a --config file)",
    )
    need(all(0 <= b < 1 for b in t.betas), "train.betas must be in [0, 1)")
    need(t.eps > 0, "train.eps must be positive")
    need(t.weight_decay >= 0, "train.weight_decay must be 0 or more")
    need(t.clip >= 0, "train.clip must be 0 (off) or positive")
    need(t.loss_scale_min > 0, "train.loss_scale_min must be positive")
    need(
        t.loss_scale_min <= t.loss_scale_init <= t.loss_scale_max,
        "train.loss_scale_init must lie within [loss_scale_min, loss_scale_max]",
    )
    need(t.loss_scale_growth_interval >= 1, "train.loss_scale_growth_interval must be at least 1")
    need(0 <= t.context <= m.context,
         f"train.context ({t.context}) must be 0 (the model's context) or at most the model's context of {m.context}")
    need(t.eval_every >= 0, "train.eval_every must be 0 (off) or positive")
    need(t.eval_batch_size >= 1, "train.eval_batch_size must be at least 1")
    need(t.eval_batches >= 0, "train.eval_batches must be 0 (complete splits) or positive")
    need(t.monitor_tokens >= 0, "train.monitor_tokens must be 0 or more")
    need(t.precision in PRECISIONS, f"train.precision must be one of {PRECISIONS}")
    need(t.threads >= 0, "train.threads must be 0 (auto: adapts to how busy the machine is) or at least 1")
    need(t.device in DEVICE_CHOICES, f"train.device must be one of {', '.join(DEVICE_CHOICES)}, got '{t.device}'")
    need(t.save_every >= 0, "train.save_every must be 0 (off) or positive")
    need(t.keep_last >= 1, "train.keep_last must be at least 1")
    need(t.divergence_patience >= 0, "train.divergence_patience must be 0 (never stop) or positive")
    if t.document_order:
        need(
            sorted(t.document_order) == list(range(len(t.document_order))),
            "train.document_order must be a permutation of 0..n-1",
        )


# Upper bounds on sizes and counts, and every number finite: a value beyond them is a typo
# or a hostile file, and is refused before anything is allocated or any folder is made.
LIMITS: dict[str, int] = {
    "model.width": 16_384,
    "model.heads": 1_024,
    "model.kv_heads": 1_024,
    "model.ffn": 65_536,
    "model.layers": 1_024,
    "model.context": 65_536,
    "tokenizer.merges": 100_000,
    "corpus.val_every": 1_000_000_000,
    "train.steps": 1_000_000_000,
    "train.warmup": 1_000_000_000,
    "train.batch_size": 65_536,
    "train.microbatches": 65_536,
    "train.context": 65_536,
    "train.eval_every": 1_000_000_000,
    "train.eval_batch_size": 65_536,
    "train.monitor_tokens": 1_000_000_000,
    "train.threads": 1_024,
    "train.save_every": 1_000_000_000,
    "train.keep_last": 1_000_000,
    "train.divergence_patience": 1_000_000_000,
    "train.loss_scale_growth_interval": 1_000_000_000,
}
# The most scalars a model may have here (about 8 GB in float64): CPU training beyond it
# is not what this tool is for, and a saved config declaring more is not a real model.
MAX_PARAMETERS = 1_000_000_000


def estimated_parameters(m: ModelConfig, vocab_size: int) -> int:
    """Scalars of a model of this config (the tied table once), from the config alone."""
    attention = m.width * m.heads * m.head_dim * 2 + m.width * m.kv_heads * m.head_dim * 2
    feed_forward = m.width * m.ffn * (3 if m.ffn_kind == "swiglu" else 2)
    per_block = attention + feed_forward + 4 * m.width + 2 * m.ffn
    positions = m.context * m.width if m.positions == "learned" else 0
    head = 0 if m.tied_head else vocab_size * m.width
    return vocab_size * m.width + head + positions + m.layers * per_block + 2 * m.width


def check_bounds(config: RunConfig) -> None:
    for dotted, limit in LIMITS.items():
        section, name = dotted.split(".")
        value = getattr(getattr(config, section), name)
        if value > limit:
            raise ConfigError(f"{dotted} is {value}, above the limit of {limit:,}")
    for section in ("model", "train"):
        part = getattr(config, section)
        for item in fields(part):
            value = getattr(part, item.name)
            values = value if isinstance(value, tuple) else (value,)
            if any(isinstance(v, float) and not math.isfinite(v) for v in values):
                raise ConfigError(f"{section}.{item.name} must be a finite number, got {value!r}")

    scalars = estimated_parameters(config.model, FIRST_MERGE_ID + config.tokenizer.merges)
    if scalars > MAX_PARAMETERS:
        raise ConfigError(
            f"the model would have about {scalars:,} parameters, above the limit of {MAX_PARAMETERS:,} "
            "(lower model.width, model.ffn or model.layers)"
        )
