"""Federated learning with [Flower](https://flower.ai) over ort_cffi, on Flower's Message API.

- Client side (`client`): `make_client_app` gives a ``ClientApp`` whose ``@app.train()`` and
  ``@app.evaluate()`` functions run an ``OrtTrainingSession`` on the client's data (`LocalLearner`).
- Server side (`server`): `make_server_app` gives a ``ServerApp`` whose ``main`` drives one of
  Flower's strategies (`strategies`: ``--strategy fedavg|fedprox|fedmedian|trimmedavg|krum|fedadam``,
  optional DP wrapper), screens every update before it is aggregated (`updates`), evaluates the
  global model through ort_cffi (`GlobalModel`), and commits the checkpoint and ``history.json``
  after every round so that a killed server resumes (`store`).
- The model travels as an ``ArrayRecord`` of one float32 array per parameter (`ParameterLayout`).
- `simulation`: simulated federations the way Flower supports them (``flwr run`` on a local
  SuperLink in simulation mode): `simulate`, `LocalSimulation`.
- `data`: IID or Dirichlet (non-IID) shares of a dataset. `deploy`: SuperLink, SuperNodes and
  ``flwr run`` as processes, with TLS and SuperNode authentication.

`clientapp` and `serverapp` are what ``flwr run`` loads (``ort_cffi.flower:clientapp``,
``ort_cffi.flower:serverapp``); both read the run config. This package needs Flower:
ort_cffi's ``[federated]`` extra (``pip install ".[federated]"`` in a checkout). ``import ort_cffi`` does not
import it.
"""
from __future__ import annotations

INSTALL_HINT = "pip install 'flwr[simulation]>=1.42' (ort_cffi's [federated] extra)"

try:
    import flwr.app  # noqa: F401  (the Message API: flwr >= 1.42)
    import flwr.clientapp  # noqa: F401
    import flwr.serverapp.strategy  # noqa: F401
except ImportError as exc:  # flwr missing (or too old for these names)
    raise ImportError(
        f"ort_cffi.flower needs Flower (the flwr package), which is not installed or too old ({exc}): "
        f"{INSTALL_HINT}",
        name="flwr",
    ) from exc

from ort_cffi.flower.client import (  # noqa: E402
    ClientSettings,
    LocalLearner,
    close_shared_sessions,
    learner_for,
    load_learner,
    local_data,
    make_client_app,
    shared_session,
)
from ort_cffi.flower.data import PARTITIONINGS, label_proportions, partition, partition_dataset  # noqa: E402
from ort_cffi.flower.model import FederatedError, GlobalModel, ParameterLayout  # noqa: E402
from ort_cffi.flower.server import LOG_MARK, FederatedServer, ServerSettings, make_server_app  # noqa: E402
from ort_cffi.flower.simulation import LocalSimulation, preflight, simulate  # noqa: E402
from ort_cffi.flower.store import format_round, plot_history  # noqa: E402
from ort_cffi.flower.strategies import STRATEGIES, STRATEGY_HELP, StrategyError, StrategySettings, build_strategy  # noqa: E402
from ort_cffi.flower.updates import Rejection, screen_replies  # noqa: E402

__all__ = [
    "ClientSettings", "FederatedError", "FederatedServer", "GlobalModel", "INSTALL_HINT", "LOG_MARK", "LocalLearner",
    "LocalSimulation", "preflight", "simulate",
    "PARTITIONINGS", "ParameterLayout", "Rejection", "STRATEGIES", "STRATEGY_HELP", "ServerSettings", "StrategyError",
    "StrategySettings", "build_strategy", "clientapp", "close_shared_sessions", "format_round", "label_proportions",
    "learner_for", "load_learner", "local_data", "make_client_app", "make_server_app", "partition",
    "partition_dataset", "plot_history", "screen_replies", "serverapp", "shared_session",
]

#: What ``flwr run`` loads from a Flower app project: ``[tool.flwr.app.components]``
#: ``clientapp = "ort_cffi.flower:clientapp"`` and ``serverapp = "ort_cffi.flower:serverapp"``.
clientapp = make_client_app()
serverapp = make_server_app()
