"""``generate``, ``probes`` and ``infer``: next-token decisions over a saved model, headless.

All three are served by the engine's :class:`DecisionStepper`; there is no other
generation loop. Numbers are read here (not by argparse) so that every bad value gives the
same one-line error and exit status 1.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rich.table import Table
from rich.text import Text

from minigpt_tui.commands.common import (
    emit_json,
    generation_number,
    output_console,
    runs_dir_from_args,
)
from minigpt_tui.commands.insight import (
    add_insight_arguments,
    insight_request_from_args,
    print_insights,
)
from minigpt_tui.engine.core.errors import GenerationError
from minigpt_tui.engine.core.files import check_user_output, write_file
from minigpt_tui.engine.core.printable import escape_controls
from minigpt_tui.engine.session.generation_runs import (
    ProbeRun,
    TraceRequest,
    generate_trace,
    generation_rules,
    infer_record,
)
from minigpt_tui.engine.session.opening import open_model
from minigpt_tui.engine.session.steering import SteeringRequest

MODEL_HELP = ("a model file, a checkpoint folder, RUN:best / RUN:latest from the runs directory, "
              "a transformers model folder (gpt2, gpt_neo, gpt_neox, llama, qwen2), a GGUF file "
              "(llama, qwen2, gpt2) or a nanoGPT ckpt.pt")


def add_dtype_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dtype", choices=("float32", "float64"), default=None,
                        help="compute type for a model from elsewhere (default float32); ours keep their own")
    parser.add_argument("--tokenizer", metavar="FILE", default=None,
                        help="a tokenizer.json or meta.pkl for a nanoGPT ckpt.pt without meta.pkl beside it")


def register(subparsers: argparse._SubParsersAction) -> None:
    generate = subparsers.add_parser("generate", help="step through generation, one decision per row")
    generate.add_argument("--model", required=True, help=MODEL_HELP)
    add_dtype_flag(generate)
    generate.add_argument("--prompt", required=True, help="prompt text (encoded once, BOS prepended)")
    _add_rule_arguments(generate, several_temperatures=False)
    generate.add_argument("--top", default="3", metavar="N", help="alternatives kept per decision (default 3)")
    generate.add_argument("--kv-cache", action=argparse.BooleanOptionalAction, default=None,
                          help="reuse keys/values (the default) or, with --no-kv-cache, recompute the whole prefix "
                               "each decision (the default in float64, whose bits it keeps)")
    generate.add_argument("--attention", action="store_true", help="record the last position's attention (JSON)")
    generate.add_argument("--stop-at-context", action="store_true",
                          help="stop when the prefix fills the model's context (stop: context) instead of going on "
                               "over a sliding window of its last positions")
    add_insight_arguments(generate)
    _add_steering_arguments(generate)
    generate.add_argument("--json", action="store_true", help="print the whole trace as JSON")
    generate.add_argument("--trace-out", metavar="FILE",
                          help="also write the trace as JSON to FILE (a new file unless --force)")
    generate.add_argument("--force", action="store_true", help="replace an existing --trace-out or --save-steering file")
    generate.add_argument("--full-logits", action="store_true",
                          help="keep each decision's logits, both distributions over the whole vocabulary and the "
                               "retained and ineligible ids in the trace (megabytes a decision on a large vocabulary)")
    generate.add_argument("--runs-dir", dest="runs_dir_sub", metavar="DIR", help="runs directory")
    generate.set_defaults(handler=run_generate)

    probes = subparsers.add_parser("probes", help="run a versioned prompt file against models and rules")
    probes.add_argument("--model", action="append", required=True, help=MODEL_HELP + " (repeat for several)")
    add_dtype_flag(probes)
    probes.add_argument("--prompts", metavar="FILE", help="a probes JSON file (default: the bundled one)")
    _add_rule_arguments(probes, several_temperatures=True)
    probes.add_argument("--json", action="store_true", help="print the results as JSON")
    probes.add_argument("--out", metavar="FILE", help="also write the results as JSON to FILE (a new file unless --force)")
    probes.add_argument("--force", action="store_true", help="replace an existing --out file")
    probes.add_argument("--runs-dir", dest="runs_dir_sub", metavar="DIR", help="runs directory")
    probes.set_defaults(handler=run_probes_command)

    infer = subparsers.add_parser("infer", help="the greedy continuation of a prompt as one record (ids, bytes, stop reason)")
    infer.add_argument("--model", required=True, help=MODEL_HELP)
    add_dtype_flag(infer)
    infer.add_argument("--prompt", required=True, help="prompt text")
    infer.add_argument("--tokens", default="3", metavar="N", help="new-token budget (default 3)")
    infer.add_argument("--json", action="store_true", help="print one JSON object")
    infer.add_argument("--runs-dir", dest="runs_dir_sub", metavar="DIR", help="runs directory")
    infer.set_defaults(handler=run_infer)


def _add_steering_arguments(parser: argparse.ArgumentParser) -> None:
    steer = parser.add_argument_group("steering (a direction added at a site in every decision's forward)")
    steer.add_argument("--steer-from", nargs=2, metavar=("A", "B"),
                       help="the direction: prompt A's values at --steer-site minus prompt B's (BOS prepended), "
                            "at each prompt's last position unless --steer-reduce mean")
    steer.add_argument("--steer-file", metavar="FILE", help="the direction saved in a steering file (--save-steering)")
    steer.add_argument("--steer-site", metavar="SITE",
                       help="where to read and add it, e.g. blocks.0.hook_resid_post (for a file: another site than "
                            "the file's)")
    steer.add_argument("--steer-coefficient", metavar="C",
                       help="the direction's multiple added (default 1; 0 adds nothing: the unsteered bits)")
    steer.add_argument("--steer-positions", metavar="WHICH",
                       help="all (default), prompt (its positions, BOS included) or generated (the prompt's last "
                            "position and every generated one: those whose output is a decision)")
    steer.add_argument("--steer-reduce", metavar="HOW",
                       help="how a contrast reads each prompt: last (its last position, the default) or mean "
                            "(over its positions)")
    steer.add_argument("--steer-unit", action="store_true", help="scale a contrast direction to norm 1")
    steer.add_argument("--save-steering", metavar="FILE", help="also save the contrast direction as a steering file")
    steer.add_argument("--steer-compare", action="store_true",
                       help="also generate without the steering and print both decisions side by side")


def _add_rule_arguments(parser: argparse.ArgumentParser, *, several_temperatures: bool) -> None:
    parser.add_argument("--max-new-tokens", default="24", metavar="N", help="new-token budget (default 24)")
    parser.add_argument("--greedy", action="store_true",
                        help="highest eligible logit, ties to the smaller id (the default)")
    if several_temperatures:
        parser.add_argument("--temperature", nargs="+", metavar="T",
                            help="sample at each temperature (with --greedy: greedy as well)")
    else:
        parser.add_argument("--temperature", metavar="T", help="sample at this temperature")
    parser.add_argument("--top-k", metavar="K", help="sampling: keep the K highest eligible logits")
    parser.add_argument("--top-p", metavar="P", help="sampling: keep the shortest prefix with mass >= P")
    parser.add_argument("--seed", default="31415", metavar="S", help="sampling seed (default 31415)")
    parser.add_argument("--forbid", action="append", default=[], metavar="ID",
                        help="an id that may not be chosen, besides BOS (repeatable)")


# -- reading arguments -------------------------------------------------------------------
def rules_from_args(args: argparse.Namespace) -> list[Any]:
    """The rules asked for: greedy by default; one sampling rule per temperature."""
    budget = generation_number(args.max_new_tokens, "--max-new-tokens", int)
    top_k = generation_number(args.top_k, "--top-k", int)
    top_p = generation_number(args.top_p, "--top-p", float)
    seed = generation_number(args.seed, "--seed", int)
    forbidden = tuple(generation_number(value, "--forbid", int) for value in args.forbid)
    temperatures = _temperatures_from_args(args)
    _check_rule_choice(args, temperatures, top_k, top_p)
    return generation_rules(greedy=args.greedy, temperatures=temperatures, top_k=top_k, top_p=top_p, seed=seed,
                            budget=budget, forbidden=forbidden)


def _temperatures_from_args(args: argparse.Namespace) -> list[float]:
    """``--temperature``: one value, several (a list), or none."""
    temperatures = args.temperature
    if isinstance(temperatures, str):
        temperatures = [temperatures]
    return [generation_number(t, "--temperature", float) for t in temperatures or []]


def _check_rule_choice(args: argparse.Namespace, temperatures: list[float], top_k: Any, top_p: Any) -> None:
    """Greedy and sampling options that contradict each other are refused."""
    several = isinstance(args.temperature, list)
    if temperatures and args.greedy and not several:
        raise GenerationError("choose either --greedy or --temperature, not both")
    if not temperatures and (top_k is not None or top_p is not None):
        raise GenerationError("--top-k and --top-p apply to sampling: give --temperature too")


STEERING_OPTIONS = ("--steer-site", "--steer-coefficient", "--steer-positions", "--steer-reduce", "--steer-unit",
                    "--save-steering", "--steer-compare")


def steering_from_args(args: argparse.Namespace) -> SteeringRequest | None:
    """The steering asked for, or None; a steering option without a direction is refused."""
    if args.steer_from is None and args.steer_file is None:
        given = [flag for flag in STEERING_OPTIONS if getattr(args, flag[2:].replace("-", "_")) not in (None, False)]
        if given:
            raise GenerationError(f"{given[0]} steers: give the direction with --steer-from A B or --steer-file FILE")
        return None
    coefficient = generation_number(args.steer_coefficient, "--steer-coefficient", float)
    contrast = None if args.steer_from is None else (_prompt(args.steer_from[0], "--steer-from"),
                                                     _prompt(args.steer_from[1], "--steer-from"))
    return SteeringRequest(contrast=contrast, file=args.steer_file, site=args.steer_site,
                           coefficient=1.0 if coefficient is None else coefficient,
                           positions=args.steer_positions or "all", reduce=args.steer_reduce or "last",
                           unit=args.steer_unit,
                           save=args.save_steering, replace=args.force, compare=args.steer_compare)


def load_model(spec: str, args: argparse.Namespace) -> Any:
    """Resolve FILE | checkpoint folder | RUN:best | RUN:latest | a transformers folder and
    open the model."""
    return open_model(spec, runs_dir_from_args(args), dtype=getattr(args, "dtype", None),
                      tokenizer=getattr(args, "tokenizer", None))


def _write_json(path_text: str, data: Any, force: bool) -> Path:
    return write_file(Path(path_text), (json.dumps(data, indent=2) + "\n").encode("utf-8"), replace=force)


def _check_output(path_text: str | None, force: bool) -> None:
    """Refuse an unusable output path before any model is loaded."""
    if path_text:
        check_user_output(Path(path_text), replace=force)


def _prompt(text: str, option: str = "--prompt") -> str:
    """The prompt as given; bytes that are not UTF-8 (kept by the command line as lone
    surrogates) are refused in one line."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        raise GenerationError(f"{option} is not valid UTF-8 text (byte {err.start} of the argument)") from None
    return text


# -- generate ----------------------------------------------------------------------------
def run_generate(args: argparse.Namespace) -> int:
    (rule,) = rules_from_args(args)
    top = generation_number(args.top, "--top", int)
    if top < 1:
        raise GenerationError(f"--top must be at least 1, got {top}")
    steering = steering_from_args(args)
    request = TraceRequest(_prompt(args.prompt), rule, top, args.kv_cache, args.attention, args.stop_at_context,
                           args.full_logits, insight_request_from_args(args), steering)
    _check_output(args.trace_out, args.force)
    if steering is not None:
        steering.check_outputs()
    generated = generate_trace(load_model(args.model, args), request)
    if args.trace_out:
        _write_json(args.trace_out, generated.trace, args.force)
    if args.json:
        emit_json(generated.trace)
    else:
        print_decisions(generated.stepper)
        print_insights(generated.stepper.decisions, generated.insights, request.insight)
        print_steering(generated.trace)
    return 0


def print_steering(trace: dict[str, Any]) -> None:
    """The steering a trace records and, when compared, each step without and with it."""
    steering = trace.get("steering")
    if steering is None:
        return
    console = output_console()
    source = steering["source"]
    origin = (f"contrast {_shown(source['a'])} - {_shown(source['b'])} ({source['reduce']}"
              f"{', unit' if source['unit'] else ''})" if source.get("kind") == "contrast"
              else f"file {source.get('path')}")
    console.print(Text(escape_controls(
        f"steering: {steering['coefficient']:g} x direction at {steering['site']} · positions {steering['positions']}"
        f" · norm {steering['direction_norm']:.6g} · sha256 {steering['direction_sha256'][:16]} · {origin}")))
    unsteered = trace.get("unsteered")
    if unsteered is not None:
        console.print(_compared_table(unsteered["compared"]))
        console.print(Text(f"output without: {_shown(unsteered['output']['display'])}"))


def _compared_table(rows: list[dict[str, Any]]) -> Table:
    table = Table(title="decisions without and with the steering (each follows its own choices)")
    for name in ("step", "without: id", "piece", "p", "", "with: id", "piece", "p"):
        table.add_column(name, justify="left" if name in ("piece", "") else "right")
    for row in rows:
        cells: list[Any] = [str(row["step"])]
        for side in ("without", "with"):
            chosen = row[side]
            cells += (["", "", ""] if chosen is None else
                      [str(chosen["id"]), Text(_shown(chosen["piece"])), f"{chosen['probability']:.6f}"])
            if side == "without":
                cells.append("=" if row["same"] else "≠")
        table.add_row(*cells)
    return table


def _shown(piece: str) -> str:
    """A piece with its boundaries visible: quoted, spaces kept, control characters escaped."""
    return escape_controls(json.dumps(piece, ensure_ascii=False))


def print_decisions(stepper: Any) -> None:
    console = output_console()
    trace_model = stepper.model_path or "(in memory)"
    console.print(Text(escape_controls(f"model {trace_model}")))
    prompt_pieces = " ".join(_shown(stepper.tokenizer.piece_text(i)) for i in stepper.prompt_ids)
    console.print(Text(f"prompt ids {list(stepper.prompt_ids)}: {prompt_pieces}"))
    console.print(_decisions_table(stepper))
    out = stepper.output()
    window = stepper.window_note()
    console.print(Text(f"stop: {stepper.stop_reason}" + (f" · {window}" if window else "")))
    label = "output" if out["valid_utf8"] else "output (display only: invalid UTF-8 shown as U+FFFD)"
    console.print(Text(f"{label}: {_shown(out['display'])}"))
    console.print(Text(f"generated ids {out['generated_ids']}"))


def _decisions_table(stepper: Any) -> Table:
    table = Table(title=f"decisions · {stepper.rule.label} · budget {stepper.rule.max_new_tokens}")
    for name in ("step", "id", "piece", "logit", "raw p", "selection p", "rank"):
        table.add_column(name, justify="right" if name not in ("piece",) else "left")
    # One runner-up a line: a narrow terminal wraps between them, never inside a piece or a number.
    table.add_column("runner-ups (raw p)", overflow="fold")
    for d in stepper.decisions:
        chosen = d.chosen
        others = "\n".join(f"{_shown(c.piece.text)} {c.raw_probability:.4f}"
                            for c in d.alternatives if c.id != chosen.id)
        table.add_row(str(d.step) + (" forced" if d.forced else ""), str(chosen.id), Text(_shown(chosen.piece.text)),
                      f"{chosen.logit:.6f}", f"{chosen.raw_probability:.6f}",
                      f"{chosen.selection_probability:.6f}", str(chosen.rank), Text(others))
    return table


# -- probes ------------------------------------------------------------------------------
def run_probes_command(args: argparse.Namespace) -> int:
    rules = rules_from_args(args)
    _check_output(args.out, args.force)
    probe_run = ProbeRun(tuple(rules), args.prompts)  # a bad file is refused before any model is loaded
    result = probe_run.run([(spec, load_model(spec, args)) for spec in args.model])
    if args.out:
        _write_json(args.out, result, args.force)
    if args.json:
        emit_json(result)
    else:
        print_probes(result)
    return 0


def print_probes(result: dict[str, Any]) -> None:
    """One table per rule, one column per model, one row per probe (as seed 003's 21.6/21.7)."""

    console = output_console()
    source = result["probes"]["source"]
    models = [m["label"] for m in result["models"]]
    for r, rule in enumerate(result["rules"]):
        console.print(_probe_table(result, r, rule, models, source))
    count = result["probes"]["count"]
    for key, matched in result["matches"].items():
        console.print(Text(f"{key}: {matched} of {count} match (exact bytes, then EOS)"))


def _probe_table(result: dict[str, Any], r: int, rule: dict[str, Any], models: list[str], source: str) -> Table:
    """The table of rule ``r``: one column per model, one row per probe."""
    table = Table(title=Text(escape_controls(f"probes · {rule['label']} · {source}")), show_lines=True)
    table.add_column("probe / prompt", overflow="fold")
    table.add_column("last token", overflow="fold")
    table.add_column("expected", overflow="fold")
    for label in models:
        table.add_column(Text(escape_controls(label)), overflow="fold")
    for row in result["rows"]:
        cells = [_probe_cell(row["results"][m * len(result["rules"]) + r]) for m in range(len(models))]
        last = row["prompt_last_token"]
        table.add_row(Text(f"{escape_controls(row['name'])}\n{_shown(row['prompt'])}"),
                      Text(f"{last['id']} {_shown(last['piece'])}"), Text(_shown(row["expected"])), *cells)
    return table


def _probe_cell(cell: dict[str, Any]) -> Text:
    """One model's result on one probe: its error, or a mark, the completion and why it stopped."""
    if "error" in cell:
        return Text(f"error: {cell['error']}", style="red")
    stop = "" if cell["stop_reason"] == "eos" else f" [{cell['stop_reason']}]"
    mark = "✓" if cell["match"] else "✗"
    return Text(f"{mark} {_shown(cell['completion'])}{stop}", style="green" if cell["match"] else "")


# -- infer -------------------------------------------------------------------------------
def run_infer(args: argparse.Namespace) -> int:
    budget = generation_number(args.tokens, "--tokens", int)
    inferred = infer_record(load_model(args.model, args), _prompt(args.prompt), budget)
    result = inferred.record
    if args.json:
        emit_json(result)
    else:
        console = output_console()

        for key in ("model_path", "model_id", "prompt_ids", "generated_ids", "generated_bytes", "stop_reason"):
            console.print(Text(escape_controls(f"{key}: {result[key]}")))
        console.print(Text(f"tied_alias: {'yes' if result['tied_alias'] else 'no'}"))
        shown = inferred.display if result["valid_utf8"] else f"{inferred.display} (display only: invalid UTF-8)"
        console.print(Text(f"text: {_shown(shown)}"))
    return 0
