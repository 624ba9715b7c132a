"""Model families, each declared once: one module per family (``gpt2``, ``gpt_neo``,
``gpt_neox``, ``llama``, ``qwen2``, ``qwen3``, ``mistral``, ``phi3``) makes one :class:`Family` record, and every reader and
writer of other tools' files (transformers folders, GGUF files), ``convert``, ``export``,
our model file's constants and the tests read it from here.

A family's record says: its parts for our model (``core.config.FAMILY_PARTS``, which stays
in core because :class:`ModelConfig` fills its parts from it and core imports nothing
above it), transformers' class and its config.json both ways, the state dict's names both
ways, llama.cpp's GGUF architecture both ways (or None), the tokenizer its models ship and
a tiny example config. Adding a family whose parts exist is its module, its line in
:data:`REGISTRY` and its parts in ``core.config`` (see docs/development.md).

This layer imports core only (torch inside functions).
"""

from __future__ import annotations

from minigpt_tui.engine.core.errors import CheckpointError
from minigpt_tui.engine.families import gemma2, gemma3, gpt2, gpt_neo, gpt_neox, llama, mistral, phi3, qwen2, qwen3
from minigpt_tui.engine.families.declaration import ACTIVATION_NAMES, GELU_NAMES, Family, GGUFLayout

__all__ = ["ACTIVATION_NAMES", "GELU_NAMES", "REGISTRY", "Family", "GGUFLayout", "family", "gguf_architectures",
           "gguf_family"]

# In core.config.FAMILIES' order.
REGISTRY: tuple[Family, ...] = (llama.FAMILY, gpt2.FAMILY, qwen2.FAMILY, gpt_neo.FAMILY, gpt_neox.FAMILY,
                                qwen3.FAMILY, mistral.FAMILY, phi3.FAMILY, gemma2.FAMILY, gemma3.FAMILY)


def family(name: str) -> Family:
    """The family named ``name`` (ours, and transformers' model_type)."""
    for declared in REGISTRY:
        if declared.name == name:
            return declared
    raise CheckpointError(f"no model family {name!r} (known: {', '.join(f.name for f in REGISTRY)})")


def gguf_family(architecture: str) -> Family | None:
    """The family llama.cpp's ``general.architecture`` names, or None."""
    return next((f for f in REGISTRY if f.gguf is not None and f.gguf.architecture == architecture), None)


def gguf_architectures() -> tuple[str, ...]:
    return tuple(f.gguf.architecture for f in REGISTRY if f.gguf is not None)
