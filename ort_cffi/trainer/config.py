"""A run of ``ort-cffi-train`` and its configuration, stored with every checkpoint so that ``--resume``
continues the run it promises: the same learning rate, schedule, warm-up, batch size, total epochs, seed,
dataset and artifacts. An option that contradicts the stored configuration is refused, unless the user
asks to override it; one that only repeats it is fine; one left out takes the stored value."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from ort_cffi import OrtCheckpointState, OrtException
from ort_cffi._facade.files import file_sha256
from ort_cffi.trainer.errors import SetupError

# Checkpoint properties this trainer writes and a resumed run reads.
EPOCH, STEP, BEST_ACC, BEST_LOSS = "epoch", "step", "best_val_accuracy", "best_val_loss"
CONFIG = "run_config"  # the RunConfig as JSON (a string property keeps floats exact; float properties are float32)

# The options a run is made of, their defaults and their flags. warmup_steps None: one epoch.
# bn_reestimate: the BatchNorm statistics re-estimated over the training set before each validation.
DEFAULTS: Dict[str, Any] = {"epochs": 30, "batch_size": 32, "lr": 0.01, "schedule": "linear", "warmup_steps": None, "seed": 0,
                            "bn_reestimate": True}
DEFAULTS["patience"] = None  # early stopping: epochs without a lower validation loss (None: never stops early)
FLAGS = {"epochs": "--epochs", "batch_size": "--batch-size", "lr": "--lr", "schedule": "--schedule",
         "warmup_steps": "--warmup-steps", "seed": "--seed", "bn_reestimate": "--bn-reestimate"}
FLAGS["patience"] = "--patience"
# What a configuration stored before an option existed ran with (such a run did not re-estimate).
EARLIER = {"bn_reestimate": False, "patience": None}
# Artifact files whose content a run's parameters depend on (the checkpoint is the run's own).
MODEL_FILES = ("training_model.onnx", "eval_model.onnx", "optimizer_model.onnx")


def artifacts_identity(folder: Path) -> Dict[str, Any]:
    """Where the artifacts are and what they hold: the sha256 of each model file."""
    return {"path": str(folder.resolve()), "sha256": {name: file_sha256(folder / name) for name in MODEL_FILES}}


@dataclass
class RunConfig:
    """What a run is. ``warmup_steps`` is resolved (None only before the run starts, meaning one epoch);
    ``model`` is set when the run generated its artifacts from an ONNX model (``--model``)."""

    epochs: int
    batch_size: int
    lr: float
    schedule: str
    warmup_steps: Optional[int]
    seed: int
    bn_reestimate: bool = True
    patience: Optional[int] = None
    data: Dict[str, Any] = field(default_factory=dict)
    artifacts: Dict[str, Any] = field(default_factory=dict)
    model: Optional[Dict[str, Any]] = None

    def options(self) -> Dict[str, Any]:
        """The run's options by name (those of ``DEFAULTS``)."""
        return {key: getattr(self, key) for key in DEFAULTS}

    def to_json(self) -> str:
        """The configuration as the checkpoint property stores it."""
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str, where: str) -> RunConfig:
        """The configuration stored in a checkpoint (``where`` names it in the SetupError for garbage)."""
        try:
            values = json.loads(text)
            options: Dict[str, Any] = {key: values[key] if key in values or key not in EARLIER else EARLIER[key]
                                       for key in DEFAULTS}
            return cls(**options, data=values["data"], artifacts=values["artifacts"],
                       model=values.get("model"))
        except (ValueError, KeyError, TypeError):
            raise SetupError(f"{where} holds a run configuration this ort_cffi cannot read") from None


def as_flag(key: str, value: Any) -> str:
    """One option as typed: ``--epochs 30``; a switch as itself or its ``--no-`` form."""
    if isinstance(value, bool):
        return FLAGS[key] if value else FLAGS[key].replace("--", "--no-", 1)
    if value is None:  # the defaults that are no number: the warm-up's one epoch, no early stopping
        return f"{FLAGS[key]} {'one epoch' if key == 'warmup_steps' else 'off'}"
    return f"{FLAGS[key]} {value}"


def describe_options(options: Dict[str, Any]) -> str:
    """Options as flags: ``--epochs 30, --batch-size 32, ...``."""
    return ", ".join(as_flag(key, value) for key, value in options.items())


@dataclass
class Resumed:
    """What a checkpoint to resume from holds: where the run stopped, its configuration (None for
    checkpoints written before ort_cffi stored it) and the best validation score so far."""

    epoch: int
    step: int
    config: Optional[RunConfig]
    best: Tuple[float, float]  # (accuracy, -loss)
    path: Path  # the checkpoint


def read_checkpoint(checkpoint: Path) -> Resumed:
    """The run state stored in a checkpoint this trainer wrote; a SetupError for any other checkpoint."""
    where = f"checkpoint {str(checkpoint)!r}"
    with OrtCheckpointState.loadCheckpoint(checkpoint) as state:
        try:
            epoch, step = state.getIntProperty(EPOCH), state.getIntProperty(STEP)
        except OrtException:
            raise SetupError(f"{where} has no {EPOCH!r}/{STEP!r} properties: only checkpoints ort-cffi-train "
                             "wrote can be resumed") from None
        try:
            best = (state.getFloatProperty(BEST_ACC), -state.getFloatProperty(BEST_LOSS))
        except OrtException:
            best = (0.0, float("-inf"))
        try:
            text: Optional[str] = state.getStringProperty(CONFIG)
        except OrtException:
            text = None  # written before the configuration was stored
    return Resumed(epoch, step, None if text is None else RunConfig.from_json(text, where), best, checkpoint)


def resume_options(stored: RunConfig, given: Dict[str, Any], override: bool) -> Tuple[Dict[str, Any], List[str]]:
    """The options of a resumed run: the stored ones, where ``given`` (the options typed, None for those
    left out) agrees or is silent. A contradiction is refused unless ``override``; returns the options and
    the overrides applied, as ``--lr 0.01 -> 0.001`` lines."""
    options = stored.options()
    contradicting = [key for key, value in given.items() if value is not None and value != options[key]]
    changes = [f"{as_flag(key, options[key])} -> "
               f"{as_flag(key, given[key]) if isinstance(given[key], bool) else given[key]}" for key in contradicting]
    if contradicting and not override:
        several = len(contradicting) > 1
        typed = " and ".join(as_flag(key, given[key]) for key in contradicting)
        kept = " and ".join(as_flag(key, options[key]) for key in contradicting)
        raise SetupError(
            f"{typed} contradict{'' if several else 's'} the run being resumed, which has {kept} "
            f"({describe_options(options)}). Leave {'them' if several else 'it'} out to continue the run as it "
            "was, or add --override to change the run from here on"
        )
    options.update({key: value for key, value in given.items() if value is not None})
    return options, changes


def check_identity(what: str, stored: Dict[str, Any], current: Dict[str, Any], override: bool, hint: str) -> Optional[str]:
    """Compare the dataset or the artifacts (``what``) a resumed run finds with those it started with, by
    content. A difference is refused unless ``override``; returns the line that reports an accepted one."""
    if stored.get("sha256") == current["sha256"]:
        return None
    same_path = stored.get("path") == current["path"]
    change = (f"the {what} {current['path']!r} changed since the run started" if same_path else
              f"the {what} {current['path']!r} {'is not the one' if what == 'dataset' else 'are not those'} the run "
              f"started with ({stored.get('path')!r})")
    if not override:
        raise SetupError(f"{change}: {hint}, or add --override to continue the run on {'it' if what == 'dataset' else 'them'}")
    return f"{what}: {current['path']} (not what the run started with)"
