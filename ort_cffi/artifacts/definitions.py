"""What ``generate_artifacts`` takes and returns: its errors, loss and optimizer choices, the parameters and
tensors it describes, and the lines ``ort-cffi-artifacts`` and ``ort-cffi-train`` print about them.
"""
from __future__ import annotations

import enum
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

ModelLike = Union[str, "os.PathLike[str]", bytes, bytearray, memoryview, Any]  # Any: an onnx.ModelProto
SHOWN = 12  # trainable tensors listed one by one by describe()
# The preparation rules (rewrites.py, loss_reading.py) as describe() names them.
RULES = {
    "rewrite": "rewritten (no usable gradient in ONNX Runtime):",
    "zero_gradient": "rewritten (zero gradient):",
    "declare_outputs": "optional outputs declared:",
    "duplicate_input": "input read twice, once through Identity:",
    "explicit_perm": "default perm written out:",
    "loss_input": "loss input:",
    "logits": "loss input:",
    "class_axis": "class axis:",
    "inference_form": "eval model in inference form:",
    "batchnorm_statistics": "running statistics:",
    "merged_parameters": "parameters apart again:",
    "tied_parameters": "shared parameters tied again:",
    "dropped_biases": "biases of zeros put back:",
    "unread_parameters": "not in the file:",
    "flat_indices": "indices of shape [1, ...] flattened:",
    "static_shape": "input shape declared for the gradient kernel:",
}


class ArtifactsError(Exception):
    """Training artifacts could not be made; the message says why. Base of the two below."""


class ArtifactsInputError(ArtifactsError, ValueError):
    """The model or the options cannot make training artifacts: the message names what was wrong (a
    pattern that matches nothing, a parameter that is not floating-point, a model without a usable output
    for the loss, a folder that cannot be written, ...)."""


class GeneratorUnavailableError(ArtifactsError, RuntimeError):
    """No interpreter with ONNX Runtime's Python training layer (where the gradient builder lives) and
    ``onnx`` to run the generator: the message says which interpreter lacked what and how to name another."""


class LossType(enum.Enum):
    """The loss added on top of the model's output: ONNX Runtime's ``LossType``, its names and values
    (``LossType(2)`` is CrossEntropyLoss). ort_cffi's names for them, ``option`` (``"cross-entropy"``, the
    command line's ``--loss``, ``artifacts.json``), are taken too: ``LossType("cross-entropy")``."""

    MSELoss = 1
    CrossEntropyLoss = 2
    BCEWithLogitsLoss = 3
    L1Loss = 4

    @property
    def option(self) -> str:
        """ort_cffi's name of the loss: what ``--loss`` takes and ``artifacts.json`` records."""
        return _LOSS_OPTIONS[self.name]

    @classmethod
    def _missing_(cls, value: object) -> Optional[LossType]:
        return _by_option(cls, value, _LOSS_OPTIONS)


class OptimType(enum.Enum):
    """The optimizer of the optimizer model: ONNX Runtime's ``OptimType``, its names and values
    (``OptimType(1)`` is AdamW); ort_cffi's names (``option``: ``"adamw"``, ``"sgd"``) are taken too."""

    AdamW = 1
    SGD = 2

    @property
    def option(self) -> str:
        """ort_cffi's name of the optimizer: what ``--optimizer`` takes and ``artifacts.json`` records."""
        return _OPTIM_OPTIONS[self.name]

    @classmethod
    def _missing_(cls, value: object) -> Optional[OptimType]:
        return _by_option(cls, value, _OPTIM_OPTIONS)


_LOSS_OPTIONS = {"CrossEntropyLoss": "cross-entropy", "MSELoss": "mse", "BCEWithLogitsLoss": "bce-with-logits",
                 "L1Loss": "l1"}
_OPTIM_OPTIONS = {"AdamW": "adamw", "SGD": "sgd"}


def _by_option(kind: Any, value: object, options: Dict[str, str]) -> Any:
    """The member ort_cffi's name ``value`` stands for (or the member's own name, in any case), or None."""
    if isinstance(value, str):
        for name, option in options.items():
            if value.lower() in (option, name.lower()):
                return kind[name]
    return None


class Selection(enum.Enum):
    """ort_cffi's former defaults of ``generate_artifacts``, asked for by name (its defaults are ONNX Runtime's):
    ``ALL_PARAMETERS`` for ``requires_grad``, ``MODEL_OUTPUTS`` for ``additional_output_names``."""

    ALL_PARAMETERS = "every floating-point parameter a gradient reaches, less frozen_params"
    MODEL_OUTPUTS = "the model's own outputs"

    def __repr__(self) -> str:
        return f"ort_cffi.artifacts.{self.name}"


# requires_grad=ALL_PARAMETERS: every floating-point initializer that a gradient reaches is trained, less
# frozen_params and the numbers torch's default exporter writes as initializers (ONNX Runtime's None trains none).
ALL_PARAMETERS = Selection.ALL_PARAMETERS
# additional_output_names=MODEL_OUTPUTS: the training and eval models give the model's own outputs after the
# loss (a ZipMap's class scores in its place), so that an inference model can be exported from the eval model
# and accuracy read (ONNX Runtime's None gives the loss alone).
MODEL_OUTPUTS = Selection.MODEL_OUTPUTS


@dataclass(frozen=True)
class Parameter:
    """One initializer of the model: its name, element type (a numpy dtype name), shape and element count;
    ``module_name``: the torch name it was made from, where torch's default exporter renamed it
    (``encoder.layers.0.linear1.weight`` for ``val_88``; ``lstm.W`` for a tensor holding parts of several)."""

    name: str
    dtype: str
    shape: Tuple[int, ...]
    size: int
    module_name: Optional[str] = None

    @property
    def shown_name(self) -> str:
        """The name, and the torch name in brackets where the exporter renamed it."""
        return f"{self.name} ({self.module_name})" if self.module_name else self.name


@dataclass(frozen=True)
class TensorSpec:
    """A graph input or output: name, element type and shape (ints, symbolic names, or None when unknown)."""

    name: str
    dtype: str
    shape: Optional[Tuple[Union[int, str, None], ...]]

    def __str__(self) -> str:
        if self.shape is None:
            return f"{self.name} {self.dtype}"
        return f"{self.name} {self.dtype} [{', '.join('?' if d is None else str(d) for d in self.shape)}]"


@dataclass(frozen=True)
class GeneratedArtifacts:
    """What ``generate_artifacts`` wrote and made trainable. The files belong to the caller."""

    folder: Path
    files: Dict[str, Path]  # checkpoint, training_model, eval_model[, optimizer_model][, nominal_checkpoint]
    trainable: Tuple[Parameter, ...]
    frozen: Tuple[Parameter, ...]
    constants: Tuple[Parameter, ...]  # floating-point initializers that stay constants of the graphs
    left_out: Dict[str, str]  # name -> why a pattern's match was not made trainable (no gradient reaches it)
    loss: Optional[LossType]
    loss_input: Optional[str]  # the model output the loss reads (with no loss: the output that is the loss)
    optimizer: Optional[OptimType]
    model_inputs: Tuple[TensorSpec, ...]
    model_outputs: Tuple[TensorSpec, ...]
    training_inputs: Tuple[TensorSpec, ...]  # the data inputs of the training model, labels included
    added_inputs: Tuple[str, ...]  # those the loss added (labels, target)
    eval_outputs: Tuple[str, ...]
    model_ir_version: int
    model_opset: Optional[int]
    ir_version: int
    notes: Tuple[str, ...]  # what was changed to load in ONNX Runtime 1.19 (IR version, opset, local functions)
    versions: Dict[str, str]  # onnx, onnxruntime and python of the generator
    manifest: Dict[str, Any] = field(repr=False)
    # What was changed before the gradient build (``prepare``): one record per rule and operator type,
    # {"rule", "op", "count", "nodes"} (and "note" where the loss's reading changed); () when nothing.
    preparation: Tuple[Dict[str, Any], ...] = ()
    # How the cross-entropy loss reads the model (None for other losses, or with prepare=False):
    # {"labels": the labels input, "labels_shape", "scores": the eval output whose argmax along
    # "class_axis" is the predicted class, "class_axis", "tensor": what the loss reads}.
    loss_reading: Optional[Dict[str, Any]] = None

    @property
    def checkpoint(self) -> Path:
        """The checkpoint with the parameters' initial values."""
        return self.files["checkpoint"]

    @property
    def training_model(self) -> Path:
        """The training model: forward graph, loss and gradients."""
        return self.files["training_model"]

    @property
    def eval_model(self) -> Path:
        """The eval model: forward graph and loss, and the outputs kept next to the loss."""
        return self.files["eval_model"]

    @property
    def optimizer_model(self) -> Optional[Path]:
        """The optimizer model, or None when generated with ``optimizer=None``."""
        return self.files.get("optimizer_model")

    @property
    def nominal_checkpoint(self) -> Optional[Path]:
        """The shapes-only checkpoint, or None unless generated with ``nominal_checkpoint=True``."""
        return self.files.get("nominal_checkpoint")

    @property
    def trainable_parameters(self) -> int:
        """Elements of the trainable tensors."""
        return sum(p.size for p in self.trainable)

    @property
    def total_parameters(self) -> int:
        """Elements of all floating-point initializers of the model: trainable, frozen and constant."""
        return sum(p.size for p in self.trainable + self.frozen + self.constants)



def _count(n: int) -> str:
    return f"{n:,} parameter{'s' if n != 1 else ''}"


def _tensors(params: Sequence[Parameter]) -> str:
    return f"{len(params)} tensor{'s' if len(params) != 1 else ''}"


def preparation_lines(records: Sequence[Dict[str, Any]]) -> List[str]:
    """One line per preparation record: the rule, the operator, how many nodes and which (the first few)."""
    lines = []
    for record in records:
        nodes = list(record.get("nodes", ()))
        shown = ", ".join(nodes[:3]) + (f", ... ({len(nodes) - 3} more)" if len(nodes) > 3 else "")
        what = RULES.get(record["rule"], record["rule"])
        line = f"{what} {record['op']} x{record['count']}" + (f" ({shown})" if shown else "")
        if record.get("note"):
            line += f": {record['note']}"
        lines.append(line)
    return lines


def describe(made: GeneratedArtifacts, model: str, verbose: bool = False) -> List[str]:
    """The lines ``ort-cffi-artifacts`` prints about what it made from ``model`` (ort-cffi-train prints them too).
    ``verbose`` adds the internals a user need not act on: what was converted for the runtime (IR version,
    opset) and the loss output's generated name."""
    def shape(p: Parameter) -> str:
        return "[" + ", ".join(str(d) for d in p.shape) + "]"

    lines = [
        f"model:      {model} (IR {made.model_ir_version}, opset {made.model_opset}); inputs "
        f"{', '.join(str(s) for s in made.model_inputs) or 'none'}; outputs {', '.join(str(s) for s in made.model_outputs)}",
    ]
    if verbose:
        lines += [f"converted:  {note}" for note in made.notes]
    lines += [f"prepared:   {line}" for line in preparation_lines(made.preparation)]
    total = made.total_parameters
    share = f" ({made.trainable_parameters / total:.1%} of the model's {_count(total)})" if total else ""
    lines.append(f"trainable:  {_tensors(made.trainable)}, {_count(made.trainable_parameters)}{share}")
    shown = made.trainable[:SHOWN]
    name_width = max(len(p.shown_name) for p in shown)
    type_width = max(len(f"{p.dtype} {shape(p)}") for p in shown)
    size_width = max(len(f"{p.size:,}") for p in shown)
    for p in shown:
        lines.append(f"            {p.shown_name:<{name_width}}  {p.dtype + ' ' + shape(p):<{type_width}}  {p.size:>{size_width},}")
    if len(made.trainable) > SHOWN:
        lines.append(f"            ... and {len(made.trainable) - SHOWN} more (artifacts.json lists them all)")
    if made.frozen:
        lines.append(f"frozen:     {_tensors(made.frozen)}, {_count(sum(p.size for p in made.frozen))} (in the checkpoint, not trained)")
    if made.constants:
        names = ", ".join(p.shown_name for p in made.constants[:SHOWN])
        more = f" and {len(made.constants) - SHOWN} more" if len(made.constants) > SHOWN else ""
        lines.append(f"constant:   {_tensors(made.constants)}, {_count(sum(p.size for p in made.constants))}: "
                     f"{names}{more} (stay constants of the graphs)")
    for name, reason in made.left_out.items():
        lines.append(f"not trained: {name}: {reason}")
    if made.loss is None:
        lines.append(f"loss:       none (the model's first output, {made.loss_input}, is the loss)")
    else:
        lines.append(f"loss:       {made.loss.option} on {made.loss_input}")
    lines.append(f"optimizer:  {made.optimizer.name if made.optimizer else 'none (no optimizer model)'}")
    added = f" (added by the loss: {', '.join(made.added_inputs)})" if made.added_inputs else ""
    lines.append(f"training model inputs: {', '.join(str(s) for s in made.training_inputs)}{added}")
    # The first is the loss, under a name the generator made up (onnx::loss::2): named by its role.
    if made.eval_outputs:
        loss_output = f"{made.eval_outputs[0]} (the loss)" if verbose else "the loss"
        lines.append(f"eval model outputs:    {', '.join([loss_output, *made.eval_outputs[1:]])}")
    return lines
