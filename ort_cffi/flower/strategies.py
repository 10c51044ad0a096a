"""The server's aggregation: each ``--strategy`` name mapped to Flower's own implementation in
``flwr.serverapp.strategy``, optionally wrapped in Flower's differential-privacy wrapper, plus what a
resumed server needs to carry a stateful strategy (FedAdam's moments) across a restart.

Nothing here aggregates by hand: the arithmetic is Flower's. What this module adds is the choice, the
checks that a choice can work with the federation's size (made before the first round), and the
strategy's state as arrays for the crash-safe run files.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional

import numpy as np
from flwr.serverapp.strategy import (
    DifferentialPrivacyClientSideFixedClipping,
    DifferentialPrivacyServerSideFixedClipping,
    FedAdam,
    FedAvg,
    FedMedian,
    FedProx,
    FedTrimmedAvg,
    Krum,
    Strategy,
)

from ort_cffi import OrtException

STRATEGIES = ("fedavg", "fedprox", "fedmedian", "trimmedavg", "krum", "fedadam")
DP_SIDES = ("server", "client")

#: One line per strategy: what it does and when to use it (``--help`` and the guide say the same).
STRATEGY_HELP = {
    "fedavg": "weighted mean of the clients' models (the default; honest clients)",
    "fedprox": "FedAvg whose clients are pulled toward the global model (--proximal-mu): non-IID data",
    "fedmedian": "coordinate-wise median: robust to a minority of broken or hostile clients",
    "trimmedavg": "mean after dropping the --trim-beta highest and lowest values of each coordinate",
    "krum": "the one client model closest to the others (--krum-f hostile clients tolerated)",
    "fedadam": "Adam on the server over the clients' mean update (--server-lr): slow or noisy progress",
}


class StrategyError(OrtException):
    """A strategy, or its settings, cannot work with this federation (reported before the first round)."""


@dataclass(frozen=True)
class StrategySettings:
    """Which of Flower's strategies aggregates, with its own parameters and the optional DP wrapper.

    ``proximal_mu`` is FedProx's mu; ``trim_beta`` FedTrimmedAvg's beta (the share cut at each end);
    ``krum_f`` Krum's number of hostile clients to tolerate; ``server_lr`` FedAdam's eta. With
    ``dp_clipping`` set, Flower's fixed-clipping DP wrapper clips each client's update to that L2 norm
    (on the server, or on the clients with ``dp_side="client"``) and adds Gaussian noise of standard
    deviation ``dp_noise * dp_clipping / sampled clients`` to the aggregate, on the server (central DP
    either way: the server sees every update without noise).
    """

    name: str = "fedavg"
    proximal_mu: float = 0.01
    trim_beta: float = 0.2
    krum_f: int = 1
    server_lr: float = 0.1  # Flower's own default eta
    dp_clipping: Optional[float] = None
    dp_noise: float = 1.0
    dp_side: str = "server"

    def describe(self) -> str:
        """A short label for progress lines and plots, e.g. ``Krum (f=1), DP clip 1 noise 0.5``."""
        label = {
            "fedavg": "FedAvg",
            "fedprox": f"FedProx (mu={self.proximal_mu:g})",
            "fedmedian": "FedMedian",
            "trimmedavg": f"FedTrimmedAvg (beta={self.trim_beta:g})",
            "krum": f"Krum (f={self.krum_f})",
            "fedadam": f"FedAdam (server lr {self.server_lr:g})",
        }.get(self.name, self.name)
        if self.dp_clipping is not None:
            label += f", DP ({self.dp_side}-side clip {self.dp_clipping:g}, noise {self.dp_noise:g})"
        return label


def check_strategy(settings: StrategySettings, *, sampled: int) -> None:
    """Refuse, with the reason, a strategy that cannot aggregate ``sampled`` replies a round (the fewest
    the server accepts); called before the first round. Raises `StrategyError`."""
    name = settings.name
    if name not in STRATEGIES:
        raise StrategyError(f"unknown strategy {name!r}: choose one of {', '.join(STRATEGIES)}")
    if name == "fedprox" and not settings.proximal_mu >= 0:
        raise StrategyError(f"FedProx's proximal mu must be >= 0, got {settings.proximal_mu}")
    if name == "trimmedavg":
        if not 0.0 <= settings.trim_beta < 0.5:
            raise StrategyError(f"--trim-beta must be in [0, 0.5), got {settings.trim_beta}")
        if sampled - 2 * int(settings.trim_beta * sampled) < 1:
            raise StrategyError(f"trimmed mean with beta {settings.trim_beta:g} leaves nothing of {sampled} clients")
    if name == "krum":
        if settings.krum_f < 0:
            raise StrategyError(f"--krum-f must be >= 0, got {settings.krum_f}")
        # Krum's guarantee (Blanchard et al., 2017) holds for n > 2f + 2 clients.
        if sampled < 2 * settings.krum_f + 3:
            raise StrategyError(
                f"Krum tolerating {settings.krum_f} hostile client(s) needs at least {2 * settings.krum_f + 3} "
                f"clients a round, but a round may aggregate as few as {sampled}: raise --min-fit-clients "
                f"(and --clients) or lower --krum-f")
    if name == "fedadam" and not settings.server_lr > 0:
        raise StrategyError(f"FedAdam's server learning rate must be positive, got {settings.server_lr}")
    if settings.dp_clipping is not None:
        if not settings.dp_clipping > 0:
            raise StrategyError(f"--dp-clipping must be a positive L2 norm, got {settings.dp_clipping}")
        if not settings.dp_noise >= 0:
            raise StrategyError(f"--dp-noise must be >= 0, got {settings.dp_noise}")
        if settings.dp_side not in DP_SIDES:
            raise StrategyError(f"--dp-side must be one of {', '.join(DP_SIDES)}, not {settings.dp_side!r}")


def build_strategy(settings: StrategySettings, *, min_fit_clients: int, expected_clients: int,
                   fraction_fit: float, fraction_evaluate: float) -> Strategy:
    """Flower's strategy for ``settings`` (wrapped for DP when asked): it samples
    ``fraction_fit`` of the connected nodes (at least ``min_fit_clients``) and needs only
    ``min_fit_clients`` of them connected, so that a federation that lost a client goes on.
    ``expected_clients`` sets the DP noise's number of sampled clients. Raises `StrategyError`."""
    check_strategy(settings, sampled=min_fit_clients)
    common = dict(fraction_train=fraction_fit, fraction_evaluate=fraction_evaluate,
                  min_train_nodes=min_fit_clients, min_evaluate_nodes=1 if fraction_evaluate > 0 else 0,
                  min_available_nodes=min_fit_clients)
    strategy: Strategy
    if settings.name == "fedavg":
        strategy = FedAvg(**common)  # type: ignore[arg-type]
    elif settings.name == "fedprox":
        strategy = FedProx(proximal_mu=settings.proximal_mu, **common)  # type: ignore[arg-type]
    elif settings.name == "fedmedian":
        strategy = FedMedian(**common)  # type: ignore[arg-type]
    elif settings.name == "trimmedavg":
        strategy = FedTrimmedAvg(beta=settings.trim_beta, **common)  # type: ignore[arg-type]
    elif settings.name == "krum":
        strategy = Krum(num_malicious_nodes=settings.krum_f, **common)  # type: ignore[arg-type]
    else:  # fedadam
        strategy = FedAdam(eta=settings.server_lr, **common)  # type: ignore[arg-type]
    if settings.dp_clipping is None:
        return strategy
    sampled = max(min_fit_clients, int(expected_clients * fraction_fit))
    wrapper = (DifferentialPrivacyServerSideFixedClipping if settings.dp_side == "server"
               else DifferentialPrivacyClientSideFixedClipping)
    return wrapper(strategy, noise_multiplier=settings.dp_noise, clipping_norm=settings.dp_clipping,
                   num_sampled_clients=sampled)


def _inner(strategy: Strategy) -> Strategy:
    """The aggregating strategy inside a DP wrapper (or the strategy itself)."""
    inner = getattr(strategy, "strategy", None)
    return inner if isinstance(inner, Strategy) else strategy


def is_stateful(settings: StrategySettings) -> bool:
    """Whether the strategy carries state from round to round (then a resume needs it: FedAdam)."""
    return settings.name == "fedadam"


def strategy_state(strategy: Strategy) -> Dict[str, np.ndarray]:
    """The state a strategy carries from round to round, as named arrays (empty when it has none).
    Of these strategies only FedAdam has one: its first and second moments ``m_t``/``v_t``."""
    inner = _inner(strategy)
    state: Dict[str, np.ndarray] = {}
    if isinstance(inner, FedAdam):
        for moment in ("m_t", "v_t"):
            for key, value in (getattr(inner, moment) or {}).items():
                state[f"{moment}/{key}"] = np.asarray(value)
    return state


def restore_strategy_state(strategy: Strategy, state: Dict[str, np.ndarray]) -> None:
    """Give a freshly built strategy the state `strategy_state` saved (a resumed server)."""
    inner = _inner(strategy)
    if isinstance(inner, FedAdam):
        for moment in ("m_t", "v_t"):
            prefix = f"{moment}/"
            values = {key[len(prefix):]: value for key, value in state.items() if key.startswith(prefix)}
            setattr(inner, moment, values or None)
