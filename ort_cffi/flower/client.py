"""The client side: a Flower ``ClientApp`` whose ``@app.train()`` and ``@app.evaluate()`` functions run
an ort_cffi ``OrtTrainingSession`` on the client's local data.

A train message carries the global model (an ``ArrayRecord``, `ort_cffi.flower.model.ParameterLayout`)
and a ``ConfigRecord`` (``local-epochs``, ``batch-size``, ``lr``, ``seed``, ``server-round``, and FedProx's
``proximal-mu``); the reply carries the trained model, a ``MetricRecord`` (``num-examples``, the weight
Flower's strategies use, ``train-loss``, ``train-accuracy``) and a ``ConfigRecord`` ``client`` naming the
client for the server's history. An evaluate reply carries ``num-examples``, ``eval-loss`` and
``eval-accuracy``. A client that cannot train raises, and Flower turns that into an error reply that the
server records and leaves out of the round.
"""
from __future__ import annotations

import tempfile
import threading
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Dict, Hashable, List, Mapping, Optional, Sequence, Tuple

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MessageType, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.clientapp.mod import fixedclipping_mod
from flwr.clientapp.typing import ClientAppCallable

from ort_cffi import OrtCheckpointState, OrtClosedException, OrtEnvironment, OrtTrainingSession, SessionOptions
from ort_cffi._facade import denormals
from ort_cffi.artifacts import read_manifest
from ort_cffi.flower.config import RunConfigurable
from ort_cffi.flower.data import Arrays, label_name, partition_dataset
from ort_cffi.flower.model import FederatedError, ParameterLayout, PathLike
from ort_cffi.trainer.batchnorm import reestimate_batchnorm
from ort_cffi.trainer.data import DEFAULT_ARTIFACTS, batches, find_artifacts, find_dataset, input_infos, load_dataset
from ort_cffi.trainer.data import fixed_batch as model_fixed_batch
from ort_cffi.trainer.loop import count_correct, evaluate

CLIPPING_NORM = "clipping_norm"  # the key Flower's client-side DP wrapper sends (flwr.supercore.differential_privacy)


@dataclass(frozen=True)
class ClientSettings(RunConfigurable):
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


# --- this process's sessions and datasets --------------------------------------------------------

#: The most training sessions one process keeps. A simulation's Ray actor serves any of the federation's
#: clients, one at a time, and keeps each client's own session (its AdamW moments and step count) from
#: round to round; so that a large federation does not hold a session per client in every actor, the
#: sessions beyond this many are closed, least recently used first.
MAX_SESSIONS = 32

#: The ``ConfigRecord`` of a client's ``Context.state`` (which Flower keeps for each node from round to
#: round, whichever process serves it) that holds the client's optimizer state: ``checkpoint``, the
#: bytes of its session's checkpoint with the optimizer state, and ``stamp``, which names that state.
STATE_KEY = "ort_cffi"

_cache_lock = threading.Lock()
_SessionKey = Tuple[str, int, Hashable]
_sessions: "OrderedDict[_SessionKey, Tuple[OrtTrainingSession, ParameterLayout]]" = OrderedDict()
_stamps: Dict[_SessionKey, Optional[str]] = {}  # the stamp of the state each cached session holds
_datasets: Dict[Tuple[Any, ...], Any] = {}


def session_key(artifacts: PathLike, threads: int = 1, client: Hashable = None) -> _SessionKey:
    """The cache key of a client's session (`shared_session`)."""
    return (str(Path(artifacts).resolve()), int(threads), client)


def shared_session(artifacts: PathLike, threads: int = 1, seed: int = 0, client: Hashable = None,
                   state: Optional[RecordDict] = None) -> Tuple[OrtTrainingSession, ParameterLayout]:
    """The training session over ``artifacts`` of the client ``client`` (any hashable identity, e.g. its
    partition or data path) in this process, and its parameter layout: created on first use (the runtime
    is loaded then, once) and reused for that client in every round, so its optimizer state carries
    over. Each client has its own; this process keeps the `MAX_SESSIONS` used last (the others are
    closed). `close_shared_sessions` releases them.

    ``state`` is the client's ``Context.state``: the session then holds the optimizer state that the
    client's last training left there (`keep_state`; none: a fresh optimizer), whichever process it
    trained in. A simulation's Ray actors serve the clients in whatever order they come, so without it a
    client's optimizer state would depend on which actor served it last: the runs would not repeat."""
    folder = Path(artifacts)
    key = session_key(folder, threads, client)
    saved = state.get(STATE_KEY) if state is not None else None
    saved = saved if isinstance(saved, ConfigRecord) else None
    stamp = str(saved["stamp"]) if saved is not None and "stamp" in saved else None
    with _cache_lock:
        cached = _sessions.get(key)
        stale = state is not None and cached is not None and _stamps.get(key) != stamp
        if cached is None or cached[0].isClosed() or stale:
            if cached is not None:
                _close(cached[0])
            paths = find_artifacts(folder)
            OrtTrainingSession.setSeed(seed)
            checkpoint: Any = paths["checkpoint"]
            if stamp is not None:  # closed with the session (`_close`)
                checkpoint = OrtCheckpointState.loadCheckpointFromBuffer(saved["checkpoint"])  # type: ignore[index,arg-type]
            try:
                with SessionOptions() as options:
                    if threads:
                        options.setIntraOpNumThreads(threads)
                    denormals.apply(options, denormals.request())
                    session = OrtEnvironment.getEnvironment().createTrainingSession(
                        checkpoint, paths["train"], paths["eval"], paths["optimizer"], options)
            except BaseException:
                if isinstance(checkpoint, OrtCheckpointState):
                    checkpoint.close()
                raise
            try:
                cached = (session, ParameterLayout.of_session(session, paths["train"]))
            except BaseException:
                _close(session)
                raise
            _sessions[key] = cached
            _stamps[key] = stamp
        _sessions.move_to_end(key)
        while len(_sessions) > MAX_SESSIONS:
            gone, (evicted, _) = _sessions.popitem(last=False)
            _stamps.pop(gone, None)
            _close(evicted)
        return cached


def _close(session: OrtTrainingSession) -> None:
    """Close a session and its checkpoint state: one the session loaded is closed with it already, one
    loaded here from a client's state (`shared_session`) is this module's to close."""
    state = None if session.isClosed() else session.getCheckpointState()
    session.close()
    if state is not None:
        state.close()  # idempotent


def keep_state(session: OrtTrainingSession, key: _SessionKey, state: RecordDict) -> None:
    """Put ``session``'s checkpoint with its optimizer state into the client's ``Context.state``, under a new
    stamp that the cached session ``key`` now holds (see `shared_session`)."""
    with tempfile.TemporaryDirectory(prefix="ort-cffi-client-") as folder:
        path = Path(folder) / "state"
        session.saveCheckpoint(path, True)
        data = path.read_bytes()
    stamp = uuid.uuid4().hex
    state[STATE_KEY] = ConfigRecord({"stamp": stamp, "checkpoint": data})
    with _cache_lock:
        if key in _sessions:
            _stamps[key] = stamp


def close_shared_sessions() -> None:
    """Close this process's cached sessions (and forget its cached datasets)."""
    with _cache_lock:
        for session, _ in _sessions.values():
            _close(session)
        _sessions.clear()
        _stamps.clear()
        _datasets.clear()


def _dataset(session: OrtTrainingSession, artifacts: Path, data: Optional[str]) -> Tuple[Path, Dict[str, Arrays], Optional[int]]:
    """The .npz dataset, checked against the model's inputs (names, dtypes, shapes) as ort-cffi-train does,
    and the batch size the model's inputs fix (None: any)."""
    path = find_dataset(Path(data) if data else None, artifacts)
    key = ("dataset", str(path.resolve()), str(artifacts.resolve()))
    if key not in _datasets:
        splits = {"train": list(session.getTrainInputNames()), "val": list(session.getEvalInputNames())}
        paths = find_artifacts(artifacts)
        infos = input_infos(OrtEnvironment.getEnvironment(), paths["eval"],
                                   sorted(set(splits["train"]) | set(splits["val"])))
        _datasets[key] = (load_dataset(path, splits, infos), model_fixed_batch(infos))
    dataset, fixed_batch = _datasets[key]
    return path, dataset, fixed_batch


def local_data(settings: ClientSettings, session: OrtTrainingSession, partition_id: Optional[int],
               num_partitions: Optional[int], data_path: Optional[str] = None) -> Tuple[Dict[str, Arrays], Optional[int]]:
    """A client's ``{"train": ..., "val": ...}``: all of ``data_path`` (a device's own data), or
    partition ``partition_id`` of ``num_partitions`` of the settings' dataset; and the batch size the
    model's inputs fix (None: any). Raises ``ValueError`` for a partition that does not exist."""
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


# --- one client's learning -----------------------------------------------------------------------

class LocalLearner:
    """One client's training and evaluation: an ort_cffi training session and the client's local data.

    `fit` and `evaluate` work on the session's flat parameter buffer (no Flower types);
    `train_reply` and `evaluate_reply` are the same on a message's ``RecordDict``.

    ``fit`` starts from the parameters it is given (``copyBufferToParameters``, checked first: a closed
    session or a model of another shape fails with a `FederatedError` that says so), runs
    ``epochs`` local epochs at learning rate ``lr`` in an order that depends only on the seed, round,
    epoch and client, and returns the new buffer and its metrics. With ``proximal_mu`` > 0 (FedProx) each
    optimizer step is followed by a pull toward the global model, ``w -= lr * mu * (w - w_global)``: the
    proximal term's gradient applied decoupled from AdamW, as AdamW applies weight decay, because the
    loss itself is fixed inside the training graph.

    A model whose inputs fix the batch size (``fixed_batch``) takes whole batches only: ``fit`` refuses
    another ``batch_size`` and a client with fewer examples than one batch, and both calls leave out the
    last partial batch (the counts they return are the examples used).

    A client's session is kept from round to round (`shared_session`, one per client), so AdamW's
    moments carry over from one ``fit`` to the next; only the parameters are replaced by the global model's.
    With ``state`` (the client's ``Context.state``, as `learner_for` passes it) `train_reply` also leaves
    the optimizer state there (`keep_state`), and the next round starts from it in whichever process
    serves the client: a simulation with a fixed seed then repeats itself.

    ``batchnorm`` (``artifacts.json``'s ``batchnorm_statistics``; `load_learner` reads it): a BatchNorm model's
    running statistics are the client's own (the server sends the trainable parameters only), so
    ``evaluate`` first re-estimates them over the client's training data for the model it was sent
    (`reestimate_batchnorm`), as ``ort-cffi-train`` does before it validates.
    """

    def __init__(self, session: OrtTrainingSession, data: Mapping[str, Arrays], *, name: str = "client 0",
                 order_id: int = 0, fixed_batch: Optional[int] = None,
                 layout: Optional[ParameterLayout] = None, state: Optional[RecordDict] = None,
                 key: Optional[_SessionKey] = None, batchnorm: Sequence[Mapping[str, Any]] = ()) -> None:
        self.session = session
        self.state, self.key = state, key  # the client's Context.state, and its session's cache key
        self.name = name
        self.order_id = int(order_id)
        self.fixed_batch = fixed_batch
        self.train_data, self.val_data = data["train"], data.get("val", {})
        train_outputs, eval_outputs = list(session.getTrainOutputNames()), list(session.getEvalOutputNames())
        self.loss_name = train_outputs[0]  # generate_artifacts puts the loss first
        self.train_scores = train_outputs[1] if len(train_outputs) > 1 else None
        self.eval_loss = eval_outputs[0] if eval_outputs else None
        self.eval_scores = eval_outputs[1] if len(eval_outputs) > 1 else None
        self.labels = label_name(self.train_data)
        self.layout = layout or ParameterLayout.flat(session.getParametersSize(True))
        self.batchnorm = tuple(batchnorm)

    # -- on buffers --

    def parameters(self) -> np.ndarray:
        """The session's current trainable parameters (a copy, owned by the caller)."""
        return self._session().copyParametersToBuffer(True)

    def fit(self, buffer: np.ndarray, *, epochs: int = 1, batch_size: Optional[int] = None, lr: Optional[float] = None,
            server_round: int = 0, seed: int = 0, proximal_mu: float = 0.0) -> Tuple[np.ndarray, Dict[str, float]]:
        """Train from ``buffer``; return the new buffer and ``num-examples``, ``train-loss`` (mean over the
        local epochs) and, for a classifier whose training model outputs scores, ``train-accuracy``."""
        session = self._load(buffer)
        batch_size = int(batch_size or self.fixed_batch or 32)
        if epochs < 1 or batch_size < 1:
            raise FederatedError(f"{self.name}: local-epochs and batch-size must be at least 1, got {epochs} and {batch_size}")
        if self.fixed_batch is not None and batch_size != self.fixed_batch:
            raise FederatedError(f"{self.name}: the model's inputs fix the batch size at {self.fixed_batch}, "
                                 f"but the server asks for batch-size {batch_size}")
        if not proximal_mu >= 0:
            raise FederatedError(f"{self.name}: proximal-mu must be >= 0, got {proximal_mu}")
        if lr is not None:
            session.setLearningRate(float(lr))
        n = len(next(iter(self.train_data.values()), ()))
        if n == 0:  # partition_dataset and load_dataset see to it; a client built on other data may not
            raise FederatedError(f"{self.name}: it has no training data, so it cannot fit")
        drop_last = self.fixed_batch is not None  # a smaller last batch would not fit the model
        if drop_last and n < batch_size:
            raise FederatedError(f"{self.name}: it has {n} training examples, fewer than one batch: the "
                                 f"model's inputs fix the batch size at {batch_size}")
        start = np.array(buffer, dtype=np.float32, copy=True).reshape(-1) if proximal_mu > 0 else None
        wanted = [self.loss_name] + ([self.train_scores] if self.train_scores else [])
        loss_sum, correct, seen = 0.0, 0, 0
        for epoch in range(epochs):
            order = np.random.default_rng([seed, server_round, epoch, self.order_id]).permutation(n)
            for idx in batches(order, batch_size, drop_last):
                with session.trainStep({name: array[idx] for name, array in self.train_data.items()}, wanted) as result:
                    loss = float(result.get(0).getValue())
                    if self.train_scores and self.labels:
                        correct += count_correct(result.get(1).getValue(), self.train_data[self.labels][idx]) or 0
                if not np.isfinite(loss):
                    raise FederatedError(f"{self.name}: training diverged (loss {loss}); lower the lr")
                session.optimizerStep()
                session.lazyResetGrad()
                if start is not None:
                    weights = session.copyParametersToBuffer(True)
                    weights -= np.float32(session.getLearningRate() * proximal_mu) * (weights - start)
                    session.copyBufferToParameters(weights, True)
                loss_sum, seen = loss_sum + loss * len(idx), seen + len(idx)
        metrics = {"num-examples": float(seen // epochs), "train-loss": loss_sum / seen}
        if self.train_scores and self.labels:
            metrics["train-accuracy"] = correct / seen
        return session.copyParametersToBuffer(True), metrics

    def evaluate(self, buffer: np.ndarray, *, batch_size: int = 128) -> Dict[str, float]:
        """Evaluate ``buffer`` on the local validation data: ``num-examples`` (0 when there is none: it then
        weighs nothing), ``eval-loss`` and, for a classifier, ``eval-accuracy``."""
        session = self._load(buffer)
        n = len(next(iter(self.val_data.values()))) if self.val_data else 0
        batch_size = self.fixed_batch or int(batch_size)
        if self.fixed_batch is not None:
            n -= n % batch_size  # whole batches only
        if n == 0 or self.eval_loss is None:
            return {"num-examples": 0.0, "eval-loss": 0.0}
        n_train = len(next(iter(self.train_data.values()), ()))
        if self.batchnorm and n_train >= (self.fixed_batch or 1):
            reestimate_batchnorm(session, self.batchnorm, (
                {name: array[idx] for name, array in self.train_data.items()}
                for idx in batches(np.arange(n_train), batch_size, self.fixed_batch is not None)))
        loss, accuracy = evaluate(session, self.val_data, self.eval_loss, self.eval_scores,
                                         self.labels, batch_size, self.fixed_batch is not None)
        metrics = {"num-examples": float(n), "eval-loss": loss}
        if accuracy is not None:
            metrics["eval-accuracy"] = accuracy
        return metrics

    # -- on messages --

    def train_reply(self, content: RecordDict) -> RecordDict:
        """The reply to a train message's content: the trained ``ArrayRecord``, its ``MetricRecord`` and
        the ``client`` ``ConfigRecord``."""
        arrays, config = _arrays_and_config(content, self.name)
        buffer = self.layout.to_buffer(arrays, f"{self.name}: the model the server sent")
        lr = _number(config, "lr", None)
        trained, metrics = self.fit(
            buffer, epochs=int(_number(config, "local-epochs", 1)), batch_size=_int_or_none(_number(config, "batch-size", None)),
            lr=lr, server_round=int(_number(config, "server-round", 0)), seed=int(_number(config, "seed", 0)),
            proximal_mu=float(_number(config, "proximal-mu", 0.0)))
        if self.state is not None and self.key is not None:
            keep_state(self.session, self.key, self.state)
        return RecordDict({"arrays": self.layout.to_record(trained), "metrics": MetricRecord(metrics),  # type: ignore[arg-type]
                           "client": ConfigRecord({"name": self.name})})

    def evaluate_reply(self, content: RecordDict) -> RecordDict:
        """The reply to an evaluate message's content: the ``MetricRecord`` and the ``client`` record."""
        arrays, config = _arrays_and_config(content, self.name)
        buffer = self.layout.to_buffer(arrays, f"{self.name}: the model the server sent")
        metrics = self.evaluate(buffer, batch_size=int(_number(config, "eval-batch-size", 128)))
        return RecordDict({"metrics": MetricRecord(metrics), "client": ConfigRecord({"name": self.name})})  # type: ignore[arg-type]

    # -- the session --

    def _session(self) -> OrtTrainingSession:
        if self.session.isClosed():
            raise FederatedError(
                f"{self.name}: its training session is closed, so it can no longer train or evaluate "
                "(a closed session cannot be reopened: create the client again)")
        return self.session

    def _load(self, buffer: np.ndarray) -> OrtTrainingSession:
        session = self._session()
        flat = np.asarray(buffer)
        if flat.size != self.layout.size:
            raise FederatedError(
                f"{self.name}: the server sent {flat.size} values, but this client's model has "
                f"{self.layout.size} trainable parameters: the server and the clients must use the same training artifacts")
        try:
            session.copyBufferToParameters(np.ascontiguousarray(flat.reshape(-1), dtype=np.float32), True)
        except OrtClosedException:  # closed by another thread in between
            self._session()
            raise
        return session

    def close(self) -> None:
        """Close the session, shared or not: a learner closed is closed for good."""
        _close(self.session)

    def __enter__(self) -> LocalLearner:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


def _int_or_none(value: Any) -> Optional[int]:
    return None if value is None else int(value)


def _number(config: ConfigRecord, key: str, default: Any) -> Any:
    """A number from the server's config (``default`` when absent); a value of another type is refused."""
    value = config.get(key, default)
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise FederatedError(f"the server's config {key!r} is {value!r}, not a number")
    return value


def _arrays_and_config(content: RecordDict, name: str) -> Tuple[ArrayRecord, ConfigRecord]:
    arrays, configs = list(content.array_records.values()), list(content.config_records.values())
    if len(arrays) != 1:
        raise FederatedError(f"{name}: the server's message holds {len(arrays)} ArrayRecords, not the one model")
    return arrays[0], configs[0] if configs else ConfigRecord()


def load_learner(settings: ClientSettings = ClientSettings(), partition_id: Optional[int] = None,
                 num_partitions: Optional[int] = None, data_path: Optional[str] = None,
                 state: Optional[RecordDict] = None) -> LocalLearner:
    """A learner over this client's session in this process (`shared_session`) and its local data:
    partition ``partition_id`` of ``num_partitions`` of the settings' dataset, or all of ``data_path``.
    The session stays cached for the client's next round (do not close it unless you mean to end the
    client's optimizer state). With ``state`` (the client's ``Context.state``) the optimizer state also
    travels there, so that it does not depend on the process that serves the client."""
    if data_path:
        client: Hashable = ("data-path", str(Path(data_path).resolve()))
        name = f"client {Path(data_path).name}"
    elif partition_id is not None:
        client = ("partition", settings.data, partition_id, num_partitions)
        name = f"client {partition_id}"
    else:
        client, name = ("all", settings.data), "client"
    session, layout = shared_session(settings.artifacts, settings.threads, settings.seed, client, state)
    data, fixed_batch = local_data(settings, session, partition_id, num_partitions, data_path)
    statistics = (read_manifest(settings.artifacts) or {}).get("batchnorm_statistics") or ()
    return LocalLearner(session, data, name=name, order_id=partition_id or 0, fixed_batch=fixed_batch, layout=layout,
                        state=state, key=session_key(settings.artifacts, settings.threads, client), batchnorm=statistics)


def learner_for(settings: ClientSettings, context: Context) -> LocalLearner:
    """The learner a message's ``context`` asks for: the node config's ``partition-id``/``num-partitions``
    (set by the simulation, or by ``flower-supernode --node-config``) or ``data-path``, with the run config
    overriding the settings (``artifacts``, ``data``, ``partitioning``, ``dirichlet-alpha``, ``seed``,
    ``client-threads``); its optimizer state travels in ``context.state`` (see `shared_session`)."""
    node = context.node_config
    resolved = settings.with_run_config(context.run_config)
    partition_id = int(node["partition-id"]) if "partition-id" in node else None
    num_partitions = int(node["num-partitions"]) if "num-partitions" in node else None
    data_path = str(node["data-path"]) if node.get("data-path") else None
    return load_learner(resolved, partition_id, num_partitions, data_path, context.state)


def client_side_clipping(msg: Message, context: Context, call_next: ClientAppCallable) -> Message:
    """Flower's ``fixedclipping_mod`` on the train messages that ask for it (those of the client-side DP
    wrapper carry ``clipping_norm``, the norm the server chose); every other message passes untouched.
    This is not local differential privacy: the server still sees each clipped update without noise, and
    adds the noise to the aggregate itself."""
    configs = list(msg.content.config_records.values()) if msg.has_content() else []
    if msg.metadata.message_type == MessageType.TRAIN and configs and CLIPPING_NORM in configs[0]:
        return fixedclipping_mod(msg, context, call_next)
    return call_next(msg, context)


def make_client_app(settings: Optional[ClientSettings] = None) -> ClientApp:
    """A ``ClientApp`` whose ``train`` and ``evaluate`` functions run `LocalLearner` on the
    client's data (see `learner_for`), with client-side DP clipping when the server asks for it."""
    base = settings or ClientSettings()
    app = ClientApp(mods=[client_side_clipping])

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        return Message(learner_for(base, context).train_reply(msg.content), reply_to=msg)

    @app.evaluate()
    def evaluate(msg: Message, context: Context) -> Message:
        return Message(learner_for(base, context).evaluate_reply(msg.content), reply_to=msg)

    return app
