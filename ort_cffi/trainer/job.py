"""One training run: ``TrainingJob(TrainSettings(...)).run()``, what ``ort-cffi-train`` does after parsing
its command line, callable from Python without argparse.

A run chooses what to train (``--model``'s artifacts, generated or reused; an artifacts folder; the resumed
run's; or the embedded digits example), settles its configuration (the options given, the defaults, or the
resumed run's), opens one training session, checks the dataset against the session's inputs, trains the
epochs (``loop.run_epochs``), then exports the best checkpoint as an inference model and checks it.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Union

from ort_cffi import OrtEnvironment, OrtTrainingSession, SessionOptions, __version__, backend
from ort_cffi._facade import denormals
from ort_cffi._facade.files import probe_writes
from ort_cffi.artifacts import (
    ALL_PARAMETERS,
    MODEL_OUTPUTS,
    LossType,
    OptimType,
    artifacts_match,
    describe,
    generate_artifacts,
    model_sha256,
    request_options,
)
from ort_cffi.trainer.config import (
    DEFAULTS,
    Resumed,
    RunConfig,
    artifacts_identity,
    check_identity,
    read_checkpoint,
    resume_options,
)
from ort_cffi.trainer.data import DEFAULT_ARTIFACTS, find_artifacts, find_dataset
from ort_cffi.trainer.errors import OutputError, SetupError
from ort_cffi.trainer.lr_finder import AUTO, range_test
from ort_cffi.trainer.model_kind import artifacts_kind
from ort_cffi.trainer.loop import inference_check, run_epochs
from ort_cffi.trainer.output import MadeFolders, plot, write_json, writing
from ort_cffi.trainer.prepared import History, Prepared
from ort_cffi.trainer.sources import RUN_FILE, DataOptions, check_exists, data_identity, decoded, write_metadata
from ort_cffi.trainer.sources.common import FLAGS as DATA_FLAGS

# The files that make a folder a run's: a new run refuses such an --out unless told --resume or --overwrite.
# Where --overwrite generates --model's new artifacts (inside --out) until the pre-flight passed.
STAGED_ARTIFACTS = ".artifacts-staged"
# How the header names the backend that trains (ort_cffi.backend()).
BACKEND_WORDS = {"training-api": "its training API", "engine": "ort_cffi's engine over the inference API"}
RUN_FILES = ("last_checkpoint", "best_checkpoint", "metrics.json", "inference_model.onnx")
# What a new run with --overwrite removes of the old run before its first epoch (artifacts/ aside).
REPLACED_FILES = RUN_FILES + ("training.png", RUN_FILE)

# The settings that choose how --model's artifacts are made, and their flags (for messages).
GENERATION_FLAGS = {"trainable": "--trainable", "frozen": "--frozen", "loss": "--loss", "loss_input": "--loss-input",
                    "optimizer": "--optimizer", "python": "--python",
                    "generator": "--generator", "class_axis": "--class-axis"}


@dataclass
class TrainSettings:
    """What one run is asked to do; None means "the default, or the resumed run's value". Each field is the
    ``ort-cffi-train`` option of the same name (``--batch-size`` is ``batch_size``)."""

    out: Path
    model: Optional[Path] = None
    artifacts: Optional[Path] = None
    trainable: Optional[List[str]] = None
    frozen: Optional[List[str]] = None
    loss: Optional[str] = None
    loss_input: Optional[List[str]] = None
    optimizer: Optional[str] = None
    python: Optional[str] = None  # the interpreter of ONNX Runtime's generator (generate_artifacts' python=)
    generator: Optional[str] = None  # who generates --model's artifacts (generate_artifacts' generator=)
    class_axis: Optional[int] = None  # the scores' class axis for cross-entropy (generate_artifacts' class_axis=)
    data: Optional[Path] = None
    # What the dataset is made of, besides --data (ort_cffi.trainer.sources.DataOptions): kept with the run.
    val_split: Optional[float] = None
    label_column: Optional[str] = None
    text_column: Optional[str] = None
    tokenizer: Optional[str] = None
    normalize: Optional[List[List[float]]] = None
    patience: Optional[int] = None  # stop when the validation loss has not improved for this many epochs
    epochs: Optional[int] = None
    batch_size: Optional[int] = None
    lr: Union[None, float, str] = None  # a number, or "auto": a range test picks it (lr_finder.py)
    schedule: Optional[str] = None
    warmup_steps: Optional[int] = None
    seed: Optional[int] = None
    bn_reestimate: Optional[bool] = None  # BatchNorm statistics re-estimated before each validation (default: on)
    resume: Union[None, bool, str, Path] = None  # True or "": OUT/last_checkpoint; a path: that checkpoint
    override: bool = False
    overwrite: bool = False  # start a new run in an --out that holds one, replacing it
    export_outputs: Optional[List[str]] = None
    threads: int = 0
    # Denormals flushed to zero in the run's sessions (docs/guides/performance.md); None: $ORT_CFFI_FLUSH_DENORMALS,
    # unset means yes
    flush_denormals: Optional[bool] = None
    progress: Optional[bool] = None  # None: a bar only when stderr is a terminal
    no_plot: bool = False
    verbose: bool = False  # describe --model's artifacts with their internals (conversion notes, the loss's name)

    def __post_init__(self) -> None:
        for name in ("out", "model", "artifacts", "data"):  # paths may be given as strings
            value = getattr(self, name)
            if value is not None and not isinstance(value, Path):
                setattr(self, name, Path(value))

    def as_record(self) -> Dict[str, Any]:
        """The settings as JSON values, for metrics.json."""
        return {key: (str(value) if isinstance(value, Path) else value) for key, value in self.__dict__.items()}


@dataclass
class _Source:
    """What a run trains: the artifacts folder and files, the checkpoint it starts from, the dataset."""

    folder: Path
    files: Dict[str, Path]
    checkpoint: Path
    data: Path
    model: Optional[Dict[str, Any]]  # --model's identity (path, sha256, options), or None
    lines: List[str] = field(default_factory=list)  # what to print about the artifacts
    # With --overwrite, --model's new artifacts are generated beside the old ones (``folder`` is then the
    # staging folder) and take their place (``replaces``) only once the pre-flight passed.
    replaces: Optional[Path] = None

    def settle(self) -> None:
        """Move staged artifacts into the place of the ones they replace (after the pre-flight)."""
        if self.replaces is None:
            return
        shutil.rmtree(self.replaces, ignore_errors=True)
        os.replace(self.folder, self.replaces)
        self.folder, self.replaces = self.replaces, None
        self.files = find_artifacts(self.folder)
        self.checkpoint = self.files["checkpoint"]


class TrainingJob:
    """One run of the trainer. ``run()`` returns the exit status (0, or 130 when interrupted); it raises
    SetupError for what the user gave (printed as a usage error), ArtifactsError when --model's artifacts
    cannot be made, OrtException when the runtime refuses something."""

    def __init__(self, settings: TrainSettings) -> None:
        self.settings = settings
        self.env = OrtEnvironment.getEnvironment()
        self.out = settings.out

    def run(self) -> int:
        """Train the run: prints its progress, writes into ``settings.out``, returns 0 (130 when interrupted).

        Raises:
            SetupError: A folder, file, dataset or option given is wrong (before anything is trained).
            OutputError: A file of the run could not be written once training began; it says what was kept.
            ArtifactsError: ``--model``'s artifacts cannot be made.
            OrtException: The runtime refuses something.
        """
        denormals.request(self.settings.flush_denormals)  # before the first session: see the module
        started = time.monotonic()
        if self.settings.resume not in (None, False) and self.settings.overwrite:
            raise SetupError("--resume and --overwrite exclude each other: continue the run in --out, or replace it")
        resumed = self._resumed()
        if resumed is None:
            self._refuse_a_run_in_out()
        undo = _Undo(self.out)  # a failed pre-flight leaves the file system as it found it
        try:
            return self._run(started, resumed, undo)
        except KeyboardInterrupt:  # Ctrl-C outside the epochs (those say how to resume): one line, no traceback
            print(f"\ninterrupted before training began: {self.out} is as it was", file=sys.stderr)
            return 130

    def _run(self, started: float, resumed: Optional[Resumed], undo: "_Undo") -> int:
        try:
            source = self._source(resumed)
            config, notes = self._config(source, resumed)
            try:
                self.out.mkdir(parents=True, exist_ok=True)
            except OSError as error:
                raise SetupError(f"--out {str(self.out)!r} cannot be the run's folder: {error.strerror}") from None
            try:  # every file of the run goes into --out, each by a temporary file renamed over it
                probe_writes(str(self.out))
            except OSError as error:
                raise SetupError(f"--out {str(self.out)!r} cannot be written ({error.strerror}: a probe file could not "
                                 "be created, written and renamed there): nothing was trained; choose another --out, "
                                 "or make this one writable") from None

            OrtTrainingSession.setSeed(config.seed)
            with SessionOptions() as session_options:
                if self.settings.threads:
                    session_options.setIntraOpNumThreads(self.settings.threads)
                denormals.apply(session_options)
                session = self.env.createTrainingSession(source.checkpoint, source.files["train"], source.files["eval"],
                                                         source.files["optimizer"], session_options)
        except BaseException:
            undo()
            raise
        with session:
            try:
                prepared = Prepared(self.env, session, source.files, source.folder, source.data, config, self.out,
                                    self.settings.export_outputs, _progress(self.settings))
                if config.lr == AUTO:  # a range test from the run's starting checkpoint, in a session of its own
                    found = range_test(self.env, source.files, source.checkpoint, prepared.data["train"],
                                       prepared.names.loss, config.batch_size, config.seed, self.settings.threads)
                    fallback = artifacts_kind(source.files["eval"], source.checkpoint).lr
                    config.lr = found.lr if found.lr is not None else fallback
                    notes.append(found.describe(fallback))
                plan, history = prepared.start(resumed)
                print(f"ort-cffi-train: ort_cffi {__version__}, ONNX Runtime {self.env.getVersion()}, "
                      f"{BACKEND_WORDS[backend()]}")
                for line in source.lines + prepared.describe(resumed, source.checkpoint, bool(resumed and resumed.config)):
                    print(line)
                for note in notes:
                    print(note)
                print(f"output:    {self.out}")
                if resumed is None:  # where the model starts from, on the task at hand
                    history.before = prepared.validate()
            except BaseException:
                undo()
                raise
            if resumed is None and self.settings.overwrite:
                self._remove_old_run(source)
                source.settle()
            if plan.first_epoch > config.epochs:
                print(f"nothing left to do: the checkpoint is at epoch {plan.first_epoch - 1} and the run has "
                      f"{config.epochs} epochs; to train further, resume with --epochs N (more than "
                      f"{plan.first_epoch - 1}) --override")
            try:
                history.stopped_early = run_epochs(
                    session, prepared.data, plan, prepared.names, self.out, history.best, history.steps, history.epochs,
                    lambda: history.record(self.out, config, self.settings.as_record()),
                    (history.before or {}).get("val_loss"))
            except KeyboardInterrupt:
                if resumed is None and not (self.out / "last_checkpoint").exists():
                    # No epoch ended: nothing to resume. What the run made goes, as after a failed pre-flight.
                    (self.out / "best_checkpoint").unlink(missing_ok=True)
                    undo()
                    print(f"\ninterrupted before the first epoch ended: nothing was kept in {self.out}", file=sys.stderr)
                    return 130
                print(f"\ninterrupted: resume with --out {self.out} --resume", file=sys.stderr)
                return 130
            except OutputError as error:
                error.kept = self._kept(history, config, trained=False)
                raise
        try:
            self._finish(source, prepared, history, config)
        except OutputError as error:
            error.kept = self._kept(history, config, trained=True)
            raise
        except KeyboardInterrupt:
            print(f"\ninterrupted while exporting: the trained checkpoints are kept in {self.out}; export them with: "
                  f"ort-cffi-train --out {self.out} --resume", file=sys.stderr)
            return 130
        print(f"wrote {', '.join(str(f) for f in history.files)} in {time.monotonic() - started:.1f} s")
        if history.inference_accuracy is not None:
            print(f"inference model accuracy on validation: {history.inference_accuracy:.4f}")
        return 0

    def _kept(self, history: History, config: RunConfig, trained: bool) -> str:
        """What a run that could not write a file kept, and how to go on from it (OutputError's ``kept``)."""
        out = self.out
        files = [name for name in RUN_FILES if (out / name).is_file()]
        if not history.epochs or "last_checkpoint" not in files:
            left = f" ({', '.join(files)} left from the attempt)" if files else ""
            return (f"Nothing of this run's training was kept: no epoch could be saved{left}. Make room in {out}, "
                    "or choose another --out, and run again")
        epoch = history.epochs[-1]["epoch"]
        if trained:
            return (f"The training is kept: {', '.join(files)} in {out} (last_checkpoint at epoch {epoch} of "
                    f"{config.epochs}); once {out} can be written, export it with: ort-cffi-train --out {out} --resume")
        return (f"Kept: {', '.join(files)} in {out}, last_checkpoint at epoch {epoch} of {config.epochs}; once {out} "
                f"can be written, continue with: ort-cffi-train --out {out} --resume")

    # --- before the session --------------------------------------------------------------------------------

    def _refuse_a_run_in_out(self) -> None:
        """A new run never replaces one silently (it lost 64 epochs of checkpoints to a forgotten --resume):
        an --out that holds a run is refused unless --overwrite, saying what was probably meant, --resume
        for a run that stopped before its end, --overwrite or another --out for a finished one."""
        out = self.out
        found = [name for name in RUN_FILES if os.path.lexists(out / name)]
        if self.settings.overwrite or not found:
            return
        if "last_checkpoint" not in found:  # nothing to resume, but files a new run would write over
            raise SetupError(
                f"{out} holds {', '.join(found)} of an earlier run (and no last_checkpoint to resume): a run's files "
                "are never overwritten unless asked. To train in this folder, replacing them, pass --overwrite; or "
                "write the new run to another --out")
        try:
            metrics = json.loads((out / "metrics.json").read_text())
            epochs = metrics["epochs"][-1]["epoch"] if metrics["epochs"] else 0
            total, finished = metrics["config"]["epochs"], metrics.get("inference") is not None
        except (OSError, ValueError, KeyError, TypeError, IndexError):
            epochs, total, finished = None, None, False  # no readable record: treated as unfinished, to be safe
        if finished:
            raise SetupError(
                f"{out} holds a finished run ({epochs} of {total} epochs, inference model exported): a run is never "
                "overwritten unless asked. To train again in this folder, replacing it, pass --overwrite; or write "
                "the new run to another --out")
        stopped = f"stopped after epoch {epochs} of {total}" if epochs is not None else "did not finish"
        raise SetupError(
            f"{out} holds a run that {stopped}: continue it with --resume (ort-cffi-train --out {out} --resume), "
            "or write the new run to another --out (--overwrite would discard it)")

    def _remove_old_run(self, source: _Source) -> None:
        """--overwrite, once the pre-flight passed: the old run's files go before the first epoch, so that
        none of them (a better best_checkpoint, a stale inference model) passes for the new run's. Its
        artifacts/ goes too, unless the new run trains them (--model reused or regenerated them)."""
        for name in REPLACED_FILES:
            (self.out / name).unlink(missing_ok=True)
        old_artifacts = self.out / "artifacts"
        trained = source.replaces or source.folder  # where the artifacts this run trains will be
        if old_artifacts.is_dir() and old_artifacts.resolve() != trained.resolve():
            shutil.rmtree(old_artifacts)

    def _resumed(self) -> Optional[Resumed]:
        resume = self.settings.resume
        if resume is None or resume is False:
            return None
        checkpoint = self.out / "last_checkpoint" if resume is True or resume == "" else Path(resume)
        if not checkpoint.is_file():
            raise SetupError(f"checkpoint {str(checkpoint)!r} to resume from does not exist")
        return read_checkpoint(checkpoint)

    def _source(self, resumed: Optional[Resumed]) -> _Source:
        """What to train: --model's artifacts, --artifacts, the resumed run's, or the embedded example."""
        settings, stored = self.settings, resumed.config if resumed is not None else None
        lines: List[str] = []
        model: Optional[Dict[str, Any]] = stored.model if stored is not None else None
        replaces: Optional[Path] = None
        if settings.model is not None:
            folder, model, lines = self._model_artifacts(resumed)
            if folder.name == STAGED_ARTIFACTS:
                replaces = self.out / "artifacts"
        elif settings.artifacts is not None:
            folder = settings.artifacts
        elif stored is not None:
            folder = Path(stored.artifacts["path"])
            if not folder.is_dir():
                raise SetupError(f"the artifacts folder of the run being resumed, {str(folder)!r}, no longer exists: "
                                 "name it with --artifacts DIR")
        else:
            folder = DEFAULT_ARTIFACTS
        if not lines and model is not None and model.get("path"):  # a resumed --model run: named by its model
            lines = [f"artifacts: {folder} (the run's, made from {model['path']})"]
        if not lines:
            lines = [f"artifacts: {folder}{' (the embedded digits example)' if folder == DEFAULT_ARTIFACTS else ''}"]
        files = find_artifacts(folder)
        checkpoint = files["checkpoint"] if resumed is None else resumed.path
        if settings.data is None and stored is not None:
            data = Path(stored.data["path"])
            if not data.exists():
                raise SetupError(f"the dataset of the run being resumed, {str(data)!r}, no longer exists: "
                                 "name it with --data")
        elif settings.data is not None:
            data = check_exists(settings.data)  # what it is, and whether it is usable, is the sources' to say
        else:
            data = find_dataset(None, folder)
        return _Source(folder, files, checkpoint, data, model, lines, replaces)

    def _model_artifacts(self, resumed: Optional[Resumed]) -> Tuple[Path, Dict[str, Any], List[str]]:
        """The artifacts of ``--model`` in OUT/artifacts: generated, or reused when they match the model and
        the options. A resumed run keeps the artifacts it trained: a different model or generation option is
        refused. Returns the folder, the model's identity for the run's configuration, and lines to print."""
        settings = self.settings
        assert settings.model is not None
        folder = self.out / "artifacts"
        options = request_options(requires_grad=settings.trainable, frozen_params=settings.frozen,
                                  loss=LossType.CrossEntropyLoss if settings.loss is None else settings.loss,
                                  optimizer=OptimType.AdamW if settings.optimizer is None else settings.optimizer,
                                  loss_input_names=settings.loss_input, generator=settings.generator,
                                  python=settings.python, class_axis=settings.class_axis)
        identity = {"path": str(settings.model.resolve()), "sha256": model_sha256(settings.model), "options": options}
        if resumed is not None and resumed.config is not None:
            stored = resumed.config.model
            if stored is None:
                raise SetupError(f"the run being resumed trained the artifacts {resumed.config.artifacts.get('path')!r}, "
                                 "not a --model: leave --model out to resume it")
            if stored["sha256"] != identity["sha256"]:
                raise SetupError(f"--model {settings.model} is not the model the run started from ({stored['path']!r}): "
                                 "a resumed run keeps its artifacts; leave --model out to resume, or start a new run "
                                 "without --resume")
            keys = {"trainable": "requires_grad", "frozen": "frozen_params", "loss": "loss",
                    "loss_input": "loss_input_names", "optimizer": "optimizer"}
            changed = [GENERATION_FLAGS[arg] for arg, key in keys.items()
                       if getattr(settings, arg) is not None and options[key] != stored["options"].get(key)]
            if changed:
                raise SetupError(f"{', '.join(changed)} differ{'s' if len(changed) == 1 else ''} from the options the "
                                 f"run's artifacts were made with: a resumed run keeps its artifacts; leave "
                                 f"{'it' if len(changed) == 1 else 'them'} out, or start a new run without --resume")
            return folder, stored, [f"artifacts: {folder} (the run's, made from {settings.model})"]
        if resumed is not None:
            return folder, identity, [f"artifacts: {folder}"]
        if artifacts_match(folder, settings.model, options):
            return folder, identity, [f"artifacts: {folder} (reused: made from {settings.model} with the same options)"]
        target, note = folder, "generated"
        if settings.overwrite and os.path.lexists(folder):  # the old ones stay until the pre-flight passed
            target, note = self.out / STAGED_ARTIFACTS, f"generated; they replace {folder} once the checks pass"
            shutil.rmtree(target, ignore_errors=True)  # left by a run that was killed
        # generate_artifacts' defaults are ONNX Runtime's: the trainer's (every parameter, the model's outputs
        # kept for accuracy and export) are asked for
        trained = ALL_PARAMETERS if options["requires_grad"] is None else options["requires_grad"]
        made = generate_artifacts(settings.model, trained, options["frozen_params"], options["loss"],
                                  options["optimizer"], target, loss_input_names=options["loss_input_names"],
                                  additional_output_names=MODEL_OUTPUTS,
                                  overwrite=settings.overwrite, python=settings.python,
                                  generator=options["generator"], class_axis=settings.class_axis)
        return target, identity, describe(made, str(settings.model), settings.verbose) + [f"artifacts: {folder} ({note})"]

    def _config(self, source: _Source, resumed: Optional[Resumed]) -> Tuple[RunConfig, List[str]]:
        """The run's configuration: the options given and the defaults, or the resumed run's; and the notes
        to print about what an override changed."""
        given = {key: getattr(self.settings, key) for key in DEFAULTS}
        data_id, artifacts_id = data_identity(source.data), artifacts_identity(source.folder)
        if source.replaces is not None:  # staged: the run's record names where they will be
            artifacts_id["path"] = str(source.replaces.resolve())
        notes: List[str] = []
        stored = resumed.config if resumed is not None else None
        data_id["options"] = self._data_options(stored, notes)
        if stored is not None:
            options, changes = resume_options(stored, given, self.settings.override)
            notes += [f"overriding: {change}" for change in changes]
            for what, started_with, now, hint in (
                ("dataset", stored.data, data_id, "name the run's dataset with --data"),
                ("artifacts", stored.artifacts, artifacts_id, "the run's checkpoint belongs to the artifacts it started with"),
            ):
                line = check_identity(what, started_with, now, self.settings.override, hint)
                if line:
                    notes.append(f"overriding: {line}")
        else:
            options = {key: DEFAULTS[key] if value is None else value for key, value in given.items()}
            if given["lr"] is None:  # the default that fits the model: 1e-3 for transformers (model_kind.py)
                kind = artifacts_kind(source.files["eval"], source.checkpoint)
                options["lr"] = kind.lr
                if kind.evidence:
                    notes.append(kind.describe())
            if resumed is not None:
                notes.append("the checkpoint holds no run configuration (an older ort-cffi-train wrote it): resuming "
                             "with the options given and the defaults")
        return RunConfig(**options, data=data_id, artifacts=artifacts_id, model=source.model), notes

    def _data_options(self, stored: Optional[RunConfig], notes: List[str]) -> Dict[str, Any]:
        """The options that shape the dataset (--val-split, --label-column, ...): those given, else the resumed
        run's; one that contradicts the resumed run's is refused unless --override (it would change the split,
        the vocabulary or the standardisation the trained parameters depend on)."""
        given = DataOptions(**{key: getattr(self.settings, key) for key in DATA_FLAGS}).given()
        if stored is None:
            return given
        before = stored.data.get("options") or {}
        changed = [key for key, value in given.items() if before.get(key) != value]
        if changed and not self.settings.override:
            flags = " and ".join(DATA_FLAGS[key] for key in changed)
            raise SetupError(f"{flags} differ{'s' if len(changed) == 1 else ''} from the run being resumed "
                             f"({', '.join(f'{DATA_FLAGS[k]} {v}' for k, v in before.items()) or 'the defaults'}): "
                             "the trained parameters depend on its data as it was shaped; leave "
                             f"{'it' if len(changed) == 1 else 'them'} out, or add --override")
        notes += [f"overriding: {DATA_FLAGS[key]} {before.get(key)} -> {given[key]}" for key in changed]
        return {**before, **given}

    # --- after training ------------------------------------------------------------------------------------

    def _finish(self, source: _Source, prepared: Prepared, history: History, config: RunConfig) -> None:
        """Export the best parameters, run the exported model, write the metrics and the plot."""
        settings, out = self.settings, self.out
        best_epochs = [e for e in history.epochs if e["best"]]
        title = f"{run_name(settings, config, source.folder)}: {len(history.epochs)} epochs"
        if best_epochs:
            chosen = best_epochs[-1]
            accuracy = f", val acc {chosen['val_accuracy']:.4f}" if chosen["val_accuracy"] is not None else ""
            print(f"best: epoch {chosen['epoch']} (val loss {chosen['val_loss']:.4f}{accuracy}) -> {out / 'best_checkpoint'}")
            title += f", best epoch {chosen['epoch']}{accuracy}"
        # A fresh session over best_checkpoint exports the eval graph with the best weights.
        best = out / "best_checkpoint"
        exported_from = best if best.is_file() else source.checkpoint
        model_path = out / "inference_model.onnx"
        with self.env.createTrainingSession(exported_from, source.files["train"], source.files["eval"]) as exporter:
            with writing(model_path):
                exporter.exportModelForInference(model_path, prepared.export)
        outputs, history.inference_accuracy = inference_check(self.env, model_path, prepared.data["val"], prepared.labels,
                                                              config.batch_size, prepared.drop_last, prepared.scores,
                                                              prepared.class_axis)
        print(f"inference model: {model_path} (from {exported_from.name}; outputs {', '.join(outputs)})")
        loaded = prepared.loaded
        if loaded.metadata:  # what a user of the model needs: the classes, the preprocessing, the tokens
            with writing(model_path):
                write_metadata(model_path, loaded.metadata)
            with writing(out / RUN_FILE):
                write_json(out / RUN_FILE, decoded(loaded.metadata), "preprocessing record")
            history.files.append(out / RUN_FILE)
            print(f"metadata:  {', '.join(loaded.metadata)} in the inference model's metadata_props and in {RUN_FILE}")
        if loaded.classes is not None:
            shown = ", ".join(loaded.classes[:20]) + (", ..." if len(loaded.classes) > 20 else "")
            print(f"classes:   {shown} ({len(loaded.classes)}, in id order)")
        history.inference = {"model": model_path.name, "outputs": outputs, "val_accuracy": history.inference_accuracy}
        with writing(out / "metrics.json"):
            history.record(out, config, settings.as_record())
        if not settings.no_plot and history.steps:
            try:
                with writing(out / "training.png"):
                    plot(out / "training.png", history.steps, history.epochs, title)
                history.files.append(out / "training.png")
            except ImportError:
                print("no plot: matplotlib is not installed; it comes with ort_cffi's demo extra (pip install \".[demo]\" in "
                      "ort_cffi's checkout, with the progress bar), or pip install matplotlib", file=sys.stderr)


class _Undo:
    """What a run's pre-flight made, to remove again when it fails: the --out folder and the parents it
    needed, when they did not exist, or else OUT/artifacts, when it did not. Nothing that existed before is
    removed: with --overwrite, --model's new artifacts wait beside the old ones (``STAGED_ARTIFACTS``) and go."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.folders = MadeFolders(out)
        self.artifacts = None if self.folders.made or os.path.lexists(out / "artifacts") else out / "artifacts"

    def __call__(self) -> None:
        shutil.rmtree(self.out / STAGED_ARTIFACTS, ignore_errors=True)
        if self.folders.made:
            self.folders.remove(with_contents=True)  # made by this run: all it holds is this run's
        elif self.artifacts is not None:
            shutil.rmtree(self.artifacts, ignore_errors=True)


def run_name(settings: TrainSettings, config: RunConfig, folder: Path) -> str:
    """The run's name for the plot's title: the model's (``--model``, or the one the resumed run was made from),
    else the artifacts folder's."""
    if settings.model is not None:
        return settings.model.stem
    if config.model is not None and config.model.get("path"):
        return Path(config.model["path"]).stem
    return folder.resolve().name


def _progress(settings: TrainSettings) -> bool:
    """The progress bar: as asked, else only when stderr is a terminal (not in logs, pipes or CI)."""
    return bool(settings.progress) if settings.progress is not None else sys.stderr.isatty()


def settings_from(values: Dict[str, Any]) -> TrainSettings:
    """TrainSettings from a mapping of option names (an argparse namespace's ``vars``); unknown keys are refused."""
    known = set(TrainSettings.__dataclass_fields__)
    unknown = sorted(set(values) - known)
    if unknown:
        raise TypeError(f"unknown training settings: {', '.join(unknown)}")
    return TrainSettings(**values)



