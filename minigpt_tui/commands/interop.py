"""``export`` and ``convert``: a portable model to a transformers folder and back.

Options are validated here, not by argparse, so that every refusal is one line and exit
status 1 (argparse's own errors exit 2 with a usage block).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from minigpt_tui.commands.common import emit_json, runs_dir_from_args
from minigpt_tui.commands.task_progress import stage_progress, task_progress
from minigpt_tui.engine.session.conversion import (
    DEFAULT_QUANT,
    check_export,
    convert_folder,
    export_gguf_file,
    export_transformers,
    open_for_export,
)

MODEL_HELP = ("a model file, a checkpoint folder, RUN:best / RUN:latest from the runs directory, "
              "a transformers folder or a GGUF file")


def register(subparsers: argparse._SubParsersAction) -> None:
    export = subparsers.add_parser("export", help="write a model as a transformers folder or a GGUF file")
    export.add_argument("--model", required=True, help=MODEL_HELP)
    export.add_argument("--format", default="hf",
                        help="hf: a transformers folder (the default); gguf: one file for llama.cpp and Ollama")
    export.add_argument("--quant", help=f"GGUF weights: f32, {DEFAULT_QUANT} (the default) or q8_0")
    export.add_argument("--out", required=True, metavar="PATH", help="new folder (hf) or file (gguf) to create")
    export.add_argument("--json", action="store_true", help="print one JSON object")
    export.add_argument("--runs-dir", dest="runs_dir_sub", metavar="DIR", help="runs directory")
    export.set_defaults(handler=run_export)

    convert = subparsers.add_parser("convert", help="turn a transformers folder of any family generate opens into a "
                                                    "model file")
    convert.add_argument("--hf", required=True, metavar="DIR", help="transformers folder (or its sharded index)")
    convert.add_argument("--out", required=True, metavar="FILE", help="new model file to create")
    convert.add_argument("--tokenizer-from", metavar="FILE",
                         help="take the tokenizer from a model file, checkpoint, RUN spec or tokenizer.json")
    convert.add_argument("--json", action="store_true", help="print one JSON object")
    convert.add_argument("--runs-dir", dest="runs_dir_sub", metavar="DIR", help="runs directory")
    convert.set_defaults(handler=run_convert)


def run_export(args: argparse.Namespace) -> int:
    out = Path(args.out).expanduser()
    quant = check_export(args.format, args.quant, out)
    with stage_progress(f"opening {args.model}", enabled=not args.json):
        portable = open_for_export(args.model, runs_dir_from_args(args))
    if args.format == "gguf":
        return _report_gguf(args, portable, out, quant or DEFAULT_QUANT)
    with stage_progress(f"writing {out}", enabled=not args.json):
        result = export_transformers(portable, out)
    if args.json:
        emit_json({**result.to_json(), "source": str(portable.path)})
    else:
        print(f"exported {portable.path} -> {result.path}")
        print(f"  {result.architecture}, {result.dtype}, {result.tensors} tensors, {result.scalars} parameters")
        print(f"  files: {', '.join(result.files)}")
        print(f"  load with: AutoModelForCausalLM.from_pretrained({str(result.path)!r})")
    return 0


def _report_gguf(args: argparse.Namespace, portable: Any, out: Path, quant: str) -> int:
    with task_progress("converting tensors", enabled=not args.json, unit="tensor") as advance:
        result = export_gguf_file(portable, out, quant, progress=advance)
    if args.json:
        emit_json({**result.to_json(), "source": str(portable.path)})
    else:
        print(f"exported {portable.path} -> {result.path}")
        types = ", ".join(f"{count} {name}" for name, count in result.types)
        print(f"  GGUF {result.architecture}, {result.quant}, {result.tensors} tensors ({types}), "
              f"{result.bytes:,} bytes")
        print(f"  run with: llama-cli -m {str(result.path)!r}   (Ollama: FROM {result.path} in a Modelfile)")
    return 0


def run_convert(args: argparse.Namespace) -> int:
    with stage_progress(f"converting {args.hf}", enabled=not args.json):
        result = convert_folder(args.hf, args.out, args.tokenizer_from, runs_dir_from_args(args))
    data = result.to_json()
    if args.json:
        emit_json(data)
    else:
        print(f"converted {result.source} -> {result.path}")
        head = "tied table: one parameter" if result.tied_head else "an untied head of its own"
        print(f"  {result.architecture} as {result.family}, {result.dtype}, {result.tensors} tensors, "
              f"{result.scalars} parameters, {head}")
        print(f"  model identity {result.model_identity}")
        if data["identity_matches_export"] is not None:
            same = "the same as" if data["identity_matches_export"] else "DIFFERENT from"
            print(f"  {same} the identity recorded when it was exported")
    return 0
