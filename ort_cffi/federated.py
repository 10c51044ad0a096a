"""``ort-cffi-federated``: federated learning of a set of ONNX Runtime training artifacts, simulated with
Flower's simulation engine on Ray: N clients (Ray actors) each train their partition of the dataset
through ort_cffi, the server averages their models (FedAvg) and evaluates the result through ort_cffi.

With no arguments it runs the embedded default (the digits MLP of ``ort-cffi-train``, 10 IID clients,
20 rounds). Needs ``pip install 'ort_cffi[federated]'`` (Flower with its Ray simulation backend).

Writes to ``--out``: ``global_checkpoint`` (every round), ``inference_model.onnx`` (exported after the last
round), ``history.json`` (a record per round) and ``federated.png`` (accuracy and loss per round).
"""
from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import sys
import time
import zipfile
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, Optional, Sequence

import numpy as np

from . import __version__
from . import train as _train
from ._errors import OrtException

if TYPE_CHECKING:
    from .flower import OrtFedAvg

INSTALL_HINT = "pip install 'ort_cffi[federated]'"

DESCRIPTION = """\
Federated learning with Flower over ort_cffi, simulated on Ray: N clients train their share
of the dataset through ort_cffi, the server averages their models (FedAvg) for R rounds and
evaluates each round's global model on the validation split.
With no arguments: the embedded digits example, 10 clients with IID shares, 20 rounds.
"""

EPILOG = """\
writes to --out: global_checkpoint (the global model, every round), inference_model.onnx
(exported after the last round), history.json (a record per round), federated.png (plot).

examples:
  ort-cffi-federated                                     # 10 IID clients, 20 rounds
  ort-cffi-federated --partitioning dirichlet --alpha 0.3
  ort-cffi-federated --artifacts my_artifacts --data my_data.npz --clients 4
"""


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="ort-cffi-federated", description=DESCRIPTION, epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--artifacts", type=Path, default=_train.DEFAULT_ARTIFACTS, metavar="DIR",
                   help="training artifacts folder (default: the embedded digits MLP)")
    p.add_argument("--data", type=Path, metavar="FILE.npz",
                   help="dataset, as ort-cffi-train reads it (default: the one .npz in the artifacts folder)")
    p.add_argument("--out", type=Path, default=Path("runs") / "federated", metavar="DIR",
                   help="output folder (default: runs/federated)")
    p.add_argument("--clients", type=_train._positive_int, default=10, metavar="N", help="simulated clients (default: 10)")
    p.add_argument("--rounds", type=_train._positive_int, default=20, metavar="R", help="FedAvg rounds (default: 20)")
    p.add_argument("--local-epochs", type=_train._positive_int, default=2, metavar="E",
                   help="epochs each client trains per round (default: 2)")
    p.add_argument("--batch-size", type=_train._positive_int, default=32, metavar="B", help="default: 32")
    p.add_argument("--lr", type=_train._positive_float, default=0.01,
                   help="clients' learning rate in round 1 (default: 0.01)")
    p.add_argument("--lr-decay", choices=("cosine", "constant"), default="cosine",
                   help="cosine: the rate sent to the clients decays to lr/10 by the last round (default)")
    p.add_argument("--partitioning", choices=("iid", "dirichlet"), default="iid",
                   help="iid: random equal shares; dirichlet: non-IID by label (default: iid)")
    p.add_argument("--alpha", type=_train._positive_float, default=0.5,
                   help="Dirichlet parameter for --partitioning dirichlet: smaller is more skewed (default: 0.5)")
    p.add_argument("--fraction-fit", type=_fraction, default=1.0, help="share of clients that train each round (default: 1)")
    p.add_argument("--fraction-evaluate", type=_fraction, default=1.0,
                   help="share of clients that evaluate the global model on their data each round (default: 1; 0: none)")
    p.add_argument("--seed", type=int, default=0, help="partitions and shuffling (default: 0)")
    p.add_argument("--cpus", type=_train._positive_int, metavar="N",
                   help="CPUs Ray may use, one per client at a time (default: all, at most --clients)")
    p.add_argument("--no-plot", action="store_true", help="do not write federated.png")
    p.add_argument("--verbose", action="store_true", help="show Flower's and Ray's logs")
    p.add_argument("--version", action="version", version=f"%(prog)s (ort_cffi {__version__})")
    return p.parse_args(argv)


def _fraction(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, got {text}")
    return value


def require_flower() -> None:
    """Flower and its Ray backend, or an ImportError that names the extra. Sets, unless already set,
    Flower's telemetry off (it is read when flwr is first imported: nothing is sent from here) and Ray's
    variable that silences its FutureWarning about GPUs (the clients use none)."""
    os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
    os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")
    missing = [name for name in ("flwr", "ray") if importlib.util.find_spec(name) is None]
    if missing:
        raise ImportError(f"{' and '.join(missing)} not installed: the federated simulation needs Flower with "
                          f"its Ray backend: {INSTALL_HINT}", name=missing[0])


class _HideDeprecation(logging.Filter):
    """run_simulation is Flower's Python entry point to its simulation engine (``flwr run`` is the CLI one);
    its deprecation notice is for Flower's users, not this command's."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "DEPRECATED FEATURE" not in str(record.msg)


@contextmanager
def _quiet(verbose: bool) -> Iterator[None]:
    """Flower's INFO logs and its deprecation notice out of the way, unless --verbose."""
    logger = logging.getLogger("flwr")
    level, hide = logger.level, _HideDeprecation()
    logger.addFilter(hide)
    if not verbose:  # a client's failure is raised, with its message, by the server (OrtFedAvg)
        logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)
        logger.removeFilter(hide)


def simulate(*, artifacts: Path = _train.DEFAULT_ARTIFACTS, data: Optional[Path] = None,
             out: Optional[Path] = None, clients: int = 10, rounds: int = 20, local_epochs: int = 2,
             batch_size: int = 32, lr: float = 0.01, lr_decay: str = "cosine", partitioning: str = "iid",
             alpha: float = 0.5, fraction_fit: float = 1.0, fraction_evaluate: float = 1.0, seed: int = 0,
             cpus: Optional[int] = None, plot: bool = True, verbose: bool = False, record_clients: bool = False,
             report: Optional[Callable[[Dict[str, Any]], None]] = None) -> "OrtFedAvg":
    """Run the simulation in this process (the server in a thread, the clients in Ray actors) and return
    the strategy, with its per-round :attr:`~OrtFedAvg.history` (and the clients' results with
    ``record_clients``)."""
    require_flower()
    from flwr.simulation import run_simulation

    from .flower import ClientSettings, FederatedServer, ServerSettings, make_client_app, make_server_app

    artifacts = Path(artifacts)
    _train.find_artifacts(artifacts)  # a wrong folder is reported before Ray starts
    data_path = _train.find_dataset(Path(data) if data else None, artifacts)
    n_train = _train_samples(data_path)
    if n_train is not None and clients > n_train:  # the partitioning would refuse it, in every client
        raise _train.UsageError(
            f"--clients {clients} is more than the {n_train} training samples of dataset {str(data_path)!r}: "
            f"every client needs training data, so use at most {n_train} clients")
    server = FederatedServer(
        artifacts=str(artifacts), data=str(data_path), num_clients=clients, report=report,
        record_clients=record_clients,
        settings=ServerSettings(rounds=rounds, local_epochs=local_epochs, batch_size=batch_size, lr=lr,
                                lr_decay=lr_decay, fraction_fit=fraction_fit, fraction_evaluate=fraction_evaluate,
                                seed=seed, out=str(out) if out else None, plot=plot),
        config={"clients": clients, "partitioning": partitioning, "alpha": alpha, "engine": "flwr simulation (ray)"},
    )
    client_settings = ClientSettings(artifacts=str(artifacts), data=str(data_path), partitioning=partitioning,
                                     alpha=alpha, seed=seed, threads=1)
    cpus = min(cpus or os.cpu_count() or 1, clients)
    backend_config: Any = {
        "client_resources": {"num_cpus": 1, "num_gpus": 0.0},
        "init_args": {"num_cpus": cpus, "num_gpus": 0, "include_dashboard": False,
                      **({} if verbose else {"logging_level": logging.ERROR, "log_to_driver": False})},
    }
    with _quiet(verbose):
        run_simulation(server_app=make_server_app(lambda context: server), client_app=make_client_app(client_settings),
                       num_supernodes=clients, backend_config=backend_config, verbose_logging=verbose)
    if server.strategy is None or len(server.strategy.history) < rounds + 1:
        done = 0 if server.strategy is None else max(len(server.strategy.history) - 1, 0)
        raise RuntimeError(f"the simulation stopped after {done} of {rounds} rounds (run with --verbose for Flower's logs)")
    return server.strategy


def _train_samples(path: Path) -> Optional[int]:
    """The number of training samples (of the first ``train_`` array) in the dataset, read before Ray
    starts; None when the file cannot be read so (the full checks, later, say why)."""
    try:
        with zipfile.ZipFile(path) as archive:
            names = sorted(n for n in archive.namelist() if n.startswith("train_") and n.endswith(".npy"))
            if not names:
                return None
            with archive.open(names[0]) as member:  # the .npy header only, not the array
                version = np.lib.format.read_magic(member)
                header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                          else np.lib.format.read_array_header_2_0)(member)
    except (OSError, ValueError, zipfile.BadZipFile):
        return None
    shape = header[0]
    return int(shape[0]) if shape else None


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    started = time.monotonic()
    try:
        require_flower()
        from .flower import format_round
    except ImportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        from .environment import OrtEnvironment

        env = OrtEnvironment.getEnvironment()
        embedded = " (the embedded digits example)" if args.artifacts == _train.DEFAULT_ARTIFACTS else ""
        part = "IID" if args.partitioning == "iid" else f"non-IID by label, Dirichlet alpha {args.alpha:g}"
        print(f"ort-cffi-federated: ort_cffi {__version__}, ONNX Runtime {env.getVersion()}, Flower {_version('flwr')}, Ray {_version('ray')}")
        print(f"artifacts: {args.artifacts}{embedded}")
        print(f"clients:   {args.clients} ({part}), {args.cpus or min(os.cpu_count() or 1, args.clients)} at a time")
        print(f"rounds:    {args.rounds} x {args.local_epochs} local epochs, batch {args.batch_size}, "
              f"lr {args.lr:g} ({args.lr_decay}), FedAvg, seed {args.seed}")
        print(f"output:    {args.out}", flush=True)
        strategy = simulate(
            artifacts=args.artifacts, data=args.data, out=args.out, clients=args.clients, rounds=args.rounds,
            local_epochs=args.local_epochs, batch_size=args.batch_size, lr=args.lr, lr_decay=args.lr_decay,
            partitioning=args.partitioning, alpha=args.alpha, fraction_fit=args.fraction_fit,
            fraction_evaluate=args.fraction_evaluate, seed=args.seed, cpus=args.cpus, plot=not args.no_plot,
            verbose=args.verbose, report=lambda record: print(format_round(record, args.rounds), flush=True))
    except _train.UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (OrtException, RuntimeError, ValueError) as exc:
        hint = "" if args.verbose else " (--verbose shows Flower's logs and the clients' tracebacks)"
        print(f"error: {exc}{hint}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"\ninterrupted: the last global model is in {args.out / 'global_checkpoint'}", file=sys.stderr)
        return 130
    final = strategy.history[-1]
    inference = strategy.inference or {}
    print(f"global model: val acc {final['val_accuracy']:.4f}, val loss {final['val_loss']:.4f} -> {args.out / 'global_checkpoint'}")
    print(f"inference model: {args.out / 'inference_model.onnx'} (outputs {', '.join(inference.get('outputs', []))})")
    print(f"wrote {', '.join(str(f) for f in strategy.files)} in {time.monotonic() - started:.1f} s")
    if not args.no_plot and not any(f.suffix == ".png" for f in strategy.files):
        print("no plot: matplotlib is not installed (pip install 'ort_cffi[demo]')", file=sys.stderr)
    if inference.get("val_accuracy") is not None:
        print(f"inference model accuracy on validation: {inference['val_accuracy']:.4f}")
    return 0


def _version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "?"


if __name__ == "__main__":
    sys.exit(main())
