"""The package files that `minigpt-tui train --preset tiny --steps 2` enters on its way to a
saved checkpoint, counted with ``sys.settrace``: ``.venv/bin/python tools/call_path.py``.

Prints how many distinct files are entered and how many times a call enters a file again
after having left it for another (a measure of how far the path jumps back and forth)."""

from __future__ import annotations

import sys
import tempfile
import threading
from types import FrameType
from typing import Any

from minigpt_tui import cli

PACKAGE = "/minigpt_tui/"


def main() -> None:
    entered: list[str] = []

    def tracer(frame: FrameType, event: str, _arg: Any) -> None:
        name = frame.f_code.co_filename
        if event == "call" and PACKAGE in name:
            name = name.split(PACKAGE, 1)[1]
            if not entered or entered[-1] != name:
                entered.append(name)

    with tempfile.TemporaryDirectory() as runs:
        sys.settrace(tracer)
        threading.settrace(tracer)
        try:
            cli.main(["train", "--preset", "tiny", "--steps", "2", "--runs-dir", runs, "--json"])
        except SystemExit:
            pass
        finally:
            sys.settrace(None)
            threading.settrace(None)  # type: ignore[arg-type]
    distinct = set(entered)
    print(f"files entered: {len(distinct)}; entries into a file already left: {len(entered) - len(distinct)}",
          file=sys.stderr)


if __name__ == "__main__":
    main()
