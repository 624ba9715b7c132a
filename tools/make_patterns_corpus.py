"""Write assets/corpus/patterns.txt: a larger original teaching corpus for the small preset.

Deterministic (seeded) combinations of three record kinds — a clue and its answer, an
update whose answer is the new value, and a comparison — so that a model can generalize
to held-out combinations rather than only memorize lines. Run from the repository root:

    .venv/bin/python tools/make_patterns_corpus.py
"""

from __future__ import annotations

import random
from pathlib import Path

OBJECTS = ["key", "box", "cup", "hat", "door", "ball", "book", "lamp", "coat", "kite", "vase", "bell"]
COLOURS = ["red", "blue", "green", "black", "white", "gold", "pink", "gray", "brown", "teal"]
NOUNS = ["limit", "price", "count", "speed", "score", "level", "width", "total"]
NAMES = ["Ada", "Ben", "Cleo", "Dev", "Eli", "Fay", "Gus", "Ivy"]
RECORDS = 1600


def main() -> None:
    rng = random.Random(20261129)
    lines: list[str] = []
    while len(lines) < RECORDS:
        kind = rng.randrange(3)
        if kind == 0:
            obj, colour = rng.choice(OBJECTS), rng.choice(COLOURS)
            lines.append(f"The {obj} is {colour}. Answer: {colour}.")
        elif kind == 1:
            noun = rng.choice(NOUNS)
            old, new = rng.sample(range(10, 1000), 2)
            lines.append(f"Old {noun}: {old}. New {noun}: {new}. Answer: {new}.")
        else:
            a, b = rng.sample(NAMES, 2)
            x, y = rng.sample(range(1, 100), 2)
            winner = a if x > y else b
            lines.append(f"{a} has {x}. {b} has {y}. Most: {winner}.")
    target = Path(__file__).resolve().parents[1] / "minigpt_tui/assets/corpus/patterns.txt"
    target.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {len(lines)} records to {target}")


if __name__ == "__main__":
    main()
