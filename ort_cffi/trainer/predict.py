"""What ``ort-cffi-predict`` does: read what an inference model exported by ``ort-cffi-train`` carries (its
``metadata_props``: the classes, the preprocessing, the vocabulary or tokenizer), prepare new inputs exactly as the
training data was prepared (image files, CSV rows, texts), run the model through ort_cffi's facade
(``OrtEnvironment.createSession``), and name the most likely class of each input with its probability."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from ort_cffi import OrtEnvironment, TensorInfo
from ort_cffi._facade.protobuf_wire import Malformed
from ort_cffi.trainer.errors import SetupError
from ort_cffi.trainer.sources.images import predict_inputs as image_inputs
from ort_cffi.trainer.sources.metadata import class_names, read_metadata
from ort_cffi.trainer.sources.table import predict_rows
from ort_cffi.trainer.sources.text import TextEncoder, predict_texts


@dataclass
class Prediction:
    """One input's prediction: what it was (a file, a CSV file and line, a text), the class name (or the value
    of a regression, as text) and its probability (None for a regression)."""

    input: str
    label: str
    probability: Optional[float]
    scores: np.ndarray  # the model's output for this input


def model_metadata(model: Union[str, Path]) -> Tuple[Dict[str, Any], Optional[List[str]], Dict[str, str]]:
    """(the preprocessing record, the class names, all metadata) of a model ``ort-cffi-train`` exported; a
    SetupError for a model without them."""
    model = Path(model)
    if not model.is_file():
        raise SetupError(f"model {str(model)!r} does not exist")
    try:
        metadata = read_metadata(model)
    except (Malformed, UnicodeDecodeError):
        raise SetupError(f"{str(model)!r} is not an ONNX model") from None
    if "preprocessing" not in metadata:
        raise SetupError(f"{str(model)!r} carries no preprocessing in its metadata: ort-cffi-predict reads the models "
                         "ort-cffi-train exports from an image folder, a CSV or a text file (their inference_model.onnx)")
    try:
        record = json.loads(metadata["preprocessing"])
        classes = class_names(metadata)
    except ValueError:
        raise SetupError(f"{str(model)!r}: its metadata 'preprocessing' or 'classes' is not JSON") from None
    return record, classes, metadata


def prepare(inputs: Sequence[str], record: Dict[str, Any], metadata: Dict[str, str],
            info: TensorInfo) -> Tuple[List[str], np.ndarray]:
    """(what each row is of, the model's input batch) for the kind of data the model was trained on."""
    kind = record.get("kind")
    if kind == "image":
        return image_inputs([Path(i) for i in inputs], record)
    if kind == "table":
        return predict_rows([Path(i) for i in inputs], record, len(info.shape))
    if kind == "text":
        vocabulary = json.loads(metadata["vocabulary"]) if "vocabulary" in metadata else None
        encoder = TextEncoder(record, vocabulary=vocabulary, tokenizer_json=metadata.get("tokenizer"))
        return predict_texts(inputs, record, encoder)
    raise SetupError(f"the model's preprocessing is of a kind this ort_cffi does not know ({kind!r})")


def probabilities(scores: np.ndarray) -> np.ndarray:
    """Class probabilities [N, C] from the model's scores: as they are when they already are (rows of values in
    0-1 that sum to 1), else their softmax (the scores are logits)."""
    scores = scores.astype(np.float64)
    if np.all(scores >= 0) and np.all(scores <= 1) and np.allclose(scores.sum(axis=1), 1.0, atol=1e-3):
        return scores
    shifted = np.exp(scores - scores.max(axis=1, keepdims=True))
    return shifted / shifted.sum(axis=1, keepdims=True)


def run_batches(session: Any, name: str, batch: np.ndarray, output: str, fixed: Optional[int]) -> np.ndarray:
    """The model's ``output`` for every row of ``batch``, in batches of the size the model fixes (the last one
    filled up with copies of its last row, whose results are dropped)."""
    size = fixed or max(len(batch), 1)
    results = []
    for start in range(0, len(batch), size):
        part = batch[start:start + size]
        filled = len(part)
        if fixed and filled < fixed:
            part = np.concatenate([part, np.repeat(part[-1:], fixed - filled, axis=0)])
        with session.run({name: np.ascontiguousarray(part)}, [output]) as result:
            results.append(np.array(result.get(0).getValue())[:filled])
    return np.concatenate(results)


def predict(model: Union[str, Path], inputs: Sequence[Union[str, Path]],
            env: Optional[OrtEnvironment] = None) -> List[Prediction]:
    """Predict the class of each input (image files or folders, CSV/TSV files of rows, texts or text files) with
    an inference model ``ort-cffi-train`` exported, preparing them as its metadata says.

    Raises:
        SetupError: The model carries no metadata of ort-cffi-train, or an input cannot be read or prepared.
        OrtException: The runtime refuses the model or the run.
    """
    model = Path(model)
    named = [str(item) for item in inputs]
    record, classes, metadata = model_metadata(model)
    env = env or OrtEnvironment.getEnvironment()
    with env.createSession(model) as session:
        infos = {n: i.getInfo() for n, i in session.getInputInfo().items()}
        name = record["input"]
        if name not in infos:
            raise SetupError(f"{str(model)!r} has no input {name!r}, which its preprocessing feeds (its inputs: "
                             f"{', '.join(infos)})")
        others = [n for n in infos if n != name]
        if others:
            raise SetupError(f"{str(model)!r} takes {', '.join(others)} besides {name!r}: ort-cffi-predict feeds one input")
        shown, batch = prepare(named, record, metadata, infos[name])
        if not len(batch):
            raise SetupError("nothing to predict: the inputs named hold no images, rows or texts")
        output = list(session.getOutputNames())[0]
        fixed = infos[name].shape[0] if infos[name].shape and infos[name].shape[0] > 0 else None
        scores = run_batches(session, name, batch, output, fixed)
    if classes is None:  # a regression: the value itself
        values = scores.reshape(len(scores), -1)
        return [Prediction(s, " ".join(f"{v:.6g}" for v in row), None, row) for s, row in zip(shown, values)]
    flat = scores.reshape(len(scores), -1)
    if flat.shape[1] == 1 and len(classes) == 2:  # one score: the second class's probability, or its logit
        one = flat[:, 0].astype(np.float64)
        second = one if np.all((one >= 0) & (one <= 1)) else 1 / (1 + np.exp(-one))
        return [Prediction(s, classes[int(p >= 0.5)], float(max(p, 1 - p)), row) for s, p, row in zip(shown, second, flat)]
    if flat.shape[1] != len(classes):
        raise SetupError(f"{str(model)!r}: its output {output!r} holds {flat.shape[1]} scores per input, but its "
                         f"metadata names {len(classes)} classes")
    chances = probabilities(flat)
    best = chances.argmax(axis=1)
    return [Prediction(s, classes[int(b)], float(p[b]), row) for s, b, p, row in zip(shown, best, chances, flat)]
