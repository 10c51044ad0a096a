"""``ort-cffi-train``: train a set of ONNX Runtime training artifacts on an ``.npz`` dataset through the
Java-style API (``OrtEnvironment`` → ``OrtTrainingSession``), then export and check an inference model.

With no arguments it trains the embedded default: a 64-64-10 MLP on scikit-learn's 8x8 digits, whose
artifacts and data ship in ``ort_cffi/data/digits`` (no torch, no download).

What one run writes to ``--out``: ``last_checkpoint`` (every epoch, with optimizer state, so that
``--resume`` continues Adam and the schedule exactly), ``best_checkpoint`` (the best validation epoch),
``inference_model.onnx`` (exported from the best checkpoint), ``metrics.json`` and ``training.png``.
The epoch and step are checkpoint properties; a resumed run reads them and carries on.

The progress bar (``tqdm``) and the plot (``matplotlib``) come with ``pip install "ort_cffi[demo]"``;
without them the trainer prints its per-epoch lines and skips the plot.
"""
from __future__ import annotations

import argparse
import importlib
import json
import math
import re
import sys
import time
import zipfile
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from . import __version__
from ._errors import OrtException
from ._files import atomic_write
from .environment import OrtEnvironment
from .options import SessionOptions
from .tensor import TensorInfo
from .training import OrtTrainingSession

DEFAULT_ARTIFACTS = Path(__file__).resolve().parent / "data" / "digits"
ARTIFACT_FILES = {
    "checkpoint": "checkpoint",
    "train": "training_model.onnx",
    "eval": "eval_model.onnx",
    "optimizer": "optimizer_model.onnx",
}
# Checkpoint properties this trainer writes and a resumed run reads.
EPOCH, STEP, BEST_ACC, BEST_LOSS = "epoch", "step", "best_val_accuracy", "best_val_loss"

Arrays = Dict[str, np.ndarray]


class UsageError(Exception):
    """A problem with what the user gave (folders, files, dataset): printed as ``error: ...``, exit 2."""


# --- command line ---------------------------------------------------------------------------------

DESCRIPTION = """\
Train ONNX Runtime training artifacts on a dataset, through ort_cffi's Java-style API.
With no arguments: the embedded example, an MLP on scikit-learn's 8x8 digits.

artifacts folder: checkpoint, training_model.onnx, eval_model.onnx, optimizer_model.onnx
(what onnxruntime.training.artifacts.generate_artifacts writes). The first output of
the training and eval models is the loss.

dataset (.npz): one array per model input and split, named train_<input> and val_<input>,
e.g. train_input, train_labels, val_input, val_labels for a model whose inputs are
'input' and 'labels'. The first dimension is the sample; dtypes and the other dimensions
must be the model's. When an integer input is the labels and the first exported output
has one score per class, accuracy is reported too.
"""

EPILOG = """\
writes to --out: last_checkpoint (every epoch, with the optimizer state, for --resume),
best_checkpoint (the best validation epoch), inference_model.onnx (exported from the best
checkpoint), metrics.json (loss and learning rate per step, validation per epoch) and
training.png (their plot).

examples:
  ort-cffi-train                                  # the digits example, into runs/digits
  ort-cffi-train --artifacts my_artifacts --data my_data.npz --epochs 10 --lr 1e-3
  ort-cffi-train --out runs/digits --resume       # continue from runs/digits/last_checkpoint
"""


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="ort-cffi-train", description=DESCRIPTION, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--artifacts", type=Path, default=DEFAULT_ARTIFACTS, metavar="DIR",
                        help="training artifacts folder (default: the embedded digits MLP)")
    parser.add_argument("--data", type=Path, metavar="FILE.npz",
                        help="dataset (default: the one .npz file in the artifacts folder)")
    parser.add_argument("--out", type=Path, metavar="DIR",
                        help="output folder (default: runs/<artifacts folder name>)")
    parser.add_argument("--epochs", type=_positive_int, default=30, metavar="N", help="epochs to train in all (default: 30)")
    parser.add_argument("--batch-size", type=_positive_int, default=32, metavar="N", help="default: 32")
    parser.add_argument("--lr", type=_positive_float, default=0.01, help="(peak) learning rate (default: 0.01)")
    parser.add_argument("--schedule", choices=("linear", "constant"), default="linear",
                        help="linear: warm up to --lr, then decay linearly to 0 at the last step "
                        "(ONNX Runtime's linear scheduler); constant: --lr throughout (default: linear)")
    parser.add_argument("--warmup-steps", type=_non_negative_int, metavar="N",
                        help="linear warm-up length in optimizer steps (default: one epoch)")
    parser.add_argument("--seed", type=int, default=0, help="shuffling and runtime seed (default: 0)")
    parser.add_argument("--resume", nargs="?", const="", type=str, metavar="CHECKPOINT",
                        help="continue from a checkpoint this command wrote (default: OUT/last_checkpoint)")
    parser.add_argument("--export-outputs", nargs="+", metavar="NAME",
                        help="outputs of the inference model (default: the eval model's outputs but the loss)")
    parser.add_argument("--threads", type=_non_negative_int, default=0, metavar="N",
                        help="intra-op threads (default: 0, the runtime's choice)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--no-plot", action="store_true", help="do not write training.png")
    parser.add_argument("--version", action="version", version=f"%(prog)s (ort_cffi {__version__})")
    args = parser.parse_args(argv)
    if args.out is None:
        args.out = Path("runs") / args.artifacts.resolve().name
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


# --- inputs: artifacts and dataset ----------------------------------------------------------------

def find_artifacts(folder: Path) -> Dict[str, Path]:
    if not folder.is_dir():
        raise UsageError(f"artifacts folder {str(folder)!r} does not exist")
    paths = {key: folder / name for key, name in ARTIFACT_FILES.items()}
    missing = [p.name for p in paths.values() if not p.is_file()]
    if missing:
        raise UsageError(
            f"artifacts folder {str(folder)!r} lacks {', '.join(missing)} "
            f"(a training artifacts folder holds {', '.join(ARTIFACT_FILES.values())})"
        )
    return paths


def find_dataset(data: Optional[Path], artifacts: Path) -> Path:
    if data is not None:
        if not data.is_file():
            raise UsageError(f"dataset {str(data)!r} does not exist")
        return data
    found = sorted(artifacts.glob("*.npz"))
    if len(found) != 1:
        raise UsageError(
            f"no --data given and the artifacts folder {str(artifacts)!r} holds "
            f"{len(found)} .npz files, not one: name the dataset with --data FILE.npz"
        )
    return found[0]


def input_infos(env: OrtEnvironment, eval_model: Path, names: Sequence[str]) -> Dict[str, TensorInfo]:
    """dtype and shape of the data inputs. The training API does not tell them, but the eval model is
    an ordinary ONNX model whose inputs are the data inputs followed by the parameters."""
    with env.createSession(eval_model) as session:
        infos = session.getInputInfo()
    return {name: infos[name].getInfo() for name in names if name in infos}


def _shape(dims: Sequence[int]) -> str:
    return "[" + ", ".join("N" if d < 0 else str(d) for d in dims) + "]"


def load_dataset(path: Path, splits: Dict[str, List[str]], infos: Dict[str, TensorInfo]) -> Dict[str, Arrays]:
    """``{"train": {input: array}, "val": {...}}`` from ``train_<input>`` / ``val_<input>``, checked
    against the model's inputs (names, dtypes, shapes, and at least one batch per split when the model
    fixes the batch size) so that a mismatch is reported here, by name, rather than as a runtime error
    in the middle of the first step."""
    if not zipfile.is_zipfile(path):  # np.load would try it as a pickle and say so, confusingly
        raise UsageError(f"dataset {str(path)!r} is not an .npz file (numpy.savez writes one)")
    try:
        with np.load(path, allow_pickle=False) as npz:
            stored = {key: npz[key] for key in npz.files}
    except Exception as exc:  # not a zip, a pickled array, a truncated file...
        raise UsageError(f"cannot read dataset {str(path)!r}: {exc}") from None
    where = f"dataset {str(path)!r}"
    expected = [f"{split}_{name}" for split, names in splits.items() for name in names]
    missing = [key for key in expected if key not in stored]
    unknown = [key for key in stored if key.startswith(("train_", "val_")) and key not in expected]
    if missing or unknown:
        problems = ([f"lacks {', '.join(missing)}"] if missing else []) + (
            [f"has {', '.join(unknown)}, which match no model input"] if unknown else []
        )
        raise UsageError(
            f"{where} {' and '.join(problems)}: the model's inputs are {', '.join(splits['train'])}, "
            f"so the arrays must be {', '.join(expected)}"
        )
    dataset: Dict[str, Arrays] = {}
    batch = fixed_batch(infos)
    for split, names in splits.items():
        arrays = {name: stored[f"{split}_{name}"] for name in names}
        for name, array in arrays.items():
            key, info = f"{split}_{name}", infos.get(name)
            if info is None:
                continue  # an input the eval model does not declare: the runtime will judge it
            if array.dtype != info.dtype:
                raise UsageError(
                    f"{where}: {key} is {array.dtype}, but the model's input {name!r} is {info.dtype} "
                    f"(convert it with .astype(np.{info.dtype}))"
                )
            model_dims, data_dims = info.shape[1:], array.shape[1:]
            if array.ndim != len(info.shape) or any(m >= 0 and m != d for m, d in zip(model_dims, data_dims)):
                raise UsageError(
                    f"{where}: {key} has shape {list(array.shape)}, but the model's input {name!r} is "
                    f"{_shape(info.shape)} (N samples first)"
                )
        counts = {len(a) for a in arrays.values()}
        if len(counts) != 1 or 0 in counts:
            sizes = ", ".join(f"{split}_{n}: {len(a)}" for n, a in arrays.items())
            raise UsageError(f"{where}: the {split} arrays need the same, non-zero number of samples ({sizes})")
        (count,) = counts
        if batch is not None and count < batch:  # only whole batches fit the model: none would run
            raise UsageError(
                f"{where}: the {split} split has {count} sample{'s' if count > 1 else ''}, fewer than one batch: "
                f"the model's inputs fix the batch size at {batch} and take whole batches only"
            )
        dataset[split] = arrays
    return dataset


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


def fixed_batch(infos: Dict[str, TensorInfo]) -> Optional[int]:
    """The batch size the model fixes, if its inputs' first dimension is not symbolic."""
    sizes = {info.shape[0] for info in infos.values() if info.shape and info.shape[0] > 0}
    return sizes.pop() if len(sizes) == 1 else None


def batches(order: np.ndarray, size: int, drop_last: bool) -> Iterator[np.ndarray]:
    end = len(order) - len(order) % size if drop_last else len(order)
    for start in range(0, end, size):
        yield order[start:start + size]


def classification_labels(infos: Dict[str, TensorInfo]) -> Optional[str]:
    """The labels input, when there is exactly one integer data input (a classification task)."""
    integer = [name for name, info in infos.items() if info.dtype is not None and info.dtype.kind in "iu"]
    return integer[0] if len(integer) == 1 else None


# --- output files ---------------------------------------------------------------------------------

def write_json(path: Path, data: Any, what: str = "JSON file") -> None:
    """Crash-safe like the checkpoints: a temporary file of its own beside ``path``, fsynced, then renamed
    over the old one (a crash leaves the old file or the new one, and concurrent runs never share it)."""
    def write(tmp: str) -> None:
        with open(tmp, "w") as file:
            json.dump(data, file, indent=1)
            file.write("\n")

    atomic_write(str(path), write, what)


def load_history(out: Path, epoch: int, step: int) -> Tuple[List[dict], List[dict]]:
    """The step and epoch records of the run being resumed, cut back to the checkpoint's epoch and step
    (records a crashed run wrote past its last checkpoint would be replaced anyway)."""
    try:
        metrics = json.loads((out / "metrics.json").read_text())
        steps = [s for s in metrics["steps"] if s["step"] <= step]
        epochs = [e for e in metrics["epochs"] if e["epoch"] <= epoch]
        return steps, epochs
    except (OSError, ValueError, KeyError, TypeError):
        return [], []


def plot(path: Path, steps: List[dict], epochs: List[dict], title: str) -> None:
    """Train loss per step, validation loss (and accuracy) per epoch, learning rate per step.
    ``Figure`` without pyplot: no GUI backend and no global state, even when called in-process."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 6), constrained_layout=True)
    loss_ax, lr_ax = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": (2, 1)})
    x = [s["step"] for s in steps]
    loss_ax.plot(x, [s["loss"] for s in steps], color="tab:blue", alpha=0.35, linewidth=0.8, label="train loss (step)")
    ends = [e["step"] for e in epochs]
    loss_ax.plot(ends, [e["train_loss"] for e in epochs], "o-", color="tab:blue", markersize=3, label="train loss (epoch)")
    loss_ax.plot(ends, [e["val_loss"] for e in epochs], "s-", color="tab:orange", markersize=3, label="validation loss")
    loss_ax.set_yscale("log")
    loss_ax.set_ylabel("loss")
    loss_ax.grid(alpha=0.3)
    handles, labels = loss_ax.get_legend_handles_labels()
    if epochs and epochs[0].get("val_accuracy") is not None:
        acc_ax = loss_ax.twinx()
        (line,) = acc_ax.plot(ends, [e["val_accuracy"] for e in epochs], "^-", color="tab:green", markersize=3)
        acc_ax.set_ylabel("validation accuracy")
        handles.append(line)
        labels.append("validation accuracy")
    loss_ax.legend(handles, labels, loc="lower left", fontsize="small")
    loss_ax.set_title(title)
    lr_ax.plot(x, [s["lr"] for s in steps], color="tab:red")
    lr_ax.set_xlabel("optimizer step")
    lr_ax.set_ylabel("learning rate")
    lr_ax.grid(alpha=0.3)
    save_figure(fig, path, "plot")


def save_figure(fig: Any, path: Path, what: str) -> None:
    """``fig.savefig`` made crash-safe like the other files: the format named by the suffix (the
    temporary file's own suffix is .tmp), written beside ``path`` and renamed over it."""
    atomic_write(str(path), lambda tmp: fig.savefig(tmp, dpi=100, format=path.suffix.lstrip(".") or "png"), what)


class _NoBar:
    """Stands in for tqdm when it is not installed or not wanted."""

    def update(self, n: int) -> None:
        pass

    def set_postfix(self, **kwargs: Any) -> None:
        pass

    def close(self) -> None:
        pass


def progress_bar(enabled: bool, total: int, desc: str) -> Any:
    if enabled:
        try:  # imported by name: tqdm is optional (the demo extra) and ships no type stubs
            tqdm = importlib.import_module("tqdm").tqdm
        except ImportError:
            pass
        else:  # on stderr, so that stdout holds only the per-epoch lines
            return tqdm(total=total, desc=desc, unit="sample", unit_scale=True, leave=False,
                        file=sys.stderr, dynamic_ncols=True)
    return _NoBar()


# --- training -------------------------------------------------------------------------------------

def count_correct(scores: np.ndarray, labels: np.ndarray) -> Optional[int]:
    """Correct predictions in a batch, or None when ``scores`` is not one row of class scores per label."""
    if scores.ndim != 2 or len(scores) != len(labels) or scores.shape[1] < 2:
        return None
    return int((scores.argmax(axis=1) == labels).sum())


def train_epoch(session: OrtTrainingSession, data: Arrays, loss_name: str, epoch_batches: Iterator[np.ndarray],
                scheduled: bool, epoch: int, step: int, steps: List[dict], bar: Any) -> float:
    """One pass over the training batches, the first of them global step ``step + 1``; appends a record
    per step to ``steps`` and returns the epoch's mean loss."""
    loss_sum, count = 0.0, 0
    for idx in epoch_batches:
        lr = session.getLearningRate()  # the rate this step runs at
        with session.trainStep({name: array[idx] for name, array in data.items()}, [loss_name]) as result:
            loss = float(result.get(0).getValue())
        if not math.isfinite(loss):
            raise OrtException(f"training diverged: the loss is {loss} at step {step + 1}; try a lower --lr")
        session.optimizerStep()
        session.lazyResetGrad()
        if scheduled:
            session.schedulerStep()  # the rate for the next step
        step += 1
        loss_sum, count = loss_sum + loss * len(idx), count + len(idx)
        steps.append({"step": step, "epoch": epoch, "loss": loss, "lr": lr})
        bar.set_postfix(loss=f"{loss_sum / count:.4f}", lr=f"{lr:.2e}", refresh=False)
        bar.update(len(idx))
    if not count:  # load_dataset makes sure of a batch: this is for callers that did not use it
        raise UsageError("the training split holds no batch to train on (fewer samples than one batch)")
    return loss_sum / count


def evaluate(session: OrtTrainingSession, data: Arrays, loss_name: str, scores: Optional[str],
             labels: Optional[str], batch_size: int, drop_last: bool) -> Tuple[float, Optional[float]]:
    """Mean validation loss, and accuracy when ``scores`` (an eval output) and ``labels`` are known."""
    wanted = [loss_name] + ([scores] if scores else [])
    total_loss, count = 0.0, 0
    correct: Optional[int] = 0 if scores and labels else None
    for idx in batches(np.arange(len(next(iter(data.values())))), batch_size, drop_last):
        with session.evalStep({name: array[idx] for name, array in data.items()}, wanted) as result:
            total_loss += float(result.get(0).getValue()) * len(idx)  # the loss is a batch mean
            if correct is not None and labels is not None:
                batch_correct = count_correct(result.get(1).getValue(), data[labels][idx])
                correct = None if batch_correct is None else correct + batch_correct
        count += len(idx)
    if not count:
        raise UsageError("the validation split holds no batch to evaluate (fewer samples than one batch)")
    return total_loss / count, (None if correct is None else correct / count)


def inference_check(env: OrtEnvironment, model: Path, data: Arrays, labels: Optional[str],
                    batch_size: int, drop_last: bool) -> Tuple[List[str], Optional[float]]:
    """Run the exported model on the validation set with an ordinary ``OrtSession``: its output names,
    and the accuracy of its first output when that is one score per class."""
    with env.createSession(model) as session:
        names, outputs = session.getInputNames(), list(session.getOutputNames())
        count = 0
        correct: Optional[int] = 0 if labels is not None else None
        for idx in batches(np.arange(len(next(iter(data.values())))), batch_size, drop_last):
            with session.run({name: data[name][idx] for name in names}, [outputs[0]]) as result:
                if correct is not None and labels is not None:
                    batch_correct = count_correct(result.get(0).getValue(), data[labels][idx])
                    correct = None if batch_correct is None else correct + batch_correct
            count += len(idx)
    return outputs, (None if correct is None else correct / count)


def train(args: argparse.Namespace) -> int:
    started = time.monotonic()
    env = OrtEnvironment.getEnvironment()
    artifacts = find_artifacts(args.artifacts)
    data_path = find_dataset(args.data, args.artifacts)
    out: Path = args.out
    if args.resume is not None:
        checkpoint = Path(args.resume) if args.resume else out / "last_checkpoint"
        if not checkpoint.is_file():
            raise UsageError(f"checkpoint {str(checkpoint)!r} to resume from does not exist")
    else:
        checkpoint = artifacts["checkpoint"]
    out.mkdir(parents=True, exist_ok=True)

    # The session, then what the data must look like: its input names come from the session.
    OrtTrainingSession.setSeed(args.seed)
    with SessionOptions() as options:
        if args.threads:
            options.setIntraOpNumThreads(args.threads)
        session = env.createTrainingSession(checkpoint, artifacts["train"], artifacts["eval"], artifacts["optimizer"], options)
    with session:
        splits = {"train": list(session.getTrainInputNames()), "val": list(session.getEvalInputNames())}
        infos = input_infos(env, artifacts["eval"], sorted(set(splits["train"]) | set(splits["val"])))
        data = load_dataset(data_path, splits, infos)
        loss_name = session.getTrainOutputNames()[0]  # generate_artifacts puts the loss first
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

        batch_size, drop_last = args.batch_size, False
        model_batch = fixed_batch(infos)
        if model_batch is not None:
            if model_batch != batch_size:
                raise UsageError(f"the model's inputs fix the batch size at {model_batch}: pass --batch-size {model_batch}")
            drop_last = True  # a smaller last batch would not fit the model
        n_train, n_val = len(data["train"][splits["train"][0]]), len(data["val"][splits["val"][0]])
        steps_per_epoch = n_train // batch_size if drop_last else -(-n_train // batch_size)
        total_steps = args.epochs * steps_per_epoch

        # Where to start: zero, or the epoch and step stored in the checkpoint being resumed.
        epoch = step = 0
        best: Optional[Tuple[float, float]] = None  # the best (accuracy, -loss) so far; accuracy 0 without labels
        steps: List[dict] = []
        epochs: List[dict] = []
        if args.resume is not None:
            try:
                epoch, step = session.getIntProperty(EPOCH), session.getIntProperty(STEP)
            except OrtException:
                raise UsageError(
                    f"checkpoint {str(checkpoint)!r} has no {EPOCH!r}/{STEP!r} properties: "
                    "only checkpoints ort-cffi-train wrote can be resumed"
                ) from None
            if (out / "best_checkpoint").is_file():  # the best to beat is only meaningful beside its file
                best = (session.getFloatProperty(BEST_ACC), -session.getFloatProperty(BEST_LOSS))
            steps, epochs = load_history(out, epoch, step)

        if args.schedule == "linear":
            warmup = min(steps_per_epoch if args.warmup_steps is None else args.warmup_steps, total_steps)
            session.registerLinearLRScheduler(warmup, total_steps, args.lr)
            # Registering sets the rate to --lr; one schedulerStep sets the rate for the steps already
            # taken (0, or those of the resumed checkpoint's optimizer state), so that warm-up starts
            # at the first step and a resumed run continues the schedule where it stopped.
            session.schedulerStep()
            schedule = f"linear schedule, warm-up {warmup} steps"
        else:
            session.setLearningRate(args.lr)
            schedule = "constant"

        print(f"ort-cffi-train: ort_cffi {__version__}, ONNX Runtime {env.getVersion()}")
        embedded = " (the embedded digits example)" if args.artifacts == DEFAULT_ARTIFACTS else ""
        print(f"artifacts: {args.artifacts}{embedded}")
        described = ", ".join(f"{n} {infos[n].dtype} {_shape(infos[n].shape)}" for n in splits["train"] if n in infos)
        print(f"dataset:   {data_path} ({n_train} train, {n_val} validation; {described})")
        print(f"training:  {args.epochs} epochs x {steps_per_epoch} steps, batch {batch_size}, "
              f"lr {args.lr:g} ({schedule}), seed {args.seed}")
        if epoch:
            print(f"resuming:  {checkpoint} at epoch {epoch}, step {step}")
        print(f"output:    {out}")

        # The epochs: train, validate, checkpoint, record.
        try:
            for epoch in range(epoch + 1, args.epochs + 1):
                epoch_started = time.monotonic()
                # The order depends on (seed, epoch) only, so a resumed run sees the batches it would have.
                order = np.random.default_rng([args.seed, epoch]).permutation(n_train)
                bar = progress_bar(not args.no_progress, n_train, f"epoch {epoch}/{args.epochs}")
                try:
                    train_loss = train_epoch(session, data["train"], loss_name, batches(order, batch_size, drop_last),
                                             args.schedule == "linear", epoch, step, steps, bar)
                finally:
                    bar.close()
                step, lr = steps[-1]["step"], steps[-1]["lr"]

                val_loss, val_acc = evaluate(session, data["val"], eval_outputs[0], scores, labels, batch_size, drop_last)
                # Higher accuracy wins, lower loss breaks ties. Rounded to float32 as the properties
                # store them, so that a resumed run compares like with like.
                score = (float(np.float32(val_acc or 0.0)), -float(np.float32(val_loss)))
                improved = best is None or score > best
                best = score if improved or best is None else best
                session.addProperty(EPOCH, epoch)
                session.addProperty(STEP, step)
                session.addProperty(BEST_ACC, best[0])
                session.addProperty(BEST_LOSS, -best[1])
                if improved:  # saved first: a crash before last_checkpoint replays this epoch, same result
                    session.saveCheckpoint(out / "best_checkpoint", True)
                session.saveCheckpoint(out / "last_checkpoint", True)  # with Adam's state, for --resume
                record = {"epoch": epoch, "step": step, "train_loss": train_loss, "val_loss": val_loss,
                          "val_accuracy": val_acc, "lr": lr, "seconds": round(time.monotonic() - epoch_started, 3),
                          "best": improved}
                epochs.append(record)
                write_json(out / "metrics.json", _metrics(args, data_path, steps, epochs, None), "metrics")
                accuracy = f"  val acc {val_acc:.4f}" if val_acc is not None else ""
                print(f"epoch {epoch:{len(str(args.epochs))}d}/{args.epochs}  train loss {train_loss:.4f}  "
                      f"val loss {val_loss:.4f}{accuracy}  lr {lr:.2e}{'  *best' if improved else ''}", flush=True)
        except KeyboardInterrupt:
            print(f"\ninterrupted: resume with --out {out} --resume", file=sys.stderr)
            return 130

    # The end: export the best parameters, run the exported model, write the metrics and the plot.
    best_epochs = [e for e in epochs if e["best"]]
    title = f"{args.artifacts.resolve().name}: {len(epochs)} epochs"
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
    names, inference_acc = inference_check(env, model_path, data["val"], labels, batch_size, drop_last)
    print(f"inference model: {model_path} (from {source.name}; outputs {', '.join(names)})")

    files = [out / "metrics.json"]
    write_json(out / "metrics.json", _metrics(args, data_path, steps, epochs, {
        "model": model_path.name, "outputs": names, "val_accuracy": inference_acc}), "metrics")
    if not args.no_plot and steps:
        try:
            plot(out / "training.png", steps, epochs, title)
            files.append(out / "training.png")
        except ImportError:
            print('no plot: matplotlib is not installed (pip install "ort_cffi[demo]")', file=sys.stderr)
    print(f"wrote {', '.join(str(f) for f in files)} in {time.monotonic() - started:.1f} s")
    if inference_acc is not None:
        print(f"inference model accuracy on validation: {inference_acc:.4f}")
    return 0


def _metrics(args: argparse.Namespace, data_path: Path, steps: List[dict], epochs: List[dict],
             inference: Optional[dict]) -> dict:
    config = {key: (str(value) if isinstance(value, Path) else value) for key, value in vars(args).items()}
    config["data"] = str(data_path)
    return {"config": config, "epochs": epochs, "steps": steps, "inference": inference}


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    try:
        return train(args)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OrtException as exc:  # the runtime refused something: its message says what, no traceback
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
