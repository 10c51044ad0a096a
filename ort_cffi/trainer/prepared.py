"""A run once its training session is open (``TrainingJob`` makes it): ``Prepared`` reads the model's inputs and
outputs, loads the dataset as they say (``sources``), chooses the labels, scores and batches, sets the learning-rate
schedule, and validates; ``History`` is what the run records in metrics.json."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from ort_cffi import OrtEnvironment, OrtTrainingSession, backend
from ort_cffi.artifacts import read_manifest
from ort_cffi.trainer.config import RunConfig, Resumed
from ort_cffi.trainer.data import (
    DYNAMIC_BATCH_HINT,
    check_batch_size,
    check_labels,
    eval_signature,
    fixed_batch,
    loss_labels,
    running_statistics,
    shape_text,
)
from ort_cffi.trainer.errors import SetupError
from ort_cffi.trainer.loop import Outputs, Plan, check_export, evaluate
from ort_cffi.trainer.output import load_history, write_json
from ort_cffi.trainer.schedule import describe as describe_schedule
from ort_cffi.trainer.schedule import learning_rate
from ort_cffi.trainer.sources import DataOptions, ModelFeed, load_data


@dataclass
class History:
    """What a run records in metrics.json: the validation before training, per step, per epoch, the export."""

    out: Path
    best: Optional[Tuple[float, float]] = None  # the best (accuracy, -loss) so far; accuracy 0 without labels
    steps: List[dict] = field(default_factory=list)
    epochs: List[dict] = field(default_factory=list)
    before: Optional[dict] = None  # the validation before training, kept in metrics.json across resumes
    inference: Optional[dict] = None
    inference_accuracy: Optional[float] = None
    files: List[Path] = field(default_factory=list)
    stopped_early: Optional[int] = None  # the epoch --patience stopped the run after

    def record(self, out: Path, config: RunConfig, options: Dict[str, Any]) -> None:
        """Write metrics.json; ``options``: the settings the run was given, as JSON values."""
        runtime = {"onnxruntime": OrtEnvironment.getEnvironment().getVersion(), "backend": backend()}
        write_json(out / "metrics.json", {"config": config.__dict__, "options": options, "runtime": runtime,
                                          "before": self.before, "epochs": self.epochs, "steps": self.steps,
                                          "inference": self.inference, "stopped_early": self.stopped_early}, "metrics")
        if out / "metrics.json" not in self.files:
            self.files.insert(0, out / "metrics.json")


class Prepared:
    """The dataset checked against the open session's inputs, the outputs to read and export, the batches."""

    def __init__(self, env: OrtEnvironment, session: OrtTrainingSession, files: Dict[str, Path], folder: Path,
                 data: Path, config: RunConfig, out: Path, export_outputs: Optional[List[str]], progress: bool) -> None:
        self.session, self.files, self.data_path, self.config = session, files, data, config
        self.out, self.progress = out, progress
        self.splits = {"train": list(session.getTrainInputNames()), "val": list(session.getEvalInputNames())}
        inputs, self.outputs = eval_signature(env, files["eval"])  # one inference session, not one per question
        self.infos = {name: inputs[name] for name in sorted(set(self.splits["train"]) | set(self.splits["val"]))
                      if name in inputs}
        eval_outputs = list(session.getEvalOutputNames())
        self.export = export_outputs or eval_outputs[1:]
        if not self.export:
            raise SetupError(
                f"the eval model's only output is the loss ({eval_outputs[0]!r}): name the inference "
                "model's outputs with --export-outputs (e.g. the original model's output)"
            )
        check_export(files["eval"], self.export, eval_outputs)
        # The labels and the class scores: what the artifacts say the loss reads (per sample, token or pixel).
        manifest = read_manifest(folder)
        self.labels, scores, self.class_axis = loss_labels(
            manifest, {n: self.infos[n] for n in self.splits["val"] if n in self.infos})
        if scores is None or scores not in eval_outputs:
            scores = self.export[0]
        self.scores = scores if scores in eval_outputs else None  # accuracy needs scores from evalStep
        train_outputs = list(session.getTrainOutputNames())
        self.names = Outputs(train_outputs[0], eval_outputs[0], self.scores, self.labels,  # loss first
                             self.class_axis, running_statistics(manifest, train_outputs),
                             tuple(entry for entry in (manifest or {}).get("batchnorm_statistics") or ()
                                   if {entry["mean_output"], entry["var_output"]} <= set(train_outputs)))
        where = f"dataset {str(data)!r}"
        classes = -1
        if self.labels is not None and self.scores is not None:
            shape = self.outputs[self.scores].shape
            classes = shape[self.class_axis] if len(shape) > self.class_axis else -1
        # The data, shaped as the model's inputs say (an .npz, an image folder, a CSV or text file).
        target = self.labels  # what the label column feeds: the classes, or a regression loss's target
        if target is None:
            added = [name for name in (manifest or {}).get("added_inputs") or () if name in self.infos]
            target = added[0] if len(added) == 1 else None
        feed = ModelFeed(self.infos, target, classes if classes > 1 else None, files["eval"], inputs)
        self.loaded = load_data(data, self.splits, feed, DataOptions(**config.data.get("options", {})),
                                config.seed)
        self.data = self.loaded.splits
        if classes > 1 and self.labels is not None and self.scores is not None:
            check_labels(self.data, self.labels, classes, self.scores, where,
                         -1 if self.class_axis == len(shape) - 1 else self.class_axis)
        self.drop_last = False
        model_batch = fixed_batch(self.infos)
        if model_batch is not None:
            if model_batch != config.batch_size:
                raise SetupError(f"the model's inputs fix the batch size at {model_batch}: pass --batch-size {model_batch}"
                                 + DYNAMIC_BATCH_HINT)
            self.drop_last = True  # a smaller last batch would not fit the model
        self.n_train = len(self.data["train"][self.splits["train"][0]])
        self.n_val = len(self.data["val"][self.splits["val"][0]])
        if not self.drop_last:
            check_batch_size(config.batch_size, self.n_train, where)
        self.steps_per_epoch = (self.n_train // config.batch_size if self.drop_last
                                else -(-self.n_train // config.batch_size))
        self.schedule = ""

    def start(self, resumed: Optional[Resumed]) -> Tuple[Plan, History]:
        """Where to start (zero, or the resumed checkpoint's epoch and step) and the learning-rate schedule,
        which ends after the remaining epochs: the configured end, unless an override changed the step count."""
        config, out = self.config, self.out
        epoch, step = (resumed.epoch, resumed.step) if resumed is not None else (0, 0)
        history = History(out)
        if resumed is not None:
            if (out / "best_checkpoint").is_file():  # the best to beat is only meaningful beside its file
                history.best = resumed.best
            history.steps, history.epochs, history.before = load_history(out, epoch, step)
        if config.warmup_steps is None:
            config.warmup_steps = self.steps_per_epoch
        total_steps = step + max(0, config.epochs - epoch) * self.steps_per_epoch
        warmup = min(config.warmup_steps, total_steps)
        schedule, peak = config.schedule, config.lr

        def rate(taken: int) -> float:  # set before each step, from the global step: a resume continues it
            return learning_rate(schedule, peak, warmup, max(total_steps, 1), taken)

        self.session.setLearningRate(rate(step))
        self.schedule = describe_schedule(schedule, warmup)
        return Plan(config, epoch + 1, step, self.steps_per_epoch, self.drop_last, self.progress,
                    rate), history

    def describe(self, resumed: Optional[Resumed], checkpoint: Path, restored: bool) -> List[str]:
        config, infos = self.config, self.infos
        described = ", ".join(f"{n} {infos[n].dtype} {shape_text(infos[n].shape)}" for n in self.splits["train"] if n in infos)
        lines = [f"dataset:   {self.data_path} ({self.n_train} train, {self.n_val} validation; {described})"]
        lines += [f"           {line}" for line in [self.loaded.description] + self.loaded.notes if line]
        lines += [f"training:  {config.epochs} epochs x {self.steps_per_epoch} steps, batch {config.batch_size}, "
                 f"lr {config.lr:g} ({self.schedule}), seed {config.seed}"
                 + (f", early stop after {config.patience} epochs without a lower val loss" if config.patience else "")]
        if self.names.batchnorm:
            layers = len(self.names.batchnorm)
            lines.append(f"batchnorm: {layers} layer{'s' if layers > 1 else ''}; running statistics "
                         + ("re-estimated over the training set before each validation" if config.bn_reestimate
                            else "as training moves them (--no-bn-reestimate)"))
        if resumed is not None:
            stored = " with the run's stored configuration" if restored else ""
            lines.append(f"resuming:  {checkpoint} at epoch {resumed.epoch}, step {resumed.step}{stored}")
        return lines

    def validate(self) -> dict:
        """The validation before training (a fresh run's), printed and returned for metrics.json."""
        val_loss, val_acc = evaluate(self.session, self.data["val"], self.names.eval_loss, self.scores, self.labels,
                                     self.config.batch_size, self.drop_last, self.class_axis)
        accuracy = f"  val acc {val_acc:.4f}" if val_acc is not None else ""
        print(f"before training: val loss {val_loss:.4f}{accuracy}", flush=True)
        return {"val_loss": val_loss, "val_accuracy": val_acc}
