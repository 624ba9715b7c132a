"""Looking inside one decision: named activations, logit lens, direct contributions, head patterns.

One forward pass over a prefix reads every site under its stable name (the model's own
:class:`~minigpt_tui.engine.models.sites.Sites`; the naming follows TransformerLens, so a
view is a loop over names, not code per view). Tensors are
stored without the batch dimension; T is the prefix length, D the width, H the query
heads, K the head width, V the vocabulary:

=================================  ==========  ==============================================
name                               shape       what it is
=================================  ==========  ==============================================
``hook_embed``                     [T, D]      token table rows of the prefix
``hook_pos_embed``                 [T, D]      position table rows (gpt2 only)
``blocks.{l}.hook_resid_pre``      [T, D]      residual stream entering block l
``blocks.{l}.attn.hook_pattern``   [H, T, T]   attention weights, query x key
``blocks.{l}.attn.hook_z``         [T, H, K]   each head's weighted values, before the output map
``blocks.{l}.hook_attn_out``       [T, D]      the attention block's output (all heads + bias)
``blocks.{l}.hook_resid_mid``      [T, D]      residual after the attention add
``blocks.{l}.hook_mlp_out``        [T, D]      the feed-forward block's output
``blocks.{l}.hook_resid_post``     [T, D]      residual leaving block l
``ln_final.hook_normalized``       [T, D]      the final norm's output
``logits``                         [T, V]      the head's output
=================================  ==========  ==============================================

**Logit lens.** Lens layer 0 is ``blocks.0.hook_resid_pre`` (the embeddings); lens layer
l >= 1 is ``blocks.{l-1}.hook_resid_post``. Each is passed through the model's own final
norm and head in the same shape as the model's forward (for a large vocabulary, at the
last position alone: the same values to rounding); the last lens row is the model's
logits bit for bit.

**Direct contributions.** The final residual at the last position is a sum of parts: the
embedding (token row, plus the position row in gpt2), each head's output (its slice of
``hook_z`` through its columns of the output map), each attention output bias (gpt2),
each feed-forward block's output (its biases included). The final norm is linear once its
scale is fixed, so the scale is taken at the final residual and applied to every part:

- llama (RMSNorm, no bias): part p gives ``(W[c] * g) . p / rms(x)``;
- gpt2 (LayerNorm): part p gives ``(W[c] * g) . (p - mean(p)) / std(x)`` (centering is
  linear, so each part is centered by its own mean) and the norm's bias gives
  ``W[c] . b`` on its own (``norm_bias``).

Here x is the final residual, g the norm's weight ((1 + w) for Gemma's norms) and W[c] the
token table row of id c. A model whose logit is not such a sum is refused in one line
(:func:`contributions_refusal`): post-attention norms (Gemma's ``sandwich_norms``) rescale
each block's sum of heads by that sum's own size, and a soft-capped logit (``logit_softcap``)
is cap * tanh(sum / cap). :func:`inspect_decision` then leaves the contributions out and
says why (``DecisionInsight.contributions_refused``); the lens still runs (each row through
the final norm, the head and the cap).
Every part is computed and summed in float64. The parts add up to the logit within
rounding (1e-9 in float64 is checked); for a model that computes in float32 or less, its
own logit carries that precision's rounding, so the float64 sum agrees with it to the
model's precision (``Contributions.rounding`` says how far).

The analysis makes its own forward pass over the whole prefix, in evaluation mode, with
no dropout; it never changes the model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from minigpt_tui.engine.core.errors import GenerationError
from minigpt_tui.engine.analysis.generation import token_rank, top_ranked
from minigpt_tui.engine.analysis.site_names import (
    EMBED,
    FINAL_NORM_BIAS,
    block_part_name,
    head_name,
    resid_name,
)
from minigpt_tui.engine.models.model import MiniGPT, decision_logits, evaluating, norm_gain, soft_capped
from minigpt_tui.engine.models.sites import Sites
from minigpt_tui.engine.core.tokenizer import ByteBPETokenizer

DEFAULT_LENS_TOP = 5
LENS_WORK = 200_000_000
# A model's logit and the float64 sum of its parts may differ by this many epsilons of the
# model's precision times the size of the parts (measured: under 2 in float32 models).
ROUNDING_UNITS = 16


# -- named activations --------------------------------------------------------------------
@dataclass(frozen=True)
class ActivationCache:
    """Every named activation of one forward pass over ``ids`` (batch dimension removed),
    and ``logits`` [1, V]: the last position's, as a decision computes them."""

    ids: tuple[int, ...]
    activations: Mapping[str, Tensor]

    def __getitem__(self, name: str) -> Tensor:
        try:
            return self.activations[name]
        except KeyError:
            raise GenerationError(f"no activation named '{name}'") from None

    def names(self) -> tuple[str, ...]:
        return tuple(self.activations)


def run_with_cache(model: MiniGPT, ids: Sequence[int]) -> ActivationCache:
    """One evaluation-mode forward over ``ids`` reading every site."""
    if not ids:
        raise GenerationError("an empty prefix has no activations")
    if len(ids) > model.config.context:
        raise GenerationError(f"{len(ids)} ids exceed the context of {model.config.context}")
    sites = Sites(model.config).read("*")
    with evaluating(model), torch.no_grad():
        out = model(torch.tensor([list(ids)], dtype=torch.int64), sites=sites, last_only=True)
    config = model.config
    activations: dict[str, Tensor] = {}
    for name, value in sites.values.items():
        value = value[0].detach()
        activations[name] = value.view(len(ids), config.heads, config.head_dim) if name.endswith("hook_z") else value
    activations["logits"] = out.logits[0].detach()
    return ActivationCache(tuple(ids), activations)


def lens_stream_name(layer: int) -> str:
    """The residual stream a lens layer reads: 0 the embeddings, l after block l - 1."""
    return "blocks.0.hook_resid_pre" if layer == 0 else f"blocks.{layer - 1}.hook_resid_post"


# -- records -----------------------------------------------------------------------------
@dataclass(frozen=True)
class LensEntry:
    id: int
    piece: str
    probability: float

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "piece": self.piece, "probability": self.probability}


@dataclass(frozen=True, eq=False)
class LensRow:
    """One layer of the logit lens at the last position; ``logits`` is float64 [V]."""

    layer: int
    stream: str
    top: tuple[LensEntry, ...]
    chosen_rank: int
    chosen_probability: float
    logits: Tensor

    @property
    def site(self) -> str:
        """The stream's display name (:mod:`site_names`): ``embed`` or ``block N resid``."""
        return resid_name(self.layer)

    def to_json(self) -> dict[str, Any]:
        return {"layer": self.layer, "stream": self.stream, "site": self.site, "top": [e.to_json() for e in self.top],
                "chosen_rank": self.chosen_rank, "chosen_probability": self.chosen_probability}


@dataclass(frozen=True)
class Part:
    """One named part of a logit (:mod:`site_names`) and what it adds."""

    name: str
    value: float


@dataclass(frozen=True)
class Contributions:
    """One id's logit at the last position, split into direct contributions (see module doc)."""

    id: int
    piece: str
    logit: float  # the model's own logit
    embedding: float
    heads: tuple[tuple[float, ...], ...]  # [layer][head]
    attention_bias: tuple[float, ...]  # [layer]; zeros in llama
    ffn: tuple[float, ...]  # [layer]
    norm_bias: float  # zero in llama
    total: float  # the sum of every part above, in float64
    dtype: str = "float64"  # the precision the model computes its logit in
    rounding: float = 0.0  # how far that precision alone may put the logit from the total

    @property
    def agrees(self) -> bool:
        """The parts' sum equals the model's logit up to the model's own rounding."""
        return abs(self.total - self.logit) <= self.rounding

    def parts(self) -> tuple[Part, ...]:
        """Every part in the order it enters the residual stream: the embedding, then each
        block's heads, attention bias (where it has one) and feed-forward, then the final
        norm's bias (where it has one)."""
        parts = [Part(EMBED, self.embedding)]
        for layer, heads in enumerate(self.heads):
            parts.extend(Part(head_name(layer, head), value) for head, value in enumerate(heads))
            if self.attention_bias[layer]:
                parts.append(Part(block_part_name(layer, "attn bias"), self.attention_bias[layer]))
            parts.append(Part(block_part_name(layer, "mlp"), self.ffn[layer]))
        if self.norm_bias:
            parts.append(Part(FINAL_NORM_BIAS, self.norm_bias))
        return tuple(parts)

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "piece": self.piece, "logit": self.logit, "embedding": self.embedding,
                "heads": [list(layer) for layer in self.heads], "attention_bias": list(self.attention_bias),
                "ffn": list(self.ffn), "norm_bias": self.norm_bias, "total": self.total, "dtype": self.dtype,
                "parts": [{"name": part.name, "value": part.value} for part in self.parts()]}


@dataclass(frozen=True, eq=False)
class HeadPattern:
    """The whole prefix x prefix attention of one head: ``weights[query, key]``, float64."""

    layer: int
    head: int
    tokens: tuple[tuple[int, str], ...]
    weights: Tensor

    def to_json(self) -> dict[str, Any]:
        return {"layer": self.layer, "head": self.head,
                "tokens": [{"id": i, "piece": p} for i, p in self.tokens], "weights": self.weights.tolist()}


@dataclass(frozen=True)
class DecisionInsight:
    """What a decision looked like inside: lens rows, contributions (chosen first), a pattern."""

    lens: tuple[LensRow, ...] | None
    contributions: tuple[Contributions, ...]
    pattern: HeadPattern | None
    contributions_refused: str = ""  # why contributions were asked for and left out (one line)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {}
        if self.lens is not None:
            data["lens"] = [row.to_json() for row in self.lens]
        if self.contributions:
            data["contributions"] = self.contributions[0].to_json()
            if len(self.contributions) > 1:
                data["candidate_contributions"] = [c.to_json() for c in self.contributions[1:]]
        if self.pattern is not None:
            data["pattern"] = self.pattern.to_json()
        if self.contributions_refused:
            data["contributions_refused"] = self.contributions_refused
        return data


# -- checks -------------------------------------------------------------------------------
def check_head(model: MiniGPT, layer: int, head: int) -> None:
    """Refuse a block or head index the model does not have (one line)."""
    layers, heads = model.config.layers, model.config.heads
    if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < layers:
        raise GenerationError(f"layer {layer} does not exist: the model has blocks 0 to {layers - 1}")
    if isinstance(head, bool) or not isinstance(head, int) or not 0 <= head < heads:
        raise GenerationError(f"head {head} does not exist: each block has heads 0 to {heads - 1}")


def contributions_refusal(config: Any) -> str:
    """Why the logits of a model of ``config`` are not a sum of direct contributions ("" when
    they are)."""
    if config.sandwich_norms:
        return (f"direct contributions are not defined for {config.family}: its post-attention and "
                "post-feed-forward norms (sandwich_norms) rescale each block's sum of heads, so the heads' parts "
                "do not add up to a logit")
    if config.logit_softcap:
        return (f"direct contributions are not defined for this model: its logits are soft-capped "
                f"(logit_softcap {config.logit_softcap:g}: cap * tanh(sum / cap) is not a sum of parts)")
    return ""


def check_token_id(model: MiniGPT, token_id: int) -> None:
    if isinstance(token_id, bool) or not isinstance(token_id, int) or not 0 <= token_id < model.vocab_size:
        raise GenerationError(f"candidate id {token_id} is outside the vocabulary of {model.vocab_size}")


# -- the views ----------------------------------------------------------------------------
def logit_lens(model: MiniGPT, tokenizer: ByteBPETokenizer, cache: ActivationCache, chosen_id: int,
               top: int = DEFAULT_LENS_TOP) -> tuple[LensRow, ...]:
    """Every layer's residual at the last position through the final norm and the head."""
    check_token_id(model, chosen_id)
    head = model.head_weight
    layers = model.config.layers
    # Each row's last position through the final norm and the head alone, as a decision
    # puts it (decision_logits), so a residual the blocks leave alone reads exactly as the
    # model's logits; where reading the head once a layer would cost more than LENS_WORK
    # multiply-adds (a large vocabulary), the layers before the last share one product.
    one_by_one = head.shape[0] * head.shape[1] * layers <= LENS_WORK
    rows = []
    with torch.no_grad():
        if not one_by_one:  # every earlier layer's last position in one product: the head is read once
            normed = torch.cat([model.final_norm(cache[lens_stream_name(layer)][None, -1:]) for layer in range(layers)],
                               dim=1)
            earlier = soft_capped(normed @ head.t(), model.config.logit_softcap)[0]
        for layer in range(layers + 1):
            stream = lens_stream_name(layer)
            if layer == layers:  # after the last block: the model's own logits, bit for bit
                logits = cache["logits"][-1].to(torch.float64)
            elif not one_by_one:
                logits = earlier[layer].to(torch.float64)
            else:
                logits = decision_logits(model, model.final_norm(cache[stream][-1:])).to(torch.float64)
            probabilities = torch.softmax(logits, dim=-1)
            order = top_ranked(logits, top)
            values = probabilities[[*order, chosen_id]].tolist()
            entries = tuple(LensEntry(i, tokenizer.piece_text(i), v) for i, v in zip(order, values))
            rows.append(LensRow(layer, stream, entries, token_rank(logits, chosen_id), values[-1], logits))
    return tuple(rows)


def _norm_parts(model: MiniGPT, cache: ActivationCache) -> tuple[list[Tensor], list[int]]:
    """The final residual's parts at the last position as float64 rows, and how many per group."""
    config = model.config
    wide = torch.float64
    embedding = cache["hook_embed"][-1].to(wide)
    if config.positions == "learned":
        embedding = embedding + cache["hook_pos_embed"][-1].to(wide)
    rows = [embedding[None]]
    for index in range(config.layers):
        z = cache[f"blocks.{index}.attn.hook_z"][-1].to(wide)  # [H, K]
        output_map = model.get_submodule(f"blocks.{index}.attn.o_proj")  # the block's weights, read by name
        out_map = output_map.weight.to(wide).reshape(config.width, config.heads, config.head_dim)
        rows.append(torch.einsum("hk,dhk->hd", z, out_map))  # [H, D]
        bias = output_map.bias
        rows.append((bias.to(wide) if bias is not None else torch.zeros_like(embedding))[None])
        rows.append(cache[f"blocks.{index}.hook_mlp_out"][-1].to(wide)[None])
    return rows, [len(r) for r in rows]


def model_rounding(dtype: torch.dtype, parts: Tensor, norm_bias: float, logit: float) -> float:
    """How far a model computing in ``dtype`` may put its own logit from the float64 sum of
    its ``parts`` by rounding alone: a few units of the precision's epsilon, scaled by the
    size of the parts and of the logit (parts of size 30: about 1e-13 in float64, 6e-5 in float32)."""
    size = float(parts.abs().sum()) + abs(norm_bias) + abs(logit)
    return ROUNDING_UNITS * torch.finfo(dtype).eps * size


def direct_contributions(model: MiniGPT, tokenizer: ByteBPETokenizer, cache: ActivationCache,
                         token_ids: Sequence[int]) -> tuple[Contributions, ...]:
    """Each id's logit at the last position as embedding + heads + biases + blocks (module doc)."""
    for token_id in token_ids:
        check_token_id(model, token_id)
    config = model.config
    if refusal := contributions_refusal(config):
        raise GenerationError(refusal)
    norm = model.final_norm
    with torch.no_grad():
        final = cache[f"blocks.{config.layers - 1}.hook_resid_post"][-1].to(torch.float64)
        rows, sizes = _norm_parts(model, cache)
        parts = torch.cat(rows)  # [parts, D], float64
        layer_norm = config.norm == "layernorm"
        if layer_norm:
            scale = 1.0 / torch.sqrt(final.var(unbiased=False) + norm.eps)
            parts = parts - parts.mean(dim=-1, keepdim=True)
        else:
            scale = torch.rsqrt(final.pow(2).mean() + norm.eps)
        table = model.head_weight[list(token_ids)].to(torch.float64)  # [N, D]
        gain = norm_gain(norm, torch.float64)
        directions = table * gain
        values = (parts @ directions.t()) * scale  # [parts, N]
        if layer_norm and norm.bias is not None:
            norm_bias = (table @ norm.bias.to(torch.float64)).tolist()
        else:
            norm_bias = [0.0] * len(token_ids)
        logits = cache["logits"][-1]
    groups = list(torch.split(values, sizes))
    results = []
    for column, token_id in enumerate(token_ids):
        embedding = float(groups[0][0, column])
        heads, attention_bias, ffn = [], [], []
        for index in range(config.layers):
            heads.append(tuple(groups[1 + 3 * index][:, column].tolist()))
            attention_bias.append(float(groups[2 + 3 * index][0, column]))
            ffn.append(float(groups[3 + 3 * index][0, column]))
        total = float(values[:, column].sum()) + norm_bias[column]
        logit = float(logits[token_id])
        results.append(Contributions(token_id, tokenizer.piece_text(token_id), logit, embedding,
                                     tuple(heads), tuple(attention_bias), tuple(ffn), norm_bias[column], total,
                                     str(logits.dtype).removeprefix("torch."),
                                     model_rounding(logits.dtype, values[:, column], norm_bias[column], logit)))
    return tuple(results)


def head_pattern(model: MiniGPT, tokenizer: ByteBPETokenizer, cache: ActivationCache,
                 layer: int, head: int) -> HeadPattern:
    check_head(model, layer, head)
    weights = cache[f"blocks.{layer}.attn.hook_pattern"][head].to(torch.float64).clone()
    tokens = tuple((i, tokenizer.piece_text(i)) for i in cache.ids)
    return HeadPattern(layer, head, tokens, weights)


def _check_decision_request(model: MiniGPT, chosen_id: int, candidate_ids: Sequence[int],
                            pattern: tuple[int, int] | None, lens_top: int) -> None:
    """Refuse an id, a head or a lens width the decision cannot be inspected with."""
    check_token_id(model, chosen_id)
    for token_id in candidate_ids:
        check_token_id(model, token_id)
    if pattern is not None:
        check_head(model, *pattern)
    if lens_top < 1:
        raise GenerationError(f"the lens shows at least 1 id per layer, got {lens_top}")


def _contribution_ids(chosen_id: int, candidate_ids: Sequence[int]) -> list[int]:
    """The chosen id first, then each candidate that is not the chosen one."""
    return [chosen_id, *[i for i in candidate_ids if i != chosen_id]]


def inspect_decision(
    model: MiniGPT,
    tokenizer: ByteBPETokenizer,
    prefix_ids: Sequence[int],
    chosen_id: int,
    *,
    lens: bool = False,
    lens_top: int = DEFAULT_LENS_TOP,
    contributions: bool = False,
    candidate_ids: Sequence[int] = (),
    pattern: tuple[int, int] | None = None,
) -> DecisionInsight:
    """The asked-for views of the decision made after ``prefix_ids``, from one forward pass.

    Contributions cover the chosen id first, then each of ``candidate_ids``."""
    _check_decision_request(model, chosen_id, candidate_ids, pattern, lens_top)
    cache = run_with_cache(model, prefix_ids)
    rows = logit_lens(model, tokenizer, cache, chosen_id, lens_top) if lens else None
    ids = _contribution_ids(chosen_id, candidate_ids) if contributions or candidate_ids else []
    refused = contributions_refusal(model.config) if ids else ""
    parts = direct_contributions(model, tokenizer, cache, ids) if ids and not refused else ()
    view = head_pattern(model, tokenizer, cache, *pattern) if pattern is not None else None
    return DecisionInsight(rows, parts, view, refused)
