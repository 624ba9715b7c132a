"""One vocabulary for the places inside a model, shared by the command line and the app:
the lens, the contributions, the patching grid and the head roles all name a place the
same way. Blocks and heads are counted from 0.

- ``embed``: the embeddings (token row, plus the position row where positions are learned),
  the residual stream before any block;
- ``block N resid``: the residual stream leaving block N (what block N + 1 reads);
- ``block N attn`` / ``block N mlp``: block N's attention output (every head and the output
  bias) and feed-forward output;
- ``block N head H``: head H of block N (its share of ``block N attn``);
- ``block N attn bias``: block N's attention output bias alone;
- ``final norm bias``: the final LayerNorm's bias.

These are display names: JSON records keep their keys and add a name field beside them.
Torch-free, so the UI can import it.
"""

from __future__ import annotations

EMBED = "embed"
FINAL_NORM_BIAS = "final norm bias"
HEAD_LEGEND = "block N head H: head H of block N, both counted from 0"
LENS_LEGEND = "embed: the embeddings · block N resid: the residual stream after block N (the last: the model)"
SITE_LEGEND = ("embed: the embeddings · block N resid: the residual stream after block N · "
               "attn, mlp: its attention and feed-forward outputs")


def head_name(layer: int, head: int) -> str:
    return f"block {layer} head {head}"


def block_part_name(layer: int, part: str) -> str:
    """``part`` of block ``layer``: resid, attn, mlp or attn bias."""
    return f"block {layer} {part}"


def resid_name(index: int) -> str:
    """The residual stream entering block ``index`` (a lens layer, a patched ``resid`` layer):
    0 is the embeddings, ``index`` >= 1 leaves block ``index`` - 1."""
    return EMBED if index == 0 else block_part_name(index - 1, "resid")


def patch_site_name(site: str, layer: int, head: int | None = None) -> str:
    """A patching site (``resid``, ``attn``, ``mlp`` or ``head``) at ``layer`` (and ``head``)."""
    if site == "resid":
        return resid_name(layer)
    if site == "head":
        return head_name(layer, -1 if head is None else head)
    return block_part_name(layer, site)
