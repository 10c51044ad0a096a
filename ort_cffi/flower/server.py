"""The server side: a Flower ``ServerApp`` whose ``main`` drives one of Flower's strategies round by round
and evaluates every global model through ort_cffi.

The round loop is this module's own rather than ``Strategy.start`` because a federation that a team can
run needs what ``start`` does not do: it screens every reply before the strategy sees it
(`ort_cffi.flower.updates`), goes on when clients are lost (the round aggregates what came back when
at least ``min-fit-clients`` did), sends a learning rate that follows a schedule, commits the global model
and the history after every round (`ort_cffi.flower.store`) and resumes from them. The strategy's
own calls (``configure_train``, ``aggregate_train``, ``configure_evaluate``, ``aggregate_evaluate``) do
the sampling and the arithmetic.

Everything that would stop the run at its end (the inference export, the strategy's needs, the output
folder) is checked before the first round.
"""
from __future__ import annotations

import logging
import math
import os
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, ClassVar, Dict, List, Optional

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import Strategy

from ort_cffi.flower.config import RunConfigurable
from ort_cffi.flower.model import FederatedError, GlobalModel, normalize_record
from ort_cffi.flower.store import (
    INFERENCE,
    PLOT,
    RunStore,
    format_round,
    new_history,
    plot_history,
    run_files,
    save_arrays,
)
from ort_cffi.flower.strategies import (
    StrategySettings,
    build_strategy,
    check_strategy,
    is_stateful,
    restore_strategy_state,
    strategy_state,
)
from ort_cffi.flower.updates import WEIGHT_KEY, Rejection, accepted_clients, screen_replies
from ort_cffi.trainer.data import DEFAULT_ARTIFACTS
from ort_cffi.trainer.errors import SetupError

LOG_MARK = "[ort_cffi] "  # the server's own log lines; ort-cffi-federated shows these from Flower's log stream
Report = Callable[[str], None]


def log_report(line: str) -> None:
    """The default report: the line on Flower's logger (streamed to ``flwr run --stream`` and ``flwr log``)."""
    logging.getLogger("flwr").info("%s%s", LOG_MARK, line)


@dataclass(frozen=True)
class ServerSettings(RunConfigurable):
    """What the server runs: the model and data, the federation, the rounds and the clients' local training,
    the strategy, and where the run's files go. Every field has a run-config key (``RUN_CONFIG``).

    ``clients`` is the federation's size, which the first round waits for (``connect_timeout`` seconds at
    most); ``min_fit_clients`` (default: half the clients a round samples, rounded up) is the fewest usable
    updates a round aggregates: fewer end the run with an error and leave the last global checkpoint as
    it was. A client that has not replied ``round_timeout`` seconds after a round started is left out.
    """

    artifacts: str = str(DEFAULT_ARTIFACTS)
    data: Optional[str] = None
    clients: int = 2
    rounds: int = 20
    local_epochs: int = 2
    batch_size: int = 32
    lr: float = 0.01
    lr_decay: str = "cosine"  # the lr sent each round: "cosine" from lr to lr/10 over the rounds, or "constant"
    fraction_fit: float = 1.0
    fraction_evaluate: float = 1.0  # federated evaluation on the clients' validation data (0: none)
    min_fit_clients: Optional[int] = None
    round_timeout: float = 3600.0
    connect_timeout: float = 600.0
    seed: int = 0
    partitioning: str = "iid"  # recorded in the history (the clients partition)
    alpha: float = 0.5
    # the strategy's settings, with StrategySettings' defaults (one place for them)
    strategy: str = StrategySettings.name
    proximal_mu: float = StrategySettings.proximal_mu
    trim_beta: float = StrategySettings.trim_beta
    krum_f: int = StrategySettings.krum_f
    server_lr: float = StrategySettings.server_lr
    dp_clipping: Optional[float] = StrategySettings.dp_clipping
    dp_noise: float = StrategySettings.dp_noise
    dp_side: str = StrategySettings.dp_side
    export_outputs: Optional[str] = None  # comma-separated; default: the eval model's outputs after the loss
    out: str = "federated_run"  # global_checkpoint, history.json, inference_model.onnx, federated.png
    plot: bool = True
    resume: bool = False
    overwrite: bool = False  # a new run may replace the run in ``out`` (never without it)
    save_updates: bool = False  # keep every round's accepted client updates (updates/round-N.npz), for audits
    threads: int = 1  # intra-op threads of the server's session

    RUN_CONFIG: ClassVar[Dict[str, str]] = {
        "artifacts": "artifacts", "data": "data", "clients": "clients", "rounds": "num-server-rounds",
        "local_epochs": "local-epochs", "batch_size": "batch-size", "lr": "lr", "lr_decay": "lr-decay",
        "fraction_fit": "fraction-fit", "fraction_evaluate": "fraction-evaluate", "min_fit_clients": "min-fit-clients",
        "round_timeout": "round-timeout", "connect_timeout": "connect-timeout", "seed": "seed",
        "partitioning": "partitioning", "alpha": "dirichlet-alpha", "strategy": "strategy",
        "proximal_mu": "proximal-mu", "trim_beta": "trim-beta", "krum_f": "krum-f", "server_lr": "server-lr",
        "dp_clipping": "dp-clipping", "dp_noise": "dp-noise", "dp_side": "dp-side",
        "export_outputs": "export-outputs", "out": "out", "plot": "plot", "resume": "resume", "overwrite": "overwrite",
        "save_updates": "save-updates", "threads": "server-threads"}

    @property
    def sampled(self) -> int:
        """The clients a round asks to train when all ``clients`` are connected."""
        return max(1, int(self.clients * self.fraction_fit))

    @property
    def min_fit(self) -> int:
        """``min_fit_clients``, or its default: half the sampled clients, rounded up (for Krum, at least the
        2f + 3 clients its guarantee needs, when that many are sampled)."""
        if self.min_fit_clients is not None:
            return self.min_fit_clients
        default = max(1, math.ceil(self.sampled / 2))
        if self.strategy == "krum":
            default = max(default, min(self.sampled, 2 * self.krum_f + 3))
        return default

    def strategy_settings(self) -> StrategySettings:
        """The strategy part of these settings."""
        return StrategySettings(self.strategy, self.proximal_mu, self.trim_beta, self.krum_f, self.server_lr,
                                self.dp_clipping, self.dp_noise, self.dp_side)

    def lr_for(self, server_round: int) -> float:
        """The learning rate sent in round ``server_round`` (1-based): ``lr``, decaying along a cosine to
        ``lr / 10`` by the last round with ``lr_decay="cosine"``."""
        if self.lr_decay == "constant" or self.rounds <= 1:
            return self.lr
        progress = (server_round - 1) / (self.rounds - 1)
        return float(self.lr * (0.1 + 0.9 * 0.5 * (1 + np.cos(np.pi * progress))))

    def check(self) -> None:
        """Refuse settings that cannot work (``SetupError`` naming the option), before anything starts."""
        problems = []
        if self.clients < 1 or self.rounds < 1 or self.local_epochs < 1 or self.batch_size < 1:
            problems.append("clients, rounds, local-epochs and batch-size must be at least 1")
        if not (0 < self.fraction_fit <= 1 and 0 <= self.fraction_evaluate <= 1):
            problems.append("fraction-fit must be in (0, 1] and fraction-evaluate in [0, 1]")
        if not 1 <= self.min_fit <= self.sampled:
            problems.append(f"min-fit-clients {self.min_fit} must be between 1 and the {self.sampled} clients a round "
                            "samples (clients x fraction-fit)")
        if self.lr_decay not in ("cosine", "constant"):
            problems.append(f"lr-decay must be cosine or constant, not {self.lr_decay!r}")
        if not (self.lr > 0 and self.round_timeout > 0 and self.connect_timeout > 0):
            problems.append("lr, round-timeout and connect-timeout must be positive")
        if self.seed < 0:
            problems.append(f"seed must not be negative, got {self.seed}")
        if self.resume and self.overwrite:
            problems.append("resume continues the run in the output folder, overwrite replaces it: not both")
        if problems:
            raise SetupError("; ".join(problems))
        check_strategy(self.strategy_settings(), sampled=self.min_fit)

    def history_config(self) -> Dict[str, Any]:
        """The settings as the history records them (and a resume compares them)."""
        config = asdict(self)
        for key in ("resume", "overwrite", "out"):
            config.pop(key)
        return config


class FederatedServer:
    """One federated run on a Flower ``Grid``: `run` opens the global model, checks what could fail
    at the end, resumes or starts the history, then trains ``settings.rounds`` rounds. ``report`` gets the
    progress lines (default: Flower's logger, marked `LOG_MARK`). After `run`,
    `history` is the run's history document."""

    def __init__(self, settings: ServerSettings, report: Optional[Report] = None) -> None:
        self.settings = settings
        self.report = report or log_report
        self.store = RunStore(Path(settings.out))
        self.history: Dict[str, Any] = {}
        self._names: Dict[int, str] = {}

    def run(self, grid: Grid) -> Dict[str, Any]:
        """Run (or resume) the federation; return the history document. Raises `FederatedError` when
        too few clients connect or reply, ``SetupError`` for settings or artifacts that cannot work; the
        history then records the error, and the global checkpoint stays at the last completed round."""
        s = self.settings
        s.check()
        files = run_files(s.artifacts, s.data)
        point = self.store.resume_point(s.history_config(), files) if s.resume else None
        if not s.resume:
            self.store.check_fresh(s.overwrite)
        exports = [n.strip() for n in s.export_outputs.split(",") if n.strip()] if s.export_outputs else None
        with GlobalModel(s.artifacts, s.data, s.threads, checkpoint=self.store.checkpoint if point else None,
                         export_outputs=exports) as model:
            if model.fixed_batch is not None and s.batch_size != model.fixed_batch:
                raise SetupError(f"the model's inputs fix the batch size at {model.fixed_batch}: set batch-size "
                                        f"{model.fixed_batch} (--batch-size {model.fixed_batch}), not {s.batch_size}")
            model.check_export()  # before round 1: the export at the end must not fail
            strategy = build_strategy(s.strategy_settings(), min_fit_clients=s.min_fit, expected_clients=s.clients,
                                      fraction_fit=s.fraction_fit, fraction_evaluate=s.fraction_evaluate)
            stateful = is_stateful(s.strategy_settings())
            layout = {"per_parameter": model.layout.per_parameter, "arrays": len(model.layout.names),
                      "parameters": model.layout.size}
            if point is None:
                self.store.clear()
                self.history = new_history(s.history_config(), layout=layout, stateful=stateful, files=files)
                first = 1
            else:
                done, records, state, saved = point
                self.history = dict(saved, status="running", error=None, rounds=records, inference=None, sha256=files)
                for key in ("resume", "interrupted"):  # what an interrupted run's history said (store.mark_interrupted)
                    self.history.pop(key, None)
                self.history.setdefault("resumed", []).append(
                    {"after_round": done, "at": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
                restore_strategy_state(strategy, state)
                first = done + 1
                self.report(f"resuming after round {done} of {s.rounds} from {self.store.checkpoint}")
            try:
                self._rounds(grid, model, strategy, first)
                self._finish(model)
            except BaseException as exc:
                self.history.update(status="failed", error=f"{type(exc).__name__}: {exc}")
                if self.history.get("config") is not None:
                    self.store.write_history(self.history)
                raise
        return self.history

    # -- the rounds --

    def _rounds(self, grid: Grid, model: GlobalModel, strategy: Strategy, first: int) -> None:
        s = self.settings
        offset = self.history["rounds"][-1]["seconds"] if self.history["rounds"] else 0.0
        started = time.monotonic() - offset
        arrays = model.record()
        if first == 1:
            loss, accuracy = model.evaluate()
            self._commit(model, strategy, {"round": 0, "val_loss": loss, "val_accuracy": accuracy,
                                           "seconds": round(time.monotonic() - started, 3)})
        # A new run waits for its whole federation; a resumed one, which may have lost clients, for enough.
        if first == 1:
            self._wait_for(grid, s.clients, "the federation's clients")
        else:
            self._wait_for(grid, s.min_fit, "min-fit-clients")
        for server_round in range(first, s.rounds + 1):
            if server_round > first:
                self._wait_for(grid, s.min_fit, "min-fit-clients")
            lr = s.lr_for(server_round)
            config = ConfigRecord({"local-epochs": s.local_epochs, "batch-size": s.batch_size, "lr": lr, "seed": s.seed})
            _seed_round(s.seed, server_round, "train")
            sent = list(strategy.configure_train(server_round, arrays, config, sorted_nodes(grid)))
            replies = list(grid.send_and_receive(sent, timeout=s.round_timeout))
            accepted, rejected = screen_replies(sent, replies, model.layout, train=True, timeout=s.round_timeout,
                                                names=self._names)
            for rejection in rejected:
                self.report(f"round {server_round}: {self._who(rejection)} left out: {rejection.reason}")
            if len(accepted) < s.min_fit:
                raise self._too_few(server_round, len(sent), accepted, rejected)
            clients = accepted_clients(sent, accepted)  # before the strategy, which may empty the replies
            if s.save_updates:
                self._save_updates(server_round, accepted)
            aggregated, metrics = strategy.aggregate_train(server_round, accepted)
            if aggregated is None:
                raise FederatedError(f"round {server_round}: the {s.strategy} strategy aggregated nothing from "
                                     f"{len(accepted)} update(s) (Flower's log says why)")
            arrays = normalize_record(aggregated, model.layout)
            loss, accuracy = model.evaluate(arrays)
            record: Dict[str, Any] = {
                "round": server_round, "lr": lr, "clients": len(accepted),
                "examples": int(sum(_weight(m) for m in accepted)),
                "train_loss": _metric(metrics, "train-loss"), "train_accuracy": _metric(metrics, "train-accuracy"),
                "val_loss": loss, "val_accuracy": accuracy,
                "accepted": clients,
                "failed": [r.to_json() for r in rejected]}
            record.update(self._federated_evaluation(grid, strategy, server_round, arrays, model))
            record["seconds"] = round(time.monotonic() - started, 3)
            self._commit(model, strategy, record)

    def _commit(self, model: GlobalModel, strategy: Strategy, record: Dict[str, Any]) -> None:
        self.history["rounds"].append(record)
        self.store.commit(model, record["round"], self.history, strategy_state(strategy))
        self.report(format_round(record, self.settings.rounds))

    def _federated_evaluation(self, grid: Grid, strategy: Strategy, server_round: int, arrays: ArrayRecord,
                              model: GlobalModel) -> Dict[str, Any]:
        """The global model evaluated by the clients on their validation data (when fraction-evaluate > 0);
        a client that fails here is recorded but costs the round nothing."""
        if self.settings.fraction_evaluate <= 0:
            return {}
        _seed_round(self.settings.seed, server_round, "evaluate")
        sent = list(strategy.configure_evaluate(server_round, arrays, ConfigRecord({"eval-batch-size": 128}),
                                                sorted_nodes(grid)))
        replies = list(grid.send_and_receive(sent, timeout=self.settings.round_timeout))
        accepted, rejected = screen_replies(sent, replies, model.layout, train=False,
                                            timeout=self.settings.round_timeout, names=self._names)
        useful = [m for m in accepted if _weight(m) > 0]
        result: Dict[str, Any] = {"evaluate_failed": [r.to_json() for r in rejected]} if rejected else {}
        if useful:
            metrics = strategy.aggregate_evaluate(server_round, useful)
            result.update(clients_val_loss=_metric(metrics, "eval-loss"),
                          clients_val_accuracy=_metric(metrics, "eval-accuracy"))
        return result

    def _wait_for(self, grid: Grid, needed: int, what: str) -> None:
        """Wait until ``needed`` nodes are connected (Flower's sampling would otherwise wait for ever)."""
        deadline = time.monotonic() + self.settings.connect_timeout
        reported = False
        while True:
            connected = len(list(grid.get_node_ids()))
            if connected >= needed:
                return
            if time.monotonic() >= deadline:
                raise FederatedError(
                    f"only {connected} client(s) connected within {self.settings.connect_timeout:g} s, fewer than "
                    f"{needed} ({what}); the global model of the last completed round is in {self.store.checkpoint}")
            if not reported:
                self.report(f"waiting for {needed} client(s) to connect ({connected} so far)")
                reported = True
            time.sleep(1.0)

    def _too_few(self, server_round: int, sent: int, accepted: List[Message], rejected: List[Rejection]) -> FederatedError:
        reasons = "; ".join(f"{self._who(r)}: {r.reason}" for r in rejected) or "none replied"
        self.history["failed_round"] = {"round": server_round, "failed": [r.to_json() for r in rejected],
                                        "accepted": len(accepted)}
        return FederatedError(
            f"round {server_round}: only {len(accepted)} of {sent} client(s) returned a usable update, fewer than "
            f"min-fit-clients {self.settings.min_fit} ({reasons}). The global model of round {server_round - 1} "
            f"is in {self.store.checkpoint}: resume with --resume once enough clients are back")

    def _who(self, rejection: Rejection) -> str:
        return f"{rejection.client} (node {rejection.node})" if rejection.client else f"node {rejection.node}"

    def _save_updates(self, server_round: int, accepted: List[Message]) -> None:
        """Keep the round's accepted updates and their weights (``updates/round-N.npz``), before any strategy
        touches them (some take the arrays out of the replies)."""
        folder = self.store.out / "updates"
        folder.mkdir(parents=True, exist_ok=True)
        arrays: Dict[str, np.ndarray] = {}
        for index, message in enumerate(accepted):
            record = next(iter(message.content.array_records.values()))
            for name in record.keys():
                arrays[f"{index}/{name}"] = record[name].numpy()
            arrays[f"{index}/{WEIGHT_KEY}"] = np.asarray(_weight(message))
        save_arrays(folder / f"round-{server_round}.npz", **arrays)

    # -- the end --

    def _finish(self, model: GlobalModel) -> None:
        """After the last round: the plot, then the inference model (exported from the global model and run
        once through an ordinary ``OrtSession``), then the completed history."""
        out = self.store.out
        if self.settings.plot:
            if not plot_history(out / PLOT, self.history["rounds"], self._title()):
                self.report("no plot: matplotlib is not installed (pip install matplotlib)")
        names, accuracy = model.export(out / INFERENCE)
        self.history.update(status="completed", inference={"model": INFERENCE, "outputs": names, "val_accuracy": accuracy})
        self.store.write_history(self.history)

    def _title(self) -> str:
        s = self.settings
        part = f"Dirichlet({s.alpha:g})" if s.partitioning == "dirichlet" else s.partitioning.upper()
        return (f"{s.strategy_settings().describe()}, {s.clients} clients ({part}), {s.rounds} rounds x "
                f"{s.local_epochs} local epochs")


class SortedNodes:
    """A ``Grid`` whose ``get_node_ids`` lists the nodes sorted, for a strategy's sampling (`_seed_round`):
    the SuperLink lists them in no fixed order."""

    def __init__(self, grid: Grid) -> None:
        self._grid = grid

    def get_node_ids(self) -> List[int]:
        return sorted(self._grid.get_node_ids())

    def __getattr__(self, name: str) -> Any:
        return getattr(self._grid, name)


def sorted_nodes(grid: Grid) -> Grid:
    """``grid`` as a strategy's sampling should see it (`SortedNodes`; typed as the ``Grid`` it stands for)."""
    proxy: Any = SortedNodes(grid)
    return proxy


def _seed_round(seed: int, server_round: int, step: str) -> None:
    """Seed what the strategies draw from, per round and step (so a resumed run draws what the whole run
    would have): Python's ``random`` (Flower's sampling of the clients with a fraction below 1) and
    numpy's global generator (the Gaussian noise of Flower's differential privacy wrappers)."""
    random.seed(f"ort_cffi {seed} {server_round} {step}")
    np.random.seed([seed, server_round, 0 if step == "train" else 1])


def _weight(message: Message) -> float:
    return float(next(iter(message.content.metric_records.values())).get(WEIGHT_KEY, 0.0))  # type: ignore[arg-type]


def _metric(metrics: Optional[MetricRecord], key: str) -> Optional[float]:
    value = metrics.get(key) if metrics is not None else None
    return float(value) if isinstance(value, (int, float)) else None


def server_settings(context: Context, base: Optional[ServerSettings] = None) -> ServerSettings:
    """The settings a run's ``context`` asks for: ``base`` (default: `ServerSettings`) overridden by
    the run config. A relative ``out`` is taken from the server process's working folder."""
    return (base or ServerSettings()).with_run_config(context.run_config)


def make_server_app(settings: Optional[ServerSettings] = None, report: Optional[Report] = None) -> ServerApp:
    """A ``ServerApp`` whose ``main`` runs `FederatedServer` with ``settings`` overridden by the run
    config (``report``: where the progress lines go, default Flower's logger)."""
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        resolved = server_settings(context, settings)
        if not os.path.isabs(resolved.out):
            logging.getLogger("flwr").info("%swriting to %s", LOG_MARK, os.path.abspath(resolved.out))
        FederatedServer(resolved, report).run(grid)

    return app

