"""A bounded Jinja sandbox for chat templates (a template from a model file is code from
elsewhere): the immutable sandbox, plus bounds on what one rendering may spend and build.

- Time: every loop step, call, filter and operator counts; past ``STEP_LIMIT`` steps
  or ``RENDER_SECONDS`` the rendering stops. Every ``{% for %}`` is counted (the parsed
  template's loops are wrapped), so nested loops over ``range`` end too.
- Size: an operation that would build text (or a list) longer than ``TEXT_LIMIT`` is
  refused before it allocates (``*``, ``+``, ``~``, ``%``, ``format``, ``center``,
  ``indent``, ``replace``, ``join``, ``tojson``, the string methods that pad), and what one
  rendering builds in all is bounded by ``BUILT_LIMIT``.
- Determinism: no ``lipsum`` and no ``random``: one file always renders the same corpus.

A bound reached raises :class:`TemplateBound` (a ``jinja2.TemplateError``), one line.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import wraps
from pprint import pformat
from typing import Any

import jinja2
from jinja2 import nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment, SandboxedFormatter
from jinja2.visitor import NodeTransformer

TEXT_LIMIT = 1 << 23  # characters one value (and one rendering) may hold
BUILT_LIMIT = 1 << 26  # characters one rendering may build in all
ITEMS_LIMIT = 1 << 20  # items one list built by the template may hold
INT_BITS_LIMIT = 1 << 16  # bits of an integer the template computes
STEP_LIMIT = 5_000_000  # loop steps, calls and lookups in one rendering (a long conversation takes ~10 a message)
RENDER_SECONDS = 10.0
RANGE_LIMIT = 100_000  # as Jinja's sandbox
_CHECK_EVERY = 4096  # steps between clock readings

_LOOP_FILTER = "minigpt_loop"
_CONCAT_FILTER = "minigpt_concat"
_PERCENT_SPEC = re.compile(r"%(?:\([^)]*\))?[#0\- +]*(\*|\d+)?(?:\.(\*|\d+))?[hlL]?[a-zA-Z%]")
_SPEC_NUMBERS = re.compile(r"\d+")


class TemplateBound(jinja2.TemplateError):
    """A chat template that went past one of its bounds."""


@dataclass
class _Budget:
    """What one rendering has spent (a renderer renders one conversation at a time)."""

    deadline: float
    steps: int = 0
    built: int = 0
    clock: Callable[[], float] = field(default=time.monotonic, repr=False)

    def step(self) -> None:
        self.steps += 1
        if not self.steps % _CHECK_EVERY:
            if self.steps > STEP_LIMIT:
                raise TemplateBound(f"it ran more than {STEP_LIMIT:,} steps")
            if self.clock() > self.deadline:
                raise TemplateBound(f"it ran longer than {RENDER_SECONDS:g} s")

    def build(self, characters: int, what: str = "text") -> None:
        """Refuse, before it is built, a value of ``characters`` (or items) past the bounds."""
        limit = ITEMS_LIMIT if what == "a list" else TEXT_LIMIT
        if characters > limit:
            raise TemplateBound(f"it would build {what} of {characters:,} {_unit(what)}, more than {limit:,}")
        self.built += characters
        if self.built > BUILT_LIMIT:
            raise TemplateBound(f"it built more than {BUILT_LIMIT:,} characters in all")


def _unit(what: str) -> str:
    return "items" if what == "a list" else "characters"


def _size(value: Any, limit: int = TEXT_LIMIT) -> int:
    """About how many characters ``value`` holds as text; counting stops past ``limit``."""
    total, stack = 0, [value]
    while stack and total <= limit:
        item = stack.pop()
        if isinstance(item, str):
            total += len(item)
        elif isinstance(item, (bytes, bytearray)):
            total += 4 * len(item)
        elif isinstance(item, dict):
            total += 2 + 4 * len(item)
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple, set, frozenset)):
            total += 2 + 2 * len(item)
            stack.extend(item)
        elif isinstance(item, int) and not isinstance(item, bool):
            total += item.bit_length() // 3 + 2
        else:
            total += 24
    return total


class _Bounding(NodeTransformer):
    """Every loop's iterable counted, every ``~`` bounded: rewritten as filters of ours."""

    def visit_For(self, node: nodes.For) -> nodes.Node:
        self.generic_visit(node)
        node.iter = nodes.Filter(node.iter, _LOOP_FILTER, [], [], None, None, lineno=node.lineno)
        return node

    def visit_Concat(self, node: nodes.Concat) -> nodes.Node:
        self.generic_visit(node)
        return nodes.Filter(nodes.List(node.nodes, lineno=node.lineno), _CONCAT_FILTER, [], [], None, None,
                            lineno=node.lineno)


class _BoundedFormatter(SandboxedFormatter):
    """``str.format`` with each field's width checked before the field is padded."""

    def __init__(self, environment: BoundedEnvironment) -> None:
        super().__init__(environment)
        self._budget = environment

    def format_field(self, value: Any, format_spec: str) -> Any:
        self._budget.bound_spec(format_spec, value)
        return super().format_field(value, format_spec)


class BoundedEnvironment(ImmutableSandboxedEnvironment):
    """The immutable sandbox with the bounds of the module doc."""

    intercepted_binops = frozenset({"*", "+", "%", "**"})

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.budget = _Budget(deadline=float("inf"))
        self.globals.pop("lipsum", None)
        self.globals["range"] = self._range
        self.filters.pop("random", None)
        for name, filter_ in list(self.filters.items()):
            self.filters[name] = self._charged(filter_)
        self.filters.update({
            _LOOP_FILTER: self._loop, _CONCAT_FILTER: self._concat_filter, "center": self._center,
            "indent": self._indent, "format": self._format, "replace": self._charged(self._replace),
            "join": self._join, "batch": self._batch, "slice": self._slice, "tojson": self._tojson,
            "pprint": self._pprint, "string": self._string,
        })
        self.concat = self._concat  # what ``{% set %}`` blocks, macros and filter blocks join

    # -- one rendering ------------------------------------------------------------------
    def render(self, template: jinja2.Template, variables: dict[str, Any]) -> str:
        """``template`` with ``variables``, within the bounds (a fresh budget each time)."""
        self.budget = _Budget(deadline=time.monotonic() + RENDER_SECONDS)
        return template.render(**variables)  # joined by _concat, within the bound

    def _parse(self, source: str, name: str | None, filename: str | None) -> nodes.Template:
        parsed = super()._parse(source, name, filename)
        return _Bounding().visit(parsed)

    # -- what every template does (any repetition is a loop step or a call) ---------------
    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805 as the sandbox names them
        __self.budget.step()
        owner = getattr(__obj, "__self__", None)
        if isinstance(owner, str):
            __self._bound_str_method(owner, getattr(__obj, "__name__", ""), args, kwargs)
        return super().call(__context, __obj, *args, **kwargs)

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        self.budget.step()
        if operator == "%" and isinstance(left, str):
            return self._percent(left, right)
        self._bound_binop(operator, left, right)
        result = super().call_binop(context, operator, left, right)
        if _is_int(result) and result.bit_length() > INT_BITS_LIMIT:
            raise TemplateBound(f"it would compute an integer of more than {INT_BITS_LIMIT:,} bits")
        return result

    def _bound_binop(self, operator: str, left: Any, right: Any) -> None:
        """What ``left operator right`` would build, charged (or refused) before it is built."""
        if operator == "*":
            self._bound_repeat(left, right)
        elif operator == "+" and isinstance(left, (str, list, tuple)) and isinstance(right, type(left)):
            self.budget.build(len(left) + len(right), "text" if isinstance(left, str) else "a list")
        elif operator == "**":
            _bound_power(left, right)

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        if getattr(value, "__name__", None) not in ("format", "format_map"):
            return None
        text = getattr(value, "__self__", None)
        if not isinstance(text, str):
            return None
        formatter = _BoundedFormatter(self)
        mapping = value.__name__ == "format_map"

        def bounded(*args: Any, **kwargs: Any) -> str:
            if mapping:
                if kwargs or len(args) != 1:
                    raise TypeError("format_map() takes exactly one argument")
                kwargs, args = args[0], ()
            result = formatter.vformat(text, args, kwargs)
            self.budget.build(len(result))
            return result

        return bounded

    # -- bounds ---------------------------------------------------------------------------
    def bound_spec(self, spec: str, value: Any) -> None:
        """A format spec's width and precision, and the field's text, within the bounds."""
        widest = max((int(number) for number in _SPEC_NUMBERS.findall(spec)), default=0)
        self.budget.build(max(widest, _size(value)))

    def _bound_repeat(self, left: Any, right: Any) -> None:
        for sequence, times in ((left, right), (right, left)):
            if isinstance(sequence, (str, list, tuple)) and _is_int(times) and times > 0:
                if isinstance(sequence, str):
                    self.budget.build(len(sequence) * times)
                else:
                    self.budget.build(len(sequence) * times, "a list")
                    self.budget.build(_size(sequence) * times)

    def _bound_str_method(self, text: str, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        sized = _STR_METHOD_SIZES.get(name)
        size = sized(text, args, kwargs) if sized is not None else None
        if size is not None:
            self.budget.build(size)

    def _percent(self, text: str, values: Any) -> str:
        """``text % values`` with every width and precision, and the result, bounded first."""
        specs = _PERCENT_SPEC.findall(text)
        if any("*" in spec for spec in specs):
            raise TemplateBound("a % format takes its width from an argument")
        widest = max((int(number) for spec in specs for number in spec if number), default=0)
        self.budget.build(len(text) + len(specs) * (widest + _size(values)))
        return text % values

    def _range(self, *args: int) -> range:
        numbers = range(*args)
        if len(numbers) > RANGE_LIMIT:
            raise TemplateBound(f"range of {len(numbers):,} numbers, more than {RANGE_LIMIT:,}")
        return numbers

    def _charged(self, filter_: Callable[..., Any]) -> Callable[..., Any]:
        """``filter_`` with what it returns charged to the rendering (its pass_* marks kept)."""

        @wraps(filter_)
        def charged(*args: Any, **kwargs: Any) -> Any:
            self.budget.step()
            result = filter_(*args, **kwargs)
            if isinstance(result, str):
                self.budget.build(len(result))
            elif isinstance(result, list):
                self.budget.build(len(result), "a list")
            return result

        return charged

    # -- filters of ours ------------------------------------------------------------------
    def _loop(self, iterable: Any) -> Iterator[Any]:
        step = self.budget.step
        for item in iterable:
            step()
            yield item

    def _concat(self, pieces: Iterable[str]) -> str:
        """Output pieces joined (Jinja's own pieces: texts, each already bounded)."""
        held = list(pieces)
        self.budget.build(sum(map(len, held)))
        return "".join(held)

    def _concat_filter(self, values: list[Any]) -> str:
        self.budget.build(sum(_size(value) for value in values))
        return "".join(map(str, values))

    def _center(self, value: Any, width: int = 80) -> str:
        text = str(value)
        if _is_int(width):
            self.budget.build(max(len(text), width))
        return text.center(width)

    def _indent(self, value: Any, width: Any = 4, first: bool = False, blank: bool = False) -> str:
        text = str(value)
        step = len(width) if isinstance(width, str) else width if _is_int(width) else 0
        self.budget.build(len(text) + (text.count("\n") + 2) * max(0, step))
        return self._builtin("indent")(text, width, first, blank)

    def _format(self, value: Any, *args: Any, **kwargs: Any) -> str:
        if args and kwargs:
            raise jinja2.FilterArgumentError("format takes positional or keyword arguments, not both")
        return self._percent(str(value), kwargs or args)

    @jinja2.pass_eval_context
    def _replace(self, eval_context: Any, value: Any, old: Any, new: Any, count: int | None = None) -> str:
        text = str(value)
        self.budget.build(_replaced_size(text, str(old), str(new), -1 if count is None else count))
        return self._builtin("replace")(eval_context, text, old, new, count)

    @jinja2.pass_eval_context
    def _join(self, eval_context: Any, value: Any, separator: str = "", attribute: Any = None) -> str:
        items = list(self._loop(value))
        if attribute is None:
            self.budget.build(sum(_size(item) for item in items) + len(str(separator)) * len(items))
        result = self._builtin("join")(eval_context, items, separator, attribute)
        self.budget.build(len(result))
        return result

    def _batch(self, value: Any, linecount: int, fill_with: Any = None) -> Iterator[list[Any]]:
        if _is_int(linecount):
            self.budget.build(linecount, "a list")
        return self._builtin("batch")(value, linecount, fill_with)

    def _slice(self, value: Any, slices: int, fill_with: Any = None) -> Iterator[list[Any]]:
        if _is_int(slices):
            self.budget.build(slices, "a list")
        return self._builtin("slice")(value, slices, fill_with)

    def _tojson(self, value: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None,
                sort_keys: bool = False) -> str:
        """Jinja's ``tojson`` as transformers overrides it (plain JSON, HTML characters
        unescaped), encoded piece by piece so that a large value stops at the bound."""
        if _is_int(indent):
            self.budget.build(indent)
        encoder = json.JSONEncoder(ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                                   sort_keys=sort_keys)
        pieces, total = [], 0
        for piece in encoder.iterencode(value):
            total += len(piece)
            if total > TEXT_LIMIT:
                self.budget.build(total)  # refused
            pieces.append(piece)
        self.budget.build(total)
        return "".join(pieces)

    def _pprint(self, value: Any) -> str:
        self.budget.build(2 * _size(value))
        return pformat(value)

    def _string(self, value: Any) -> str:
        self.budget.build(_size(value))
        return self._builtin("string")(value)

    def _builtin(self, name: str) -> Callable[..., Any]:
        return jinja2.filters.FILTERS[name]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _replaced_size(text: str, old: Any, new: Any, count: Any) -> int:
    if not (isinstance(old, str) and isinstance(new, str)):
        return len(text)
    found = text.count(old) if old else len(text) + 1
    if _is_int(count) and count >= 0:
        found = min(found, count)
    return len(text) + found * max(0, len(new) - len(old))


__all__ = ["BUILT_LIMIT", "RENDER_SECONDS", "STEP_LIMIT", "TEXT_LIMIT", "BoundedEnvironment", "TemplateBound"]


def _bound_power(left: Any, right: Any) -> None:
    """``left ** right`` refused before it computes an integer past the bound."""
    if _is_int(left) and _is_int(right) and right > 0 and abs(left) > 1:
        if max(1, abs(left).bit_length()) * right > INT_BITS_LIMIT:
            raise TemplateBound(f"it would compute an integer of more than {INT_BITS_LIMIT:,} bits")


# What a str method called in a template would build, in characters (None: nothing to bound).
def _padded_size(text: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int | None:
    width = args[0] if args else kwargs.get("width", 0)
    return max(len(text), width) if _is_int(width) else None


def _expanded_size(text: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int | None:
    size = args[0] if args else kwargs.get("tabsize", 8)
    return len(text) + text.count("\t") * max(0, size) if _is_int(size) else None


def _replace_size(text: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int | None:
    if len(args) < 2:
        return None
    return _replaced_size(text, args[0], args[1], args[2] if len(args) > 2 else -1)


def _join_size(text: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int | None:
    items = args[0] if args else None
    if not isinstance(items, (list, tuple)):
        return None
    return sum(_size(item) for item in items) + len(text) * len(items)


def _translate_size(text: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int | None:
    if not (args and isinstance(args[0], dict)):
        return None
    longest = max((_size(item) for item in args[0].values()), default=1)
    return len(text) * max(1, longest)


_STR_METHOD_SIZES: dict[str, Callable[[str, tuple[Any, ...], dict[str, Any]], int | None]] = {
    "center": _padded_size, "ljust": _padded_size, "rjust": _padded_size, "zfill": _padded_size,
    "expandtabs": _expanded_size, "replace": _replace_size, "join": _join_size,
    "translate": _translate_size,
}
