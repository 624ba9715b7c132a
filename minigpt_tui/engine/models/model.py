"""A decoder-only transformer built from declared parts.

A family is a setting of the parts in :class:`ModelConfig` (see ``FAMILY_PARTS``):

- norm: ``layernorm`` (weight, and a bias unless ``norm_bias`` is off) or ``rmsnorm``
  (weight, epsilon inside the root);
- positions: a ``learned`` table added to the token rows, or ``rotary`` (rotate-half) on
  the leading ``rotary_dims`` of every query and key head;
- attention: query heads and grouped kv heads (query head h reads kv head
  h // (heads / kv_heads)), a bias on none / the q, k, v projections / the output / all,
  scores scaled by 1/sqrt(head width) or not, and a window over the last
  ``attention_window`` positions in the ``local_layers``; each head ``head_dim`` wide
  (``head_dim_override``, else width / heads), with an RMSNorm on every query and key head
  before rotary where ``qk_norm``;
- feed-forward: ``gelu`` (the declared approximation), ``swiglu`` (silu(gate) * up) or
  ``geglu`` (gelu_tanh(gate) * up), with or without biases;
- Gemma's parts: RMSNorms scaling by (1 + w) (``norm_offset``), a norm on each sublayer's
  output before its residual add (``sandwich_norms``), token rows times sqrt(width)
  (``scaled_embedding``), scores scaled by ``attention_scalar`` ** -0.5, soft-capped scores
  and logits (``attention_softcap``, ``logit_softcap``: cap * tanh(x / cap)) and the local
  blocks' own rotary base (``local_rope_base``);
- residual: ``sequential`` (x + attn(norm(x)), then + ffn(norm(x))) or ``parallel``
  (x + attn(norm1(x)) + ffn(norm2(x)), both read the block's input);
- head: the token table transposed (tied: one Parameter, two uses) or a table of its own.

``llama`` (RMSNorm, rotary, SwiGLU, no biases) and ``gpt2`` (LayerNorm, learned positions,
GELU, biases) are the families a run here trains; ``qwen2``, ``gpt_neo`` and ``gpt_neox``
are the settings of models opened from elsewhere.

Attention is computed explicitly (scores, causal mask, softmax, weights @ values) unless
the model is built with ``fused_attention`` (fast precision): then a forward that needs
no attention weights and no attention dropout calls ``scaled_dot_product_attention``.
The explicit path is the definition; the fused one agrees with it to rounding.

A forward given ``sites`` (:class:`~minigpt_tui.engine.models.sites.Sites`) reads, replaces
or adds to the activations named in :data:`ACTIVATIONS`, each with its batch dimension, at
the one call per site (:func:`_site`); every method that looks inside (lens, contributions,
head patterns, patching, steering) goes through it, and nothing else runs the blocks.

Dropout masks come from a counter-based stream keyed by (seed, counter). A forward call
is given the base counter and returns how many random values it consumed, so the caller
advances the counter outside any recomputed region: recomputation regenerates the same
masks, and a resumed run continues the same sequence.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from minigpt_tui.engine.core.config import ModelConfig
# The site names (ACTIVATIONS, re-exported) and the one way to read and edit them.
from minigpt_tui.engine.models.sites import ACTIVATIONS as ACTIVATIONS
from minigpt_tui.engine.models.sites import Sites, SiteVisit


@dataclass(frozen=True)
class DropoutKey:
    """Where a forward pass reads its dropout randomness: stream seed and base counter."""

    seed: int
    counter: int

    def mask(self, offset: int, shape: tuple[int, ...], p: float, dtype: torch.dtype,
             device: torch.device | str = "cpu") -> Tensor:
        """Scaled keep mask for values counter+offset .. counter+offset+numel-1."""
        material = f"{self.seed}:{self.counter + offset}".encode()
        key = int.from_bytes(hashlib.blake2b(material, digest_size=8).digest(), "little")
        generator = torch.Generator().manual_seed(key)
        keep = torch.rand(shape, generator=generator, dtype=torch.float64) >= p
        # Drawn on the CPU whatever the device, so a mask is the same bits everywhere.
        return (keep.to(dtype) / (1.0 - p)).to(device)


@dataclass
class ForwardOutput:
    logits: Tensor
    consumed: int = 0  # dropout random values drawn
    attentions: list[Tensor] = field(default_factory=list)  # per layer [B, H, T, S]
    hidden: Tensor | None = None


KVCache = list[tuple[Tensor, Tensor]]


class _FilledLater:
    """A module built on the meta device is given its tensors afterwards (a model opened
    from a file), so it draws no initial values there: for a 124M model that drawing was
    most of the time to build it. Built anywhere else it initializes as PyTorch's own."""

    def reset_parameters(self) -> None:
        if not any(p.is_meta for p in self.parameters(recurse=False)):  # type: ignore[attr-defined]
            super().reset_parameters()  # type: ignore[misc]


class Linear(_FilledLater, nn.Linear):
    pass


class Embedding(_FilledLater, nn.Embedding):
    pass


class LayerNorm(_FilledLater, nn.LayerNorm):
    pass


class RMSNorm(nn.Module):
    """x / rms(x) times the weight; with ``offset`` (Gemma) the weight is stored as w - 1
    and the norm scales by (1 + w), computed in float32 at least and cast back, as Gemma's."""

    def __init__(self, width: int, eps: float, dtype: torch.dtype, offset: bool = False) -> None:
        super().__init__()
        self.eps = eps
        self.offset = offset
        self.weight = nn.Parameter(torch.zeros(width, dtype=dtype) if offset else torch.ones(width, dtype=dtype))

    def forward(self, x: Tensor) -> Tensor:
        if self.offset:
            wide = torch.promote_types(x.dtype, torch.float32)
            y = x.to(wide)
            y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + self.eps)
            return (y * (1.0 + self.weight.to(wide))).to(x.dtype)
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def norm_gain(norm: nn.Module, dtype: torch.dtype) -> Tensor | None:
    """What a norm multiplies its normalized input by, in ``dtype``: its weight, plus one
    where it stores w - 1 (Gemma's ``offset``); None for a norm without a weight."""
    weight = getattr(norm, "weight", None)
    if weight is None:
        return None
    weight = weight.detach().to(dtype)
    return weight + 1.0 if getattr(norm, "offset", False) else weight


def make_norm(config: ModelConfig, dtype: torch.dtype) -> nn.Module:
    if config.norm == "rmsnorm":
        return RMSNorm(config.width, config.norm_eps, dtype, bool(config.norm_offset))
    return LayerNorm(config.width, eps=config.norm_eps, bias=config.norm_bias, dtype=dtype)


def rotate_half(x: Tensor) -> Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rope_tables(positions: Tensor, dims: int, base: float, dtype: torch.dtype,
                scaling: ModelConfig | None = None) -> tuple[Tensor, Tensor]:
    """cos and sin [T, dims] for rotating the leading ``dims`` of a head at ``positions``,
    the frequencies stretched as ``scaling`` (a config's rope_scaling settings) says."""
    inv_freq = 1.0 / (base ** (torch.arange(0, dims, 2, dtype=torch.float64, device=positions.device) / dims))
    if scaling is not None:
        inv_freq = scaled_frequencies(inv_freq, scaling)
    freqs = positions.to(torch.float64)[:, None] * inv_freq[None, :]
    angles = torch.cat((freqs, freqs), dim=-1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def scaled_frequencies(inv_freq: Tensor, c: ModelConfig) -> Tensor:
    """The rotary frequencies under ``c.rope_scaling`` (see :data:`ROPE_SCALINGS`)."""
    if c.rope_scaling == "linear":
        return inv_freq / c.rope_factor
    if c.rope_scaling != "llama3":
        return inv_freq
    wavelength = 2 * math.pi / inv_freq
    long_from = c.rope_original_context / c.rope_low_freq_factor  # longer wavelengths: divided
    short_under = c.rope_original_context / c.rope_high_freq_factor  # shorter ones: kept
    divided = torch.where(wavelength > long_from, inv_freq / c.rope_factor, inv_freq)
    share = (c.rope_original_context / wavelength - c.rope_low_freq_factor) / (
        c.rope_high_freq_factor - c.rope_low_freq_factor)
    blended = (1 - share) * divided / c.rope_factor + share * divided
    between = (wavelength >= short_under) & (wavelength <= long_from)
    return torch.where(between, blended, divided)


def apply_rotary(x: Tensor, rope: tuple[Tensor, Tensor]) -> Tensor:
    """Rotate-half positions on the leading dimensions the tables cover; the rest pass."""
    cos, sin = rope
    dims = cos.shape[-1]
    if dims == x.shape[-1]:
        return x * cos + rotate_half(x) * sin
    turned, kept = x[..., :dims], x[..., dims:]
    return torch.cat((turned * cos + rotate_half(turned) * sin, kept), dim=-1)


def visible(t: int, s: int, window: int, device: torch.device) -> Tensor:
    """[t, s] True where a query (the last t of s positions) may read a key: causal, and
    within the last ``window`` positions when a window is set."""
    past = s - t
    mask = torch.ones(t, s, dtype=torch.bool, device=device).tril(diagonal=past)
    if window:
        mask &= torch.ones(t, s, dtype=torch.bool, device=device).triu(diagonal=past - window + 1)
    return mask


def soft_capped(values: Tensor, cap: float) -> Tensor:
    """``cap * tanh(values / cap)`` (Gemma 2's soft-capping, its order of operations); the
    values themselves when ``cap`` is 0."""
    return torch.tanh(values / cap) * cap if cap else values


def _site(visit: SiteVisit | None, prefix: str, key: str, value: Tensor) -> Tensor:
    """``value`` at the site ``prefix + key``, after the edits there (kept when read); the
    value itself when the forward has no sites, without building the name."""
    return value if visit is None else visit.at(prefix + key, value)


class Attention(nn.Module):
    def __init__(self, config: ModelConfig, dtype: torch.dtype, fused: bool = False, window: int = 0) -> None:
        super().__init__()
        self.config = config
        self.fused = fused
        self.window = window
        hd = config.head_dim
        self.scale = 1.0 / math.sqrt(hd) if config.attention_scale == "inverse_sqrt" else None
        if self.scale is not None and config.attention_scalar:  # Gemma's query_pre_attn_scalar ** -0.5
            self.scale = config.attention_scalar ** -0.5
        # The fused kernel's scale: its own 1/sqrt(head width) unless another is set.
        self.kernel_scale = 1.0 if self.scale is None else (self.scale if config.attention_scalar else None)
        self.softcap = config.attention_softcap
        # Whether the fused kernel computes this attention: no window to mask, no scores to cap.
        self.kernel_fits = not window and not self.softcap
        self.q_proj = Linear(config.width, config.heads * hd, bias=config.biased("q"), dtype=dtype)
        self.k_proj = Linear(config.width, config.kv_heads * hd, bias=config.biased("k"), dtype=dtype)
        self.v_proj = Linear(config.width, config.kv_heads * hd, bias=config.biased("v"), dtype=dtype)
        self.o_proj = Linear(config.heads * hd, config.width, bias=config.biased("o"), dtype=dtype)
        if config.qk_norm:  # an RMSNorm over each query and key head, before rotary
            self.q_norm = RMSNorm(hd, config.norm_eps, dtype, bool(config.norm_offset))
            self.k_norm = RMSNorm(hd, config.norm_eps, dtype, bool(config.norm_offset))

    def _project(self, x: Tensor, need_weights: bool) -> tuple[Tensor, Tensor, Tensor]:
        """Queries, keys and values. Training in fast precision without attention weights
        computes them as one matrix product over the three weights side by side (one kernel
        forward and backward instead of three); otherwise each is its own product, so the
        exact path stays bit for bit. The projections are read as ``F.linear`` (what their
        modules compute) without a module call each: a small model's decision is mostly
        calls, not arithmetic."""
        if not (self.fused and self.training and not need_weights):
            return (F.linear(x, self.q_proj.weight, self.q_proj.bias), F.linear(x, self.k_proj.weight, self.k_proj.bias),
                    F.linear(x, self.v_proj.weight, self.v_proj.bias))
        projections = (self.q_proj, self.k_proj, self.v_proj)
        weight = torch.cat([p.weight for p in projections])
        if self.q_proj.bias is not None:
            bias = torch.cat([p.bias for p in projections])
        else:
            bias = None
        sizes = [p.out_features for p in projections]
        q, k, v = F.linear(x, weight, bias).split(sizes, dim=-1)
        return q, k, v

    def forward(
        self,
        x: Tensor,
        rope: tuple[Tensor, Tensor] | None,
        dropout: DropoutKey | None,
        offset: int,
        cache: tuple[Tensor, Tensor] | None,
        need_weights: bool = True,
        visit: SiteVisit | None = None,
        name: str = "",
    ) -> tuple[Tensor, Tensor | None, tuple[Tensor, Tensor]]:
        """Output, attention weights [B, H, T, S] (None when the fused path ran) and the
        new key/value cache."""
        c = self.config
        b, t, _ = x.shape
        if self._one_new_query(need_weights, visit, dropout, t, cache, x.dtype):
            # A decision with the cache: one query over every cached key, no weights kept.
            # The kernel reads the shared key/value heads in place of repeated copies.
            q, k, v, new_cache = self._heads(x, False, rope, cache, repeat=False)
            return self._kernel(q, k, v, causal=False), None, new_cache
        q, k, v, new_cache = self._heads(x, need_weights or visit is not None, rope, cache)
        s = k.shape[2]
        past = s - t
        attention_dropout = dropout is not None and c.dropout > 0
        if self._fusable(need_weights, visit, attention_dropout, past, t):
            # Causal from the start, or one new position that sees every cached one.
            return self._kernel(q, k, v, causal=past == 0), None, new_cache
        weights, out = self._explicit(q, k, v, dropout if attention_dropout else None, offset, x.device, visit, name)
        return self.o_proj(_site(visit, name, ".attn.hook_z", out)), weights, new_cache

    def _kernel(self, q: Tensor, k: Tensor, v: Tensor, causal: bool) -> Tensor:
        """The output projection of ``scaled_dot_product_attention`` over q [B, H, T, K] and
        k, v with H heads, or with the kv heads unrepeated (the kernel groups them)."""
        c = self.config
        b, _, t, _ = q.shape
        fused = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=self.kernel_scale,
                                               enable_gqa=k.shape[1] != c.heads)
        return self.o_proj(fused.transpose(1, 2).reshape(b, t, c.heads * c.head_dim))

    def _heads(
        self, x: Tensor, need_weights: bool, rope: tuple[Tensor, Tensor] | None, cache: tuple[Tensor, Tensor] | None,
        repeat: bool = True,
    ) -> tuple[Tensor, Tensor, Tensor, tuple[Tensor, Tensor]]:
        """Queries, keys and values per head [B, H, T, K] (rotated, the cache in front, kv
        heads repeated for their query groups unless ``repeat`` is false) and the new
        key/value cache."""
        c = self.config
        b, t, _ = x.shape
        hd = c.head_dim
        q, k, v = self._project(x, need_weights)
        q, k = q.view(b, t, c.heads, hd), k.view(b, t, c.kv_heads, hd)
        if c.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = q.transpose(1, 2), k.transpose(1, 2)
        v = v.view(b, t, c.kv_heads, hd).transpose(1, 2)
        if rope is not None:
            q, k = apply_rotary(q, rope), apply_rotary(k, rope)
        if cache is not None:
            k = torch.cat((cache[0], k), dim=2)
            v = torch.cat((cache[1], v), dim=2)
        new_cache = (k, v)
        groups = c.heads // c.kv_heads
        if groups > 1 and repeat:
            k = k.repeat_interleave(groups, dim=1)
            v = v.repeat_interleave(groups, dim=1)
        return q, k, v, new_cache

    def _one_new_query(self, need_weights: bool, visit: SiteVisit | None, dropout: DropoutKey | None, t: int,
                       cache: tuple[Tensor, Tensor] | None, dtype: torch.dtype) -> bool:
        """Whether this is inference on one new position after cached ones, with no site to
        read or edit: every cached key is visible, so no mask is needed. Training, every
        forward with sites and exact precision (float64 without the fused kernel, whose bits
        the explicit path defines) keep the explicit path."""
        return (t == 1 and cache is not None and not self.training and not torch.is_grad_enabled()
                and not need_weights and visit is None and dropout is None and self.kernel_fits
                and (self.fused or dtype != torch.float64))

    def _fusable(self, need_weights: bool, visit: SiteVisit | None, attention_dropout: bool, past: int,
                 t: int) -> bool:
        """Whether ``scaled_dot_product_attention`` may stand in for the explicit path."""
        return (self.fused and not need_weights and visit is None and not attention_dropout and self.kernel_fits
                and (past == 0 or t == 1))

    def _explicit(self, q: Tensor, k: Tensor, v: Tensor, dropout: DropoutKey | None, offset: int,
                  device: torch.device, visit: SiteVisit | None = None, name: str = "") -> tuple[Tensor, Tensor]:
        """Attention weights [B, H, T, S] (after the ``attn.hook_pattern`` site) and the heads'
        weighted values [B, T, H * K]: scores, causal (and window) mask, softmax, dropout when
        given, weights @ values."""
        c = self.config
        b, _, t, _ = q.shape
        s = k.shape[2]
        scores = q @ k.transpose(-2, -1)
        if self.scale is not None:
            scores = scores * self.scale
        scores = soft_capped(scores, self.softcap)
        if t > 1 or self.window:  # one query without a window sees every key: nothing to mask
            scores = scores.masked_fill(~visible(t, s, self.window, device), float("-inf"))
        weights = _site(visit, name, ".attn.hook_pattern", torch.softmax(scores, dim=-1))
        attended = weights
        if dropout is not None:
            attended = weights * dropout.mask(offset, tuple(weights.shape), c.dropout, weights.dtype, device)
        out = (attended @ v).transpose(1, 2).reshape(b, t, c.heads * c.head_dim)
        return weights, out


class FeedForward(nn.Module):
    def __init__(self, config: ModelConfig, dtype: torch.dtype) -> None:
        super().__init__()
        self.swiglu = config.ffn_kind == "swiglu"
        self.gated = config.ffn_kind in ("swiglu", "geglu")  # act(gate) * up: SiLU, or GELU-tanh (Gemma)
        self.approximate = config.gelu_approximation
        bias = bool(config.ffn_bias)
        if self.gated:
            self.gate_proj = Linear(config.width, config.ffn, bias=bias, dtype=dtype)
        self.up_proj = Linear(config.width, config.ffn, bias=bias, dtype=dtype)
        self.down_proj = Linear(config.ffn, config.width, bias=bias, dtype=dtype)

    def forward(self, x: Tensor) -> Tensor:
        # Each projection as F.linear, what its module computes, without a module call.
        up, down = self.up_proj, self.down_proj
        if self.swiglu:
            gate = self.gate_proj
            hidden = F.silu(F.linear(x, gate.weight, gate.bias)) * F.linear(x, up.weight, up.bias)
        elif self.gated:
            gate = self.gate_proj
            hidden = F.gelu(F.linear(x, gate.weight, gate.bias), approximate="tanh") * F.linear(x, up.weight, up.bias)
        else:
            hidden = F.gelu(F.linear(x, up.weight, up.bias), approximate=self.approximate)
        return F.linear(hidden, down.weight, down.bias)


class Block(nn.Module):
    def __init__(self, config: ModelConfig, dtype: torch.dtype, fused_attention: bool = False,
                 layer: int = 0) -> None:
        super().__init__()
        self.config = config
        self.name = f"blocks.{layer}"
        self.parallel = config.residual == "parallel"
        self.attn_norm = make_norm(config, dtype)
        self.ffn_norm = make_norm(config, dtype)
        self.attn = Attention(config, dtype, fused_attention, config.window_of(layer))
        self.ffn = FeedForward(config, dtype)
        self.sandwich = bool(config.sandwich_norms)
        if self.sandwich:  # a norm on each sublayer's output too, before its residual add (Gemma)
            self.post_attn_norm = make_norm(config, dtype)
            self.post_ffn_norm = make_norm(config, dtype)
        # Local blocks rotate with their own base where one is set (Gemma 3).
        self.local_rope = bool(config.local_rope_base and config.window_of(layer) and config.positions == "rotary")

    def dropout_values(self, b: int, t: int, s: int) -> int:
        """Random values one block draws for a [b, t] input attending over s positions."""
        c = self.config
        return b * c.heads * t * s + 2 * b * t * c.width if c.dropout > 0 else 0

    def forward(
        self,
        x: Tensor,
        rope: tuple[Tensor, Tensor] | None,
        dropout: DropoutKey | None,
        offset: int,
        cache: tuple[Tensor, Tensor] | None = None,
        need_weights: bool = True,
        visit: SiteVisit | None = None,
    ) -> tuple[Tensor, Tensor | None, tuple[Tensor, Tensor]]:
        name = self.name
        x = _site(visit, name, ".hook_resid_pre", x)
        attn_out, weights, new_cache = self.attn(self.attn_norm(x), rope, dropout, offset, cache, need_weights,
                                                 visit, name)
        if self.sandwich:
            attn_out = self.post_attn_norm(attn_out)
        b, t, d = x.shape
        s = new_cache[0].shape[2]
        offset += b * self.config.heads * t * s
        attn_out = self._dropped(_site(visit, name, ".hook_attn_out", attn_out), dropout, offset, x)
        offset += b * t * d
        if self.parallel:
            ffn_out = self.ffn(self.ffn_norm(x))
        else:
            x = _site(visit, name, ".hook_resid_mid", x + attn_out)
            ffn_out = self.ffn(self.ffn_norm(x))
        if self.sandwich:
            ffn_out = self.post_ffn_norm(ffn_out)
        ffn_out = self._dropped(_site(visit, name, ".hook_mlp_out", ffn_out), dropout, offset, x)
        out = x + attn_out + ffn_out if self.parallel else x + ffn_out
        return _site(visit, name, ".hook_resid_post", out), weights, new_cache

    def _dropped(self, y: Tensor, dropout: DropoutKey | None, offset: int, x: Tensor) -> Tensor:
        """``y`` [B, T, D] times the dropout mask at ``offset`` (in ``x``'s dtype and device);
        ``y`` itself when no dropout applies."""
        p = self.config.dropout
        if dropout is not None and p > 0:
            return y * dropout.mask(offset, tuple(x.shape), p, x.dtype, x.device)
        return y


class MiniGPT(nn.Module):
    """Token table -> blocks -> final norm -> head (the token table transposed, or its own)."""

    def __init__(
        self, config: ModelConfig, vocab_size: int, dtype: torch.dtype = torch.float64, fused_attention: bool = False
    ) -> None:
        super().__init__()
        self.config = config
        self.fused_attention = fused_attention
        self.vocab_size = vocab_size
        self.dtype = dtype
        self.token_embedding = Embedding(vocab_size, config.width, dtype=dtype)
        if config.positions == "learned":
            self.position_embedding = Embedding(config.context, config.width, dtype=dtype)
        self.blocks = nn.ModuleList(Block(config, dtype, fused_attention, i) for i in range(config.layers))
        self.final_norm = make_norm(config, dtype)
        if not config.tied_head:
            self.lm_head = Linear(config.width, vocab_size, bias=False, dtype=dtype)

    @property
    def head_weight(self) -> Tensor:
        """The output head's weight [V, D]: the token table itself when tied (one Parameter,
        two uses), else the head's own table."""
        return self.token_embedding.weight if self.config.tied_head else self.lm_head.weight

    def initialize(self, seed: int) -> None:
        """Seeded initialization: weights N(0, init_std) in parameter order; biases 0; norms 1
        (a (1 + w) norm's stored w: 0)."""
        generator = torch.Generator().manual_seed(seed)
        std = self.config.init_std
        unit = 0.0 if self.config.norm_offset and self.config.norm == "rmsnorm" else 1.0
        with torch.no_grad():
            for name, param in self.named_parameters():
                if name.endswith("norm.weight"):
                    param.fill_(unit)
                elif name.endswith(".bias"):
                    param.zero_()
                else:
                    values = torch.randn(param.shape, generator=generator, dtype=torch.float64)
                    param.copy_(values * std)

    def embed(self, ids: Tensor | None, inputs_embeds: Tensor | None, past: int,
              visit: SiteVisit | None = None) -> tuple[Tensor, tuple[Tensor, Tensor] | None]:
        """The residual stream's start and the rotary tables for the positions after ``past``."""
        c = self.config
        x = self.token_embedding(ids) if inputs_embeds is None else inputs_embeds
        if c.scaled_embedding:  # token rows (or the rows given) times sqrt(width), in their dtype as Gemma
            x = x * torch.tensor(c.width ** 0.5, dtype=x.dtype, device=x.device)
        t = x.shape[1]
        if past + t > c.context:
            raise ValueError(f"{past + t} positions exceed the context of {c.context}")
        x = _site(visit, "", "hook_embed", x)
        if c.positions == "learned":
            rows = self.position_embedding.weight[past:past + t][None]  # the table's rows for these positions
            if visit is not None:  # the rows of every input, a view: the sum has the same bits
                rows = visit.at("hook_pos_embed", rows.expand(x.shape[0], -1, -1))
            return x + rows, None
        return x, self.rotary(past, t, x.device)

    def rotary(self, past: int, t: int, device: torch.device, local: bool = False) -> tuple[Tensor, Tensor] | None:
        """The rotary tables for ``t`` positions after ``past``; None with learned positions.
        ``local``: the local blocks' tables (``local_rope_base``, no scaling)."""
        c = self.config
        if c.positions == "learned":
            return None
        positions = torch.arange(past, past + t, device=device)
        if local:
            return rope_tables(positions, c.rotary_dims, c.local_rope_base, self.dtype)
        return rope_tables(positions, c.rotary_dims, c.rope_base, self.dtype, c)

    def _local_rotary(self, rope: tuple[Tensor, Tensor] | None, past: int, t: int,
                      device: torch.device) -> tuple[Tensor, Tensor] | None:
        """The local blocks' rotary tables: ``rope`` itself unless a block rotates with its own base."""
        if rope is None or not any(block.local_rope for block in self.blocks):
            return rope
        return self.rotary(past, t, device, local=True)

    def forward(
        self,
        ids: Tensor | None,
        *,
        dropout: DropoutKey | None = None,
        recompute: bool = False,
        return_attention: bool = False,
        cache: KVCache | None = None,
        inputs_embeds: Tensor | None = None,
        skip_head: bool = False,
        sites: Sites | None = None,
        entering: tuple[int, Tensor] | None = None,
        last_only: bool = False,
    ) -> ForwardOutput:
        """Logits for ``ids`` [B, T]. With ``cache`` (a list, filled in place) the ids
        continue the cached positions. ``dropout`` None means no dropout (evaluation).
        ``sites`` reads, replaces or adds to the named activations (:data:`ACTIVATIONS`,
        :mod:`~minigpt_tui.engine.models.sites`). ``entering`` (l, x) starts the forward
        from x, the residual stream entering block l (l = layers: the final norm's input),
        without the embeddings and the blocks before l: the sites between blocks l - 1 and
        l are its first. ``last_only`` puts the last position alone through the head
        (logits [B, 1, V]), as a decision does (:func:`decision_logits`)."""
        c = self.config
        past = cache[0][0].shape[2] if cache else 0
        visit = self._visit(sites, past)
        first = 0
        if entering is None:
            x, rope = self.embed(ids, inputs_embeds, past, visit)
        else:
            first, x, rope = self._entering(entering, dropout, cache, visit)
        b, t, _ = x.shape
        ropes = (rope, self._local_rotary(rope, past, t, x.device))
        dropping = dropout is not None and c.dropout > 0
        offset = 0
        if dropping:
            x = x * dropout.mask(offset, (b, t, c.width), c.dropout, x.dtype, x.device)
            offset += b * t * c.width
        x, offset, attentions, new_cache = self._through_blocks(x, ropes, dropout, offset, cache, recompute,
                                                                return_attention, visit, first)
        if cache is not None:
            cache[:] = new_cache
        hidden = _site(visit, "", "ln_final.hook_normalized", self.final_norm(x))
        rows = hidden[:, -1:] if last_only else hidden
        logits = hidden if skip_head else soft_capped(rows @ self.head_weight.t(), c.logit_softcap)
        consumed = offset if dropping else 0
        return ForwardOutput(logits, consumed, attentions, hidden)

    def _visit(self, sites: Sites | None, past: int) -> SiteVisit | None:
        """What this forward does at its sites: None without sites or with nothing to do."""
        if sites is None:
            return None
        if sites.config != self.config:
            raise ValueError("these sites were made for a model of other settings")
        return sites.visit(past)

    def _entering(self, entering: tuple[int, Tensor], dropout: DropoutKey | None, cache: KVCache | None,
                  visit: SiteVisit | None) -> tuple[int, Tensor, tuple[Tensor, Tensor] | None]:
        """The first block, the residual entering it (after the site of the block before
        leaving it) and the rotary tables of a forward started at a block."""
        first, x = entering
        if not 0 <= first <= self.config.layers:
            raise ValueError(f"no block {first} to enter: the model has blocks 0 to {self.config.layers - 1}")
        if dropout is not None or cache is not None:
            raise ValueError("a forward entering at a block takes no dropout and no cache")
        if first:
            x = _site(visit, f"blocks.{first - 1}", ".hook_resid_post", x)
        return first, x, self.rotary(0, x.shape[1], x.device)

    def _through_blocks(
        self,
        x: Tensor,
        ropes: tuple[tuple[Tensor, Tensor] | None, tuple[Tensor, Tensor] | None],
        dropout: DropoutKey | None,
        offset: int,
        cache: KVCache | None,
        recompute: bool,
        return_attention: bool,
        visit: SiteVisit | None,
        first: int = 0,
    ) -> tuple[Tensor, int, list[Tensor], KVCache]:
        """The residual stream after every block from ``first``, the dropout offset after
        them, the detached attention weights (when asked for) and the new cache. ``ropes``:
        the global and the local blocks' rotary tables."""
        b, t, _ = x.shape
        attentions: list[Tensor] = []
        new_cache: KVCache = []
        for i, block in enumerate(self.blocks):
            if i < first:
                continue
            layer_cache = cache[i] if cache else None
            x, weights, kv = self._run_block(block, x, ropes[block.local_rope], dropout, offset, layer_cache,
                                             recompute, return_attention, visit)
            offset += block.dropout_values(b, t, kv[0].shape[2])
            new_cache.append(kv)
            if return_attention and weights is not None:
                attentions.append(weights.detach())
        return x, offset, attentions, new_cache

    def _run_block(
        self,
        block: Block,
        x: Tensor,
        rope: tuple[Tensor, Tensor] | None,
        dropout: DropoutKey | None,
        offset: int,
        layer_cache: tuple[Tensor, Tensor] | None,
        recompute: bool,
        return_attention: bool,
        visit: SiteVisit | None,
    ) -> tuple[Tensor, Tensor | None, tuple[Tensor, Tensor]]:
        """One block's forward; recomputed in the backward pass when training asks for it
        (such a forward has no sites: training passes none)."""
        if recompute and self.training and torch.is_grad_enabled():
            return checkpoint(block, x, rope, dropout, offset, layer_cache, return_attention, use_reentrant=False)
        return block(x, rope, dropout, offset, layer_cache, return_attention, visit)


def decision_logits(model: MiniGPT, normalized: Tensor) -> Tensor:
    """A decision's logits [V]: the last row of the final norm's output ``normalized``
    [..., T, D] alone through the head, the one-row product every decision, lens row and
    patched run reads (a row inside a larger product can differ in its last bits)."""
    return soft_capped(normalized.reshape(-1, normalized.shape[-1])[-1:] @ model.head_weight.t(),
                       model.config.logit_softcap)[0]


@contextmanager
def evaluating(model: nn.Module) -> Iterator[None]:
    """``model`` in evaluation mode inside the block, and back in training mode after when
    it was training. A model already evaluating is left alone: setting a mode walks every
    submodule, which costs a small model more than a forward."""
    if not model.training:
        yield
        return
    model.eval()
    try:
        yield
    finally:
        model.train()


def count_parameters(model: nn.Module) -> tuple[int, int]:
    """(distinct learned tensors, scalars): the tied table counts once."""
    params = list(model.parameters())  # parameters() yields each Parameter once
    return len(params), sum(p.numel() for p in params)
