"""config.json of a transformers model as the family modules read it: each field's type
checked, a refusal naming the field and the file, in one line."""

from __future__ import annotations

from typing import Any

from minigpt_tui.engine.core.config import GIGA, ROPE_SCALINGS
from minigpt_tui.engine.core.errors import CheckpointError
from minigpt_tui.engine.families.declaration import GELU_NAMES


_JSON_WORDS = {None: "null", True: "true", False: "false"}


def shown(value: Any, width: int = 60) -> str:
    """A value from someone else's file as that file spells it (``null``, ``true``,
    ``false``; others as ``repr``), cut to ``width`` characters: echoed in a one-line
    refusal whatever its size."""
    if value is None or isinstance(value, bool):
        return _JSON_WORDS[value]
    text = repr(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def positive_number(value: Any) -> bool:
    """A JSON number above 0 and finite (not a bool, NaN or Infinity)."""
    return not isinstance(value, bool) and isinstance(value, (int, float)) and 0 < value < float("inf")


class ConfigReader:
    """config.json's fields, each read with its type checked and the file named."""

    def __init__(self, data: dict[str, Any], where: str, architecture: str) -> None:
        self.data, self.where, self.architecture = data, where, architecture

    def refuse(self, what: str) -> CheckpointError:
        return CheckpointError(f"{self.where}: unsupported {self.architecture} setting: {what}")

    def int(self, key: str, default: int | None = None) -> int:
        value = self.data.get(key, default)
        if value is None and default is not None:
            value = default
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise CheckpointError(f"{self.where}: {key} must be a positive integer, got {shown(value)}")
        return value

    def float(self, key: str, default: float) -> float:
        value = self.data.get(key, default)
        if not positive_number(value):
            raise CheckpointError(f"{self.where}: {key} must be a positive number, got {shown(value)}")
        return float(value)

    def flag(self, key: str, default: bool) -> bool:
        value = self.data.get(key, default)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise CheckpointError(f"{self.where}: {key} must be true or false, got {shown(value)}")
        return value

    def text(self, key: str, default: str) -> str:
        value = self.data.get(key, default)
        if not isinstance(value, str):
            raise CheckpointError(f"{self.where}: {key} must be a string, got {shown(value)}")
        return value

    def gelu(self, key: str) -> str:
        name = self.text(key, "gelu_new")
        if name not in GELU_NAMES:
            raise self.refuse(f"{key} {shown(name)} (supported: {', '.join(GELU_NAMES)})")
        return GELU_NAMES[name]

    def rope(self, theta_key: str = "rope_theta", fraction_key: str | None = None) -> tuple[float, float]:
        """RoPE's base and rotated share; scaling other than none, linear or llama3 is refused."""
        params = self.data.get("rope_parameters")
        params = params if isinstance(params, dict) else {}
        kind = self._rope_kind(params)
        if kind not in ("default", None, *ROPE_SCALINGS[1:]):
            raise self.refuse(f"rope scaling {shown(kind)} (supported: none, linear, llama3)")
        theta = params.get("rope_theta", self.data.get(theta_key, 10000.0))
        fraction = params.get("partial_rotary_factor", self.data.get(fraction_key, 1.0) if fraction_key else 1.0)
        if not positive_number(theta):
            raise CheckpointError(f"{self.where}: rope_theta must be a positive number, got {shown(theta)}")
        if not positive_number(fraction) or not fraction <= 1:
            raise CheckpointError(f"{self.where}: the rotary share must be in (0, 1], got {shown(fraction)}")
        return float(theta), float(fraction)

    def rope_scaling(self) -> dict[str, Any]:
        """Our rope_scaling settings for the config's linear or llama3 scaling ({} for none)."""
        params = self.data.get("rope_parameters")
        params = dict(params) if isinstance(params, dict) else {}
        scaling = self.data.get("rope_scaling")
        if isinstance(scaling, dict):
            params.update(scaling)
        kind = self._rope_kind(params)
        if kind not in ROPE_SCALINGS[1:]:
            return {}

        def number(key: str, default: float | None = None) -> float:
            value = params.get(key, default)
            if not positive_number(value):
                raise CheckpointError(f"{self.where}: rope scaling {kind} needs a positive {key}, got {shown(value)}")
            return float(value)

        values: dict[str, Any] = {"rope_scaling": kind, "rope_factor": number("factor")}
        if kind == "llama3":
            values.update(rope_low_freq_factor=number("low_freq_factor"),
                          rope_high_freq_factor=number("high_freq_factor"),
                          rope_original_context=self._positions(params, "original_max_position_embeddings"))
            if values["rope_high_freq_factor"] <= values["rope_low_freq_factor"]:
                raise CheckpointError(f"{self.where}: rope scaling llama3 needs high_freq_factor over low_freq_factor")
        return values

    def _positions(self, params: dict[str, Any], key: str) -> int:
        """A count of positions in rope scaling: a whole number up to a billion (JSON may
        write it 8192.0; Infinity or 1e30 is no context a model was trained on)."""
        value = params.get(key)
        if not positive_number(value) or value != int(value) or value > GIGA:
            raise CheckpointError(f"{self.where}: rope scaling needs {key} to be a whole number from 1 to "
                                  f"{GIGA:,}, got {shown(value)}")
        return int(value)

    def _rope_kind(self, params: dict[str, Any]) -> Any:
        """The RoPE type: rope_scaling's when it is an object, else rope_parameters'."""
        kind = params.get("rope_type", params.get("type", "default"))
        scaling = self.data.get("rope_scaling")
        if isinstance(scaling, dict):
            kind = scaling.get("rope_type", scaling.get("type", kind))
        return kind


def rope_parameters(config: Any) -> dict[str, Any]:
    """transformers' rope_parameters: the base, and the scaling where there is one."""
    if config.rope_scaling == "none":
        return {"rope_type": "default", "rope_theta": config.rope_base}
    out: dict[str, Any] = {"rope_type": config.rope_scaling, "rope_theta": config.rope_base,
                           "factor": config.rope_factor}
    if config.rope_scaling == "llama3":
        out.update(low_freq_factor=config.rope_low_freq_factor, high_freq_factor=config.rope_high_freq_factor,
                   original_max_position_embeddings=config.rope_original_context)
    return out


def sliding_window(c: ConfigReader, sliding: tuple[int, ...], context: int) -> dict[str, Any]:
    """Our window settings for config.json's ``sliding_window`` over the blocks ``sliding``
    (each attends over its last W positions, itself included, as transformers' mask does);
    {} for none, or for a window no shorter than the context (it hides nothing)."""
    value = c.data.get("sliding_window")
    if value is None or not sliding:
        return {}
    window = c.int("sliding_window")
    return {"attention_window": window, "local_layers": sliding} if window < context else {}


def window_config(config: Any) -> int | None:
    """config.json's ``sliding_window``: the windowed blocks' window (None: no window)."""
    return config.attention_window or None
