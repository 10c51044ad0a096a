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

The parts: ``train_data`` (artifacts folder and dataset, checked), ``train_config`` (the run's configuration
and --resume), ``train_loop`` (epochs, validation, checkpoints), ``train_output`` (metrics and plot); this
module is the command line. The progress bar (``tqdm``) and the plot (``matplotlib``) come with
ort_cffi's ``[demo]`` extra; without them the trainer prints its per-epoch lines and skips the plot.
"""
from __future__ import annotations

import argparse
import math
import re
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from . import __version__
from ._errors import OrtException
from .artifacts import (
    ArtifactsError,
    LossType,
    OptimType,
    artifacts_match,
    generate_artifacts,
    model_sha256,
    request_options,
)
from .artifacts_cli import describe
from .environment import OrtEnvironment
from .options import SessionOptions
from .train_config import (
    DEFAULTS,
    Resumed,
    RunConfig,
    artifacts_identity,
    check_identity,
    data_identity,
    read_checkpoint,
    resume_options,
)
from .train_data import (  # noqa: F401  (also imported from here by ort_cffi.flower and ort_cffi.federated)
    ARTIFACT_FILES,
    DEFAULT_ARTIFACTS,
    Arrays,
    UsageError,
    batches,
    check_batch_size,
    check_labels,
    classification_labels,
    find_artifacts,
    find_dataset,
    fixed_batch,
    input_infos,
    load_dataset,
    output_infos,
    shape_text,
)
from .train_loop import Outputs, Plan, count_correct, evaluate, inference_check, progress_bar, run_epochs, train_epoch  # noqa: F401
from .train_output import load_history, plot, save_figure, write_json  # noqa: F401
from .training import OrtTrainingSession

DESCRIPTION = """\
Fine-tune an ONNX model, or train ONNX Runtime training artifacts, on a dataset, through
ort_cffi's Java-style API. With no arguments: the embedded example, an MLP on scikit-learn's
8x8 digits.

--model MODEL.onnx: its training artifacts are generated into OUT/artifacts (or reused when
they match the model and options); --trainable limits training to some parameters.
--artifacts DIR: checkpoint, training_model.onnx, eval_model.onnx, optimizer_model.onnx
(what ort-cffi-artifacts or onnxruntime.training.artifacts.generate_artifacts writes). The
first output of the training and eval models is the loss.

dataset (.npz): one array per model input and split, named train_<input> and val_<input>,
e.g. train_input, train_labels, val_input, val_labels for a model whose inputs are
'input' and 'labels'. The first dimension is the sample; dtypes and the other dimensions
must be the model's. When an integer input is the labels and the first exported output
has one score per class, accuracy is reported too, and labels outside the classes are refused.
"""

EPILOG = """\
writes to --out: last_checkpoint (every epoch, with the optimizer state and the run's
configuration, for --resume), best_checkpoint (the best validation epoch), inference_model.onnx
(exported from the best checkpoint), metrics.json (loss and learning rate per step, validation
per epoch) and training.png (their plot); with --model, the artifacts in artifacts/.

--resume continues the run stored in the checkpoint: its learning rate, schedule, warm-up, batch
size, epochs, seed, dataset and artifacts. Options left out take the stored values; one that
contradicts them is refused unless --override is given.

examples:
  ort-cffi-train                                  # the digits example, into runs/digits
  ort-cffi-train --model model.onnx --data data.npz --trainable 'head.*' --out runs/mine
  ort-cffi-train --artifacts my_artifacts --data my_data.npz --epochs 10 --lr 1e-3
  ort-cffi-train --out runs/mine --resume         # continue from runs/mine/last_checkpoint
"""

GENERATION_FLAGS = {"trainable": "--trainable", "frozen": "--frozen", "loss": "--loss", "loss_input": "--loss-input",
                    "optimizer": "--optimizer"}


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
                       help="names or glob patterns of the parameters to train (default: all)")
    model.add_argument("--frozen", nargs="+", metavar="PATTERN", help="parameters kept in the checkpoint, not trained")
    model.add_argument("--loss", choices=[t.value for t in LossType] + ["none"], help="default: cross-entropy")
    model.add_argument("--loss-input", nargs="+", metavar="NAME", help="the output the loss reads [and its input's name]")
    model.add_argument("--optimizer", choices=[t.value for t in OptimType], help="default: adamw")
    parser.add_argument("--data", type=Path, metavar="FILE.npz",
                        help="dataset (default: the one .npz file in the artifacts folder)")
    parser.add_argument("--out", type=Path, metavar="DIR",
                        help="output folder (default: runs/<model or artifacts folder name>)")
    parser.add_argument("--epochs", type=_positive_int, metavar="N", help="epochs to train in all (default: 30)")
    parser.add_argument("--batch-size", type=_positive_int, metavar="N", help="default: 32")
    parser.add_argument("--lr", type=_positive_float, help="(peak) learning rate (default: 0.01)")
    parser.add_argument("--schedule", choices=("linear", "constant"),
                        help="linear: warm up to --lr, then decay linearly to 0 at the last step "
                        "(ONNX Runtime's linear scheduler); constant: --lr throughout (default: linear)")
    parser.add_argument("--warmup-steps", type=_non_negative_int, metavar="N",
                        help="linear warm-up length in optimizer steps (default: one epoch)")
    parser.add_argument("--seed", type=_non_negative_int, help="shuffling and runtime seed, 0 or more (default: 0)")
    parser.add_argument("--resume", nargs="?", const="", type=str, metavar="CHECKPOINT",
                        help="continue the run stored in a checkpoint this command wrote (default: OUT/last_checkpoint); "
                        "without --out, the run goes on in the checkpoint's folder")
    parser.add_argument("--override", action="store_true",
                        help="with --resume: let the options given replace the run's stored ones")
    parser.add_argument("--export-outputs", nargs="+", metavar="NAME",
                        help="outputs of the inference model (default: the eval model's outputs but the loss)")
    parser.add_argument("--threads", type=_non_negative_int, default=0, metavar="N",
                        help="intra-op threads (default: 0, the runtime's choice)")
    parser.add_argument("--progress", dest="progress", action="store_true", default=None,
                        help="show a progress bar (default: when stderr is a terminal)")
    parser.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")
    parser.add_argument("--no-plot", action="store_true", help="do not write training.png")
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
    if args.out is None and args.resume:  # a named checkpoint: its run continues where it was written
        args.out = Path(args.resume).parent
    if args.out is None:
        name = args.model.stem if args.model is not None else (args.artifacts or DEFAULT_ARTIFACTS).resolve().name
        args.out = Path("runs") / name
    return args


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {value}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
    return value


def model_artifacts(args: argparse.Namespace, resumed: Optional[Resumed]) -> Tuple[Path, Dict[str, Any], List[str]]:
    """The artifacts of ``--model`` in OUT/artifacts: generated, or reused when they match the model and
    the options. A resumed run keeps the artifacts it trained: a different model or generation option is
    refused. Returns the folder, the model's identity for the run's configuration, and lines to print."""
    folder: Path = args.out / "artifacts"
    options = request_options(requires_grad=args.trainable, frozen_params=args.frozen,
                              loss=LossType.CrossEntropyLoss if args.loss is None else args.loss,
                              optimizer=OptimType.AdamW if args.optimizer is None else args.optimizer,
                              loss_input_names=args.loss_input)
    identity = {"path": str(args.model.resolve()), "sha256": model_sha256(args.model), "options": options}
    if resumed is not None and resumed.config is not None:
        stored = resumed.config.model
        if stored is None:
            raise UsageError(f"the run being resumed trained the artifacts {resumed.config.artifacts.get('path')!r}, "
                             "not a --model: leave --model out to resume it")
        if stored["sha256"] != identity["sha256"]:
            raise UsageError(f"--model {args.model} is not the model the run started from ({stored['path']!r}): "
                             "a resumed run keeps its artifacts; leave --model out to resume, or start a new run "
                             "without --resume")
        keys = {"trainable": "requires_grad", "frozen": "frozen_params", "loss": "loss", "loss_input": "loss_input_names",
                "optimizer": "optimizer"}
        changed = [GENERATION_FLAGS[arg] for arg, key in keys.items()
                   if getattr(args, arg) is not None and options[key] != stored["options"].get(key)]
        if changed:
            raise UsageError(f"{', '.join(changed)} differ{'s' if len(changed) == 1 else ''} from the options the run's "
                             f"artifacts were made with: a resumed run keeps its artifacts; leave "
                             f"{'it' if len(changed) == 1 else 'them'} out, or start a new run without --resume")
        return folder, stored, [f"artifacts: {folder} (the run's, made from {args.model})"]
    if resumed is not None:
        return folder, identity, [f"artifacts: {folder}"]
    if artifacts_match(folder, args.model, options):
        return folder, identity, [f"artifacts: {folder} (reused: made from {args.model} with the same options)"]
    made = generate_artifacts(args.model, options["requires_grad"], options["frozen_params"], options["loss"],
                              options["optimizer"], folder, loss_input_names=options["loss_input_names"])
    return folder, identity, describe(made, str(args.model)) + [f"artifacts: {folder} (generated)"]


def check_export(session: OrtTrainingSession, out: Path, names: List[str], eval_outputs: List[str]) -> None:
    """Export once before training, so that a wrong --export-outputs fails now, not after the last epoch
    (the runtime accepts the eval model's outputs and the values its graph computes)."""
    probe = out / ".export-check.onnx"
    try:
        session.exportModelForInference(probe, names)
    except OrtException as exc:
        # The runtime's message leads with a source location and a C++ signature: keep what follows.
        reason = re.sub(r"^.*\[ONNXRuntimeError\] : \d+ : \w+ : (\S+:\d+ \w+ )?", "", str(exc).strip())
        raise UsageError(
            f"cannot export {', '.join(names)} for inference (the eval model's outputs are "
            f"{', '.join(eval_outputs)}): {reason}"
        ) from None
    finally:
        probe.unlink(missing_ok=True)


def train(args: argparse.Namespace) -> int:
    """One run of ``ort-cffi-train``: returns its exit status; raises UsageError, ArtifactsError or
    OrtException for ``main`` to report."""
    started = time.monotonic()
    env = OrtEnvironment.getEnvironment()
    out: Path = args.out
    resumed: Optional[Resumed] = None
    if args.resume is not None:
        checkpoint = Path(args.resume) if args.resume else out / "last_checkpoint"
        if not checkpoint.is_file():
            raise UsageError(f"checkpoint {str(checkpoint)!r} to resume from does not exist")
        resumed = read_checkpoint(checkpoint)
    stored = resumed.config if resumed is not None else None

    # What to train: --model's artifacts, --artifacts, the resumed run's, or the embedded example.
    lines: List[str] = []
    model: Optional[Dict[str, Any]] = stored.model if stored is not None else None
    if args.model is not None:
        folder, model, lines = model_artifacts(args, resumed)
    elif args.artifacts is not None:
        folder = args.artifacts
    elif stored is not None:
        folder = Path(stored.artifacts["path"])
        if not folder.is_dir():
            raise UsageError(f"the artifacts folder of the run being resumed, {str(folder)!r}, no longer exists: "
                             "name it with --artifacts DIR")
    else:
        folder = DEFAULT_ARTIFACTS
    if not lines:
        lines = [f"artifacts: {folder}{' (the embedded digits example)' if folder == DEFAULT_ARTIFACTS else ''}"]
    artifacts = find_artifacts(folder)
    if resumed is None:
        checkpoint = artifacts["checkpoint"]
    if args.data is None and stored is not None:
        data_path = Path(stored.data["path"])
        if not data_path.is_file():
            raise UsageError(f"the dataset of the run being resumed, {str(data_path)!r}, no longer exists: "
                             "name it with --data FILE.npz")
    else:
        data_path = find_dataset(args.data, folder)

    # The run's configuration: the options given and the defaults, or the resumed run's.
    given = {key: getattr(args, key) for key in DEFAULTS}
    data_id, artifacts_id = data_identity(data_path), artifacts_identity(folder)
    notes: List[str] = []
    if stored is not None:
        options, changes = resume_options(stored, given, args.override)
        notes += [f"overriding: {change}" for change in changes]
        for what, started_with, now, hint in (
            ("dataset", stored.data, data_id, "name the run's dataset with --data"),
            ("artifacts", stored.artifacts, artifacts_id, "the run's checkpoint belongs to the artifacts it started with"),
        ):
            line = check_identity(what, started_with, now, args.override, hint)
            if line:
                notes.append(f"overriding: {line}")
    else:
        options = {key: DEFAULTS[key] if value is None else value for key, value in given.items()}
        if resumed is not None:
            notes.append("the checkpoint holds no run configuration (an older ort-cffi-train wrote it): resuming "
                         "with the options given and the defaults")
    config = RunConfig(**options, data=data_id, artifacts=artifacts_id, model=model)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UsageError(f"--out {str(out)!r} cannot be the run's folder: {error.strerror}") from None

    # The session, then what the data must look like: its input names come from the session.
    OrtTrainingSession.setSeed(config.seed)
    with SessionOptions() as session_options:
        if args.threads:
            session_options.setIntraOpNumThreads(args.threads)
        session = env.createTrainingSession(checkpoint, artifacts["train"], artifacts["eval"], artifacts["optimizer"],
                                            session_options)
    with session:
        splits = {"train": list(session.getTrainInputNames()), "val": list(session.getEvalInputNames())}
        infos = input_infos(env, artifacts["eval"], sorted(set(splits["train"]) | set(splits["val"])))
        data = load_dataset(data_path, splits, infos)
        eval_outputs = list(session.getEvalOutputNames())
        export = args.export_outputs or eval_outputs[1:]
        if not export:
            raise UsageError(
                f"the eval model's only output is the loss ({eval_outputs[0]!r}): name the inference "
                "model's outputs with --export-outputs (e.g. the original model's output)"
            )
        check_export(session, out, export, eval_outputs)
        labels = classification_labels({n: infos[n] for n in splits["val"] if n in infos})
        scores = export[0] if export[0] in eval_outputs else None  # accuracy needs scores from evalStep
        names = Outputs(session.getTrainOutputNames()[0], eval_outputs[0], scores, labels)  # the loss comes first
        where = f"dataset {str(data_path)!r}"
        if labels is not None and scores is not None:
            classes = output_infos(env, artifacts["eval"])[scores].shape[-1:]
            if classes and classes[0] > 1:
                check_labels(data, labels, classes[0], scores, where)

        drop_last = False
        model_batch = fixed_batch(infos)
        if model_batch is not None:
            if model_batch != config.batch_size:
                raise UsageError(f"the model's inputs fix the batch size at {model_batch}: pass --batch-size {model_batch}")
            drop_last = True  # a smaller last batch would not fit the model
        n_train, n_val = len(data["train"][splits["train"][0]]), len(data["val"][splits["val"][0]])
        if not drop_last:
            check_batch_size(config.batch_size, n_train, where)
        steps_per_epoch = n_train // config.batch_size if drop_last else -(-n_train // config.batch_size)

        # Where to start: zero, or the epoch and step stored in the checkpoint being resumed. The schedule
        # ends after the remaining epochs: the configured end, unless an override changed the step count.
        epoch, step = (resumed.epoch, resumed.step) if resumed is not None else (0, 0)
        best: Optional[Tuple[float, float]] = None  # the best (accuracy, -loss) so far; accuracy 0 without labels
        steps: List[dict] = []
        epochs: List[dict] = []
        before: Optional[dict] = None  # the validation before training, kept in metrics.json across resumes
        if resumed is not None:
            if (out / "best_checkpoint").is_file():  # the best to beat is only meaningful beside its file
                best = resumed.best
            steps, epochs, before = load_history(out, epoch, step)
        if config.warmup_steps is None:
            config.warmup_steps = steps_per_epoch
        total_steps = step + max(0, config.epochs - epoch) * steps_per_epoch
        if config.schedule == "linear":
            warmup = min(config.warmup_steps, total_steps)
            session.registerLinearLRScheduler(warmup, max(total_steps, 1), config.lr)
            # Registering sets the rate to --lr; one schedulerStep sets the rate for the steps already
            # taken (0, or those of the resumed checkpoint's optimizer state), so that warm-up starts
            # at the first step and a resumed run continues the schedule where it stopped.
            session.schedulerStep()
            schedule = f"linear schedule, warm-up {warmup} steps"
        else:
            session.setLearningRate(config.lr)
            schedule = "constant"

        print(f"ort-cffi-train: ort_cffi {__version__}, ONNX Runtime {env.getVersion()}")
        for line in lines:
            print(line)
        described = ", ".join(f"{n} {infos[n].dtype} {shape_text(infos[n].shape)}" for n in splits["train"] if n in infos)
        print(f"dataset:   {data_path} ({n_train} train, {n_val} validation; {described})")
        print(f"training:  {config.epochs} epochs x {steps_per_epoch} steps, batch {config.batch_size}, "
              f"lr {config.lr:g} ({schedule}), seed {config.seed}")
        if resumed is not None:
            restored = " with the run's stored configuration" if stored is not None else ""
            print(f"resuming:  {checkpoint} at epoch {epoch}, step {step}{restored}")
        for note in notes:
            print(note)
        print(f"output:    {out}")

        if resumed is None:  # where the model starts from, on the task at hand
            val_loss, val_acc = evaluate(session, data["val"], names.eval_loss, scores, labels, config.batch_size, drop_last)
            before = {"val_loss": val_loss, "val_accuracy": val_acc}
            accuracy = f"  val acc {val_acc:.4f}" if val_acc is not None else ""
            print(f"before training: val loss {val_loss:.4f}{accuracy}", flush=True)

        def record(inference: Optional[dict] = None) -> None:
            write_json(out / "metrics.json", _metrics(config, args, before, steps, epochs, inference), "metrics")

        if epoch >= config.epochs:
            print(f"nothing left to do: the checkpoint is at epoch {epoch} and the run has {config.epochs} epochs; "
                  f"to train further, resume with --epochs N (more than {epoch}) --override")
        try:
            run_epochs(session, data, Plan(config, epoch + 1, step, steps_per_epoch, drop_last, _progress(args)),
                       names, out, best, steps, epochs, record)
        except KeyboardInterrupt:
            print(f"\ninterrupted: resume with --out {out} --resume", file=sys.stderr)
            return 130

    # The end: export the best parameters, run the exported model, write the metrics and the plot.
    best_epochs = [e for e in epochs if e["best"]]
    title = f"{(args.model.stem if args.model is not None else folder.resolve().name)}: {len(epochs)} epochs"
    if best_epochs:
        chosen = best_epochs[-1]
        accuracy = f", val acc {chosen['val_accuracy']:.4f}" if chosen["val_accuracy"] is not None else ""
        print(f"best: epoch {chosen['epoch']} (val loss {chosen['val_loss']:.4f}{accuracy}) -> {out / 'best_checkpoint'}")
        title += f", best epoch {chosen['epoch']}{accuracy}"

    # A fresh session over best_checkpoint exports the eval graph with the best weights.
    source = out / "best_checkpoint" if (out / "best_checkpoint").is_file() else checkpoint
    model_path = out / "inference_model.onnx"
    with env.createTrainingSession(source, artifacts["train"], artifacts["eval"]) as exporter:
        exporter.exportModelForInference(model_path, export)
    outputs, inference_acc = inference_check(env, model_path, data["val"], labels, config.batch_size, drop_last)
    print(f"inference model: {model_path} (from {source.name}; outputs {', '.join(outputs)})")

    files = [out / "metrics.json"]
    record({"model": model_path.name, "outputs": outputs, "val_accuracy": inference_acc})
    if not args.no_plot and steps:
        try:
            plot(out / "training.png", steps, epochs, title)
            files.append(out / "training.png")
        except ImportError:
            print("no plot: matplotlib is not installed (pip install matplotlib)", file=sys.stderr)
    print(f"wrote {', '.join(str(f) for f in files)} in {time.monotonic() - started:.1f} s")
    if inference_acc is not None:
        print(f"inference model accuracy on validation: {inference_acc:.4f}")
    return 0


def _progress(args: argparse.Namespace) -> bool:
    """The progress bar: as asked, else only when stderr is a terminal (not in logs, pipes or CI)."""
    return bool(args.progress) if args.progress is not None else sys.stderr.isatty()


def _metrics(config: RunConfig, args: argparse.Namespace, before: Optional[dict], steps: List[dict], epochs: List[dict],
             inference: Optional[dict]) -> dict:
    """metrics.json: the run's configuration, the command's options, the validation before training (a
    fresh run's), then per step, per epoch, and the exported model's check."""
    options = {key: (str(value) if isinstance(value, Path) else value) for key, value in vars(args).items()}
    return {"config": config.__dict__, "options": options, "before": before, "epochs": epochs, "steps": steps,
            "inference": inference}


def main(argv: Optional[Sequence[str]] = None) -> int:
    """The ``ort-cffi-train`` command; returns its exit status (2: a usage error, 1: the runtime refused)."""
    args = parse_args(argv)
    try:
        return train(args)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except ArtifactsError as exc:  # generating --model's artifacts failed: its message says why
        print(f"error: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, ValueError) else 1
    except OrtException as exc:  # the runtime refused something: its message says what, no traceback
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
