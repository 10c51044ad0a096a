"""The training loop of ``ort-cffi-train``: epochs of train steps through the Java-style API, validation,
checkpoints with the run's state, and the check of the exported inference model. ``ort_cffi.flower`` uses
``evaluate``, ``count_correct`` and ``inference_check`` too."""
from __future__ import annotations

import importlib
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from ort_cffi import OrtEnvironment, OrtException, OrtTrainingSession
from ort_cffi._facade.sessions.signature import unknown_values
from ort_cffi.trainer.batchnorm import reestimate_batchnorm
from ort_cffi.trainer.config import BEST_ACC, BEST_LOSS, CONFIG, EPOCH, STEP, RunConfig
from ort_cffi.trainer.data import Arrays, batches
from ort_cffi.trainer.errors import SetupError
from ort_cffi.trainer.output import writing


class _NoBar:
    """Stands in for tqdm when it is not installed or not wanted."""

    def update(self, n: int) -> None:
        pass

    def set_postfix(self, **kwargs: Any) -> None:
        pass

    def close(self) -> None:
        pass


def progress_bar(enabled: bool, total: int, desc: str) -> Any:
    """A tqdm bar on stderr counting samples, or a stand-in that shows nothing (not enabled, or no tqdm)."""
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

def count_correct(scores: np.ndarray, labels: np.ndarray, class_axis: int = 1) -> Optional[int]:
    """Correct predictions in a batch: the argmax of ``scores`` along ``class_axis`` against ``labels``, one
    per sample ([N, C] and [N]), per token ([N, T, V] along 2 and [N, T]) or per pixel ([N, C, H, W] along 1
    and [N, H, W]). None when the scores are no class scores of the labels' shape."""
    if scores.ndim < 2 or not 0 < class_axis < scores.ndim or scores.shape[class_axis] < 2:
        return None
    predicted = scores.argmax(axis=class_axis)
    if predicted.shape != labels.shape:
        return None
    return int((predicted == labels).sum())


def train_epoch(session: OrtTrainingSession, data: Arrays, loss_name: str, epoch_batches: Iterator[np.ndarray],
                rate: Optional[Callable[[int], float]], epoch: int, step: int, steps: List[dict], bar: Any,
                statistics: Sequence[Tuple[str, str]] = ()) -> float:
    """One pass over the training batches, the first of them global step ``step + 1``; appends a record
    per step to ``steps`` and returns the epoch's mean loss. ``rate(step)``: the learning rate of the step that
    follows ``step`` steps taken, set before it (None: the session's rate stays). ``statistics``: (training output, frozen
    parameter) pairs, BatchNormalization's running statistics as the step updated them, written back into
    the parameters after each step (artifacts.json's ``batchnorm_statistics``)."""
    loss_sum, count = 0.0, 0
    state = session.getCheckpointState() if statistics else None
    wanted = [loss_name] + [output for output, _ in statistics]
    for idx in epoch_batches:
        if rate is not None:
            session.setLearningRate(rate(step))
        lr = session.getLearningRate()  # the rate this step runs at
        with session.trainStep({name: array[idx] for name, array in data.items()}, wanted) as result:
            loss = float(result.get(0).getValue())
            updated = [np.array(result.get(i + 1).getValue()) for i in range(len(statistics))]
        if not math.isfinite(loss):
            raise OrtException(f"training diverged: the loss is {loss} at step {step + 1}; try a lower --lr")
        session.optimizerStep()
        session.lazyResetGrad()
        if state is not None:
            for (_, parameter), value in zip(statistics, updated):
                state.updateParameter(parameter, value)
        step += 1
        loss_sum, count = loss_sum + loss * len(idx), count + len(idx)
        steps.append({"step": step, "epoch": epoch, "loss": loss, "lr": lr})
        bar.set_postfix(loss=f"{loss_sum / count:.4f}", lr=f"{lr:.2e}", refresh=False)
        bar.update(len(idx))
    if not count:  # load_dataset makes sure of a batch: this is for callers that did not use it
        raise SetupError("the training split holds no batch to train on (fewer samples than one batch)")
    return loss_sum / count


def evaluate(session: OrtTrainingSession, data: Arrays, loss_name: str, scores: Optional[str],
             labels: Optional[str], batch_size: int, drop_last: bool,
             class_axis: int = 1) -> Tuple[float, Optional[float]]:
    """Mean validation loss, and accuracy when ``scores`` (an eval output, classes along ``class_axis``)
    and ``labels`` are known: the share of labels predicted (per sample, per token or per pixel)."""
    wanted = [loss_name] + ([scores] if scores else [])
    total_loss, count, labelled = 0.0, 0, 0
    correct: Optional[int] = 0 if scores and labels else None
    for idx in batches(np.arange(len(next(iter(data.values())))), batch_size, drop_last):
        with session.evalStep({name: array[idx] for name, array in data.items()}, wanted) as result:
            total_loss += float(result.get(0).getValue()) * len(idx)  # the loss is a batch mean
            if correct is not None and labels is not None:
                batch_correct = count_correct(result.get(1).getValue(), data[labels][idx], class_axis)
                correct = None if batch_correct is None else correct + batch_correct
                labelled += data[labels][idx].size
        count += len(idx)
    if not count:
        raise SetupError("the validation split holds no batch to evaluate (fewer samples than one batch)")
    return total_loss / count, (None if correct is None else correct / labelled)


def inference_check(env: OrtEnvironment, model: Path, data: Arrays, labels: Optional[str],
                    batch_size: int, drop_last: bool, scores: Optional[str] = None,
                    class_axis: int = 1) -> Tuple[List[str], Optional[float]]:
    """Run the exported model on the validation set with an ordinary ``OrtSession``: its output names,
    and the accuracy of ``scores`` (default: its first output) when that holds class scores along
    ``class_axis``."""
    with env.createSession(model) as session:
        names, outputs = session.getInputNames(), list(session.getOutputNames())
        read = scores if scores in outputs else outputs[0]
        labelled = 0
        correct: Optional[int] = 0 if labels is not None else None
        for idx in batches(np.arange(len(next(iter(data.values())))), batch_size, drop_last):
            with session.run({name: data[name][idx] for name in names}, [read]) as result:
                if correct is not None and labels is not None:
                    batch_correct = count_correct(result.get(0).getValue(), data[labels][idx], class_axis)
                    correct = None if batch_correct is None else correct + batch_correct
                    labelled += data[labels][idx].size
    return outputs, (None if correct is None or not labelled else correct / labelled)


@dataclass
class Outputs:
    """The names the loop reads: the training loss, the eval loss, the eval output with class scores and
    the labels input (both None when accuracy cannot be measured)."""

    loss: str
    eval_loss: str
    scores: Optional[str]
    labels: Optional[str]
    class_axis: int = 1  # the axis of ``scores`` that holds the classes
    statistics: Tuple[Tuple[str, str], ...] = ()  # (training output, frozen parameter): running statistics
    batchnorm: Tuple[Dict[str, Any], ...] = ()  # artifacts.json's batchnorm_statistics, for reestimate_batchnorm


@dataclass
class Plan:
    """The epochs this invocation trains, and how: from ``first_epoch`` to ``config.epochs``."""

    config: RunConfig
    first_epoch: int
    step: int
    steps_per_epoch: int
    drop_last: bool
    progress: bool
    rate: Optional[Callable[[int], float]] = None  # the learning rate after a number of steps (schedule.learning_rate)


def run_epochs(session: OrtTrainingSession, data: Dict[str, Arrays], plan: Plan, names: Outputs, out: Path,
               best: Optional[Tuple[float, float]], steps: List[dict], epochs: List[dict],
               record: Callable[[], None], before_val_loss: Optional[float] = None) -> Optional[int]:
    """Train, validate, checkpoint and record each epoch from ``plan.first_epoch`` on. Each epoch stores
    the epoch, step, best score and the run's configuration as checkpoint properties, saves
    ``best_checkpoint`` when validation improved and ``last_checkpoint`` always (with the optimizer state,
    for --resume), appends to ``steps`` and ``epochs``, calls ``record()`` and prints its line. With
    ``config.patience``, stops once the validation loss has not improved for that many epochs, and returns the
    epoch it stopped after (None when it ran to the end); ``best_checkpoint`` keeps the best epoch."""
    config, step = plan.config, plan.step
    n_train = len(next(iter(data["train"].values())))
    width = len(str(config.epochs))
    waited = epochs_without_improvement(epochs, before_val_loss)
    if config.patience and epochs and waited >= config.patience and plan.first_epoch <= config.epochs:
        # a resumed run that --patience had stopped: it stays stopped unless the patience was raised (--override)
        print(f"early stop: the run stopped after epoch {epochs[-1]['epoch']}, {waited} epochs without a lower validation "
              f"loss (--patience {config.patience}); to train further, resume with a higher --patience --override",
              flush=True)
        return int(epochs[-1]["epoch"])
    for epoch in range(plan.first_epoch, config.epochs + 1):
        epoch_started = time.monotonic()
        # The order depends on (seed, epoch) only, so a resumed run sees the batches it would have.
        order = np.random.default_rng([config.seed, epoch]).permutation(n_train)
        bar = progress_bar(plan.progress, n_train, f"epoch {epoch}/{config.epochs}")
        try:
            train_loss = train_epoch(session, data["train"], names.loss, batches(order, config.batch_size, plan.drop_last),
                                     plan.rate, epoch, step, steps, bar, names.statistics)
        finally:
            bar.close()
        step, lr = steps[-1]["step"], steps[-1]["lr"]
        reestimated = None
        if config.bn_reestimate and names.batchnorm:  # the statistics of the weights validated and saved
            train = data["train"]
            reestimated = reestimate_batchnorm(
                session, names.batchnorm, ({name: array[idx] for name, array in train.items()}
                                           for idx in batches(np.arange(n_train), config.batch_size, plan.drop_last)))

        val_loss, val_acc = evaluate(session, data["val"], names.eval_loss, names.scores, names.labels,
                                     config.batch_size, plan.drop_last, names.class_axis)
        # Higher accuracy wins, lower loss breaks ties. Rounded to float32 as the properties store them,
        # so that a resumed run compares like with like.
        score = (float(np.float32(val_acc or 0.0)), -float(np.float32(val_loss)))
        improved = best is None or score > best
        warning = exploded(val_loss, train_loss, epochs, before_val_loss)
        if warning:
            print(f"warning: epoch {epoch}: {warning}", file=sys.stderr, flush=True)
            improved = False  # such parameters validate with statistics that do not describe them: not "best"
        best = score if improved or best is None else best
        session.addProperty(EPOCH, epoch)
        session.addProperty(STEP, step)
        session.addProperty(BEST_ACC, best[0])
        session.addProperty(BEST_LOSS, -best[1])
        session.addProperty(CONFIG, config.to_json())
        if improved:  # saved first: a crash before last_checkpoint replays this epoch, same result
            with writing(out / "best_checkpoint"):
                session.saveCheckpoint(out / "best_checkpoint", True)
        with writing(out / "last_checkpoint"):
            session.saveCheckpoint(out / "last_checkpoint", True)  # with Adam's state, for --resume
        epochs.append({"epoch": epoch, "step": step, "train_loss": train_loss, "val_loss": val_loss,
                       "val_accuracy": val_acc, "lr": lr, "seconds": round(time.monotonic() - epoch_started, 3),
                       "best": improved, "bn_reestimate": None if reestimated is None else {
                           "layers": reestimated.layers, "batches": reestimated.batches,
                           "seconds": round(reestimated.seconds, 3)}})
        with writing(out / "metrics.json"):
            record()
        accuracy = f"  val acc {val_acc:.4f}" if val_acc is not None else ""
        statistics = f"  bn re-estimated ({reestimated.seconds:.1f} s)" if reestimated is not None else ""
        print(f"epoch {epoch:{width}d}/{config.epochs}  train loss {train_loss:.4f}  "
              f"val loss {val_loss:.4f}{accuracy}  lr {lr:.2e}{statistics}{'  *best' if improved else ''}", flush=True)
        waited = epochs_without_improvement(epochs, before_val_loss)
        if config.patience and waited >= config.patience and epoch < config.epochs:
            print(f"early stop: the validation loss has not improved for {waited} epochs (--patience "
                  f"{config.patience}); the best epoch is kept in best_checkpoint", flush=True)
            return epoch
    return None


def epochs_without_improvement(epochs: List[dict], before_val_loss: Optional[float]) -> int:
    """How many epochs have passed since the lowest validation loss (that before training included)."""
    losses = ([before_val_loss] if before_val_loss is not None else []) + [e["val_loss"] for e in epochs]
    if not losses:
        return 0
    finite = [loss if math.isfinite(loss) else math.inf for loss in losses]
    return len(finite) - 1 - finite.index(min(finite))


EXPLODED = 100.0  # a validation loss this many times its lowest so far, while training loss falls


def exploded(val_loss: float, train_loss: float, epochs: List[dict], before_val_loss: Optional[float]) -> Optional[str]:
    """Why this epoch's validation cannot be trusted, or None: a validation loss grown by two orders of
    magnitude (or not finite) while the training loss fell is the mark of an eval graph that normalises with
    statistics training did not update (BatchNormalization's running mean and variance, onnxruntime #19370),
    not of overfitting."""
    earlier = [e["val_loss"] for e in epochs] + ([before_val_loss] if before_val_loss is not None else [])
    trained = [e["train_loss"] for e in epochs]
    if not earlier or (trained and train_loss >= trained[-1]):
        return None
    lowest = min(earlier)
    if math.isfinite(val_loss) and val_loss <= EXPLODED * max(lowest, 1e-12):
        return None
    return (f"validation loss {val_loss:.4g} is over {EXPLODED:g} times its lowest so far ({lowest:.4g}) while the "
            "training loss falls: the eval model does not compute what training does (BatchNormalization running "
            "statistics that training did not update?); this epoch is not kept as best")


def check_export(eval_model: Path, names: List[str], eval_outputs: List[str]) -> None:
    """Refuse export names the eval model lacks before training, so that a wrong --export-outputs fails
    now, not after the last epoch: a name check against the eval graph's values (the runtime exports any
    of them, not only the outputs: docs/internals/runtime.md §4), with nothing written. The export itself
    runs at the end, and what the runtime refuses there is reported as it says it."""
    unknown = unknown_values(str(eval_model), [name for name in names if name not in eval_outputs])
    if unknown:
        several = len(unknown) > 1
        raise SetupError(
            f"cannot export {', '.join(unknown)} for inference: the eval model has no value of "
            f"{'these names' if several else 'that name'} (its outputs are {', '.join(eval_outputs)}); name "
            "the inference model's outputs with --export-outputs"
        )
