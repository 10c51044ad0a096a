"""``ort-cffi-train``: fine-tune an ONNX model, or train a set of training artifacts, on an ``.npz`` dataset
through the Java-style API (``OrtEnvironment`` → ``OrtTrainingSession``), then export and check an
inference model.

With no arguments it trains the embedded default: a 64-64-10 MLP on scikit-learn's 8x8 digits, whose
artifacts and data ship in ``ort_cffi/data/digits`` (no torch, no download). With ``--model MODEL.onnx`` it
first generates the model's training artifacts into ``OUT/artifacts`` (``ort_cffi.artifacts``), or reuses
those when they match the model and options.

What one run writes to ``--out``: ``last_checkpoint`` (every epoch, with optimizer state, so that
``--resume`` continues Adam and the schedule exactly), ``best_checkpoint`` (the best validation epoch),
``inference_model.onnx`` (exported from the best checkpoint), ``metrics.json`` and ``training.png``.
The epoch, step and the run's configuration are checkpoint properties: a resumed run restores them.

The work is ``ort_cffi.trainer`` (``TrainingJob``, whose settings are a ``TrainSettings``); this module is the
command line: argparse and exit codes. The progress bar (``tqdm``) and the plot (``matplotlib``) come with
ort_cffi's ``[demo]`` extra; without them the trainer prints its per-epoch lines and skips the plot.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Optional, Sequence, Union

from ort_cffi import OrtException, __version__
from ort_cffi.artifacts import ArtifactsError, LossType, OptimType
from ort_cffi.artifacts.options import GENERATORS
from ort_cffi.cli.args import fraction, in_flag_words, non_negative_int, number_list, positive_float, positive_int
from ort_cffi.trainer import DEFAULT_ARTIFACTS, GENERATION_FLAGS, OutputError, SetupError, TrainingJob, settings_from
from ort_cffi.trainer.lr_finder import AUTO
from ort_cffi.trainer.schedule import SCHEDULES

DESCRIPTION = """\
Fine-tune an ONNX model, or train ONNX Runtime training artifacts, on a dataset, through
ort_cffi's Java-style API. With no arguments: the embedded example, an MLP on scikit-learn's
8x8 digits.

--model MODEL.onnx: its training artifacts are generated into OUT/artifacts (or reused when
they match the model and options); --trainable limits training to some parameters.
--artifacts DIR: checkpoint, training_model.onnx, eval_model.onnx, optimizer_model.onnx
(what ort-cffi-artifacts or onnxruntime.training.artifacts.generate_artifacts writes). The
first output of the training and eval models is the loss.

--data takes what the data is (docs/guides/bring-your-data.md):
- an image folder: one subfolder of images per class, or train/ and val/ folders that each
  hold such subfolders. Images are resized to the model's input, scaled to 0-1 (--normalize
  MEAN STD after that) and laid out as the input says (channels first or last). Needs Pillow
  (pip install "ort-cffi[images]").
- a CSV or TSV file with a header row: --label-column (default: the last column) holds the
  labels, every other column is a numeric feature, standardised on the training split.
- text: a CSV or TSV file with --text-column and --label-column; token ids from --tokenizer
  tokenizer.json (pip install "ort-cffi[text]"), or from a vocabulary built on the training
  split that fits the model's embedding, padded or truncated to its sequence length.
- an .npz file: one array per model input and split, train_<input> and val_<input> (e.g.
  train_input, train_labels, val_input, val_labels); the first dimension is the sample,
  dtypes and the other dimensions are the model's.
Label strings become class ids, sorted. Data without a validation part gets one: --val-split
(default 0.2), seeded and stratified by class. The class names, the preprocessing and the
vocabulary or tokenizer go into the inference model's metadata (and preprocessing.json):
ort-cffi-predict MODEL.onnx INPUT... reads them. When an integer input is the labels and the
first exported output has one score per class, accuracy is reported too, and labels outside
the classes are refused.
"""

EPILOG = """\
writes to --out: last_checkpoint (every epoch, with the optimizer state and the run's
configuration, for --resume), best_checkpoint (the best validation epoch), inference_model.onnx
(exported from the best checkpoint), metrics.json (loss and learning rate per step, validation
per epoch) and training.png (their plot); with --model, the artifacts in artifacts/; for an image
folder, CSV or text file, preprocessing.json (the classes and preprocessing the model also carries).
--patience N stops a run once the validation loss has not improved for N epochs.

A run is never overwritten unless asked: an --out that holds a run, finished or not, is refused
unless --resume continues it or --overwrite replaces it. A run that fails before its first epoch
leaves the file system as it found it. An --out that cannot be written is refused before anything is
trained; a write that fails later (a full disk) ends with an error that says what was kept. Ctrl-C
stops a run with one line and exit status 130 (in training: how to resume it).

A BatchNorm model's running statistics trail its weights after a short fine-tuning: before each
validation, the trainer re-estimates them over the training set (--no-bn-reestimate: it does not).

--resume continues the run stored in the checkpoint: its learning rate, schedule, warm-up, batch
size, epochs, seed, BatchNorm re-estimation, dataset and artifacts. Options left out take the
stored values; one that contradicts them is refused unless --override is given.

examples:
  ort-cffi-train                                  # the digits example, into runs/digits
  ort-cffi-train --model model.onnx --data data.npz --trainable 'head.*' --out runs/mine
  ort-cffi-train --model cnn.onnx --data photos/ --patience 5 --out runs/photos
  ort-cffi-train --model mlp.onnx --data table.csv --label-column species
  ort-cffi-train --model text.onnx --data reviews.csv --text-column review --label-column stars
  ort-cffi-predict runs/photos/inference_model.onnx new_photo.jpg
  ort-cffi-train --artifacts my_artifacts --data my_data.npz --epochs 10 --lr 1e-3
  ort-cffi-train --out runs/mine --resume         # continue from runs/mine/last_checkpoint
"""


def learning_rate(text: str) -> Union[float, str]:
    """``--lr``: a positive number, or ``auto`` (``ort_cffi.trainer.lr_finder``)."""
    if text == AUTO:
        return AUTO
    try:
        return positive_float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive number or auto, got {text}") from None


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    """The command line of ``ort-cffi-train``: options left out are None, so that a resumed run can tell
    them from options typed (argparse exits 2 on a bad command line)."""
    parser = argparse.ArgumentParser(
        prog="ort-cffi-train", description=DESCRIPTION, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", type=Path, metavar="MODEL.onnx",
                        help="an ONNX model to fine-tune: its artifacts are generated into OUT/artifacts")
    parser.add_argument("--artifacts", type=Path, metavar="DIR",
                        help="training artifacts folder (default: the embedded digits MLP)")
    model = parser.add_argument_group("artifacts from --model (see ort-cffi-artifacts --help)")
    model.add_argument("--trainable", nargs="+", metavar="PATTERN",
                       help="names or glob patterns of the parameters to train, by initializer name or torch "
                       "name (dynamo exports); default: all")
    model.add_argument("--frozen", nargs="+", metavar="PATTERN", help="parameters kept in the checkpoint, not trained")
    model.add_argument("--loss", choices=[t.option for t in LossType] + ["none"], help="default: cross-entropy")
    model.add_argument("--loss-input", nargs="+", metavar="NAME", help="the output the loss reads [and its input's name]")
    model.add_argument("--class-axis", type=int, metavar="AXIS",
                       help="the axis of the scores that holds the classes, for cross-entropy (default: found)")
    model.add_argument("--optimizer", choices=[t.option for t in OptimType], help="default: adamw")
    model.add_argument("--generator", choices=GENERATORS,
                       help="ort_cffi: its own gradient builder (the default); onnxruntime: ONNX Runtime's generator "
                       "(the default when --python is given)")
    model.add_argument("--python", metavar="PYTHON",
                       help="interpreter that runs ONNX Runtime's generator (default: $ORT_CFFI_ARTIFACTS_PYTHON, else "
                       "this one)")
    parser.add_argument("--data", type=Path, metavar="PATH",
                        help="dataset: an image folder, a CSV/TSV file or an .npz file (default: the one .npz file in "
                        "the artifacts folder)")
    data = parser.add_argument_group("what --data is made into")
    data.add_argument("--val-split", type=fraction, metavar="FRACTION",
                      help="hold out this fraction for validation where the data has no validation part "
                      "(default: 0.2; seeded by --seed, stratified by class)")
    data.add_argument("--label-column", metavar="NAME", help="CSV/TSV: the labels' column (default: the last one)")
    data.add_argument("--text-column", metavar="NAME", help="CSV/TSV: a column of text, fed as token ids")
    data.add_argument("--tokenizer", metavar="TOKENIZER.json",
                      help="text: a Hugging Face tokenizers file (default: a vocabulary built on the training split)")
    data.add_argument("--normalize", nargs=2, type=number_list, metavar=("MEAN", "STD"),
                      help="images: after scaling to 0-1, subtract MEAN and divide by STD, one number for every "
                      "channel or one per channel separated by commas (e.g. 0.485,0.456,0.406 0.229,0.224,0.225)")
    parser.add_argument("--out", type=Path, metavar="DIR",
                        help="output folder (default: runs/<model or artifacts folder name>)")
    parser.add_argument("--epochs", type=positive_int, metavar="N", help="epochs to train in all (default: 30)")
    parser.add_argument("--batch-size", type=positive_int, metavar="N", help="default: 32")
    parser.add_argument("--lr", type=learning_rate, metavar="LR|auto",
                        help="(peak) learning rate, or auto: a range test of 100 steps picks it (a tenth of the rate "
                        "where the loss is lowest, as fastai's lr_find suggests). Default: by the model, 0.001 when "
                        "it has attention or layer normalization, as transformers do, else 0.01")
    parser.add_argument("--schedule", choices=SCHEDULES,
                        help="linear: warm up to --lr, then decay linearly towards 0 at the last step; cosine: warm "
                        "up, then decay along a half cosine; constant: --lr throughout (default: linear)")
    parser.add_argument("--warmup-steps", type=non_negative_int, metavar="N",
                        help="warm-up length in optimizer steps, the first step already learning (default: one epoch)")
    parser.add_argument("--patience", type=positive_int, metavar="N",
                        help="stop when the validation loss has not improved for N epochs; the best epoch is kept "
                        "and exported (default: train all epochs)")
    parser.add_argument("--seed", type=non_negative_int, help="shuffling and runtime seed, 0 or more (default: 0)")
    parser.add_argument("--bn-reestimate", dest="bn_reestimate", action="store_true", default=None,
                        help="BatchNorm models: before each validation (and so before the export), re-estimate the "
                        "running statistics over the training set with the trained weights, as torch's update_bn "
                        "does (default: on)")
    parser.add_argument("--no-bn-reestimate", dest="bn_reestimate", action="store_false",
                        help="keep the running statistics as training moved them (momentum)")
    parser.add_argument("--resume", nargs="?", const="", type=str, metavar="CHECKPOINT",
                        help="continue the run stored in a checkpoint this command wrote (default: OUT/last_checkpoint); "
                        "without --out, the run goes on in the checkpoint's folder")
    parser.add_argument("--override", action="store_true",
                        help="with --resume: let the options given replace the run's stored ones")
    parser.add_argument("--overwrite", action="store_true",
                        help="start a new run in an --out that holds one, replacing it (without --resume or "
                        "--overwrite, such an --out is refused)")
    parser.add_argument("--export-outputs", nargs="+", metavar="NAME",
                        help="outputs of the inference model (default: the eval model's outputs but the loss)")
    parser.add_argument("--threads", type=non_negative_int, default=0, metavar="N",
                        help="intra-op threads (default: 0, the runtime's choice)")
    parser.add_argument("--keep-denormals", dest="flush_denormals", action="store_false", default=None,
                        help="keep denormal numbers, as ONNX Runtime does by default (the trainer flushes them to "
                        "zero, which can make a step 2-3x faster; also $ORT_CFFI_FLUSH_DENORMALS=0)")
    parser.add_argument("--progress", dest="progress", action="store_true", default=None,
                        help="show a progress bar (default: when stderr is a terminal)")
    parser.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")
    parser.add_argument("--no-plot", action="store_true", help="do not write training.png")
    parser.add_argument("--verbose", action="store_true",
                        help="also print internals: what --model's conversion changed, the loss output's name")
    parser.add_argument("--version", action="version", version=f"%(prog)s (ort_cffi {__version__})")
    args = parser.parse_args(argv)
    if args.model is not None and args.artifacts is not None:
        parser.error("--model and --artifacts exclude each other: train a model (its artifacts are generated) "
                     "or a set of artifacts")
    if args.model is None:
        given = [flag for key, flag in GENERATION_FLAGS.items() if getattr(args, key) is not None]
        if given:
            parser.error(f"{', '.join(given)} choose how --model's artifacts are made: use them with --model")
    if args.override and args.resume is None:
        parser.error("--override applies to --resume only")
    if args.overwrite and args.resume is not None:
        parser.error("--resume and --overwrite exclude each other: continue the run in --out, or replace it")
    if args.out is None and args.resume:  # a named checkpoint: its run continues where it was written
        args.out = Path(args.resume).parent
    if args.out is None:
        name = args.model.stem if args.model is not None else (args.artifacts or DEFAULT_ARTIFACTS).resolve().name
        args.out = Path("runs") / name
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    """The ``ort-cffi-train`` command; returns its exit status (2: a usage error, 1: the runtime refused)."""
    args = parse_args(argv)
    try:
        return TrainingJob(settings_from(vars(args))).run()
    except SetupError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OutputError as exc:  # a full disk, a folder made read-only during the run: what was kept
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except ArtifactsError as exc:  # generating --model's artifacts failed: its message says why
        print(f"error: {in_flag_words(str(exc))}", file=sys.stderr)
        return 2 if isinstance(exc, ValueError) else 1
    except OrtException as exc:  # the runtime refused something: its message says what, no traceback
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # the job says more where it can (in the epochs, before them, exporting)
        print("\ninterrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
