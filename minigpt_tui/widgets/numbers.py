"""Short number labels shared by the generation views.

Every probability follows one rule: from 0.005 up it is a decimal, below 0.005 it is
written with an exponent (so a small probability never reads as 0.00 or as a run of
zeros), and exactly zero is ``0``. Six-cell columns (the candidates, the decision line)
show two significant digits below 0.005 (``4.2e-3``) and four decimals above (``0.4778``);
four-cell columns (the decision list, the lens) one digit (``4e-3``) and two decimals (``0.79``).
"""

from __future__ import annotations

SMALL_PROBABILITY = 0.005  # below this a probability is written with an exponent


def _exponent_form(value: float, digits: int) -> str:
    """``value`` as ``4.2e-3`` (``digits`` after the point), no zero padding in the exponent."""
    mantissa, exponent = f"{value:.{digits}e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def short_probability(value: float) -> str:
    """A probability in four cells: ``0.79`` from 0.005 up, else ``4e-3`` (``0`` for zero)."""
    if value == 0:
        return "0"
    if value >= SMALL_PROBABILITY:
        return f"{value:.2f}"
    return _exponent_form(value, 0)


def table_probability(value: float) -> str:
    """A probability in six cells: ``0.4778`` from 0.005 up, else ``4.2e-3`` (``0`` for zero)."""
    if value == 0:
        return "0"
    if value >= SMALL_PROBABILITY:
        return f"{value:.4f}"
    return _exponent_form(value, 1)
