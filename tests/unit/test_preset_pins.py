"""Today's presets pinned: records, identities and digests recorded from the code before the
model was rebuilt out of declared parts. A change to the model, the trainer or the portable
file that moves one bit of these fails here.

Recorded with ``python tests/unit/test_preset_pins.py --record`` (only when a change is meant
to alter them; say so in the CHANGELOG). Float results depend on the CPU's kernels, so the
file holds one set of pins per kind of CPU (``--record`` adds or replaces this one's); on any
machine,
``test_legacy_model.py`` checks the rebuilt model against the one it replaced, bit for bit.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from checkpoint_support import make_trainer  # noqa: E402

from minigpt_tui.engine.formats.portable import portable_payload  # noqa: E402
from minigpt_tui.engine.analysis.lens import inspect_decision  # noqa: E402

PINS = Path(__file__).parents[1] / "fixtures" / "preset-pins.json"
CASES = [("tiny", "exact"), ("mini", "exact"), ("small", "exact"), ("text", "exact"),
         ("mini", "fast"), ("small", "fast"), ("text", "fast")]
PROMPT = "the cat sat on"


def _digest(value: object) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


def _tensor_digest(tensor: torch.Tensor) -> str:
    return hashlib.sha256(tensor.detach().contiguous().numpy().tobytes()).hexdigest()


def measure(preset: str, precision: str) -> dict[str, str]:
    overrides = {"train": {"precision": precision, "threads": 1}}
    trainer = make_trainer(preset, **overrides)
    records = [trainer.update().exact_fields() for _ in range(2)]
    model, tokenizer = trainer.model, trainer.tokenizer
    identity = portable_payload(model, tokenizer).identity()
    model.eval()
    ids = tokenizer.encode_prompt(PROMPT)[: model.config.context]
    with torch.no_grad():
        logits = model(torch.tensor([ids]), return_attention=True).logits
    insight = inspect_decision(model, tokenizer, ids, int(logits[0, -1].argmax()), lens=True,
                               contributions=True, pattern=(0, 0))
    return {
        "records": _digest([{k: (v.hex() if isinstance(v, float) else v) for k, v in r.items()} for r in records]),
        "state": trainer.state_digest(),
        "identity": identity,
        "logits": _tensor_digest(logits),
        "insight": _digest(_numbers_of(insight.to_json())),
    }


def _numbers_of(insight: dict) -> dict:
    """The insight record without the labels added after the first pins were recorded (the
    precision's name, the display names of parts and lens rows, each beside the numbers it
    names): the digest covers its numbers and pieces."""
    for part in [insight.get("contributions") or {}, *(insight.get("candidate_contributions") or ())]:
        part.pop("dtype", None)
        part.pop("parts", None)
    for row in insight.get("lens") or ():
        if isinstance(row, dict):
            row.pop("site", None)
    return insight


def _capability() -> str:
    """The CPU the float results depend on: its model (MKL takes other paths on other
    vendors' chips) and the kernels torch dispatches to."""
    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model} / {torch.backends.cpu.get_cpu_capability()}"


@pytest.fixture(scope="module")
def pins() -> dict:
    return json.loads(PINS.read_text())


@pytest.mark.parametrize(("preset", "precision"), CASES)
def test_presets_keep_every_bit(pins, preset, precision):
    cpu = _capability()
    if cpu not in pins["cpus"]:
        pytest.skip(f"pins recorded on {sorted(pins['cpus'])}; this CPU is {cpu}")
    pinned = pins["cpus"][cpu]["cases"][f"{preset}/{precision}"]
    assert {"records", "state", "identity", "logits"} <= set(pinned)  # what training decides is always pinned
    measured = measure(preset, precision)
    assert {key: measured[key] for key in pinned} == pinned


if __name__ == "__main__" and sys.argv[1:] == ["--record"]:
    recorded = json.loads(PINS.read_text())["cpus"] if PINS.exists() else {}
    recorded[_capability()] = {"torch": torch.__version__, "cases": {f"{p}/{q}": measure(p, q) for p, q in CASES}}
    PINS.write_text(json.dumps({"cpus": recorded}, indent=1, sort_keys=True) + "\n")
    print(f"wrote {PINS}")
