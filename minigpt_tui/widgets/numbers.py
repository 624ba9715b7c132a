"""Short number labels shared by the generation views."""

from __future__ import annotations


def short_probability(value: float) -> str:
    """A probability in four cells: ``0.79`` from 0.005 up, else ``4e-3`` (``0`` for zero),
    so a small probability never reads as 0.00."""
    if value == 0:
        return "0"
    if value >= 0.005:
        return f"{value:.2f}"
    mantissa, exponent = f"{value:.0e}".split("e")
    return f"{mantissa}e{int(exponent)}"
