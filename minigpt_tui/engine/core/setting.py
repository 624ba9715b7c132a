"""A config setting declared once, beside its default: the values it takes (in the words of
its refusal), the limit beyond which a value is a typo or a hostile file, and its help.

``width: int = setting(16, least=1, limit=16_384, help="the residual stream's size")`` is a
dataclass field whose metadata holds a :class:`Setting`; validation, the limits and the
command-line help read it from there.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

Value = TypeVar("Value")
_KEY = "setting"  # the dataclass field metadata key that holds a field's Setting


@dataclass(frozen=True)
class Setting:
    """What one setting takes. A tuple setting takes a tuple whose every item it takes."""

    help: str = ""
    least: float | None = None  # the smallest value taken (beside 0, where ``zero`` says what 0 means)
    above: float | None = None  # every value taken is greater than this
    most: float | None = None  # the largest value taken
    under: float | None = None  # every value taken is less than this
    zero: str | None = None  # 0 is taken too, meaning this ("off")
    choices: tuple[str, ...] = ()
    limit: int | None = None  # the largest size or count, checked after every other rule
    echo: bool = False  # the refusal ends with the value it refuses
    refusal: str | None = None  # the refusal's own words ({where}, {value}) where the bounds' are not them
    accepts: Callable[[Any], bool] | None = None  # a rule the bounds cannot say (``refusal`` says it)

    def takes(self, value: Any) -> bool:
        return all(self._takes_one(item) for item in (value if isinstance(value, tuple) else (value,)))

    def _takes_one(self, value: Any) -> bool:
        if self.zero is not None and value == 0:
            return True
        if self.choices and value not in self.choices:
            return False
        if self.accepts is not None and not self.accepts(value):
            return False
        return self._within(value)

    def _within(self, value: Any) -> bool:
        low = (self.least is None or value >= self.least) and (self.above is None or value > self.above)
        return low and (self.most is None or value <= self.most) and (self.under is None or value < self.under)

    def refused(self, where: str, value: Any) -> str:
        """The one-line refusal of ``value`` for the setting named ``where``."""
        if self.refusal is not None:
            return self.refusal.format(where=where, value=value)
        message = f"{where} must be {self.must_be}"
        if self.echo:
            message += f", got '{value}'" if self.choices else f", got {value}"
        return message

    @property
    def must_be(self) -> str:
        """What a value must be, in words: "at least 1", "0 (off) or positive", "in [0, 1)"."""
        if self.choices:
            return f"one of {self.choices}"
        low = self.least if self.least is not None else self.above
        high = self.most if self.most is not None else self.under
        if low is not None and high is not None:
            return f"in {'[' if self.least is not None else '('}{low}, {high}{']' if self.most is not None else ')'}"
        return f"0 ({self.zero}) or {self._lower}" if self.zero is not None else self._lower

    @property
    def _lower(self) -> str:
        """The lower bound in words: "positive", "0 or more", "at least 2"."""
        if self.above is not None:
            return "positive" if self.above == 0 else f"above {self.above}"
        return "0 or more" if self.least == 0 else f"at least {self.least}"

    @property
    def span(self) -> str:
        """The values taken up to the limit, as help shows them: "1 to 1,000,000" or
        "0 (none) or 2 to 1,000,000"."""
        lowest = self.least if self.least is not None else 1
        if self.zero is not None and lowest <= 1:
            lowest = 0
        start = f"0 ({self.zero}) or {lowest}" if self.zero is not None and lowest > 1 else f"{lowest}"
        return f"{start} to {self.limit:,}"


def setting(default: Value, **rule: Any) -> Value:
    """A dataclass field with ``default`` and the :class:`Setting` that ``rule`` declares."""
    return dataclasses.field(default=default, metadata={_KEY: Setting(**rule)})


def declared(cls: type) -> Iterator[tuple[str, Setting]]:
    """Each field of the dataclass ``cls`` that declares a Setting, in field order."""
    for item in dataclasses.fields(cls):
        if _KEY in item.metadata:
            yield item.name, item.metadata[_KEY]
