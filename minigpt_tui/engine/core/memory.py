"""Memory before allocation: how much this process may still use (the machine's available
memory, and the limit of its cgroup when it has one), and about how much a run will need,
so that a run too large is refused with both figures instead of being killed halfway.
No torch: the estimate is arithmetic over the config.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from minigpt_tui.engine.core.config import estimated_parameters
from minigpt_tui.engine.core.errors import ConfigError
from minigpt_tui.engine.core.precision import precision_of

GB = 1e9
RUNTIME_BYTES = 400_000_000  # torch, numpy and the interpreter in one training process


def amount(nbytes: int) -> str:
    """A memory size as people say it: "48.9 GB", "750 MB"."""
    return f"{nbytes / GB:.1f} GB" if nbytes >= GB else f"{max(1, round(nbytes / 1e6))} MB"


@dataclass(frozen=True)
class Available:
    bytes: int
    source: str  # "machine" or "cgroup limit"


def _read(path: Path | str) -> str:
    with open(path, encoding="ascii", errors="replace") as handle:  # small kernel files
        return handle.read(1 << 16)


def _read_int(path: Path) -> int | None:
    try:
        text = _read(path).strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _machine_available() -> int | None:
    try:
        for line in _read("/proc/meminfo").splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def _cgroup_room(root: Path = Path("/sys/fs/cgroup")) -> int | None:
    """What the cgroup of this process still allows: limit minus usage (v2 or v1)."""
    try:
        lines = _read("/proc/self/cgroup").splitlines()
    except OSError:
        return None
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hierarchy, controllers, relative = parts
        if hierarchy == "0" and controllers == "":  # cgroup v2
            folder = root / relative.lstrip("/")
            limit, usage = _read_int(folder / "memory.max"), _read_int(folder / "memory.current")
        elif "memory" in controllers.split(","):  # cgroup v1
            folder = root / "memory" / relative.lstrip("/")
            limit, usage = _read_int(folder / "memory.limit_in_bytes"), _read_int(folder / "memory.usage_in_bytes")
        else:
            continue
        if limit is not None and limit < 1 << 60:  # "max" or a huge v1 value: no limit
            return max(0, limit - (usage or 0))
    return None


def available_memory() -> Available | None:
    """The memory this process may still take: the smaller of the machine's available
    memory and its cgroup's room; None when neither can be read."""
    machine, cgroup = _machine_available(), _cgroup_room()
    if cgroup is not None and (machine is None or cgroup < machine):
        return Available(cgroup, "cgroup limit")
    return Available(machine, "machine") if machine is not None else None


def training_bytes(config: Any, vocab_size: int | None = None, *, processes: int = 1) -> int:
    """About the peak memory of training ``config`` (a RunConfig): the runtime, parameters
    with their gradients and two optimizer moments (float32 master weights beside autocast),
    the activations kept for the backward pass of one microbatch, and an evaluation batch,
    for each of ``processes`` processes."""
    model, train = config.model, config.train
    vocab = vocab_size if vocab_size is not None else 258 + config.tokenizer.merges
    element = precision_of(train.precision).bytes_per_element

    width, layers, ffn, heads = model.width, model.layers, model.ffn, model.heads
    context = config.window if hasattr(config, "window") else model.context
    weights = 4 * estimated_parameters(model, vocab) * element  # weights, gradients, two Adam moments
    tokens = train.batch_size * context
    # Saved for backward per token and block: norms, q/k/v, attention scores and
    # probabilities, the feed-forward's hidden units; then the logits and their gradient.
    per_token_block = 8 * width + 2 * heads * context + 3 * ffn
    kept_blocks = 1 if train.recompute else layers
    activations = tokens * (kept_blocks * per_token_block + 3 * vocab) * element
    evaluation = train.eval_batch_size * context * (per_token_block + 2 * vocab) * element
    return processes * (RUNTIME_BYTES + weights + activations + evaluation)


def suggest_batch(config: Any, room: int, vocab_size: int | None, processes: int) -> int:
    """The largest power-of-two batch size that fits ``room`` (0 when none does)."""
    size = config.train.batch_size
    while size > 1:
        size //= 2
        smaller = dataclasses.replace(config, train=dataclasses.replace(config.train, batch_size=size))
        if training_bytes(smaller, vocab_size, processes=processes) <= room:
            return size
    return 0


def require_memory_for_training(config: Any, vocab_size: int | None = None, *, processes: int = 1,
                                extra_bytes: int = 0, what: str = "this run") -> None:
    """Refuse, before anything is allocated, a run that would need more memory than is
    available, with the estimate, what is available and a batch size that would fit
    (``extra_bytes``: memory the run holds besides its training, such as the model it is
    read from)."""
    room = available_memory()
    if room is None:
        return
    needed = training_bytes(config, vocab_size, processes=processes) + extra_bytes
    if needed <= room.bytes:
        return
    each = f" ({processes} processes)" if processes > 1 else ""
    fitting = room.bytes // training_bytes(config, vocab_size) if processes > 1 else 0
    batch = suggest_batch(config, room.bytes - extra_bytes, vocab_size, processes)
    hint = (f"try --nproc {fitting}" if fitting >= 1 else f"try [train] batch_size = {batch}" if batch
            else "choose a smaller model")
    raise ConfigError(f"{what} needs about {amount(needed)} of memory{each}; {amount(room.bytes)} "
                      f"available ({room.source}); {hint}")


def require_memory(nbytes: int, what: str) -> None:
    """Refuse to allocate ``nbytes`` for ``what`` when that much is not available (the
    machine's available memory, or its cgroup's room)."""
    room = available_memory()
    if room is not None and nbytes > room.bytes:
        raise ConfigError(f"{what} needs about {amount(nbytes)} of memory; {amount(room.bytes)} available "
                          f"({room.source})")
