"""``ort-cffi-artifacts``: turn an ONNX model into training artifacts (``ort_cffi.artifacts``), and say what
was made trainable and what the training model now takes."""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Optional, Sequence

from ort_cffi import __version__
from ort_cffi.artifacts import ENV_PYTHON, ArtifactsError, LossType, OptimType, describe, generate_artifacts

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
  ort-cffi-artifacts model.onnx --out artifacts --python /usr/bin/python3.12

The generator is ONNX Runtime's own, run in a child process by an interpreter that has
ONNX Runtime's Python training layer and onnx (ort_cffi's [artifacts] extra): this one,
or the one named by --python or ${ENV_PYTHON} (on Python 3.13 and later, which
that layer does not support).
"""

LOSSES = [t.value for t in LossType] + ["none"]
OPTIMIZERS = [t.value for t in OptimType] + ["none"]
SHOWN = 12  # trainable tensors listed one by one


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    """The command line of ``ort-cffi-artifacts`` (argparse exits 2 on a bad one)."""
    parser = argparse.ArgumentParser(prog="ort-cffi-artifacts", description=DESCRIPTION, epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", type=Path, metavar="MODEL.onnx", help="the inference model")
    parser.add_argument("--out", type=Path, required=True, metavar="DIR", help="artifacts folder (created if missing)")
    parser.add_argument("--trainable", nargs="+", metavar="PATTERN",
                        help="names or glob patterns of the parameters to train (default: every floating-point "
                        "initializer a gradient reaches)")
    parser.add_argument("--frozen", nargs="+", metavar="PATTERN",
                        help="names or patterns of parameters kept in the checkpoint but not trained")
    parser.add_argument("--loss", choices=LOSSES, default=LossType.CrossEntropyLoss.value,
                        help="loss added on the model's output; none: the model's first output is the loss "
                        "(default: cross-entropy)")
    parser.add_argument("--loss-input", nargs="+", metavar="NAME",
                        help="the output the loss reads (needed when the model has several), then optionally "
                        "the name of the input the loss adds (default: labels or target)")
    parser.add_argument("--optimizer", choices=OPTIMIZERS, default=OptimType.AdamW.value, help="default: adamw")
    parser.add_argument("--outputs", nargs="*", metavar="NAME",
                        help="outputs the eval model gives next to the loss (default: the model's outputs; "
                        "--outputs alone: none)")
    parser.add_argument("--nominal-checkpoint", action="store_true",
                        help="also write nominal_checkpoint (parameter shapes only)")
    parser.add_argument("--python", metavar="PYTHON",
                        help=f"interpreter that runs the generator (default: ${ENV_PYTHON}, else this one)")
    parser.add_argument("--no-check", action="store_true",
                        help="do not open the artifacts in a training session after writing them")
    parser.add_argument("--no-prepare", action="store_true",
                        help="hand the model to ONNX Runtime's generator as it is: no rewrite of operators without a "
                        "gradient, no fitting of the loss's input (the default changes only models that need it)")
    parser.add_argument("--version", action="version", version=f"%(prog)s (ort_cffi {__version__})")
    return parser.parse_args(argv)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """The ``ort-cffi-artifacts`` command; returns its exit status (2: bad model or options, 1: no generator,
    or the generator or the runtime failed)."""
    args = parse_args(argv)
    started = time.monotonic()
    try:
        made = generate_artifacts(
            args.model,
            requires_grad=args.trainable,
            frozen_params=args.frozen,
            loss=args.loss,
            optimizer=args.optimizer,
            artifact_directory=args.out,
            additional_output_names=args.outputs,
            nominal_checkpoint=args.nominal_checkpoint,
            loss_input_names=args.loss_input,
            python=args.python,
            check=not args.no_check,
            prepare=not args.no_prepare,
        )
    except ArtifactsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, ValueError) else 1
    versions = made.versions
    print(f"ort-cffi-artifacts: ort_cffi {__version__}; generator: ONNX Runtime {versions['onnxruntime']}, "
          f"onnx {versions['onnx']}, Python {versions['python']} ({versions['executable']})")
    for line in describe(made, str(args.model)):
        print(line)
    written = ", ".join(str(p) for p in made.files.values())
    checked = "" if args.no_check else "; they load in a training session"
    print(f"wrote:      {written}, {made.folder / 'artifacts.json'} in {time.monotonic() - started:.1f} s{checked}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
