"""Run every benchmarks/bench_*.py in its own process, one after another."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

here = Path(__file__).resolve().parent
selected = sys.argv[1:]
for script in sorted(here.glob("bench_*.py")):
    if selected and not any(s in script.stem for s in selected):
        continue
    print(f"== {script.name}", flush=True)
    subprocess.run([sys.executable, str(script)], check=False)
