"""``export`` and ``convert``: a portable model to a transformers folder and back.

Options are validated here, not by argparse, so that every refusal is one line and exit
status 1 (argparse's own errors exit 2 with a usage block).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from minigpt_tui.commands.common import emit_json, runs_dir_from_args
from minigpt_tui.commands.task_progress import stage_progress, task_progress
from minigpt_tui.engine.core.errors import ConfigError
from minigpt_tui.engine.formats.hf_export import (
    FORMATS,
    export_hf,
    prepare_output_folder,
)
from minigpt_tui.engine.session.opening import is_foreign_model, open_model
from minigpt_tui.engine.session.runs import resolve_model_file
from minigpt_tui.engine.models.gguf_export import QUANTS, export_gguf
from minigpt_tui.engine.models.hf_models import convert_hf

DEFAULT_QUANT = "f16"  # GGUF weights when --quant is not given
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

    convert = subparsers.add_parser("convert", help="turn a transformers llama/gpt2 folder into a model file")
    convert.add_argument("--hf", required=True, metavar="DIR", help="transformers folder (or its sharded index)")
    convert.add_argument("--out", required=True, metavar="FILE", help="new model file to create")
    convert.add_argument("--tokenizer-from", metavar="FILE",
                         help="take the tokenizer from a model file, checkpoint, RUN spec or tokenizer.json")
    convert.add_argument("--json", action="store_true", help="print one JSON object")
    convert.add_argument("--runs-dir", dest="runs_dir_sub", metavar="DIR", help="runs directory")
    convert.set_defaults(handler=run_convert)


def _model_path(spec: str, args: argparse.Namespace) -> Path:
    path = Path(spec).expanduser()
    if path.is_dir() and (path / "model.safetensors").is_file():
        return path / "model.safetensors"
    return resolve_model_file(spec, runs_dir_from_args(args))


def run_export(args: argparse.Namespace) -> int:
    from minigpt_tui.engine.models.model_file import (  # deferred: imports torch
        load_portable_model,
    )

    if args.format not in (*FORMATS, "gguf"):
        raise ConfigError(f"--format {args.format!r} is not supported (choose from {', '.join((*FORMATS, 'gguf'))})")
    out = Path(args.out).expanduser()

    if args.quant is not None and args.format != "gguf":
        raise ConfigError(f"--quant applies to --format gguf only: --format {args.format} keeps the model's own dtype")
    if args.format == "gguf" and (args.quant or DEFAULT_QUANT) not in QUANTS:
        raise ConfigError(f"--quant {args.quant!r} is not supported (choose from {', '.join(QUANTS)})")
    prepare_output_folder(out)  # refuse before reading a large model

    with stage_progress(f"opening {args.model}", enabled=not args.json):
        if is_foreign_model(args.model):  # a transformers folder, GGUF file or nanoGPT checkpoint
            portable = open_model(args.model, runs_dir_from_args(args))
        else:
            portable = load_portable_model(_model_path(args.model, args))
    if args.format == "gguf":
        return _report_gguf(args, portable, out)
    with stage_progress(f"writing {out}", enabled=not args.json):
        result = export_hf(portable, out)
    if args.json:
        emit_json({**result.to_json(), "source": str(portable.path)})
    else:
        print(f"exported {portable.path} -> {result.path}")
        print(f"  {result.architecture}, {result.dtype}, {result.tensors} tensors, {result.scalars} parameters")
        print(f"  files: {', '.join(result.files)}")
        print(f"  load with: AutoModelForCausalLM.from_pretrained({str(result.path)!r})")
    return 0


def _report_gguf(args: argparse.Namespace, portable: object, out: Path) -> int:
    with task_progress("converting tensors", enabled=not args.json, unit="tensor") as advance:
        result = export_gguf(portable, out, args.quant or DEFAULT_QUANT, progress=advance)  # type: ignore[arg-type]
    if args.json:
        emit_json({**result.to_json(), "source": str(portable.path)})  # type: ignore[attr-defined]
    else:
        print(f"exported {portable.path} -> {result.path}")  # type: ignore[attr-defined]
        types = ", ".join(f"{count} {name}" for name, count in result.types)
        print(f"  GGUF {result.architecture}, {result.quant}, {result.tensors} tensors ({types}), "
              f"{result.bytes:,} bytes")
        print(f"  run with: llama-cli -m {str(result.path)!r}   (Ollama: FROM {result.path} in a Modelfile)")
    return 0


def run_convert(args: argparse.Namespace) -> int:
    tokenizer = args.tokenizer_from
    if tokenizer is not None and not Path(tokenizer).expanduser().exists():
        tokenizer = _model_path(tokenizer, args)
    with stage_progress(f"converting {args.hf}", enabled=not args.json):
        result = convert_hf(args.hf, args.out, tokenizer_path=tokenizer)
    data = result.to_json()
    if args.json:
        emit_json(data)
    else:
        print(f"converted {result.source} -> {result.path}")
        print(f"  {result.architecture} as {result.family}, {result.dtype}, {result.tensors} tensors, "
              f"{result.scalars} parameters, tied table: one parameter")
        print(f"  model identity {result.model_identity}")
        if data["identity_matches_export"] is not None:
            same = "the same as" if data["identity_matches_export"] else "DIFFERENT from"
            print(f"  {same} the identity recorded when it was exported")
    return 0
