"""``ort-cffi-artifacts``: turn an ONNX model into training artifacts (``ort_cffi.artifacts``), and say what
was made trainable and what the training model now takes."""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from ort_cffi import __version__
from ort_cffi.artifacts import (
    ALL_PARAMETERS,
    ENV_PYTHON,
    MODEL_OUTPUTS,
    ArtifactsError,
    LossType,
    OptimType,
    check_generator,
    describe,
    generate_artifacts,
)
from ort_cffi.artifacts.options import GENERATORS, ONNX_RUNTIME, ORT_CFFI, chosen_generator
from ort_cffi.cli.args import in_flag_words, parameter_rows

DESCRIPTION = """\
Make ONNX Runtime training artifacts from an ONNX model, without torch: checkpoint,
training_model.onnx, eval_model.onnx and optimizer_model.onnx (plus artifacts.json, what
they were made from), as onnxruntime.training.artifacts.generate_artifacts writes them.

By default every floating-point initializer trains, the loss is cross-entropy on the
model's output (it adds an int64 'labels' input), the optimizer is AdamW, and the eval
model keeps the model's outputs next to the loss (to export an inference model later).
"""

EPILOG = f"""\
examples:
  ort-cffi-artifacts model.onnx --out artifacts
  ort-cffi-artifacts model.onnx --out artifacts --trainable 'fc2.*'      # only the last layer
  ort-cffi-artifacts model.onnx --out artifacts --loss mse --optimizer sgd
  ort-cffi-artifacts model.onnx --out artifacts --generator onnxruntime   # ONNX Runtime's own
  ort-cffi-artifacts --check-generator --generator onnxruntime  # does ONNX Runtime's import here

The generator is ort_cffi's own gradient builder, in this process, on every interpreter: it
needs onnx only (ort_cffi's [artifacts] extra). ONNX Runtime's own generator remains an option
(--generator onnxruntime) where it runs: in a child process, by this interpreter or the one
named by --python or ${ENV_PYTHON}, with ONNX Runtime's Python training layer (the training
wheel's on Python 3.8-3.12; on 3.13 the one `ort-cffi-runtime install` keeps).
"""

LOSSES = [t.option for t in LossType] + ["none"]
OPTIMIZERS = [t.option for t in OptimType] + ["none"]
SHOWN = 12  # trainable tensors listed one by one


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    """The command line of ``ort-cffi-artifacts`` (argparse exits 2 on a bad one)."""
    parser = argparse.ArgumentParser(prog="ort-cffi-artifacts", description=DESCRIPTION, epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", type=Path, nargs="?", metavar="MODEL.onnx", help="the inference model")
    parser.add_argument("--out", type=Path, metavar="DIR", help="artifacts folder (created if missing; required)")
    parser.add_argument("--trainable", nargs="+", metavar="PATTERN",
                        help="names or glob patterns of the parameters to train, by initializer name or, in a "
                        "torch dynamo export, by torch name ('encoder.layers.0.linear1.weight', 'classifier.*'); "
                        "default: every floating-point initializer a gradient reaches")
    parser.add_argument("--frozen", nargs="+", metavar="PATTERN",
                        help="names or patterns of parameters kept in the checkpoint but not trained")
    parser.add_argument("--frozen-rows", type=parameter_rows, action="append", metavar="NAME=ROWS",
                        help="rows of a trained parameter that stay as they are while the rest trains, along its "
                        "first axis: an embedding's padding row (torch's padding_idx, which the export loses), "
                        "e.g. 'embeddings.weight=0'; repeat for several parameters (ort_cffi's builder only)")
    parser.add_argument("--loss", choices=LOSSES, default=LossType.CrossEntropyLoss.option,
                        help="loss added on the model's output; none: the model's first output is the loss "
                        "(default: cross-entropy)")
    parser.add_argument("--loss-input", nargs="+", metavar="NAME",
                        help="the output the loss reads (needed when the model has several), then optionally "
                        "the name of the input the loss adds (default: labels or target)")
    parser.add_argument("--class-axis", type=int, metavar="AXIS",
                        help="the axis of the scores that holds the classes, for cross-entropy (default: found from "
                        "the operator that computes them, e.g. 2 for [N, T, vocabulary])")
    parser.add_argument("--optimizer", choices=OPTIMIZERS, default=OptimType.AdamW.option, help="default: adamw")
    parser.add_argument("--outputs", nargs="*", metavar="NAME",
                        help="outputs the eval model gives next to the loss (default: the model's outputs; "
                        "--outputs alone: none)")
    parser.add_argument("--nominal-checkpoint", action="store_true",
                        help="also write nominal_checkpoint (parameter shapes only)")
    parser.add_argument("--generator", choices=GENERATORS, default=None,
                        help="ort_cffi: its own gradient builder (the default); onnxruntime: ONNX Runtime's "
                        "generator (the default when --python is given)")
    parser.add_argument("--python", metavar="PYTHON",
                        help=f"interpreter that runs ONNX Runtime's generator (default: ${ENV_PYTHON}, else this one)")
    parser.add_argument("--no-check", action="store_true",
                        help="do not check the artifacts after writing them. The check opens the training, eval and "
                        "optimizer models in a training session over the shapes-only nominal checkpoint and holds the "
                        "checkpoint against the training model: it costs a few MiB whatever the model's size (on a "
                        "100M-parameter model the command peaks at 0.23x the model's size with it and without it; "
                        "training those artifacts takes 4.3x)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace artifacts of another model or other options in --out (refused without it; "
                        "the same model and options may always be generated again)")
    parser.add_argument("--check-generator", action="store_true",
                        help="only say which interpreter and ONNX Runtime would generate, after importing them in a "
                        "child process (exit 1 when none can)")
    parser.add_argument("--no-prepare", action="store_true",
                        help="hand the model to ONNX Runtime's generator as it is: no rewrite of operators without a "
                        "gradient, no fitting of the loss's input (the default changes only models that need it)")
    parser.add_argument("--kernel-forms", action="store_true",
                        help="ONNX Runtime's gradient kernels everywhere (standard_forms=False): the training model "
                        "its generator writes, whose losses are bit for bit its artifacts'. By default ort_cffi's "
                        "builder writes the few gradients measured faster in standard operators so (the LSTM and GRU "
                        "backward, the embedding's gradient; docs/guides/performance.md)")
    parser.add_argument("--verbose", action="store_true",
                        help="also print internals: what the conversion for ONNX Runtime 1.19 changed (IR version, "
                        "opset), the loss output's name")
    parser.add_argument("--version", action="version", version=f"%(prog)s (ort_cffi {__version__})")
    args = parser.parse_args(argv)
    if not args.check_generator:  # required unless only the generator is checked
        missing = [name for name, value in (("MODEL.onnx", args.model), ("--out", args.out)) if value is None]
        if missing:
            parser.error(f"the following arguments are required: {', '.join(missing)}")
    return args


def report_generator(generator: Optional[str], python: Optional[str]) -> int:
    """``--check-generator``: who would run the generator, or why none can (exit 1)."""
    try:
        if chosen_generator(generator, python) == ORT_CFFI:
            import onnx

            print(f"generator: ort_cffi {__version__}'s own gradient builder, in this process (Python "
                  f"{'.'.join(map(str, sys.version_info[:3]))}, {sys.executable}), with onnx {onnx.__version__}")
            return 0
        found = check_generator(python)
    except ImportError as exc:
        print(f"error: ort_cffi's gradient builder needs the onnx package ({exc}): install ort_cffi's [artifacts] "
              "extra", file=sys.stderr)
        return 1
    except ArtifactsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"generator: ONNX Runtime {found['onnxruntime']} and onnx {found['onnx']}, run by {found['description']} "
          f"(Python {found['version']}, {found['python']}); ONNX Runtime's Python layer: {found['layer']}")
    return 0


def _rows(given: Optional[List[Tuple[str, List[int]]]]) -> Optional[Dict[str, List[int]]]:
    """--frozen-rows, repeated, as one mapping (a parameter named twice keeps the rows of both)."""
    if not given:
        return None
    rows: Dict[str, List[int]] = {}
    for name, indices in given:
        rows.setdefault(name, []).extend(indices)
    return rows


def main(argv: Optional[Sequence[str]] = None) -> int:
    """The ``ort-cffi-artifacts`` command; returns its exit status (2: bad model or options, 1: no generator,
    or the generator or the runtime failed)."""
    args = parse_args(argv)
    if args.check_generator:
        return report_generator(args.generator, args.python)
    started = time.monotonic()
    try:
        made = generate_artifacts(
            args.model,
            # The command's own defaults (DESCRIPTION), asked of generate_artifacts, whose defaults are ONNX Runtime's
            requires_grad=ALL_PARAMETERS if args.trainable is None else args.trainable,
            frozen_params=args.frozen,
            frozen_rows=_rows(args.frozen_rows),
            loss=args.loss,
            optimizer=args.optimizer,
            artifact_directory=args.out,
            additional_output_names=MODEL_OUTPUTS if args.outputs is None else args.outputs,
            nominal_checkpoint=args.nominal_checkpoint,
            loss_input_names=args.loss_input,
            python=args.python,
            generator=args.generator,
            class_axis=args.class_axis,
            check=not args.no_check,
            overwrite=args.overwrite,
            prepare=not args.no_prepare,
            standard_forms=not args.kernel_forms,
        )
    except ArtifactsError as exc:
        print(f"error: {in_flag_words(str(exc))}", file=sys.stderr)
        return 2 if isinstance(exc, ValueError) else 1
    except KeyboardInterrupt:  # the generator works in a temporary folder, removed on the way out
        print(f"\ninterrupted: no artifacts were written to {args.out}", file=sys.stderr)
        return 130
    versions = made.versions
    who = (f"ONNX Runtime {versions['onnxruntime']}" if versions.get("generator") == ONNX_RUNTIME
           else "ort_cffi's gradient builder")
    print(f"ort-cffi-artifacts: ort_cffi {__version__}; generator: {who}, onnx {versions['onnx']}, "
          f"Python {versions['python']} ({versions['executable']})")
    for line in describe(made, str(args.model), args.verbose):
        print(line)
    written = ", ".join(str(p) for p in made.files.values())
    checked = "" if args.no_check else "; they load in a training session"
    print(f"wrote:      {written}, {made.folder / 'artifacts.json'} in {time.monotonic() - started:.1f} s{checked}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
