"""What ``ort-cffi-train`` reads: the artifacts folder and the ``.npz`` dataset, checked against the model
before training (names, dtypes, shapes, batch size, labels against the model's class count), and the batches
it trains on. ``ort_cffi.flower`` uses these too."""
from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from ort_cffi import OrtEnvironment, TensorInfo
from ort_cffi.trainer.errors import SetupError

DEFAULT_ARTIFACTS = Path(__file__).resolve().parents[1] / "data" / "digits"
ARTIFACT_FILES = {
    "checkpoint": "checkpoint",
    "train": "training_model.onnx",
    "eval": "eval_model.onnx",
    "optimizer": "optimizer_model.onnx",
}

Arrays = Dict[str, np.ndarray]


def find_artifacts(folder: Path) -> Dict[str, Path]:
    """The four artifact files of ``folder`` by role (checkpoint, train, eval, optimizer), or a SetupError
    naming what is missing."""
    if not folder.is_dir():
        raise SetupError(f"artifacts folder {str(folder)!r} does not exist")
    paths = {key: folder / name for key, name in ARTIFACT_FILES.items()}
    missing = [p.name for p in paths.values() if not p.is_file()]
    if missing:
        raise SetupError(
            f"artifacts folder {str(folder)!r} lacks {', '.join(missing)} "
            f"(a training artifacts folder holds {', '.join(ARTIFACT_FILES.values())})"
        )
    return paths


def find_dataset(data: Optional[Path], artifacts: Path) -> Path:
    """``data`` if it exists, else the one ``.npz`` file of the artifacts folder; a SetupError otherwise."""
    if data is not None:
        if data.is_dir():  # ort-cffi-train reads folders (ort_cffi.trainer.sources); the others take .npz only
            raise SetupError(f"dataset {str(data)!r} is a folder, not an .npz file (numpy.savez writes one)")
        if not data.is_file():
            raise SetupError(f"dataset {str(data)!r} does not exist")
        return data
    found = sorted(artifacts.glob("*.npz"))
    if len(found) != 1:
        raise SetupError(
            f"no --data given and the artifacts folder {str(artifacts)!r} holds "
            f"{len(found)} .npz files, not one: name the dataset with --data FILE.npz"
        )
    return found[0]


def eval_signature(env: OrtEnvironment, eval_model: Path) -> Tuple[Dict[str, TensorInfo], Dict[str, TensorInfo]]:
    """dtype and shape of the eval model's inputs and outputs, read in one inference session. The training
    API does not tell them, but the eval model is an ordinary ONNX model: its inputs are the data inputs
    followed by the parameters, its outputs the loss, then the model's own outputs."""
    with env.createSession(eval_model) as session:
        inputs = {name: info.getInfo() for name, info in session.getInputInfo().items()}
        outputs = {name: info.getInfo() for name, info in session.getOutputInfo().items()}
    return inputs, outputs


def input_infos(env: OrtEnvironment, eval_model: Path, names: Sequence[str]) -> Dict[str, TensorInfo]:
    """dtype and shape of the data inputs ``names`` (see ``eval_signature``)."""
    infos = eval_signature(env, eval_model)[0]
    return {name: infos[name] for name in names if name in infos}


def shape_text(dims: Sequence[int]) -> str:
    """A shape as the trainer prints it, symbolic dimensions as N: ``[N, 64]``."""
    return "[" + ", ".join("N" if d < 0 else str(d) for d in dims) + "]"


def load_dataset(path: Path, splits: Dict[str, List[str]], infos: Dict[str, TensorInfo]) -> Dict[str, Arrays]:
    """``{"train": {input: array}, "val": {...}}`` from ``train_<input>`` / ``val_<input>``, checked
    against the model's inputs (names, dtypes, shapes, and at least one batch per split when the model
    fixes the batch size) so that a mismatch is reported here, by name, rather than as a runtime error
    in the middle of the first step."""
    stored = read_npz(path)
    where = f"dataset {str(path)!r}"
    expected = [f"{split}_{name}" for split, names in splits.items() for name in names]
    missing = [key for key in expected if key not in stored]
    unknown = [key for key in stored if key.startswith(("train_", "val_")) and key not in expected]
    if missing or unknown:
        problems = ([f"lacks {', '.join(missing)}"] if missing else []) + (
            [f"has {', '.join(unknown)}, which match no model input"] if unknown else []
        )
        # The file's own keys too: a typo or another naming scheme is then visible at a glance.
        raise SetupError(
            f"{where} {' and '.join(problems)}: the model's inputs are {', '.join(splits['train'])}, "
            f"so the arrays must be {', '.join(expected)}; the file has {', '.join(stored) or 'no arrays'}"
        )
    return check_splits({split: {name: stored[f"{split}_{name}"] for name in names} for split, names in splits.items()},
                        infos, where)


def read_npz(path: Path) -> Arrays:
    """The arrays of an ``.npz`` file by key; a SetupError for what is not one."""
    if not zipfile.is_zipfile(path):  # np.load would try it as a pickle and say so, confusingly
        raise SetupError(f"dataset {str(path)!r} is not an .npz file (numpy.savez writes one)")
    try:
        with np.load(path, allow_pickle=False) as npz:
            return {key: npz[key] for key in npz.files}
    except Exception as exc:  # not a zip, a pickled array, a truncated file...
        raise SetupError(f"cannot read dataset {str(path)!r}: {exc}") from None


def check_splits(splits: Dict[str, Arrays], infos: Dict[str, TensorInfo], where: str) -> Dict[str, Arrays]:
    """The arrays of each split checked against the model's inputs (dtypes, shapes, as many samples in each
    array of a split, and at least one batch per split when the model fixes the batch size)."""
    dataset: Dict[str, Arrays] = {}
    batch = fixed_batch(infos)
    for split, arrays in splits.items():
        for name, array in arrays.items():
            key, info = f"{split}_{name}", infos.get(name)
            if info is None:
                continue  # an input the eval model does not declare: the runtime will judge it
            if array.dtype != info.dtype:
                raise SetupError(
                    f"{where}: {key} is {array.dtype}, but the model's input {name!r} is {info.dtype} "
                    f"(convert it with .astype(np.{info.dtype}))"
                )
            model_dims, data_dims = info.shape[1:], array.shape[1:]
            if array.ndim != len(info.shape) or any(m >= 0 and m != d for m, d in zip(model_dims, data_dims)):
                raise SetupError(
                    f"{where}: {key} has shape {list(array.shape)}, but the model's input {name!r} is "
                    f"{shape_text(info.shape)} (N samples first)"
                )
        counts = {len(a) for a in arrays.values()}
        if len(counts) != 1 or 0 in counts:
            sizes = ", ".join(f"{split}_{n}: {len(a)}" for n, a in arrays.items())
            raise SetupError(f"{where}: the {split} arrays need the same, non-zero number of samples ({sizes})")
        (count,) = counts
        if batch is not None and count < batch:  # only whole batches fit the model: none would run
            raise SetupError(
                f"{where}: the {split} split has {count} sample{'s' if count > 1 else ''}, fewer than one batch: "
                f"the model's inputs fix the batch size at {batch} and take whole batches only"
            )
        dataset[split] = arrays
    return dataset


# Said with every "the model fixes the batch size" refusal: the other way out, a model that takes any batch.
DYNAMIC_BATCH_HINT = ("; or export the model with a dynamic batch: torch.onnx.export(..., dynamic_shapes=...) with the "
                      "default exporter, or dynamic_axes={'<input>': {0: 'batch'}} with the TorchScript one "
                      "(dynamo=False)")


def fixed_batch(infos: Dict[str, TensorInfo]) -> Optional[int]:
    """The batch size the model fixes, if its inputs' first dimension is not symbolic."""
    sizes = {info.shape[0] for info in infos.values() if info.shape and info.shape[0] > 0}
    return sizes.pop() if len(sizes) == 1 else None


def batches(order: np.ndarray, size: int, drop_last: bool) -> Iterator[np.ndarray]:
    """Index arrays of ``size`` over ``order``; the last one shorter unless ``drop_last``."""
    end = len(order) - len(order) % size if drop_last else len(order)
    for start in range(0, end, size):
        yield order[start:start + size]


def classification_labels(infos: Dict[str, TensorInfo]) -> Optional[str]:
    """The labels input, when there is exactly one integer data input (a classification task)."""
    integer = [name for name, info in infos.items() if info.dtype is not None and info.dtype.kind in "iu"]
    return integer[0] if len(integer) == 1 else None


def loss_labels(manifest: Optional[Dict[str, Any]], infos: Dict[str, TensorInfo]) -> Tuple[Optional[str], Optional[str], int]:
    """(the labels input, the eval output whose argmax is the prediction or None for the exported one,
    the class axis) of a classification task; (None, None, 1) for other losses. The artifacts say it:
    ``artifacts.json``'s ``loss_reading`` (what the cross-entropy loss reads, per sample, token or pixel),
    else the input the cross-entropy loss added. Only artifacts made elsewhere, without artifacts.json, fall
    back to the one integer data input."""
    if manifest is not None:
        reading = manifest.get("loss_reading")
        if isinstance(reading, dict) and reading.get("labels") in infos:
            return reading["labels"], reading.get("scores"), int(reading.get("class_axis", 1))
        loss = manifest.get("options", {}).get("loss")
        added = [name for name in manifest.get("added_inputs") or () if name in infos]
        if loss == "cross-entropy" and added:
            return added[0], None, 1
        if "options" in manifest and loss != "cross-entropy":
            return None, None, 1  # a regression loss, or the model's own: no classes
    return classification_labels(infos), None, 1


def running_statistics(manifest: Optional[Dict[str, Any]], train_outputs: Sequence[str]) -> Tuple[Tuple[str, str], ...]:
    """(training output, frozen parameter) pairs of the BatchNormalization running statistics that the
    artifacts make follow training (``artifacts.json``'s ``batchnorm_statistics``), as the session has them."""
    found = []
    for entry in (manifest or {}).get("batchnorm_statistics") or ():
        for output, parameter in ((entry["mean_output"], entry["mean"]), (entry["var_output"], entry["var"])):
            if output in train_outputs:
                found.append((output, parameter))
    return tuple(found)


def check_batch_size(batch_size: int, n_train: int, where: str) -> None:
    """Refuse a batch larger than the training split: every epoch would be one partial batch, which is
    rarely what was meant (and with a linear schedule, one step per epoch)."""
    if batch_size > n_train:
        raise SetupError(
            f"{where}: --batch-size {batch_size} is larger than the training split ({n_train} sample"
            f"{'s' if n_train != 1 else ''}): every epoch would be a single, partial batch; pass --batch-size "
            f"{n_train} or less"
        )


def check_labels(dataset: Dict[str, Arrays], labels: str, classes: int, scores: str, where: str,
                 class_axis: int = -1) -> None:
    """Refuse class labels outside ``0 .. classes-1`` before training. The class count is the size of the
    eval model's scores output along its class axis; ONNX Runtime's cross-entropy gives a loss of 0 for a
    label just outside it and crashes for one far outside, and the binding cannot know the count."""
    axis = "last dimension" if class_axis == -1 else f"dimension {class_axis} (its class axis)"
    for split, arrays in dataset.items():
        values = arrays[labels]
        bad = np.unique(values[(values < 0) | (values >= classes)])
        if bad.size:
            count = int(((values < 0) | (values >= classes)).sum())
            shown = ", ".join(str(v) for v in bad[:5]) + (", ..." if bad.size > 5 else "")
            raise SetupError(
                f"{where}: {split}_{labels} holds {count} label{'s' if count > 1 else ''} outside the model's "
                f"{classes} classes (0 to {classes - 1}): {shown}. The class count is the {axis} of the "
                f"eval model's output {scores!r}; relabel the data or give the model that many classes"
            )
