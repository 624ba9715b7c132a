# The model as it was before its families became declared parts (a frozen copy, the oracle
# of test_legacy_model.py). Not used by the product.

"""A decoder-only transformer in two families, with one token table for lookup and head.

``llama`` follows LlamaForCausalLM: RMSNorm (weight, epsilon), rotary positions with the
rotate-half convention, SwiGLU feed-forward, no biases, optional grouped kv heads (query
head h reads kv head h // (heads / kv_heads)). ``gpt2`` follows GPT2LMHeadModel: a learned
position table, LayerNorm with bias, GELU (declared approximation) MLP, biases.

Attention is computed explicitly (scores, causal mask, softmax, weights @ values) unless
the model is built with ``fused_attention`` (fast precision): then a forward that needs
no attention weights and no attention dropout calls ``scaled_dot_product_attention``.
The explicit path is the definition; the fused one agrees with it to rounding.

Dropout masks come from a counter-based stream keyed by (seed, counter). A forward call
is given the base counter and returns how many random values it consumed, so the caller
advances the counter outside any recomputed region: recomputation regenerates the same
masks, and a resumed run continues the same sequence.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from minigpt_tui.engine.core.config import ModelConfig

TOKEN_TABLE = "token_embedding.weight"


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


class RMSNorm(nn.Module):
    def __init__(self, width: int, eps: float, dtype: torch.dtype) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(width, dtype=dtype))

    def forward(self, x: Tensor) -> Tensor:
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def rotate_half(x: Tensor) -> Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rope_tables(positions: Tensor, head_dim: int, base: float, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float64, device=positions.device) / head_dim))
    freqs = positions.to(torch.float64)[:, None] * inv_freq[None, :]
    angles = torch.cat((freqs, freqs), dim=-1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


class Attention(nn.Module):
    def __init__(self, config: ModelConfig, dtype: torch.dtype, fused: bool = False) -> None:
        super().__init__()
        self.config = config
        self.fused = fused
        bias = config.family == "gpt2"
        hd = config.head_dim
        self.q_proj = nn.Linear(config.width, config.heads * hd, bias=bias, dtype=dtype)
        self.k_proj = nn.Linear(config.width, config.kv_heads * hd, bias=bias, dtype=dtype)
        self.v_proj = nn.Linear(config.width, config.kv_heads * hd, bias=bias, dtype=dtype)
        self.o_proj = nn.Linear(config.heads * hd, config.width, bias=bias, dtype=dtype)

    def _project(self, x: Tensor, need_weights: bool) -> tuple[Tensor, Tensor, Tensor]:
        """Queries, keys and values. Training in fast precision without attention weights
        computes them as one matrix product over the three weights side by side (one kernel
        forward and backward instead of three); otherwise each projection is called as its
        own module, so the exact path stays bit for bit and hooks on the projections see
        every call."""
        if not (self.fused and self.training and not need_weights):
            return self.q_proj(x), self.k_proj(x), self.v_proj(x)
        projections = (self.q_proj, self.k_proj, self.v_proj)
        weight = torch.cat([p.weight for p in projections])
        bias = torch.cat([p.bias for p in projections]) if self.q_proj.bias is not None else None
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
    ) -> tuple[Tensor, Tensor | None, tuple[Tensor, Tensor]]:
        """Output, attention weights [B, H, T, S] (None when the fused path ran) and the
        new key/value cache."""
        c = self.config
        b, t, _ = x.shape
        hd = c.head_dim
        q, k, v = self._project(x, need_weights)
        q = q.view(b, t, c.heads, hd).transpose(1, 2)
        k = k.view(b, t, c.kv_heads, hd).transpose(1, 2)
        v = v.view(b, t, c.kv_heads, hd).transpose(1, 2)
        if rope is not None:
            cos, sin = rope
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
        if cache is not None:
            k = torch.cat((cache[0], k), dim=2)
            v = torch.cat((cache[1], v), dim=2)
        new_cache = (k, v)
        groups = c.heads // c.kv_heads
        if groups > 1:
            k = k.repeat_interleave(groups, dim=1)
            v = v.repeat_interleave(groups, dim=1)
        s = k.shape[2]
        past = s - t
        attention_dropout = dropout is not None and c.dropout > 0
        if self.fused and not need_weights and not attention_dropout and (past == 0 or t == 1):
            # Causal from the start, or one new position that sees every cached one.
            fused = F.scaled_dot_product_attention(q, k, v, is_causal=past == 0)
            return self.o_proj(fused.transpose(1, 2).reshape(b, t, c.heads * hd)), None, new_cache
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        causal = torch.ones(t, s, dtype=torch.bool, device=x.device).tril(diagonal=past)
        scores = scores.masked_fill(~causal, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        attended = weights
        if dropout is not None and c.dropout > 0:
            attended = weights * dropout.mask(offset, tuple(weights.shape), c.dropout, weights.dtype, x.device)
        out = (attended @ v).transpose(1, 2).reshape(b, t, c.heads * hd)
        return self.o_proj(out), weights, new_cache


class FeedForward(nn.Module):
    def __init__(self, config: ModelConfig, dtype: torch.dtype) -> None:
        super().__init__()
        self.family = config.family
        self.approximate = config.gelu_approximation
        if config.family == "llama":
            self.gate_proj = nn.Linear(config.width, config.ffn, bias=False, dtype=dtype)
            self.up_proj = nn.Linear(config.width, config.ffn, bias=False, dtype=dtype)
            self.down_proj = nn.Linear(config.ffn, config.width, bias=False, dtype=dtype)
        else:
            self.up_proj = nn.Linear(config.width, config.ffn, bias=True, dtype=dtype)
            self.down_proj = nn.Linear(config.ffn, config.width, bias=True, dtype=dtype)

    def forward(self, x: Tensor) -> Tensor:
        if self.family == "llama":
            return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
        return self.down_proj(F.gelu(self.up_proj(x), approximate=self.approximate))


class Block(nn.Module):
    def __init__(self, config: ModelConfig, dtype: torch.dtype, fused_attention: bool = False) -> None:
        super().__init__()
        self.config = config
        if config.family == "llama":
            self.attn_norm: nn.Module = RMSNorm(config.width, config.norm_eps, dtype)
            self.ffn_norm: nn.Module = RMSNorm(config.width, config.norm_eps, dtype)
        else:
            self.attn_norm = nn.LayerNorm(config.width, eps=config.norm_eps, dtype=dtype)
            self.ffn_norm = nn.LayerNorm(config.width, eps=config.norm_eps, dtype=dtype)
        self.attn = Attention(config, dtype, fused_attention)
        self.ffn = FeedForward(config, dtype)

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
    ) -> tuple[Tensor, Tensor | None, tuple[Tensor, Tensor]]:
        p = self.config.dropout
        attn_out, weights, new_cache = self.attn(self.attn_norm(x), rope, dropout, offset, cache, need_weights)
        b, t, d = x.shape
        s = new_cache[0].shape[2]
        offset += b * self.config.heads * t * s
        if dropout is not None and p > 0:
            attn_out = attn_out * dropout.mask(offset, (b, t, d), p, x.dtype, x.device)
        offset += b * t * d
        x = x + attn_out
        ffn_out = self.ffn(self.ffn_norm(x))
        if dropout is not None and p > 0:
            ffn_out = ffn_out * dropout.mask(offset, (b, t, d), p, x.dtype, x.device)
        return x + ffn_out, weights, new_cache


class MiniGPT(nn.Module):
    """Token table -> blocks -> final norm -> the same token table, transposed, as head."""

    def __init__(
        self, config: ModelConfig, vocab_size: int, dtype: torch.dtype = torch.float64, fused_attention: bool = False
    ) -> None:
        super().__init__()
        self.config = config
        self.fused_attention = fused_attention
        self.vocab_size = vocab_size
        self.dtype = dtype
        self.token_embedding = nn.Embedding(vocab_size, config.width, dtype=dtype)
        if config.family == "gpt2":
            self.position_embedding = nn.Embedding(config.context, config.width, dtype=dtype)
        self.blocks = nn.ModuleList(Block(config, dtype, fused_attention) for _ in range(config.layers))
        if config.family == "llama":
            self.final_norm: nn.Module = RMSNorm(config.width, config.norm_eps, dtype)
        else:
            self.final_norm = nn.LayerNorm(config.width, eps=config.norm_eps, dtype=dtype)

    @property
    def head_weight(self) -> Tensor:
        """The output head's weight: the token table itself (one Parameter, two uses)."""
        return self.token_embedding.weight

    def initialize(self, seed: int) -> None:
        """Seeded initialization: weights N(0, init_std) in parameter order; biases 0; norms 1."""
        generator = torch.Generator().manual_seed(seed)
        std = self.config.init_std
        with torch.no_grad():
            for name, param in self.named_parameters():
                if name.endswith("norm.weight"):
                    param.fill_(1.0)
                elif name.endswith(".bias"):
                    param.zero_()
                else:
                    values = torch.randn(param.shape, generator=generator, dtype=torch.float64)
                    param.copy_(values * std)

    def forward(
        self,
        ids: Tensor,
        *,
        dropout: DropoutKey | None = None,
        recompute: bool = False,
        return_attention: bool = False,
        cache: KVCache | None = None,
        inputs_embeds: Tensor | None = None,
        skip_head: bool = False,
    ) -> ForwardOutput:
        """Logits for ``ids`` [B, T]. With ``cache`` (a list, filled in place) the ids
        continue the cached positions. ``dropout`` None means no dropout (evaluation)."""
        c = self.config
        x = self.token_embedding(ids) if inputs_embeds is None else inputs_embeds
        b, t, _ = x.shape
        past = cache[0][0].shape[2] if cache else 0
        if past + t > c.context:
            raise ValueError(f"{past + t} positions exceed the context of {c.context}")
        positions = torch.arange(past, past + t, device=x.device)
        rope = None
        if c.family == "gpt2":
            x = x + self.position_embedding(positions)[None]
        else:
            rope = rope_tables(positions, c.head_dim, c.rope_base, self.dtype)
        offset = 0
        if dropout is not None and c.dropout > 0:
            x = x * dropout.mask(offset, (b, t, c.width), c.dropout, x.dtype, x.device)
            offset += b * t * c.width
        attentions: list[Tensor] = []
        new_cache: KVCache = []
        for i, block in enumerate(self.blocks):
            layer_cache = cache[i] if cache else None
            if recompute and self.training and torch.is_grad_enabled():
                x, weights, kv = checkpoint(
                    block, x, rope, dropout, offset, layer_cache, return_attention, use_reentrant=False
                )
            else:
                x, weights, kv = block(x, rope, dropout, offset, layer_cache, return_attention)
            offset += block.dropout_values(b, t, kv[0].shape[2])
            new_cache.append(kv)
            if return_attention and weights is not None:
                attentions.append(weights.detach())
        if cache is not None:
            cache[:] = new_cache
        hidden = self.final_norm(x)
        logits = hidden if skip_head else hidden @ self.token_embedding.weight.t()
        consumed = offset if dropout is not None and c.dropout > 0 else 0
        return ForwardOutput(logits, consumed, attentions, hidden)


def count_parameters(model: nn.Module) -> tuple[int, int]:
    """(distinct learned tensors, scalars): the tied table counts once."""
    params = list(model.parameters())  # parameters() yields each Parameter once
    return len(params), sum(p.numel() for p in params)
