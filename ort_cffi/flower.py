"""Federated learning with `Flower <https://flower.ai>`_ over ort_cffi: a Flower client that trains a set
of ONNX Runtime training artifacts on its local data, and the server side (FedAvg whose aggregated model
is evaluated, checkpointed and exported through ort_cffi).

The pieces, for the simulation (``ort-cffi-federated``, :mod:`ort_cffi.federated`) and for Flower's
deployment engine alike:

- :class:`OrtNumPyClient`, a ``flwr.client.NumPyClient``: the parameters travel as one flat float32 array,
  the session's parameter buffer (``copyParametersToBuffer`` / ``copyBufferToParameters``); ``fit`` runs
  the local epochs the server's config asks for and returns loss, accuracy and the number of examples.
- :func:`make_client_app` → a ``ClientApp``; :data:`clientapp` is the one ``flwr run`` loads
  (``ort_cffi.flower:clientapp``).
- :func:`partition` / :func:`partition_dataset`: IID, or non-IID by label with a Dirichlet parameter.
- :class:`GlobalModel` (the server's session), :class:`OrtFedAvg` (FedAvg that evaluates, checkpoints and
  records every round), :func:`make_server_app` → a ``ServerApp``; :data:`serverapp` is the one ``flwr run``
  loads (``ort_cffi.flower:serverapp``).

This module needs Flower: ``pip install 'ort_cffi[federated]'``. ``import ort_cffi`` does not import it.
"""
from __future__ import annotations

import os
import re
import threading
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, ClassVar, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, TypeVar, Union

import numpy as np

from . import __version__
from . import train as _train
from ._errors import OrtClosedException, OrtException
from .environment import OrtEnvironment
from .options import SessionOptions
from .training import OrtTrainingSession

INSTALL_HINT = "pip install 'ort_cffi[federated]'"

try:
    from flwr.app import Context
    from flwr.client import NumPyClient
    from flwr.clientapp import ClientApp
    from flwr.common import (
        FitRes,
        EvaluateRes,
        NDArrays,
        Parameters,
        Scalar,
        log,
        ndarrays_to_parameters,
        parameters_to_ndarrays,
    )
    from flwr.server import ServerAppComponents, ServerConfig
    from flwr.server.client_proxy import ClientProxy
    from flwr.server.strategy import FedAvg
    from flwr.serverapp import ServerApp
except ImportError as exc:  # flwr missing (or too old for these names)
    raise ImportError(
        f"ort_cffi.flower needs Flower (the flwr package), which is not installed or too old ({exc}): "
        f"{INSTALL_HINT}",
        name="flwr",
    ) from exc

DEFAULT_ARTIFACTS = _train.DEFAULT_ARTIFACTS
PARTITIONINGS = ("iid", "dirichlet")
Arrays = Dict[str, np.ndarray]
PathLike = Union[str, "os.PathLike[str]"]


class FederatedError(OrtException):
    """A federated run cannot go on: a client failed, or the server's and a client's models differ."""


# --- data: the local datasets ---------------------------------------------------------------------

def _label_name(arrays: Mapping[str, np.ndarray]) -> Optional[str]:
    """The labels: the one integer array among a split's inputs (a classification task), else None."""
    integer = [name for name, array in arrays.items() if array.dtype.kind in "iu" and array.ndim == 1]
    return integer[0] if len(integer) == 1 else None


def partition(labels: np.ndarray, num_partitions: int, *, partitioning: str = "iid", alpha: float = 0.5,
              seed: int = 0, proportions: Optional[np.ndarray] = None) -> List[np.ndarray]:
    """Split ``range(len(labels))`` into ``num_partitions`` disjoint index arrays covering it.

    ``iid``: a random permutation cut into near-equal parts. ``dirichlet``: non-IID by label, each class
    spread over the partitions in proportions drawn from Dirichlet(``alpha``) (small alpha: each client
    sees few classes; large alpha: close to IID); ``proportions`` ([classes, partitions], rows summing to 1)
    reuses a draw, e.g. that of the training split for the validation split. Deterministic in ``seed``.
    """
    if num_partitions < 1:
        raise ValueError(f"the number of partitions must be at least 1, got {num_partitions}")
    rng = np.random.default_rng(seed)
    n = len(labels)
    if partitioning == "iid":
        return [np.sort(part) for part in np.array_split(rng.permutation(n), num_partitions)]
    if partitioning != "dirichlet":
        raise ValueError(f"partitioning must be one of {', '.join(PARTITIONINGS)}, not {partitioning!r}")
    if proportions is None:
        proportions = label_proportions(labels, num_partitions, alpha=alpha, seed=seed)
    parts: List[List[np.ndarray]] = [[] for _ in range(num_partitions)]
    for label in range(proportions.shape[0]):
        members = rng.permutation(np.flatnonzero(labels == label))
        # Cut points from the cumulative proportions, rounded: every sample lands in exactly one part.
        cuts = np.round(np.cumsum(proportions[label])[:-1] * len(members)).astype(int)
        for part, chunk in zip(parts, np.split(members, cuts)):
            part.append(chunk)
    return [np.sort(np.concatenate(p)).astype(np.int64) for p in parts]


def label_proportions(labels: np.ndarray, num_partitions: int, *, alpha: float = 0.5, seed: int = 0,
                      min_size: Optional[int] = None) -> np.ndarray:
    """[classes, partitions]: how each class is spread over the partitions, drawn from Dirichlet(alpha)
    and drawn again (up to 1000 times) until every partition gets at least ``min_size`` samples
    (default: 10, or fewer for a small dataset) so that every client has something to train on."""
    if not (alpha > 0 and np.isfinite(alpha)):
        raise ValueError(f"the Dirichlet parameter alpha must be a positive number, got {alpha}")
    rng = np.random.default_rng([seed, 1])
    classes = int(labels.max()) + 1 if len(labels) else 0
    counts = np.bincount(labels, minlength=classes)
    if min_size is None:
        min_size = max(1, min(10, len(labels) // (2 * num_partitions)))
    for _ in range(1000):
        proportions = rng.dirichlet(np.full(num_partitions, alpha), size=classes)
        sizes = np.round(proportions * counts[:, None]).sum(axis=0)
        if sizes.min() >= min_size:
            return np.asarray(proportions)
    raise ValueError(
        f"no Dirichlet(alpha={alpha}) draw gives each of {num_partitions} partitions at least {min_size} "
        f"of the {len(labels)} samples: use fewer clients or a larger alpha"
    )


def partition_dataset(dataset: Mapping[str, Arrays], num_partitions: int, *, partitioning: str = "iid",
                      alpha: float = 0.5, seed: int = 0) -> List[Dict[str, Arrays]]:
    """The local datasets of ``num_partitions`` clients: each split (``train``, ``val``) partitioned,
    non-IID splits with the same label proportions (a client's validation data looks like its training
    data). Every client gets training data (a ``ValueError`` says when there is too little of it); its
    validation share may be empty (it then weighs nothing in the federated evaluation)."""
    if "train" in dataset:
        n_train = len(next(iter(dataset["train"].values()), ()))
        if n_train < num_partitions:
            raise ValueError(
                f"{num_partitions} clients cannot each get training data from {n_train} training sample"
                f"{'' if n_train == 1 else 's'}: use at most {n_train} clients")
    proportions = None
    if partitioning == "dirichlet":
        labels = _label_name(dataset["train"])
        if labels is None:
            raise ValueError("partitioning by label needs one integer labels input (a classification task)")
        proportions = label_proportions(dataset["train"][labels], num_partitions, alpha=alpha, seed=seed)
        classes = proportions.shape[0]
        for split, arrays in dataset.items():  # a class only the validation split has: spread it evenly
            extra = int(arrays[labels].max()) + 1 - classes if len(arrays[labels]) else 0
            if extra > 0:
                proportions = np.vstack([proportions, np.full((extra, num_partitions), 1.0 / num_partitions)])
                classes += extra
    local: List[Dict[str, Arrays]] = [{} for _ in range(num_partitions)]
    for number, (split, arrays) in enumerate(dataset.items()):
        labels = _label_name(arrays)
        key = arrays[labels] if labels is not None else np.zeros(len(next(iter(arrays.values()))), np.int64)
        parts = partition(key, num_partitions, partitioning=partitioning if labels is not None else "iid",
                          alpha=alpha, seed=seed + 7919 * number, proportions=proportions)
        if split == "train" and min(len(index) for index in parts) == 0:  # a Dirichlet draw's rounding
            empty = sum(len(index) == 0 for index in parts)
            raise ValueError(
                f"{empty} of the {num_partitions} clients get no training data from this {partitioning} "
                f"partitioning of {len(key)} samples: use fewer clients or a larger alpha")
        for client, index in zip(local, parts):
            client[split] = {name: array[index] for name, array in arrays.items()}
    return local


# --- settings -------------------------------------------------------------------------------------

_Settings = TypeVar("_Settings", bound="_RunConfigurable")


class _RunConfigurable:
    """Settings (a dataclass) that the run config (pyproject.toml ``[tool.flwr.app.config]``) may override:
    ``RUN_CONFIG`` maps a field to its run-config key."""

    RUN_CONFIG: ClassVar[Dict[str, str]] = {}

    def with_run_config(self: _Settings, run_config: Mapping[str, Any]) -> _Settings:
        """A copy with the fields whose keys ``run_config`` holds (and not as ``""``), each converted to
        the field's type (``str`` for a field that is None)."""
        changes: Dict[str, Any] = {}
        for name, key in self.RUN_CONFIG.items():
            if key in run_config and run_config[key] != "":
                current = getattr(self, name)
                kind = type(current) if current is not None else str
                changes[name] = kind(run_config[key])
        return replace(self, **changes)  # type: ignore[type-var]  # the subclasses are dataclasses


# --- the client -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class ClientSettings(_RunConfigurable):
    """Where a client's model and data come from. In a simulation every client reads the same dataset
    and keeps its partition (``partition-id`` of ``num-partitions``, from the node config); a real device
    names its own data with the node config ``data-path`` (an .npz with ``train_<input>``/``val_<input>``
    arrays, as ``ort-cffi-train`` reads) and uses all of it."""

    artifacts: str = str(DEFAULT_ARTIFACTS)
    data: Optional[str] = None  # default: the one .npz in the artifacts folder
    partitioning: str = "iid"
    alpha: float = 0.5
    seed: int = 0
    threads: int = 1  # intra-op threads of each client's session (simulated clients share the cores)

    # run-config keys (pyproject.toml [tool.flwr.app.config]) that override the fields above
    RUN_CONFIG: ClassVar[Dict[str, str]] = {
        "artifacts": "artifacts", "data": "data", "partitioning": "partitioning", "alpha": "dirichlet-alpha",
        "seed": "seed", "threads": "client-threads"}


_cache_lock = threading.Lock()
_sessions: Dict[Tuple[str, int], OrtTrainingSession] = {}
_datasets: Dict[Tuple[Any, ...], Any] = {}


def shared_session(artifacts: PathLike, threads: int = 1, seed: int = 0) -> OrtTrainingSession:
    """This process's training session over ``artifacts``: created on first use (the runtime is loaded
    then, once), reused by every client this process serves, in every round. A Ray actor of the
    simulation serves a client at a time; ``close_shared_sessions`` releases them."""
    folder = Path(artifacts)
    key = (str(folder.resolve()), int(threads))
    with _cache_lock:
        session = _sessions.get(key)
        if session is None or session.isClosed():
            paths = _train.find_artifacts(folder)
            OrtTrainingSession.setSeed(seed)
            with SessionOptions() as options:
                if threads:
                    options.setIntraOpNumThreads(threads)
                session = OrtEnvironment.getEnvironment().createTrainingSession(
                    paths["checkpoint"], paths["train"], paths["eval"], paths["optimizer"], options)
            _sessions[key] = session
        return session


def close_shared_sessions() -> None:
    """Close this process's cached sessions (and forget its cached datasets)."""
    with _cache_lock:
        for session in _sessions.values():
            session.close()
        _sessions.clear()
        _datasets.clear()


def _dataset(session: OrtTrainingSession, artifacts: Path, data: Optional[str]) -> Tuple[Path, Dict[str, Arrays], Optional[int]]:
    """The .npz dataset, checked against the model's inputs (names, dtypes, shapes) as ort-cffi-train does,
    and the batch size the model's inputs fix (None: any)."""
    path = _train.find_dataset(Path(data) if data else None, artifacts)
    key = ("dataset", str(path.resolve()), str(artifacts.resolve()))
    if key not in _datasets:
        splits = {"train": list(session.getTrainInputNames()), "val": list(session.getEvalInputNames())}
        paths = _train.find_artifacts(artifacts)
        infos = _train.input_infos(OrtEnvironment.getEnvironment(), paths["eval"],
                                   sorted(set(splits["train"]) | set(splits["val"])))
        _datasets[key] = (_train.load_dataset(path, splits, infos), _train.fixed_batch(infos))
    dataset, fixed_batch = _datasets[key]
    return path, dataset, fixed_batch


def local_data(settings: ClientSettings, session: OrtTrainingSession, partition_id: Optional[int],
               num_partitions: Optional[int], data_path: Optional[str] = None) -> Tuple[Dict[str, Arrays], Optional[int]]:
    """A client's ``{"train": ..., "val": ...}``: all of ``data_path`` (a device's own data), or
    partition ``partition_id`` of ``num_partitions`` of the settings' dataset; and the batch size the
    model's inputs fix (None: any)."""
    artifacts = Path(settings.artifacts)
    if data_path:
        _, own_data, fixed_batch = _dataset(session, artifacts, data_path)
        return own_data, fixed_batch
    path, dataset, fixed_batch = _dataset(session, artifacts, settings.data)
    if partition_id is None or num_partitions is None:
        return dataset, fixed_batch
    if not 0 <= partition_id < num_partitions:
        raise ValueError(f"partition-id {partition_id} is not in 0..{num_partitions - 1}")
    key = ("partitions", str(path.resolve()), num_partitions, settings.partitioning, settings.alpha, settings.seed)
    with _cache_lock:
        if key not in _datasets:
            _datasets[key] = partition_dataset(dataset, num_partitions, partitioning=settings.partitioning,
                                               alpha=settings.alpha, seed=settings.seed)
        parts: List[Dict[str, Arrays]] = _datasets[key]
    return parts[partition_id], fixed_batch


class OrtNumPyClient(NumPyClient):
    """A Flower client over an ort_cffi training session and a client's local data.

    The model travels as a single float32 array, the session's (trainable) parameter buffer, in the
    training model's parameter order: ``get_parameters`` returns ``[copyParametersToBuffer()]``, ``fit``
    and ``evaluate`` start with ``copyBufferToParameters`` of what the server sent (checked first: a
    closed session or a model of another shape fails with a :class:`FederatedError` that says so).

    ``fit`` reads its local training from the server's config: ``local-epochs`` (default 1),
    ``batch-size`` (default 32), ``lr`` (if given, ``setLearningRate``), ``server-round`` and ``seed``
    (shuffling: the order depends on seed, round, epoch and client only). It returns the new buffer, the
    number of training examples (FedAvg's weight) and ``loss``/``accuracy`` (means over the local epochs)
    and ``examples``. ``evaluate`` returns the validation loss, the number of validation examples and
    ``accuracy``.

    A model whose inputs fix the batch size (``fixed_batch``) takes whole batches only: ``fit`` refuses
    another ``batch-size`` and a client with fewer examples than one batch, and both calls leave out the
    last partial batch (the counts they return are the examples used).

    Optimizer state: the session is reused from round to round (the runtime and the artifacts are loaded
    once per process), so AdamW's moments carry over from one ``fit`` to the next, as they do on an
    on-device learner that keeps its trainer between rounds; only the parameters are replaced by the
    global model's. In a simulation a Ray actor serves its clients one at a time with one session, so
    there the moments are the actor's rather than one client's. With the digits default this makes no
    measurable difference: a fresh session (zero moments) for every fit reaches the same validation
    accuracy (0.969 after 20 rounds). Under Flower's deployment engine each message is handled by a new
    ``flwr-clientapp`` process, so there the session, and its moments, last one round.
    """

    def __init__(self, session: OrtTrainingSession, data: Mapping[str, Arrays], *, client_id: int = 0,
                 fixed_batch: Optional[int] = None) -> None:
        self.session = session
        self.client_id = int(client_id)
        self.fixed_batch = fixed_batch
        self.train_data, self.val_data = data["train"], data.get("val", {})
        train_outputs, eval_outputs = list(session.getTrainOutputNames()), list(session.getEvalOutputNames())
        self.loss_name = train_outputs[0]  # generate_artifacts puts the loss first
        self.train_scores = train_outputs[1] if len(train_outputs) > 1 else None
        self.eval_loss = eval_outputs[0] if eval_outputs else None
        self.eval_scores = eval_outputs[1] if len(eval_outputs) > 1 else None
        self.labels = _label_name(self.train_data)
        self.num_parameters = session.getParametersSize(True)

    # -- Flower's three calls --

    def get_parameters(self, config: Dict[str, Scalar]) -> NDArrays:
        return [self._session().copyParametersToBuffer(True)]

    def fit(self, parameters: NDArrays, config: Dict[str, Scalar]) -> Tuple[NDArrays, int, Dict[str, Scalar]]:
        session = self._load(parameters)
        epochs = int(config.get("local-epochs", 1))
        batch_size = int(config.get("batch-size", self.fixed_batch or 32))
        if epochs < 1 or batch_size < 1:
            raise FederatedError(f"local-epochs and batch-size must be at least 1, got {epochs} and {batch_size}")
        if self.fixed_batch is not None and batch_size != self.fixed_batch:
            raise FederatedError(f"client {self.client_id}: the model's inputs fix the batch size at {self.fixed_batch}, "
                                 f"but the server asks for batch-size {batch_size}")
        if "lr" in config:
            session.setLearningRate(float(config["lr"]))
        seed, server_round = int(config.get("seed", 0)), int(config.get("server-round", 0))
        n = len(next(iter(self.train_data.values()), ()))
        if n == 0:  # partition_dataset and load_dataset see to it; a client built on other data may not
            raise FederatedError(f"client {self.client_id}: it has no training data, so it cannot fit")
        drop_last = self.fixed_batch is not None  # a smaller last batch would not fit the model
        if drop_last and n < batch_size:
            raise FederatedError(f"client {self.client_id}: it has {n} training examples, fewer than one batch: the "
                                 f"model's inputs fix the batch size at {batch_size}")
        used = n - n % batch_size if drop_last else n
        wanted = [self.loss_name] + ([self.train_scores] if self.train_scores else [])
        loss_sum, correct, seen = 0.0, 0, 0
        for epoch in range(epochs):
            order = np.random.default_rng([seed, server_round, epoch, self.client_id]).permutation(n)
            for idx in _train.batches(order, batch_size, drop_last):
                with session.trainStep({name: array[idx] for name, array in self.train_data.items()}, wanted) as result:
                    loss = float(result.get(0).getValue())
                    if self.train_scores and self.labels:
                        correct += _train.count_correct(result.get(1).getValue(), self.train_data[self.labels][idx]) or 0
                if not np.isfinite(loss):
                    raise FederatedError(f"client {self.client_id}: training diverged (loss {loss}); lower the lr")
                session.optimizerStep()
                session.lazyResetGrad()
                loss_sum, seen = loss_sum + loss * len(idx), seen + len(idx)
        metrics: Dict[str, Scalar] = {"loss": loss_sum / seen, "examples": used}
        if self.train_scores and self.labels:
            metrics["accuracy"] = correct / seen
        return [session.copyParametersToBuffer(True)], used, metrics

    def evaluate(self, parameters: NDArrays, config: Dict[str, Scalar]) -> Tuple[float, int, Dict[str, Scalar]]:
        session = self._load(parameters)
        n = len(next(iter(self.val_data.values()))) if self.val_data else 0
        batch_size = self.fixed_batch or int(config.get("batch-size", 128))
        if self.fixed_batch is not None:
            n -= n % batch_size  # whole batches only
        if n == 0 or self.eval_loss is None:
            return 0.0, 0, {"examples": 0}  # no local validation data: weighs nothing in the average
        loss, accuracy = _train.evaluate(session, self.val_data, self.eval_loss, self.eval_scores,
                                         self.labels, batch_size, self.fixed_batch is not None)
        metrics: Dict[str, Scalar] = {"examples": n}
        if accuracy is not None:
            metrics["accuracy"] = accuracy
        return loss, n, metrics

    # -- the parameter buffer --

    def _session(self) -> OrtTrainingSession:
        if self.session.isClosed():
            raise FederatedError(
                f"client {self.client_id}: its training session is closed, so it can no longer train or "
                "evaluate (a closed session cannot be reopened: create the client again)")
        return self.session

    def _load(self, parameters: NDArrays) -> OrtTrainingSession:
        session = self._session()
        sizes = [int(np.asarray(p).size) for p in parameters]
        if len(parameters) != 1 or sizes[0] != self.num_parameters:
            raise FederatedError(
                f"client {self.client_id}: the server sent {len(parameters)} array(s) of {sizes} values, but "
                f"this client's model takes one flat array of its {self.num_parameters} trainable parameters: "
                "the server and the clients must use the same training artifacts")
        buffer = np.ascontiguousarray(np.asarray(parameters[0]).reshape(-1), dtype=np.float32)
        try:
            session.copyBufferToParameters(buffer, True)
        except OrtClosedException:  # closed by another thread in between
            self._session()
            raise
        return session

    def close(self) -> None:
        """Close the session, shared or not: a client closed is closed for good."""
        self.session.close()

    def __enter__(self) -> "OrtNumPyClient":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


def load_client(settings: ClientSettings = ClientSettings(), partition_id: Optional[int] = None,
                num_partitions: Optional[int] = None, data_path: Optional[str] = None) -> OrtNumPyClient:
    """A client over this process's shared session and its local data."""
    session = shared_session(settings.artifacts, settings.threads, settings.seed)
    data, fixed_batch = local_data(settings, session, partition_id, num_partitions, data_path)
    return OrtNumPyClient(session, data, client_id=partition_id if partition_id is not None else 0, fixed_batch=fixed_batch)


def make_client_app(settings: Optional[ClientSettings] = None) -> ClientApp:
    """A ``ClientApp`` whose clients train ``settings.artifacts`` on their local data. Each message's client
    comes from the context: the node config's ``partition-id``/``num-partitions`` (set by the simulation,
    or by ``flower-supernode --node-config``) or ``data-path``; the run config may override the settings
    (``artifacts``, ``data``, ``partitioning``, ``dirichlet-alpha``, ``seed``, ``client-threads``)."""
    base = settings or ClientSettings()

    def client_fn(context: Context) -> Any:
        node = context.node_config
        resolved = base.with_run_config(context.run_config)
        partition_id = int(node["partition-id"]) if "partition-id" in node else None
        num_partitions = int(node["num-partitions"]) if "num-partitions" in node else None
        data_path = str(node["data-path"]) if node.get("data-path") else None
        return load_client(resolved, partition_id, num_partitions, data_path).to_client()

    return ClientApp(client_fn=client_fn)


# --- the server -----------------------------------------------------------------------------------

class GlobalModel:
    """The server's copy of the model: a training session over the artifacts (no optimizer) that holds the
    aggregated parameters, evaluates them on the validation split, saves them as a checkpoint and exports
    an inference model."""

    def __init__(self, artifacts: PathLike = DEFAULT_ARTIFACTS, data: Optional[PathLike] = None,
                 threads: int = 1, batch_size: int = 128) -> None:
        self.artifacts = Path(artifacts)
        self.paths = _train.find_artifacts(self.artifacts)
        self.env = OrtEnvironment.getEnvironment()
        with SessionOptions() as options:
            if threads:
                options.setIntraOpNumThreads(threads)
            self.session = self.env.createTrainingSession(self.paths["checkpoint"], self.paths["train"], self.paths["eval"], None, options)
        try:
            self.data_path = _train.find_dataset(Path(data) if data else None, self.artifacts)
            splits = {"train": list(self.session.getTrainInputNames()), "val": list(self.session.getEvalInputNames())}
            infos = _train.input_infos(self.env, self.paths["eval"], sorted(set(splits["train"]) | set(splits["val"])))
            self.val = _train.load_dataset(self.data_path, splits, infos)["val"]
            outputs = list(self.session.getEvalOutputNames())
            self.loss_name, self.export_names = outputs[0], outputs[1:]
            self.scores = outputs[1] if len(outputs) > 1 else None
            self.labels = _label_name(self.val)
            self.fixed_batch = _train.fixed_batch(infos)  # then whole batches only, of that size
            self.batch_size = self.fixed_batch or batch_size
        except BaseException:
            self.session.close()
            raise

    def parameters(self) -> np.ndarray:
        return self.session.copyParametersToBuffer(True)

    def load(self, parameters: NDArrays) -> None:
        expected = self.session.getParametersSize(True)
        if len(parameters) != 1 or np.asarray(parameters[0]).size != expected:
            raise FederatedError(
                f"the aggregated model has {[np.asarray(p).size for p in parameters]} values, the server's "
                f"model {expected}: the clients use other artifacts")
        self.session.copyBufferToParameters(np.ascontiguousarray(parameters[0], dtype=np.float32).reshape(-1), True)

    def evaluate(self, parameters: Optional[NDArrays] = None) -> Tuple[float, Optional[float]]:
        """(validation loss, accuracy or None) of ``parameters`` (default: the ones loaded)."""
        if parameters is not None:
            self.load(parameters)
        return _train.evaluate(self.session, self.val, self.loss_name, self.scores, self.labels, self.batch_size,
                               self.fixed_batch is not None)

    def save(self, path: PathLike, server_round: int) -> None:
        """The global model as a checkpoint (written to a temporary file, then renamed over the old one)."""
        self.session.addProperty("round", int(server_round))
        self.session.saveCheckpoint(path, False)

    def export(self, path: PathLike) -> Tuple[List[str], Optional[float]]:
        """An inference model of the loaded parameters, then its outputs and its accuracy on the validation
        split, run through an ordinary ``OrtSession``."""
        if not self.export_names:
            raise FederatedError("the eval model's only output is the loss: nothing to export for inference")
        self.session.exportModelForInference(path, self.export_names)
        return _train.inference_check(self.env, Path(path), self.val, self.labels, self.batch_size,
                                      self.fixed_batch is not None)

    def close(self) -> None:
        self.session.close()

    def __enter__(self) -> "GlobalModel":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


@dataclass
class ServerSettings(_RunConfigurable):
    """What the server runs: rounds, the clients' local training, sampling, where results go."""

    rounds: int = 20
    local_epochs: int = 2
    batch_size: int = 32
    lr: float = 0.01
    lr_decay: str = "cosine"  # the lr sent each round: "cosine" from lr to lr/10 over the rounds, or "constant"
    fraction_fit: float = 1.0
    fraction_evaluate: float = 1.0  # federated evaluation on the clients' validation data (0: none)
    seed: int = 0
    out: Optional[str] = None  # global_checkpoint, inference_model.onnx, history.json, federated.png
    plot: bool = True

    # run-config keys (pyproject.toml [tool.flwr.app.config]) that override the fields above
    RUN_CONFIG: ClassVar[Dict[str, str]] = {
        "rounds": "num-server-rounds", "local_epochs": "local-epochs", "batch_size": "batch-size", "lr": "lr",
        "lr_decay": "lr-decay", "fraction_fit": "fraction-fit", "fraction_evaluate": "fraction-evaluate",
        "seed": "seed", "out": "out", "plot": "plot"}

    def lr_for(self, server_round: int) -> float:
        if self.lr_decay == "constant" or self.rounds <= 1:
            return self.lr
        progress = (server_round - 1) / (self.rounds - 1)
        return float(self.lr * (0.1 + 0.9 * 0.5 * (1 + np.cos(np.pi * progress))))


def weighted_metrics(results: List[Tuple[int, Dict[str, Scalar]]]) -> Dict[str, Scalar]:
    """The clients' metrics averaged with their example counts as weights (``examples``: the total)."""
    total = sum(n for n, _ in results)
    out: Dict[str, Scalar] = {"examples": total, "clients": len(results)}
    if total == 0:
        return out
    names = {k for _, m in results for k, v in m.items() if k != "examples" and isinstance(v, (int, float))}
    for name in sorted(names):
        weighted = [(n, float(m[name])) for n, m in results if name in m]
        weight = sum(n for n, _ in weighted)
        if weight:
            out[name] = sum(n * v for n, v in weighted) / weight
    return out


class OrtFedAvg(FedAvg):
    """FedAvg whose aggregated model is evaluated through ort_cffi every round (centralized, on the
    validation split), with a record per round in :attr:`history`, and, when ``settings.out`` is set, the
    global checkpoint and ``history.json`` written every round and the inference model and plot after the
    last. Any client failure stops the run with a :class:`FederatedError` (rather than averaging fewer
    clients silently). ``record_clients`` keeps each round's client results and aggregate in
    :attr:`fit_records` (for tests). ``report`` gets each round's record as it completes."""

    def __init__(self, model: GlobalModel, settings: ServerSettings, *, num_clients: int,
                 report: Optional[Callable[[Dict[str, Any]], None]] = None, record_clients: bool = False,
                 config: Optional[Dict[str, Any]] = None) -> None:
        if model.fixed_batch is not None and settings.batch_size != model.fixed_batch:
            raise FederatedError(f"the model's inputs fix the batch size at {model.fixed_batch}: set batch-size "
                                 f"{model.fixed_batch} (--batch-size {model.fixed_batch}), not {settings.batch_size}")
        self.model, self.settings, self.report = model, settings, report
        self.record_clients = record_clients
        self.history: List[Dict[str, Any]] = []
        self.fit_records: List[Dict[str, Any]] = []
        self.inference: Optional[Dict[str, Any]] = None
        self.final_parameters: Optional[np.ndarray] = None
        self.config = dict(config or {}, **{k: v for k, v in asdict(settings).items()})
        self.files: List[Path] = []
        self._started = time.monotonic()
        self._pending: Dict[str, Any] = {}
        super().__init__(
            fraction_fit=settings.fraction_fit,
            fraction_evaluate=settings.fraction_evaluate,
            min_fit_clients=1,
            min_evaluate_clients=1,
            min_available_clients=num_clients,
            evaluate_fn=self._evaluate_global,
            on_fit_config_fn=self._fit_config,
            on_evaluate_config_fn=lambda server_round: {"server-round": server_round},
            accept_failures=False,
            initial_parameters=ndarrays_to_parameters([model.parameters()]),
            fit_metrics_aggregation_fn=weighted_metrics,
            evaluate_metrics_aggregation_fn=weighted_metrics,
        )

    def _fit_config(self, server_round: int) -> Dict[str, Scalar]:
        s = self.settings
        return {"server-round": server_round, "local-epochs": s.local_epochs, "batch-size": s.batch_size,
                "lr": self.settings.lr_for(server_round), "seed": s.seed}

    @staticmethod
    def _failure_message(failures: Sequence[Any]) -> str:
        first = failures[0]
        if isinstance(first, BaseException):
            text = f"{type(first).__name__}: {first}"
        else:
            _, res = first
            text = getattr(getattr(res, "status", None), "message", "") or repr(res)
        # A client's exception reaches the server as the text of its traceback, wrapped by Ray and Flower:
        # its last "SomeError: message" line (not Flower's wrapper) is what the client raised.
        raised = [m for m in re.finditer(r"^([\w.]*(?:Error|Exception)): (.+)$", text, re.M)
                  if not m.group(1).endswith("ClientAppException")]
        if raised:
            text = f"{raised[-1].group(1).rsplit('.', 1)[-1]}: {raised[-1].group(2).strip()}"
        elif len(text) > 800:
            text = text[:800] + " ..."
        return f"{len(failures)} client(s) failed; the first: {text}"

    def aggregate_fit(self, server_round: int, results: List[Tuple[ClientProxy, FitRes]],
                      failures: List[Union[Tuple[ClientProxy, FitRes], BaseException]]) -> Tuple[Optional[Parameters], Dict[str, Scalar]]:
        if failures:
            raise FederatedError(f"round {server_round}: {self._failure_message(failures)}")
        clients = [(parameters_to_ndarrays(res.parameters), res.num_examples) for _, res in results] if self.record_clients else []
        aggregated, metrics = super().aggregate_fit(server_round, results, failures)
        if aggregated is None:
            raise FederatedError(f"round {server_round}: no client returned a model")
        if self.record_clients:
            self.fit_records.append({"round": server_round, "clients": clients,
                                     "aggregate": parameters_to_ndarrays(aggregated)})
        self._pending = {"round": server_round, "lr": self.settings.lr_for(server_round),
                         "clients": metrics.get("clients"), "examples": metrics.get("examples"),
                         "train_loss": metrics.get("loss"), "train_accuracy": metrics.get("accuracy")}
        return aggregated, metrics

    def _evaluate_global(self, server_round: int, parameters: NDArrays, config: Dict[str, Scalar]) -> Tuple[float, Dict[str, Scalar]]:
        loss, accuracy = self.model.evaluate(parameters)
        record: Dict[str, Any] = {"round": server_round} if server_round == 0 else dict(self._pending)
        record.update(val_loss=loss, val_accuracy=accuracy, seconds=round(time.monotonic() - self._started, 3))
        self.history.append(record)
        self.final_parameters = np.array(parameters[0], dtype=np.float32, copy=True).reshape(-1)
        if self.report is not None:
            self.report(record)
        out = Path(self.settings.out) if self.settings.out else None
        if out is not None:
            out.mkdir(parents=True, exist_ok=True)
            self.model.save(out / "global_checkpoint", server_round)
            if server_round == self.settings.rounds:
                self._finish(out)
            self.write_history()
        metrics: Dict[str, Scalar] = {} if accuracy is None else {"accuracy": accuracy}
        return loss, metrics

    def aggregate_evaluate(self, server_round: int, results: List[Tuple[ClientProxy, EvaluateRes]],
                           failures: List[Union[Tuple[ClientProxy, EvaluateRes], BaseException]]) -> Tuple[Optional[float], Dict[str, Scalar]]:
        if failures:
            raise FederatedError(f"round {server_round} (evaluation): {self._failure_message(failures)}")
        if sum(res.num_examples for _, res in results) == 0:
            return None, {}
        loss, metrics = super().aggregate_evaluate(server_round, results, failures)
        for record in self.history:
            if record["round"] == server_round:
                record.update(clients_val_loss=loss, clients_val_accuracy=metrics.get("accuracy"))
        if self.settings.out:
            self.write_history()
        return loss, metrics

    def _finish(self, out: Path) -> None:
        """After the last round: the inference model (of the global model, loaded) and the plot."""
        model_path = out / "inference_model.onnx"
        names, accuracy = self.model.export(model_path)
        self.inference = {"model": model_path.name, "outputs": names, "val_accuracy": accuracy}
        self.files = [out / "global_checkpoint", model_path, out / "history.json"]
        if self.settings.plot:
            if plot_history(out / "federated.png", self.history, self._title()):
                self.files.append(out / "federated.png")
            else:
                log(30, "no plot: matplotlib is not installed (pip install 'ort_cffi[demo]')")

    def _title(self) -> str:
        s = self.config
        part = s.get("partitioning", "")
        part = f"Dirichlet({s.get('alpha')})" if part == "dirichlet" else part.upper()
        return (f"FedAvg, {s.get('clients', '?')} clients ({part}), {s['rounds']} rounds x "
                f"{s['local_epochs']} local epochs")

    def write_history(self) -> None:
        assert self.settings.out is not None
        _train.write_json(Path(self.settings.out) / "history.json", {
            "ort_cffi": __version__, "config": self.config, "rounds": self.history, "inference": self.inference},
            "history")


def plot_history(path: Path, history: List[Dict[str, Any]], title: str) -> bool:
    """Accuracy and loss per round (a PNG); False when matplotlib is missing."""
    try:
        from matplotlib.figure import Figure
        from matplotlib.ticker import FuncFormatter, MaxNLocator
    except ImportError:
        return False
    rounds = [r["round"] for r in history]
    fig = Figure(figsize=(8, 5.5), constrained_layout=True)
    acc_ax, loss_ax = fig.subplots(2, 1, sharex=True)
    if any(r.get("val_accuracy") is not None for r in history):
        acc_ax.plot(rounds, [r.get("val_accuracy") for r in history], "o-", color="tab:green",
                    markersize=3, label="global model, validation (server)")
    trained = [r for r in history if r.get("train_accuracy") is not None]
    if trained:
        acc_ax.plot([r["round"] for r in trained], [r["train_accuracy"] for r in trained], "^-",
                    color="tab:blue", markersize=3, label="clients' local training (mean)")
    fed = [r for r in history if r.get("clients_val_accuracy") is not None]
    if fed:
        acc_ax.plot([r["round"] for r in fed], [r["clients_val_accuracy"] for r in fed], "s--",
                    color="tab:orange", markersize=3, label="global model, clients' validation data")
    acc_ax.set_ylabel("accuracy")
    acc_ax.grid(alpha=0.3)
    acc_ax.legend(loc="lower right", fontsize="small")
    acc_ax.set_title(title)
    loss_ax.plot(rounds, [r["val_loss"] for r in history], "o-", color="tab:green", markersize=3, label="validation loss")
    loss_ax.plot([r["round"] for r in trained], [r["train_loss"] for r in trained], "^-", color="tab:blue",
                 markersize=3, label="train loss (clients' mean)")
    loss_ax.set_yscale("log")
    plain = FuncFormatter(lambda value, _: f"{value:g}")
    loss_ax.yaxis.set_major_formatter(plain)
    loss_ax.yaxis.set_minor_formatter(plain)
    loss_ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    loss_ax.set_xlabel("round")
    loss_ax.set_ylabel("loss")
    loss_ax.grid(alpha=0.3)
    loss_ax.legend(loc="upper right", fontsize="small")
    _train.save_figure(fig, path, "plot")
    return True


@dataclass
class FederatedServer:
    """What a ``ServerApp`` holds for one run: the global model (opened by the app's lifespan, closed
    after the run) and the strategy, kept for the caller to read after the run."""

    artifacts: str = str(DEFAULT_ARTIFACTS)
    data: Optional[str] = None
    settings: ServerSettings = field(default_factory=ServerSettings)
    threads: int = 1
    num_clients: int = 2
    report: Optional[Callable[[Dict[str, Any]], None]] = None
    record_clients: bool = False
    config: Dict[str, Any] = field(default_factory=dict)
    model: Optional[GlobalModel] = None
    strategy: Optional[OrtFedAvg] = None

    @contextmanager
    def opened(self) -> Iterator["FederatedServer"]:
        self.model = GlobalModel(self.artifacts, self.data, self.threads)
        try:
            yield self
        finally:
            self.model.close()

    def components(self) -> ServerAppComponents:
        if self.model is None:
            raise FederatedError("the global model is not open (the ServerApp's lifespan opens it)")
        self.strategy = OrtFedAvg(self.model, self.settings, num_clients=self.num_clients, report=self.report,
                                  record_clients=self.record_clients,
                                  config=dict(self.config, artifacts=self.artifacts, data=str(self.model.data_path)))
        return ServerAppComponents(strategy=self.strategy, config=ServerConfig(num_rounds=self.settings.rounds))


def make_server_app(server: Callable[[Context], FederatedServer]) -> ServerApp:
    """A ``ServerApp`` running FedAvg over ort_cffi: ``server(context)`` gives the run's
    :class:`FederatedServer`, whose global model is open for the length of the run."""
    current: Dict[str, FederatedServer] = {}
    app = ServerApp(server_fn=lambda context: current["server"].components())

    @app.lifespan()
    def lifespan(context: Context) -> Iterator[None]:
        with server(context).opened() as running:
            current["server"] = running
            try:
                yield
            finally:
                current.pop("server", None)

    return app


def _server_from_run_config(context: Context) -> FederatedServer:
    config = context.run_config
    settings = ServerSettings(out="federated_run").with_run_config(config)

    def report(record: Dict[str, Any]) -> None:
        log(20, "%s", format_round(record, settings.rounds))

    return FederatedServer(
        artifacts=str(config.get("artifacts") or DEFAULT_ARTIFACTS),
        data=str(config["data"]) if config.get("data") else None,
        settings=settings, num_clients=int(config.get("min-clients", 2)), report=report,
        config={k: v for k, v in config.items()})


def format_round(record: Mapping[str, Any], rounds: int) -> str:
    """One progress line: ``round  3/10  train loss 0.2345  val loss 0.1987  val acc 0.9472``."""
    width = len(str(rounds))
    parts = [f"round {record['round']:{width}d}/{rounds}"]
    if record.get("train_loss") is not None:
        parts.append(f"train loss {record['train_loss']:.4f}")
    else:
        parts.append("initial model     ")
    parts.append(f"val loss {record['val_loss']:.4f}")
    if record.get("val_accuracy") is not None:
        parts.append(f"val acc {record['val_accuracy']:.4f}")
    if record.get("lr") is not None:
        parts.append(f"lr {record['lr']:.2e}")
    parts.append(f"{record['seconds']:6.1f} s")
    return "  ".join(parts)


# What `flwr run` loads from a Flower app project (see the README): pyproject.toml's
# [tool.flwr.app.components] serverapp = "ort_cffi.flower:serverapp", clientapp = "ort_cffi.flower:clientapp".
clientapp = make_client_app()
serverapp = make_server_app(_server_from_run_config)
