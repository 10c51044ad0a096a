"""The model as it travels and as the server holds it: the trainable parameters as a Flower
``ArrayRecord`` of one float32 array per parameter (`ParameterLayout`), and the server's
own session over the artifacts (`GlobalModel`), which evaluates, checkpoints and exports the
global model through ort_cffi.

Why one array per parameter rather than the session's one flat buffer: Flower's strategies and tools
treat an ``ArrayRecord`` like a ``state_dict``. Per-parameter arrays keep the names and shapes, so an
update of the wrong model is refused naming the parameter that differs, a saved record is readable
by any Flower tool, and per-layer statistics (norms, medians) mean something. The robust strategies
compute the same numbers either way (they flatten or work coordinate-wise), so nothing is lost. The
buffer order stays the session's: a record is split from, and joined back into, the
``copyParametersToBuffer`` buffer with no copy through the checkpoint.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
from flwr.app import Array, ArrayRecord

from ort_cffi import OrtEnvironment, OrtException, OrtTrainingSession, SessionOptions
from ort_cffi._facade import denormals
from ort_cffi._facade.sessions.signature import file_graph_inputs
from ort_cffi.flower.data import Arrays, label_name
from ort_cffi.trainer.data import (
    DEFAULT_ARTIFACTS,
    find_artifacts,
    find_dataset,
    fixed_batch,
    input_infos,
    load_dataset,
)
from ort_cffi.trainer.errors import SetupError
from ort_cffi.trainer.loop import check_export, evaluate, inference_check

PathLike = Union[str, "os.PathLike[str]"]
FLAT_KEY = "parameters"  # the one array of a model whose parameter names cannot be established
GRAD_BUFFER = "_grad.accumulation.buffer"  # generate_artifacts' gradient input of a trainable parameter


class FederatedError(OrtException):
    """A federated run cannot go on: too few clients replied, the server's and a client's models differ,
    a client cannot train, or the run's files do not match the run being resumed."""


@dataclass(frozen=True)
class ParameterLayout:
    """The trainable parameters in the order of the session's parameter buffer: their names and shapes.

    `of_session` reads them from the training model (its parameter inputs, in buffer order, each
    with a gradient buffer) and checks them against the buffer. A model whose layout cannot be read that
    way travels as one flat array named ``"parameters"`` (`per_parameter` is then False)."""

    names: Tuple[str, ...]
    shapes: Tuple[Tuple[int, ...], ...]

    @property
    def size(self) -> int:
        """The number of trainable float32 values (``getParametersSize(True)``)."""
        return int(sum(int(np.prod(shape)) for shape in self.shapes))

    @property
    def per_parameter(self) -> bool:
        """True when each parameter travels as its own array; False for the flat fallback."""
        return self.names != (FLAT_KEY,)

    @classmethod
    def flat(cls, size: int) -> ParameterLayout:
        """The fallback: one flat array of ``size`` values."""
        return cls((FLAT_KEY,), ((int(size),),))

    @classmethod
    def of_session(cls, session: OrtTrainingSession, training_model: PathLike) -> ParameterLayout:
        """The layout of ``session``'s trainable parameters. The training model's declared inputs (read from
        its file, not through a session) give their names and shapes; the result is
        checked against ``copyParametersToBuffer``, value for value, and falls back to `flat`
        when the two disagree (artifacts made some other way)."""
        size = session.getParametersSize(True)
        try:
            # Read from the file: an inference session of the training model would need its training operators,
            # which only the training build registers (the engine lowers them in sessions of its own).
            inputs = file_graph_inputs(os.fspath(training_model))
        except (OSError, ValueError, BufferError):
            return cls.flat(size)
        try:
            trainable = [name for name in inputs if f"{name}{GRAD_BUFFER}" in inputs]
            dims = [inputs[name].dims for name in trainable]
            if not trainable or any(d is None for d in dims):
                return cls.flat(size)
            layout = cls(tuple(trainable), tuple(tuple(int(extent) for extent, _ in d or ()) for d in dims))
            if layout.size != size or any(d < 0 for shape in layout.shapes for d in shape):
                return cls.flat(size)
            state = session.getCheckpointState()
            joined = np.concatenate([np.asarray(state.getParameter(name), np.float32).reshape(-1) for name in trainable])
            if not np.array_equal(joined, session.copyParametersToBuffer(True)):
                return cls.flat(size)
            return layout
        except OrtException:
            return cls.flat(size)

    def split(self, buffer: np.ndarray) -> Dict[str, np.ndarray]:
        """The parameters of a flat ``buffer`` (views into it), by name."""
        arrays: Dict[str, np.ndarray] = {}
        offset = 0
        for name, shape in zip(self.names, self.shapes):
            count = int(np.prod(shape))
            arrays[name] = buffer[offset:offset + count].reshape(shape)
            offset += count
        return arrays

    def to_record(self, buffer: np.ndarray) -> ArrayRecord:
        """An ``ArrayRecord`` of ``buffer`` (float32, one array per parameter, in buffer order)."""
        flat = np.ascontiguousarray(buffer, dtype=np.float32).reshape(-1)
        if flat.size != self.size:
            raise FederatedError(f"a buffer of {flat.size} values does not fit a model of {self.size} parameters")
        return ArrayRecord({name: Array(np.ascontiguousarray(array)) for name, array in self.split(flat).items()})

    def problem(self, record: ArrayRecord) -> Optional[str]:
        """Why ``record`` is not a model of this layout (names, dtype, shapes, finite values), or None.
        Never raises: the text names the first thing that is wrong."""
        keys = list(record.keys())
        if keys != list(self.names):
            if sorted(keys) == sorted(self.names):
                return "its arrays are in another order than the model's parameters"
            return f"it holds arrays {_names(keys)}, but the model's parameters are {_names(self.names)}"
        for name, shape in zip(self.names, self.shapes):
            array = record[name]
            if array.stype != "numpy.ndarray":
                return f"{name} is serialized as {array.stype!r}, not as a numpy array"
            if array.dtype != "float32":
                return f"wrong dtype: {name} is {array.dtype}, but the model's parameters are float32"
            if tuple(array.shape) != shape:
                return (f"wrong size: {name} has shape {list(array.shape)} ({int(np.prod(array.shape))} values), "
                        f"but the model's is {list(shape)} ({int(np.prod(shape))} values)")
            try:
                values = array.numpy()
            except Exception as exc:  # malformed bytes: whatever numpy's reader says
                return f"{name} cannot be read: {type(exc).__name__}: {exc}"
            if values.dtype != np.float32 or values.shape != shape:
                return (f"{name} declares {array.dtype} {list(array.shape)} but holds "
                        f"{values.dtype} {list(values.shape)}")
            finite = np.isfinite(values)
            if not finite.all():
                nan = int(np.isnan(values).sum())
                return f"{name} holds {nan} NaN and {int(values.size - finite.sum() - nan)} infinite value(s)"
        return None

    def to_buffer(self, record: ArrayRecord, what: str = "the model") -> np.ndarray:
        """The flat float32 buffer of ``record``, checked first (`problem`): a record of another
        model raises `FederatedError` starting with ``what``."""
        reason = self.problem(record)
        if reason is not None:
            raise FederatedError(f"{what} does not fit the training artifacts: {reason}")
        return np.concatenate([record[name].numpy().reshape(-1) for name in self.names])


def _names(names: Sequence[str], shown: int = 4) -> str:
    listed = ", ".join(repr(n) for n in names[:shown])
    return f"[{listed}{', ...' if len(names) > shown else ''}] ({len(names)})"


def normalize_record(record: ArrayRecord, layout: ParameterLayout) -> ArrayRecord:
    """A strategy's aggregate as the layout's float32 arrays (FedAdam's arithmetic, say, gives float64),
    refused with `FederatedError` when it is not finite or not of the model's shapes."""
    arrays: Dict[str, Array] = {}
    for name, shape in zip(layout.names, layout.shapes):
        if name not in record:
            raise FederatedError(f"the aggregated model lacks {name!r}")
        values = np.asarray(record[name].numpy())
        if values.shape != shape:
            raise FederatedError(f"the aggregated {name} has shape {list(values.shape)}, the model's is {list(shape)}")
        values = values.astype(np.float32)
        if not np.isfinite(values).all():
            raise FederatedError(f"the aggregated {name} is not finite (a strategy's arithmetic overflowed)")
        arrays[name] = Array(np.ascontiguousarray(values))
    return ArrayRecord(arrays)


class GlobalModel:
    """The server's copy of the model: a training session over the artifacts (no optimizer) that holds
    the aggregated parameters, evaluates them on the validation split, saves them as a checkpoint and
    exports an inference model. ``checkpoint`` (default: the artifacts' own) is where its parameters start,
    e.g. the global checkpoint of the run being resumed. ``export_outputs`` (default: the eval model's
    outputs after the loss) are the inference model's outputs. Owns its session: `close` it."""

    def __init__(self, artifacts: PathLike = DEFAULT_ARTIFACTS, data: Optional[PathLike] = None,
                 threads: int = 1, batch_size: int = 128, *, checkpoint: Optional[PathLike] = None,
                 export_outputs: Optional[Sequence[str]] = None) -> None:
        self.artifacts = Path(artifacts)
        self.paths = find_artifacts(self.artifacts)
        self.env = OrtEnvironment.getEnvironment()
        with SessionOptions() as options:
            if threads:
                options.setIntraOpNumThreads(threads)
            denormals.apply(options, denormals.request())
            self.session = self.env.createTrainingSession(
                checkpoint or self.paths["checkpoint"], self.paths["train"], self.paths["eval"], None, options)
        try:
            self.data_path = find_dataset(Path(data) if data else None, self.artifacts)
            splits = {"train": list(self.session.getTrainInputNames()), "val": list(self.session.getEvalInputNames())}
            infos = input_infos(self.env, self.paths["eval"], sorted(set(splits["train"]) | set(splits["val"])))
            dataset = load_dataset(self.data_path, splits, infos)
            self.val: Arrays = dataset["val"]
            self.train_samples = len(next(iter(dataset["train"].values())))
            self.eval_outputs = list(self.session.getEvalOutputNames())
            self.loss_name = self.eval_outputs[0]  # generate_artifacts puts the loss first
            self.export_names = list(export_outputs or self.eval_outputs[1:])
            self.scores = self.export_names[0] if self.export_names and self.export_names[0] in self.eval_outputs else None
            self.labels = label_name(self.val)
            self.fixed_batch = fixed_batch(infos)  # then whole batches only, of that size
            self.batch_size = self.fixed_batch or batch_size
            self.layout = ParameterLayout.of_session(self.session, self.paths["train"])
        except BaseException:
            self.session.close()
            raise

    def check_export(self) -> None:
        """Check the export's output names now, so that a model that cannot be exported fails before the
        first round rather than after the last. Raises ``SetupError`` saying what to change."""
        if not self.export_names:
            raise SetupError(
                f"the eval model's only output is the loss ({self.loss_name!r}), so there is nothing to export "
                "for inference after the last round: name the inference model's outputs with --export-outputs "
                "(e.g. the original model's output; run-config key export-outputs), or make the artifacts with "
                "generate_artifacts(..., additional_output_names=[...]) or ort_cffi.artifacts.MODEL_OUTPUTS")
        check_export(self.paths["eval"], self.export_names, self.eval_outputs)

    def parameters(self) -> np.ndarray:
        """A copy of the loaded trainable parameters (``copyParametersToBuffer``), owned by the caller."""
        return self.session.copyParametersToBuffer(True)

    def record(self) -> ArrayRecord:
        """The loaded parameters as an ``ArrayRecord`` (`ParameterLayout`)."""
        return self.layout.to_record(self.parameters())

    def load(self, record: ArrayRecord) -> None:
        """Load an aggregated ``ArrayRecord`` (checked against the layout: `FederatedError`)."""
        self.session.copyBufferToParameters(self.layout.to_buffer(record, "the aggregated model"), True)

    def evaluate(self, record: Optional[ArrayRecord] = None) -> Tuple[float, Optional[float]]:
        """(validation loss, accuracy or None) of ``record`` (default: the parameters loaded)."""
        if record is not None:
            self.load(record)
        return evaluate(self.session, self.val, self.loss_name, self.scores, self.labels, self.batch_size,
                               self.fixed_batch is not None)

    def save(self, path: PathLike, server_round: int) -> None:
        """The global model as a checkpoint with a ``round`` property (crash-safe: written to a temporary
        file, then renamed over the old one)."""
        self.session.addProperty("round", int(server_round))
        self.session.saveCheckpoint(path, False)

    def export(self, path: PathLike) -> Tuple[List[str], Optional[float]]:
        """An inference model of the loaded parameters, then its outputs and its accuracy on the validation
        split, run through an ordinary ``OrtSession``."""
        self.session.exportModelForInference(path, self.export_names)
        return inference_check(self.env, Path(path), self.val, self.labels, self.batch_size,
                                      self.fixed_batch is not None)

    def close(self) -> None:
        """Close the session (idempotent)."""
        self.session.close()

    def __enter__(self) -> GlobalModel:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()
