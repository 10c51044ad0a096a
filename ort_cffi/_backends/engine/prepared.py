"""The artifacts' models made ready for the engine, without onnx in the training process where that can be had.

Making a session on the engine means reading the training, eval and optimizer models, classifying their inputs
and outputs and lowering the training operators (``models``, ``lowering``): work done with the ``onnx`` package
and its shape inference. Importing onnx and lowering in the training process cost 15-37 MiB of resident memory
that stayed for the process's life (docs/internals/runtime.md, the engine), where the training build reads the
same files in C++. So the result of that work, a ``Prepared`` (the lowered models as bytes and the names the
session needs), is:

- **read from a cache** keyed by the models' contents (a SHA-256 of each file, and of every external data file
  they name), the parameters' names, the seed, and a version of the preparing code: the SHA-256 of this
  module's, ``models``' and every ``lowering`` module's source and onnx's version. A changed lowering or a
  changed file is a new key: nothing stale is reused. Errors are never cached: an operator with no lowering is
  refused by name at every session creation, before anything runs.
- **made in a short-lived child process** on a miss when this process has not imported onnx (the child imports
  it, lowers, answers and exits, so its memory goes with it), and here when onnx is already imported (its cost
  is paid) or a child cannot be started (an embedded interpreter): the answer is the same.

``$ORT_CFFI_ENGINE_PREPARE`` (``auto``, ``child``, ``here``) overrides where the work is done; ``$ORT_CFFI_ENGINE_CACHE=0``
turns the cache off; the cache lies in ort_cffi's cache folder (``$ORT_CFFI_CACHE_DIR``) under ``engine/``.
"""
from __future__ import annotations

import hashlib
import json
import os
import struct
import sys
import tempfile
from dataclasses import asdict, dataclass, field, fields
from functools import lru_cache
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from ort_cffi._backends.engine.optimizer import OptimizerSpec

ModelSource = Tuple[Optional[str], Optional[bytes]]
PREPARE_ENV = "ORT_CFFI_ENGINE_PREPARE"
CACHE_SWITCH_ENV = "ORT_CFFI_ENGINE_CACHE"
MAGIC = b"ort_cffi engine prepared 1\n"
KEEP_ENTRIES = 256  # the cache keeps the most recently used entries, at most this many
KEEP_BYTES = 1 << 30  # and this many bytes in all (a lowered model holds its initializers)


@dataclass
class Prepared:
    """What a session is made of: the runnable (lowered, seeded) models and the names the engine classifies."""

    training: Union[bytes, memoryview]  # the lowered, seeded training model
    user_inputs: List[str]
    user_outputs: List[str]
    parameter_inputs: List[str]
    gradients: Dict[str, str]  # trainable parameter -> its gradient output
    accumulated: Dict[str, str]  # an accumulator's accumulated-buffer output -> its parameter
    declared_shapes: Dict[str, Optional[List[int]]]  # parameter input -> its fixed declared shape, or None
    optimizer: Optional[OptimizerSpec] = None
    evaluation: Optional[Union[bytes, memoryview]] = None
    eval_user_inputs: List[str] = field(default_factory=list)
    eval_user_outputs: List[str] = field(default_factory=list)
    eval_parameter_inputs: List[str] = field(default_factory=list)
    external: Dict[str, str] = field(default_factory=dict)  # external data file read -> its SHA-256
    # the bytes of the lowered training graph's intermediate values for one sample (every symbolic dimension
    # taken as 1; a value of unknown shape counted as the largest known one): what decides the memory pattern
    # (session.py); None where no shape is known
    training_intermediates: Optional[int] = None

    def shapes_for_nominal_state(self) -> Dict[str, Tuple[int, ...]]:
        """The shapes a nominal checkpoint's parameters take; a symbolic or missing size is refused by name."""
        found = {}
        for name in self.parameter_inputs:
            shape = self.declared_shapes.get(name)
            if shape is None:
                raise ValueError(f"the training model declares no fixed shape for the parameter {name!r}, which a "
                                 "nominal checkpoint needs to know its size")
            found[name] = tuple(shape)
        return found


# --- the work itself (needs onnx) ------------------------------------------------------------------------------
def prepare_here(train: ModelSource, evaluation: Optional[ModelSource], optimizer_model: Optional[ModelSource],
                 parameters: Sequence[str], trainable: Sequence[str], seed: Optional[int],
                 intra_op_threads: int = 1) -> Prepared:
    """Read, classify and lower the models in this process, for sessions of ``intra_op_threads`` threads."""
    from ort_cffi._backends.engine import models
    from ort_cffi._backends.engine.lowering import lower_training_ops

    external: Dict[str, str] = {}

    def load(source: ModelSource, kind: str) -> Any:
        model = models.load_model(*source, kind=kind)
        if source[0] is not None:
            for name in models.external_files(source[0]):
                external[name] = _file_digest(name)
        return model

    def runnable(model: Any) -> Any:
        lowered = lower_training_ops(model, intra_op_threads)
        if seed is not None:
            models.seed_random_ops(lowered, seed)
        return lowered

    graph = models.training_graph(load(train, "training model"), set(parameters), set(trainable))
    prepared = Prepared(b"", graph.user_inputs, graph.user_outputs, graph.parameter_inputs, graph.gradients,
                        graph.accumulated, models.fixed_shapes(graph.model, graph.parameter_inputs))
    if optimizer_model is not None:
        prepared.optimizer = models.optimizer_spec(load(optimizer_model, "optimizer model"))
    evaluated = None
    if evaluation is not None:
        evaluated = models.eval_graph(load(evaluation, "eval model"), set(parameters))
        prepared.eval_user_inputs = evaluated.user_inputs
        prepared.eval_user_outputs = evaluated.user_outputs
        prepared.eval_parameter_inputs = evaluated.parameter_inputs
    lowered = runnable(graph.model)
    del graph
    prepared.training = bytes(lowered.SerializeToString())
    prepared.training_intermediates = intermediate_bytes(lowered)
    del lowered
    if evaluated is not None:
        prepared.evaluation = bytes(runnable(evaluated.model).SerializeToString())
    prepared.external = external
    return prepared


def intermediate_bytes(model: Any) -> Optional[int]:
    """The bytes of the values a graph's nodes compute, for one sample: from onnx's shape inference, every
    symbolic dimension taken as 1, a value of unknown shape or type counted as the largest known one (at most
    the bytes of a step's intermediates at batch 1, as a graph's values are mostly per sample). None where
    inference fails or knows no shape."""
    import onnx

    from ort_cffi._backends.engine.lowering.shape_targets import without_weights

    try:
        graph = onnx.shape_inference.infer_shapes(without_weights(model)).graph
    except Exception:  # an operator onnx cannot infer: the size stays unknown
        return None
    sizes: Dict[str, int] = {}
    for value in list(graph.value_info) + list(graph.output):
        tensor = value.type.tensor_type
        if not value.type.HasField("tensor_type") or not tensor.HasField("shape") or not tensor.elem_type:
            continue
        try:
            itemsize = onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type).itemsize
        except Exception:  # a type numpy has none for (a string, a float8): its size stays unknown
            continue
        count = 1
        for dim in tensor.shape.dim:
            count *= dim.dim_value if dim.HasField("dim_value") else 1
        sizes[value.name] = count * itemsize
    if not sizes:
        return None
    largest = max(sizes.values())
    return sum(sizes.get(output, largest) for node in graph.node for output in node.output if output)


# --- the entry point ------------------------------------------------------------------------------------------
def prepare(train: ModelSource, evaluation: Optional[ModelSource], optimizer_model: Optional[ModelSource],
            parameters: Sequence[str], trainable: Sequence[str], seed: Optional[int],
            intra_op_threads: int = 1) -> Prepared:
    """A ``Prepared`` for these models, lowered for sessions of ``intra_op_threads`` threads (some forms are
    chosen by it, so it is part of the cache key): from the cache, else made (in a child or here) and cached."""
    request = {"parameters": sorted(parameters), "trainable": sorted(trainable), "seed": seed,
               "intra_op_threads": intra_op_threads}
    folder = _cache_folder()
    key = None
    if folder is not None:
        version = code_version()
        if version is not None:
            key = _key(version, request, [train, evaluation, optimizer_model])
            found = _read_entry(folder / key)
            if found is not None:
                return found
    sources = {"train": train, "evaluation": evaluation, "optimizer": optimizer_model}
    where = os.environ.get(PREPARE_ENV, "auto").strip().lower() or "auto"
    if where not in ("auto", "child", "here"):
        raise ValueError(f"${PREPARE_ENV} is {where!r}: auto, child or here")
    made = None
    if where == "child" or (where == "auto" and "onnx" not in sys.modules):
        made = _prepare_in_child(sources, request)
    if made is None:
        made = prepare_here(train, evaluation, optimizer_model, parameters, trainable, seed, intra_op_threads)
    if folder is not None and key is not None:
        _write_entry(folder, key, made)
    return made


# --- the child ------------------------------------------------------------------------------------------------
def _prepare_in_child(sources: Dict[str, Optional[ModelSource]], request: Dict[str, Any]) -> Optional[Prepared]:
    """The work done by a fresh interpreter; None where none could be started or it answered nothing (the caller
    then does it here). A refusal (an operator with no lowering, a damaged file) is raised here as it was there."""
    if not sys.executable or getattr(sys, "frozen", False) or not Path(sys.executable).exists():
        return None  # no interpreter to start (embedded), or one that is an application (frozen)
    header = dict(request, sources={k: (v[0] if v else None) for k, v in sources.items()},
                  given=[k for k, v in sources.items() if v is not None])
    blobs = {k: v[1] for k, v in sources.items() if v is not None and v[1] is not None}
    package_root = str(Path(__file__).resolve().parents[3])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")])))
    import subprocess  # here: a process whose models are cached never needs it

    try:
        done = subprocess.run([sys.executable, "-c", "from ort_cffi._backends.engine.prepared import child_main; "
                               "child_main()"], input=_encode(header, blobs), capture_output=True, env=env)
    except OSError:
        return None
    # where something the child imports printed first, the answer starts after it
    start = done.stdout.find(MAGIC)
    if done.returncode != 0 or start < 0:
        return None
    answer, answer_blobs = _decode(memoryview(done.stdout)[start:].tobytes() if start else done.stdout)
    if "error" in answer:
        raise _error(answer["error"])
    return _from_header(answer, answer_blobs)


def child_main() -> None:
    """The child's side: a request on stdin, a ``Prepared`` or the error that refused it on stdout."""
    header, blobs = _decode(sys.stdin.buffer.read())
    sources: Dict[str, Optional[ModelSource]] = {
        kind: ((header["sources"][kind], blobs.get(kind)) if kind in header["given"] else None)
        for kind in ("train", "evaluation", "optimizer")}
    train = sources["train"]
    assert train is not None
    try:
        made = prepare_here(train, sources["evaluation"], sources["optimizer"], header["parameters"],
                            header["trainable"], header["seed"], header["intra_op_threads"])
    except (ValueError, TypeError, KeyError, IndexError, FileNotFoundError, NotImplementedError,
            RuntimeError) as error:
        from ort_cffi._backends.engine.lowering import UnsupportedTrainingOpError

        # the nearest class this process rebuilds it as (a subclass of ValueError stays a ValueError: the
        # status the engine's table makes of it is the same)
        kind = next(base.__name__ for base in type(error).__mro__ if base.__name__ in _ERRORS or base is RuntimeError)
        described: Dict[str, Any] = {"kind": kind, "message": str(error.args[0]) if error.args else str(error)}
        if isinstance(error, UnsupportedTrainingOpError):
            described["kind"], described["ops"] = "UnsupportedTrainingOpError", list(error.ops)
        sys.stdout.buffer.write(_encode({"error": described}, {}))
        return
    sys.stdout.buffer.write(_encode(*_to_header(made)))


_ERRORS = {"ValueError": ValueError, "TypeError": TypeError, "KeyError": KeyError, "IndexError": IndexError,
           "FileNotFoundError": FileNotFoundError, "NotImplementedError": NotImplementedError}


def _error(described: Dict[str, Any]) -> Exception:
    """The child's refusal, raised here: the same type (a refused operator is a ``ValueError``, as
    ``UnsupportedTrainingOpError`` is one, which this process cannot import without onnx) and the same words."""
    return _ERRORS.get(described["kind"], ValueError if described["kind"] == "UnsupportedTrainingOpError"
                       else RuntimeError)(described["message"])


# --- the encoding (child answers and cache entries): a JSON header, then raw bytes ---------------------------
def _encode(header: Dict[str, Any], blobs: Dict[str, Any]) -> bytes:
    offsets, offset = {}, 0
    for name, blob in blobs.items():
        offsets[name] = [offset, len(blob)]
        offset += len(blob)
    text = json.dumps(dict(header, blobs=offsets)).encode()
    return b"".join([MAGIC, struct.pack("<Q", len(text)), text, *blobs.values()])


def _decode(data: bytes) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """The header and the blobs, as views of ``data`` (a large model is not copied again)."""
    if not data.startswith(MAGIC):
        raise ValueError("not an answer of ort_cffi's engine")
    start = len(MAGIC) + 8
    (size,) = struct.unpack("<Q", data[len(MAGIC):start])
    header = json.loads(data[start:start + size])
    body = start + size
    view = memoryview(data)
    blobs = {}
    for name, (offset, length) in header.pop("blobs").items():
        blob = view[body + offset:body + offset + length]
        if len(blob) != length:
            raise ValueError("a cut-short answer")
        blobs[name] = blob
    return header, blobs


def _to_header(made: Prepared) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    blobs = {"training": made.training}
    if made.evaluation is not None:
        blobs["evaluation"] = made.evaluation
    header = {f.name: getattr(made, f.name) for f in fields(made) if f.name not in ("training", "evaluation")}
    header["optimizer"] = asdict(made.optimizer) if made.optimizer is not None else None
    return header, blobs


def _from_header(header: Dict[str, Any], blobs: Dict[str, Any]) -> Prepared:
    header = dict(header)
    spec = header.pop("optimizer")
    return Prepared(training=blobs["training"], evaluation=blobs.get("evaluation"),
                    optimizer=OptimizerSpec(**spec) if spec is not None else None, **header)


# --- the cache ------------------------------------------------------------------------------------------------
ENGINE_FILES = ("prepared.py", "models.py", "optimizer.py")


def source_files() -> List[Path]:
    """The source of the code that prepares: this module, ``models``, ``optimizer`` (the spec it reads) and
    every ``lowering`` module."""
    here = Path(__file__).resolve().parent
    return [here / name for name in ENGINE_FILES] + sorted((here / "lowering").rglob("*.py"))


@lru_cache(maxsize=1)
def code_version() -> Optional[str]:
    """SHA-256 of ``source_files()`` and onnx's version; None where a source file cannot be read (no caching
    then)."""
    digest = hashlib.sha256()
    try:
        digest.update(_onnx_version())
        for path in source_files():
            digest.update(str(path.relative_to(path.parents[1])).encode() + b"\0" + path.read_bytes() + b"\0")
    except Exception:  # a frozen or zipped install, onnx missing: prepare every time
        return None
    return digest.hexdigest()


def _onnx_version() -> bytes:
    """onnx's version without importing it (or importlib.metadata, which costs 1 MiB): its ``version.py``,
    which onnx's build writes; its distribution's metadata where that file is missing."""
    from importlib.util import find_spec

    spec = find_spec("onnx")
    if spec is None or not spec.origin:
        raise ImportError("onnx is not installed")
    written = Path(spec.origin).with_name("version.py")
    if written.is_file():
        return written.read_bytes()
    from importlib.metadata import version

    return f"onnx {version('onnx')}".encode()


def _cache_folder() -> Optional[Path]:
    if os.environ.get(CACHE_SWITCH_ENV, "1").strip() == "0":
        return None
    from ort_cffi._native.store import cache_dir

    return cache_dir() / "engine"


def _file_digest(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _key(version: str, request: Dict[str, Any], sources: Sequence[Optional[ModelSource]]) -> str:
    digest = hashlib.sha256(version.encode() + json.dumps(request, sort_keys=True).encode())
    for source in sources:
        if source is None:
            digest.update(b"-")
        elif source[1] is not None:
            digest.update(b"bytes" + hashlib.sha256(source[1]).digest())
        else:
            assert source[0] is not None
            # the folder too: a model's external data is named relative to it (the entry checks their contents)
            digest.update(b"file" + _file_digest(source[0]).encode() + str(Path(source[0]).resolve().parent).encode())
    return digest.hexdigest()


def _read_entry(path: Path) -> Optional[Prepared]:
    """The cached ``Prepared``; None if there is none, it cannot be read, or an external data file it was made
    from has changed since."""
    try:
        data = path.read_bytes()
        header, blobs = _decode(data)
        made = _from_header(header, blobs)
        for name, digest in made.external.items():
            if _file_digest(name) != digest:
                return None
    except (OSError, ValueError, KeyError, TypeError):
        return None
    try:
        os.utime(path)  # most recently used
    except OSError:  # a cache one may read but not write
        pass
    return made


def _write_entry(folder: Path, key: str, made: Prepared) -> None:
    """Write the entry whole or not at all (a temporary file renamed), then drop the least recently used ones
    (``_prune``); a cache that cannot be written is no error."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=folder, prefix=".writing-")
        try:
            with os.fdopen(handle, "wb") as f:
                f.write(_encode(*_to_header(made)))
            os.replace(temporary, folder / key)
        except BaseException:
            os.unlink(temporary)
            raise
        _prune(folder, keep=key)
    except OSError:
        pass


def _prune(folder: Path, keep: str) -> None:
    """Drop the least recently used entries past ``KEEP_ENTRIES`` or ``KEEP_BYTES`` in all, never ``keep``."""
    entries = []
    for entry in folder.iterdir():
        if not entry.name.startswith("."):
            try:
                status = entry.stat()
            except OSError:  # removed by another process meanwhile
                continue
            entries.append((status.st_mtime, status.st_size, entry))
    entries.sort(key=lambda item: item[0], reverse=True)  # most recently used first
    total = 0
    for count, (_, size, entry) in enumerate(entries):
        total += size
        if entry.name != keep and (count >= KEEP_ENTRIES or total > KEEP_BYTES):
            entry.unlink(missing_ok=True)
