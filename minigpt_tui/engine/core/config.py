"""Model, tokenizer, corpus, seed and training settings; bundled presets; TOML overrides.

A :class:`RunConfig` is frozen and fully resolved: every field the engine reads is here,
so that its normalized form (``to_dict``) identifies the run and can be written beside it.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import math
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from importlib import resources
from pathlib import Path
from typing import Any

from minigpt_tui.engine.core.devices import DEVICE_CHOICES
from minigpt_tui.engine.core.errors import ConfigError
from minigpt_tui.engine.core.files import path_exists, require_regular_file
from minigpt_tui.engine.core.precision import PRECISIONS, Precision, precision_of
from minigpt_tui.engine.core.setting import Setting, declared, setting
from minigpt_tui.engine.core.threads import Threads
from minigpt_tui.engine.core.tokenizer import FIRST_MERGE_ID

# each a setting of the parts (FAMILY_PARTS)
FAMILIES = ("llama", "gpt2", "qwen2", "gpt_neo", "gpt_neox", "qwen3", "mistral", "phi3", "gemma2", "gemma3")
NORMS = ("layernorm", "rmsnorm")
POSITION_KINDS = ("learned", "rotary")
# How rotary frequencies are stretched for a longer context: not at all, every frequency
# divided by rope_factor (linear), or Llama 3's: long wavelengths divided, short ones kept,
# the band between blended.
ROPE_SCALINGS = ("none", "linear", "llama3")
ATTENTION_BIASES = ("none", "qkv", "out", "all")  # which projections carry a bias
ATTENTION_SCALES = ("inverse_sqrt", "none")  # scores times 1/sqrt(head width), or as they are
FFN_KINDS = ("gelu", "swiglu", "geglu")
RESIDUALS = ("sequential", "parallel")
BATCH_POLICIES = ("replacement", "document_order")
CORPUS_MODES = ("records", "stream")
TRAIN_ON = ("all", "assistant")  # the tokens the loss counts: every one, or the assistant's turns of chat records
SCHEDULES = ("constant", "cosine")
GELU_APPROXIMATIONS = ("tanh", "none")
U64_MAX = 2**64 - 1
GIGA = 1_000_000_000  # the limit of an update or record count: more is a typo


def _names_a_json_field(text: str) -> bool:
    return 0 < len(text) <= 200


CHAT_TEMPLATE_LIMIT = 1 << 20  # characters: the longest chat templates published are tens of kilobytes


def _fits_a_chat_template(text: str) -> bool:
    return len(text) <= CHAT_TEMPLATE_LIMIT


_CHAT_TEXT: dict[str, Any] = {"accepts": _fits_a_chat_template,
                              "refusal": f"{{where}} is longer than {CHAT_TEMPLATE_LIMIT:,} characters"}


@dataclass(frozen=True)
class ModelConfig:
    family: str = setting("llama", choices=FAMILIES, echo=True)
    width: int = setting(16, least=1, limit=16_384, help="the residual stream's size")
    heads: int = setting(2, least=1, limit=1_024, help="attention heads")
    kv_heads: int = setting(2, least=1, limit=1_024)
    ffn: int = setting(64, least=1, limit=65_536)
    layers: int = setting(1, least=1, limit=1_024, help="transformer blocks")
    context: int = setting(64, least=1, limit=65_536, help="positions")
    dropout: float = setting(0.0, least=0, under=1, help="the dropout rate")
    rope_base: float = setting(10000.0, above=0)
    norm_eps: float = setting(1e-5, above=0)
    gelu_approximation: str = setting("tanh", choices=GELU_APPROXIMATIONS, refusal="{where}: tanh or none")
    init_std: float = 0.02
    # The model's parts. None takes the family's own setting (FAMILY_PARTS), so a family is
    # a setting of the parts and any part can be set on its own.
    norm: str | None = setting(None, choices=NORMS, echo=True)  # layernorm (weight and bias) | rmsnorm (weight)
    norm_bias: bool = True  # a LayerNorm's bias (nanoGPT's bias=False has none)
    positions: str | None = setting(None, choices=POSITION_KINDS, echo=True)  # learned table | rotary (rotate-half)
    # the leading share of each head's width that is rotated
    rotary_fraction: float = setting(1.0, above=0, most=1)
    rope_scaling: str = setting("none", choices=ROPE_SCALINGS)
    rope_factor: float = setting(1.0, above=0)  # linear and llama3: how much longer the context
    # llama3 only: wavelengths over original_context / low_freq_factor are divided by the
    # factor, those under original_context / high_freq_factor kept, the band between blended.
    rope_low_freq_factor: float = setting(1.0, above=0)
    rope_high_freq_factor: float = setting(4.0, above=0)
    rope_original_context: int = setting(8192, least=1, limit=GIGA)
    attention_bias: str | None = setting(None, choices=ATTENTION_BIASES)  # none | qkv | out | all
    attention_scale: str | None = setting(None, choices=ATTENTION_SCALES)  # inverse_sqrt | none
    # 0: every earlier position; W: the last W positions ...
    attention_window: int = setting(0, zero="every position", above=0)
    local_layers: tuple[int, ...] = ()  # ... in these blocks only
    # Each head's width: 0 is width // heads; else the q and o projections are heads * this
    # wide (Qwen3, Gemma), the k and v ones kv_heads * this.
    head_dim_override: int = setting(0, zero="width // heads", above=0, limit=4_096)
    # An RMSNorm (weight per head dimension, norm_eps) on each query and key head, before
    # rotary positions (Qwen3, Gemma 3).
    qk_norm: bool | None = None
    # Gemma's parts. An RMSNorm whose weight is stored as w - 1: it scales by (1 + w),
    # computed in float32 at least, then cast back.
    norm_offset: bool | None = None
    # A norm on the attention's and the feed-forward's outputs too, before each residual add.
    sandwich_norms: bool | None = None
    # The token rows times sqrt(width), the factor in the model's dtype.
    scaled_embedding: bool | None = None
    # Scores times attention_scalar^-0.5 in place of 1/sqrt(head width) (query_pre_attn_scalar).
    attention_scalar: float = setting(0.0, zero="the head width", above=0)
    # Soft-capping: scores (before the mask) and the head's logits become cap * tanh(x / cap).
    attention_softcap: float = setting(0.0, zero="none", above=0)
    logit_softcap: float = setting(0.0, zero="none", above=0)
    # The local_layers' own rotary base, without rope_scaling (Gemma 3's 10k); 0: rope_base.
    local_rope_base: float = setting(0.0, zero="rope_base", above=0)
    # gelu (up, activation, down) | swiglu (silu(gate) * up, down)
    ffn_kind: str | None = setting(None, choices=FFN_KINDS, echo=True)
    ffn_bias: bool | None = None
    # sequential: x + attn, then + ffn | parallel: x + attn(x) + ffn(x)
    residual: str = setting("sequential", choices=RESIDUALS, echo=True)
    tied_head: bool = True  # the head is the token table transposed, or a table of its own

    def __post_init__(self) -> None:
        for name, value in {**PART_DEFAULTS, **FAMILY_PARTS.get(self.family, {})}.items():
            if getattr(self, name) is None:
                object.__setattr__(self, name, value)

    @property
    def head_dim(self) -> int:
        return self.head_dim_override or self.width // self.heads

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
    # Qwen3: llama's parts with a query/key norm per head (its head width set apart).
    "qwen3": {"norm": "rmsnorm", "positions": "rotary", "attention_bias": "none",
              "attention_scale": "inverse_sqrt", "ffn_kind": "swiglu", "ffn_bias": False, "qk_norm": True},
    # Mistral: llama's parts, every block attending over a sliding window.
    "mistral": {"norm": "rmsnorm", "positions": "rotary", "attention_bias": "none",
                "attention_scale": "inverse_sqrt", "ffn_kind": "swiglu", "ffn_bias": False},
    # Phi-3: llama's parts (fused projections in its files), a share of each head rotated.
    "phi3": {"norm": "rmsnorm", "positions": "rotary", "attention_bias": "none",
             "attention_scale": "inverse_sqrt", "ffn_kind": "swiglu", "ffn_bias": False},
    # Gemma 2: (1 + w) RMSNorms before and after attention and the feed-forward, GELU-tanh
    # gating, embeddings times sqrt(width) (its soft-caps and windows are settings).
    "gemma2": {"norm": "rmsnorm", "positions": "rotary", "attention_bias": "none",
               "attention_scale": "inverse_sqrt", "ffn_kind": "geglu", "ffn_bias": False, "norm_offset": True,
               "sandwich_norms": True, "scaled_embedding": True},
    # Gemma 3 (text): Gemma 2's parts with a (1 + w) norm on each query and key head.
    "gemma3": {"norm": "rmsnorm", "positions": "rotary", "attention_bias": "none",
               "attention_scale": "inverse_sqrt", "ffn_kind": "geglu", "ffn_bias": False, "norm_offset": True,
               "sandwich_norms": True, "scaled_embedding": True, "qk_norm": True},
}
# Parts whose value does not come from the family, at the value every model had before.
PART_DEFAULTS: dict[str, Any] = {"norm_bias": True, "rotary_fraction": 1.0, "rope_scaling": "none", "rope_factor": 1.0,
                                 "rope_low_freq_factor": 1.0, "rope_high_freq_factor": 4.0,
                                 "rope_original_context": 8192, "attention_window": 0, "local_layers": (),
                                 "residual": "sequential", "tied_head": True,
                                 "head_dim_override": 0, "qk_norm": False, "norm_offset": False,
                                 "sandwich_norms": False, "scaled_embedding": False, "attention_scalar": 0.0,
                                 "attention_softcap": 0.0, "logit_softcap": 0.0, "local_rope_base": 0.0}
# Settings that only one kind of part reads: (the part, the value that reads the setting).
READ_ONLY_BY: dict[str, tuple[str, str]] = {
    "rope_base": ("positions", "rotary"), "rotary_fraction": ("positions", "rotary"),
    "rope_scaling": ("positions", "rotary"), "rope_low_freq_factor": ("rope_scaling", "llama3"),
    "rope_high_freq_factor": ("rope_scaling", "llama3"), "rope_original_context": ("rope_scaling", "llama3"),
    "gelu_approximation": ("ffn_kind", "gelu"), "norm_bias": ("norm", "layernorm"),
    "attention_scalar": ("attention_scale", "inverse_sqrt"), "local_rope_base": ("positions", "rotary"),
    "norm_offset": ("norm", "rmsnorm"),
}


def settings_in_use(record: Mapping[str, Any]) -> dict[str, Any]:
    """A stored model_config record without the settings its parts never read (a gpt2 model's
    learned positions read no ``rope_base``; a swiglu block no GELU approximation). A part
    missing from the record is the family's own."""
    family_parts = FAMILY_PARTS.get(str(record.get("family")), {})

    def read(name: str) -> bool:
        if name == "local_layers":
            return bool(record.get("attention_window"))
        if name == "rope_factor":
            return record.get("rope_scaling", "none") != "none"
        part, reader = READ_ONLY_BY.get(name, ("", ""))
        return not part or record.get(part, family_parts.get(part)) == reader

    return {name: value for name, value in record.items() if read(name)}


@dataclass(frozen=True)
class TokenizerConfig:
    merges: int = setting(32, least=0, limit=100_000)
    # Learn the merges from the leading training records up to this many UTF-8 bytes
    # (whole records; at least one); 0: from the whole training split.
    train_bytes: int = setting(0, zero="all", above=0)


@dataclass(frozen=True)
class CorpusConfig:
    # "bundled:NAME" for a file in the package's assets/corpus, else a path.
    source: str = "bundled:teaching.txt"
    # Record i (1-based, in file order) is validation when i % val_every == 0; 0: none.
    val_every: int = setting(4, zero="none", least=2, limit=GIGA, help="every Nth record is validation")
    # records: one padded example (or several windows) per record. stream: every record
    # joined as BOS text EOS (a chat record as its template renders it) into one token array
    # per split; examples are full windows.
    mode: str = setting("records", choices=CORPUS_MODES, echo=True)
    # A folder corpus reads the links in it only where they stay inside the folder, unless this.
    follow_links: bool = False
    # The field of each JSON Lines object (a .jsonl file) or the column of a .parquet file
    # that holds its record's text.
    text_field: str = setting("text", accepts=_names_a_json_field,
                              refusal="{where} must name a JSON field (1 to 200 characters)",
                              help="the field of each .jsonl object or .parquet column that holds its text")
    # all: the loss counts every token. assistant: only the assistant's turns of chat records (stream mode).
    train_on: str = setting("all", choices=TRAIN_ON, echo=True,
                            help="which tokens the loss counts: all, or the assistant's turns of chat records")
    # The Jinja chat template that chat records (messages) are rendered with, and the texts of
    # the bos and eos tokens it is given; a run started from a model takes its own.
    chat_template: str = setting("", **_CHAT_TEXT)
    chat_bos_token: str = setting("", **_CHAT_TEXT)
    chat_eos_token: str = setting("", **_CHAT_TEXT)


_SEED: dict[str, Any] = {"least": 0, "most": U64_MAX, "refusal": "{where} must be an unsigned 64-bit integer"}


@dataclass(frozen=True)
class SeedConfig:
    init: int = setting(1729, **_SEED)
    data: int = setting(101, **_SEED)
    dropout: int = setting(0, **_SEED)
    sampling: int = setting(31415, **_SEED)
    evaluation: int = setting(0, **_SEED)  # draws the fixed batches of bounded evaluation

    @staticmethod
    def derive(seed: int) -> SeedConfig:
        """Independent stream seeds from one user seed (SHA-256 of seed and name)."""
        values = {}
        for name in ("init", "data", "dropout", "sampling", "evaluation"):
            digest = hashlib.sha256(f"minigpt-tui/{name}/{seed}".encode()).digest()
            values[name] = int.from_bytes(digest[:8], "little")
        return SeedConfig(**values)


@dataclass(frozen=True)
class TrainConfig:
    steps: int = setting(600, least=1, echo=True, limit=GIGA, help="number of updates")
    batch_policy: str = setting("replacement", choices=BATCH_POLICIES)
    document_order: tuple[int, ...] = ()
    batch_size: int = setting(8, least=1, limit=65_536, help="examples per microbatch")
    microbatches: int = setting(1, least=1, limit=65_536)
    schedule: str = setting("constant", choices=SCHEDULES)
    lr: float = setting(0.01, above=0, help="the peak learning rate")
    final_lr: float = setting(0.01, least=0)
    warmup: int = setting(0, least=0, echo=True, limit=GIGA)
    betas: tuple[float, float] = setting((0.9, 0.999), least=0, under=1)
    eps: float = setting(1e-8, above=0)
    weight_decay: float = setting(0.0, least=0)
    clip: float = setting(0.0, zero="off", above=0)
    recompute: bool = False
    loss_scale: bool = False
    loss_scale_init: float = 65536.0
    loss_scale_min: float = setting(1.0, above=0)
    loss_scale_max: float = 2.0**24
    loss_scale_growth_interval: int = setting(2000, least=1, limit=GIGA)
    loss_scale_growth_factor: float = 2.0
    loss_scale_backoff_factor: float = 0.5
    # Training windows of this many tokens (at most the model's context); 0: the model's context.
    context: int = setting(0, limit=65_536)
    eval_every: int = setting(50, zero="off", above=0, limit=GIGA, help="updates between evaluations (0: none)")
    eval_batch_size: int = setting(8, least=1, limit=65_536)
    # 0: evaluate the complete splits. N: N fixed batches per split, drawn once from
    # seeds.evaluation; a split that N batches would cover anyway is evaluated completely.
    eval_batches: int = setting(0, zero="complete splits", above=0)
    monitor_tokens: int = setting(0, least=0, limit=GIGA)
    precision: str = setting("exact", choices=PRECISIONS)
    threads: int = setting(1, zero="auto: adapts to how busy the machine is", least=1, limit=1_024,
                           help="threads in fast precision")
    # auto | cpu | cuda | mps (auto: cuda, then mps, then cpu)
    device: str = setting("cpu", choices=DEVICE_CHOICES,
                          refusal=f"{{where}} must be one of {', '.join(DEVICE_CHOICES)}, got '{{value}}'")
    save_every: int = setting(0, zero="off", above=0, limit=GIGA, help="save a checkpoint every N updates")
    keep_last: int = setting(3, least=1, limit=1_000_000, help="keep the last K checkpoints plus the best")
    # Consecutive updates with a non-finite loss or gradient (skipped, with loss scaling)
    # after which the run stops as diverged; 0: never.
    divergence_patience: int = setting(20, zero="never stop", above=0, limit=GIGA)

    @property
    def precision_kind(self) -> Precision:
        """What ``precision`` means: dtype, thread rule, bytes per element, bitwise or not."""
        return precision_of(self.precision)

    @property
    def effective_threads(self) -> Threads:
        """The threads the run computes with (exact precision: one; automatic stays automatic)."""
        return self.precision_kind.threads(Threads(self.threads))


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
    def from_dict(data: dict[str, Any]) -> RunConfig:
        return _build(str(data.get("preset", "custom")), data)

    def replace(self, **sections: dict[str, Any]) -> RunConfig:
        """A copy with some fields of some sections changed, validated like a user file."""
        data = self.to_dict()
        for section, values in sections.items():
            require_section(section)
            data[section].update(values)
        return _build(self.preset, data)

    @property
    def window(self) -> int:
        """How many tokens a training or evaluation window holds."""
        return self.train.context or self.model.context

    @property
    def dtype_name(self) -> str:
        return self.train.precision_kind.dtype_name


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
    ("corpus", "train_on"): "all",
    ("corpus", "chat_template"): "",
    ("corpus", "chat_bos_token"): "",
    ("corpus", "chat_eos_token"): "",
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


def require_section(section: str, where: str = "") -> None:
    """Refuse a section name that is not one of the config's, naming the ones there are."""
    if section not in _SECTIONS:
        raise ConfigError(f"{where}unknown config section '{section[:80]}' (the sections are "
                          f"{', '.join(_SECTIONS)})", field=section[:80])


def _unknown_setting(section: str, name: str, known: Iterable[str]) -> ConfigError:
    """The refusal of ``section.name``: the nearest setting of that section when one is
    close, else every setting it has."""
    names = list(known)
    near = difflib.get_close_matches(name, names, n=1)
    hint = f"did you mean {section}.{near[0]}?" if near else f"{section} has {', '.join(names)}"
    return ConfigError(f"unknown setting {section}.{name[:80]} ({hint})", field=f"{section}.{name[:80]}")


def setting_of(dotted: str) -> Setting:
    """The declaration of the setting ``section.name`` (its bounds, limit and help)."""
    section, _, name = dotted.partition(".")
    return dict(declared(_SECTIONS[section]))[name]


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
        raise ConfigError(f"unknown preset '{preset}' (choose from {', '.join(presets)})", field="preset")
    data: dict[str, Any] = {name: dict(presets[preset].get(name, {})) for name in _SECTIONS}
    if config_file is not None:
        _apply_user_file(data, config_file)
    for section, values in (overrides or {}).items():
        require_section(section)
        data[section].update({k: v for k, v in values.items() if v is not None})
    return _build(preset, data)


def _apply_user_file(data: dict[str, Any], config_file: Path) -> None:
    """Lay the sections of a user's TOML file over ``data``, refusing unknown or non-table sections."""
    user = _read_toml(Path(config_file))
    for section, values in user.items():
        require_section(section, f"{config_file}: ")
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
        raise ConfigError(f"{where} must be true or false, got {value!r}", field=where)
    return value


def _as_int(where: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{where} must be an integer, got {value!r}", field=where)
    return value


def _as_float(where: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{where} must be a number, got {value!r}", field=where)
    return float(value)


def _as_str(where: str, value: Any) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"{where} must be a string, got {value!r}", field=where)
    return value


def _as_float_pair(where: str, value: Any) -> tuple[float, ...]:
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise ConfigError(f"{where} must be a list of two numbers, got {value!r}", field=where)
    return tuple(_as_float(where, v) for v in value)


def _as_ints(where: str, value: Any) -> tuple[int, ...]:
    if not isinstance(value, (list, tuple)):
        raise ConfigError(f"{where} must be a list of integers, got {value!r}", field=where)
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
                raise _unknown_setting(section, name, known)
            kwargs[name] = _coerce(section, name, known[name].type, value)
        sections[section] = cls(**kwargs)
    config = RunConfig(preset=preset, **sections)
    validate(config)
    return config


def _need(ok: bool, message: str, field: str) -> None:
    if not ok:
        raise ConfigError(message, field=field)


def validate(config: RunConfig) -> None:
    """Each section's declared rules and limits, then the rules between its settings; then
    the limits of the whole. (A value past its limit is named as such, before a rule between
    settings that it breaks only by being huge.)"""
    for section, cls in _SECTIONS.items():
        for name, rule in declared(cls):
            value = getattr(getattr(config, section), name)
            _need(rule.takes(value), rule.refused(f"{section}.{name}", value), f"{section}.{name}")
            if rule.limit is not None and value > rule.limit:
                raise ConfigError(f"{section}.{name} is {value}, above the limit of {rule.limit:,}",
                                  field=f"{section}.{name}")
        if section in _BETWEEN:
            _BETWEEN[section](config)
    check_bounds(config)


def _model_between(config: RunConfig) -> None:
    m = config.model
    _need(m.head_dim_override or m.width % m.heads == 0,
          "model.width must be a multiple of model.heads (or model.head_dim_override set)", "model.width")
    _need(m.heads % m.kv_heads == 0, "model.heads must be a multiple of model.kv_heads", "model.heads")
    _need(m.positions != "rotary" or m.head_dim % 2 == 0, "rotary positions need an even head width",
          "model.positions")
    _need(m.positions != "rotary" or m.rotary_dims >= 2, "model.rotary_fraction leaves no rotated dimensions",
          "model.rotary_fraction")
    _need(m.rope_scaling != "llama3" or m.rope_high_freq_factor > m.rope_low_freq_factor,
          "model.rope_high_freq_factor must be greater than model.rope_low_freq_factor", "model.rope_high_freq_factor")
    _need(all(0 <= layer < m.layers for layer in m.local_layers),
          "model.local_layers must name blocks of the model (0 to layers - 1)", "model.local_layers")


def _corpus_between(config: RunConfig) -> None:
    _need(
        config.corpus.mode != "stream" or config.train.batch_policy == "replacement",
        "corpus.mode = \"stream\" draws windows with replacement: set train.batch_policy = \"replacement\"",
        "corpus.mode",
    )
    _need(
        config.corpus.train_on == "all" or config.corpus.mode == "stream",
        "corpus.train_on = \"assistant\" reads the assistant's tokens from a token stream: set corpus.mode = \"stream\"",
        "corpus.train_on",
    )


def _train_between(config: RunConfig) -> None:
    t, m = config.train, config.model
    _need(
        t.warmup <= t.steps,
        f"train.warmup ({t.warmup} updates) is longer than train.steps ({t.steps}): train at least "
        f"{t.warmup} updates, or set a shorter warmup ([train] warmup = N in a --config file)",
        "train.warmup",
    )
    _need(
        t.loss_scale_min <= t.loss_scale_init <= t.loss_scale_max,
        "train.loss_scale_init must lie within [loss_scale_min, loss_scale_max]",
        "train.loss_scale_init",
    )
    _need(0 <= t.context <= m.context,
          f"train.context ({t.context}) must be 0 (the model's context) or at most the model's context of {m.context}",
          "train.context")
    if t.document_order:
        _need(
            sorted(t.document_order) == list(range(len(t.document_order))),
            "train.document_order must be a permutation of 0..n-1",
            "train.document_order",
        )


# The rules between a section's settings, checked after the section's own.
_BETWEEN: dict[str, Callable[[RunConfig], None]] = {
    "model": _model_between, "corpus": _corpus_between, "train": _train_between,
}

# Upper bounds on sizes and counts (each setting's declared limit), and every number
# finite: a value beyond them is a typo or a hostile file, and is refused before anything
# is allocated or any folder is made.
LIMITS: dict[str, int] = {
    f"{section}.{name}": rule.limit
    for section, cls in _SECTIONS.items()
    for name, rule in declared(cls)
    if rule.limit is not None
}

# The most scalars a model may have here (about 8 GB in float64): CPU training beyond it
# is not what this tool is for, and a saved config declaring more is not a real model.
MAX_PARAMETERS = 1_000_000_000


def estimated_parameters(m: ModelConfig, vocab_size: int) -> int:
    """Scalars of a model of this config (the tied table once), from the config alone."""
    attention = m.width * m.heads * m.head_dim * 2 + m.width * m.kv_heads * m.head_dim * 2
    feed_forward = m.width * m.ffn * (3 if m.ffn_kind in ("swiglu", "geglu") else 2)
    per_block = (attention + feed_forward + (6 if m.sandwich_norms else 4) * m.width + 2 * m.ffn
                 + (2 * m.head_dim if m.qk_norm else 0))
    positions = m.context * m.width if m.positions == "learned" else 0
    head = 0 if m.tied_head else vocab_size * m.width
    return vocab_size * m.width + head + positions + m.layers * per_block + 2 * m.width


def check_bounds(config: RunConfig) -> None:
    """Every number finite, and the model within MAX_PARAMETERS (each setting's own limit is
    checked with its section's rules)."""
    for section in ("model", "train"):
        part = getattr(config, section)
        for item in fields(part):
            value = getattr(part, item.name)
            values = value if isinstance(value, tuple) else (value,)
            if any(isinstance(v, float) and not math.isfinite(v) for v in values):
                raise ConfigError(f"{section}.{item.name} must be a finite number, got {value!r}",
                                  field=f"{section}.{item.name}")

    scalars = estimated_parameters(config.model, FIRST_MERGE_ID + config.tokenizer.merges)
    if scalars > MAX_PARAMETERS:
        raise ConfigError(
            f"the model would have about {scalars:,} parameters, above the limit of {MAX_PARAMETERS:,} "
            "(lower model.width, model.ffn or model.layers)"
        )
