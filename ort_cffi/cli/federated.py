"""``ort-cffi-federated``: federated learning of a set of ONNX Runtime training artifacts with Flower,
simulated on Flower's simulation engine: N clients each train their share of the dataset through
ort_cffi, the server aggregates their models with one of Flower's strategies and evaluates each round's
global model through ort_cffi.

The simulation runs the way Flower 1.42 supports: ``flwr run`` against a local SuperLink started in
simulation mode (`ort_cffi.flower.deploy`), on a free loopback port, in a Flower home folder of its
own; the command shows the server's progress lines from the run's log stream.

With no arguments it runs the embedded default (the digits MLP of ``ort-cffi-train``, 10 IID clients,
20 rounds of FedAvg). Needs Flower with its Ray simulation backend (ort_cffi's ``[federated]`` extra: ``pip install
".[federated]"`` in a checkout).

Writes to ``--out``: ``global_checkpoint`` and ``history.json`` (after every round: ``--resume`` continues
a killed run), ``inference_model.onnx`` and ``federated.png`` (after the last round), Flower's logs in
``logs/``.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, Dict, Optional, Sequence

from ort_cffi import OrtException, __version__
from ort_cffi.cli.args import non_negative_int, positive_float, positive_int
from ort_cffi.trainer.data import DEFAULT_ARTIFACTS
from ort_cffi.trainer.errors import SetupError

INSTALL_HINT = "pip install 'flwr[simulation]>=1.42' (ort_cffi's [federated] extra)"
CLIENT_APP = "ort_cffi.flower:clientapp"
STRATEGY_NAMES = ("fedavg", "fedprox", "fedmedian", "trimmedavg", "krum", "fedadam")  # ort_cffi.flower.STRATEGIES

DESCRIPTION = """\
Federated learning with Flower over ort_cffi, simulated with Flower's simulation engine: N clients
train their share of the dataset through ort_cffi, the server aggregates their models with one of
Flower's strategies for R rounds and evaluates each round's global model on the validation split.
With no arguments: the embedded digits example, 10 clients with IID shares, 20 rounds of FedAvg.
"""

EPILOG = """\
strategies (--strategy), each Flower's own implementation:
  fedavg      weighted mean of the clients' models; honest clients, the default
  fedprox     FedAvg, clients pulled toward the global model (--proximal-mu); non-IID shares
  fedmedian   coordinate-wise median; a minority of broken or hostile clients
  trimmedavg  mean without the --trim-beta highest and lowest values; a few outliers
  krum        the one model closest to the others (--krum-f tolerated); few hostile clients
  fedadam     Adam on the server over the mean update (--server-lr); slow or noisy progress
  --dp-clipping C --dp-noise Z wraps any of them in Flower's fixed-clipping differential privacy.

writes to --out after every round: global_checkpoint (the global model), history.json (a record per
round, who was left out and why); after the last: inference_model.onnx, federated.png (plot).
A killed run continues from its last completed round with --resume; a run in --out, finished or
not, is only replaced with --overwrite.

examples:
  ort-cffi-federated                                     # 10 IID clients, 20 rounds of FedAvg
  ort-cffi-federated --partitioning dirichlet --alpha 0.3 --strategy fedprox
  ort-cffi-federated --strategy fedmedian --min-fit-clients 6
  ort-cffi-federated --out runs/federated --resume       # continue a killed run
  ort-cffi-federated --artifacts my_artifacts --data my_data.npz --clients 4
"""

#: argparse destinations that are ServerSettings fields of the same name (a resumed run's defaults).
SETTING_ARGS = ("artifacts", "data", "clients", "rounds", "local_epochs", "batch_size", "lr", "lr_decay",
                "partitioning", "alpha", "fraction_fit", "fraction_evaluate", "min_fit_clients", "round_timeout",
                "seed", "strategy", "proximal_mu", "trim_beta", "krum_f", "server_lr", "dp_clipping", "dp_noise",
                "dp_side", "export_outputs", "save_updates")


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``ort-cffi-federated``."""
    p = argparse.ArgumentParser(prog="ort-cffi-federated", description=DESCRIPTION, epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--artifacts", type=Path, default=DEFAULT_ARTIFACTS, metavar="DIR",
                   help="training artifacts folder (default: the embedded digits MLP)")
    p.add_argument("--data", type=Path, metavar="FILE.npz",
                   help="dataset, as ort-cffi-train reads it (default: the one .npz in the artifacts folder)")
    p.add_argument("--out", type=Path, default=Path("runs") / "federated", metavar="DIR",
                   help="output folder (default: runs/federated)")
    again = p.add_mutually_exclusive_group()
    again.add_argument("--resume", action="store_true",
                       help="continue the run in --out from its last completed round, with its own settings")
    again.add_argument("--overwrite", action="store_true",
                       help="start a new run in --out even though it holds a run, replacing it (a run in --out is "
                            "never replaced without this)")
    p.add_argument("--clients", type=positive_int, default=10, metavar="N", help="simulated clients (default: 10)")
    p.add_argument("--rounds", type=positive_int, default=20, metavar="R", help="rounds (default: 20)")
    p.add_argument("--local-epochs", type=positive_int, default=2, metavar="E",
                   help="epochs each client trains per round (default: 2)")
    p.add_argument("--batch-size", type=positive_int, default=32, metavar="B", help="default: 32")
    p.add_argument("--lr", type=positive_float, default=0.01,
                   help="clients' learning rate in round 1 (default: 0.01)")
    p.add_argument("--lr-decay", choices=("cosine", "constant"), default="cosine",
                   help="cosine: the rate sent to the clients decays to lr/10 by the last round (default)")
    p.add_argument("--partitioning", choices=("iid", "dirichlet"), default="iid",
                   help="iid: random equal shares; dirichlet: non-IID by label (default: iid)")
    p.add_argument("--alpha", type=positive_float, default=0.5,
                   help="Dirichlet parameter for --partitioning dirichlet: smaller is more skewed (default: 0.5)")
    strategy = p.add_argument_group("aggregation")
    strategy.add_argument("--strategy", choices=STRATEGY_NAMES, default="fedavg",
                          help="Flower strategy that aggregates the clients' models (default: fedavg; see below)")
    strategy.add_argument("--proximal-mu", type=_non_negative_float, default=0.01, metavar="MU",
                          help="fedprox: pull of the global model on the clients (default: 0.01)")
    strategy.add_argument("--trim-beta", type=_fraction, default=0.2, metavar="BETA",
                          help="trimmedavg: share of values cut at each end (default: 0.2)")
    strategy.add_argument("--krum-f", type=non_negative_int, default=1, metavar="F",
                          help="krum: hostile clients to tolerate; needs 2F+3 clients a round (default: 1)")
    strategy.add_argument("--server-lr", type=positive_float, default=0.1, metavar="ETA",
                          help="fedadam: the server's learning rate (default: 0.1, as Flower's)")
    strategy.add_argument("--dp-clipping", type=positive_float, metavar="NORM",
                          help="differential privacy: clip each client's update to this L2 norm and add noise")
    strategy.add_argument("--dp-noise", type=_non_negative_float, default=1.0, metavar="Z",
                          help="differential privacy: noise multiplier (default: 1.0)")
    strategy.add_argument("--dp-side", choices=("server", "client"), default="server",
                          help="differential privacy: where updates are clipped (default: server)")
    rounds = p.add_argument_group("clients lost, late or broken")
    rounds.add_argument("--fraction-fit", type=_fraction, default=1.0,
                        help="share of clients that train each round (default: 1)")
    rounds.add_argument("--fraction-evaluate", type=_fraction, default=1.0,
                        help="share of clients that evaluate the global model on their data each round (default: 1; 0: none)")
    rounds.add_argument("--min-fit-clients", type=positive_int, metavar="N",
                        help="fewest usable updates a round aggregates; fewer end the run (default: half the clients, for krum at least 2F+3)")
    rounds.add_argument("--round-timeout", type=positive_float, default=3600.0, metavar="S",
                        help="a client that has not replied after S seconds is left out of the round (default: 3600)")
    p.add_argument("--export-outputs", metavar="NAMES",
                   help="the inference model's outputs, comma-separated (default: the eval model's outputs after the loss)")
    p.add_argument("--save-updates", action="store_true",
                   help="keep every round's accepted client updates in --out/updates (for audits)")
    p.add_argument("--client-app", default=CLIENT_APP, metavar="MODULE:ATTR",
                   help=f"the ClientApp the simulated clients run (default: {CLIENT_APP})")
    p.add_argument("--seed", type=non_negative_int, default=0, help="partitions and shuffling (default: 0)")
    p.add_argument("--cpus", type=positive_int, metavar="N",
                   help="CPUs the simulation may use, one per client at a time (default: all, at most --clients)")
    p.add_argument("--no-plot", action="store_true", help="do not write federated.png")
    p.add_argument("--verbose", action="store_true", help="show Flower's and Ray's logs")
    p.add_argument("--version", action="version", version=f"%(prog)s (ort_cffi {__version__})")
    return p


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    """The arguments; with ``--resume``, the run's saved settings are the defaults of what is not given."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.resume:
        saved = _saved_config(args.out)
        parser.set_defaults(**{k: v for k, v in saved.items() if k in SETTING_ARGS})
        args = parser.parse_args(argv)
    return args


def _saved_config(out: Path) -> Dict[str, Any]:
    try:
        doc = json.loads((out / "history.json").read_text())
        config = doc.get("config", {}) if isinstance(doc, dict) else {}
        return config if isinstance(config, dict) else {}
    except (OSError, ValueError):
        return {}


def _fraction(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, got {text}")
    return value


def _non_negative_float(text: str) -> float:
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def require_flower() -> None:
    """Flower and its Ray backend, or an ImportError that names the extra. Sets, unless already set,
    Flower's telemetry off (read when flwr is first imported: nothing is sent from here)."""
    os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
    os.environ.setdefault("FLWR_DISABLE_UPDATE_CHECK", "1")
    missing = [name for name in ("flwr", "ray") if importlib.util.find_spec(name) is None]
    if missing:
        raise ImportError(f"{' and '.join(missing)} not installed: the federated simulation needs Flower with "
                          f"its Ray backend: {INSTALL_HINT}", name=missing[0])


def simulate(out: Any = Path("runs") / "federated", **options: Any) -> Dict[str, Any]:
    """Run a simulated federation and return its history (the ``history.json`` document): see
    `ort_cffi.flower.simulation.simulate` (``clients``, ``rounds``, ``strategy``, ``resume``, ...,
    ``report`` for the progress lines). Needs the ``federated`` extra (ImportError naming it)."""
    require_flower()
    from ort_cffi.flower.simulation import simulate as run

    return run(out, **options)


def settings_from_args(args: argparse.Namespace) -> Dict[str, Any]:
    """The ServerSettings fields the command line sets."""
    values = {name: getattr(args, name) for name in SETTING_ARGS}
    values.update(artifacts=str(args.artifacts), data=str(args.data) if args.data else None,
                  plot=not args.no_plot, resume=args.resume, overwrite=args.overwrite)
    return values


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``ort-cffi-federated``: 0 when the run completed, 1 when it failed, 2 for a usage error, 130 on Ctrl-C."""
    args = parse_args(argv)
    previous: Dict[signal.Signals, Any] = {}
    if threading.current_thread() is threading.main_thread():
        _STOPPING.clear()
        for signum in (signal.SIGINT, signal.SIGTERM):  # SIGTERM stops the run as Ctrl-C does
            previous[signum] = signal.signal(signum, _interrupt)
    try:
        return _run(args)
    except KeyboardInterrupt:  # before the run's own handling began (Flower's import)
        print("\ninterrupted before the first round: nothing to continue", file=sys.stderr)
        return 130
    finally:  # a caller in the same process (a test, a notebook) gets its own handlers back
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        _STOPPING.clear()


def _run(args: argparse.Namespace) -> int:
    started, started_at = time.monotonic(), time.time()
    try:
        require_flower()
        from ort_cffi.flower import FederatedError, StrategyError, StrategySettings
    except ImportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        from ort_cffi import OrtEnvironment

        env = OrtEnvironment.getEnvironment()
        embedded = " (the embedded digits example)" if Path(args.artifacts) == DEFAULT_ARTIFACTS else ""
        part = "IID" if args.partitioning == "iid" else f"non-IID by label, Dirichlet alpha {args.alpha:g}"
        label = StrategySettings(args.strategy, args.proximal_mu, args.trim_beta, args.krum_f, args.server_lr,
                                 args.dp_clipping, args.dp_noise, args.dp_side).describe()
        cpus = args.cpus or min(os.cpu_count() or 1, args.clients)
        print(f"ort-cffi-federated: ort_cffi {__version__}, ONNX Runtime {env.getVersion()}, Flower {_version('flwr')}, "
              f"Ray {_version('ray')}")
        print(f"artifacts: {args.artifacts}{embedded}")
        print(f"clients:   {args.clients} ({part}), {cpus} at a time")
        print(f"rounds:    {args.rounds} x {args.local_epochs} local epochs, batch {args.batch_size}, "
              f"lr {args.lr:g} ({args.lr_decay}), {label}, seed {args.seed}")
        print(f"output:    {args.out}{' (resuming)' if args.resume else ''}", flush=True)
        history = simulate(args.out, cpus=args.cpus, verbose=args.verbose, client_app=args.client_app,
                           report=lambda line: print(line, flush=True), **settings_from_args(args))
    except SetupError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except StrategyError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (FederatedError, OrtException, RuntimeError, ValueError) as exc:
        message = re.sub(r"^(FederatedError|SetupError): ", "", str(exc))
        log = args.out / "logs" / "run.log"
        flower_ran = log.is_file() and log.stat().st_mtime >= started_at  # not for what failed before Flower started
        hint = f"\n(Flower's log: {log}; --verbose shows it as it runs)" if flower_ran and not args.verbose else ""
        print(f"error: {message}{hint}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        doc = _saved_history(args.out)
        if doc.get("status") == "interrupted" and doc.get("resume"):
            done = (doc.get("interrupted") or {}).get("after_round")
            kept = f" (round {done})" if done is not None else ""
            print(f"\ninterrupted: the last global model{kept} is in {args.out / 'global_checkpoint'}; "
                  f"continue with: {doc['resume']}", file=sys.stderr)
        else:
            print("\ninterrupted before the first round: nothing to continue", file=sys.stderr)
        return 130
    final = history["rounds"][-1]
    inference = history.get("inference") or {}
    left_out = sum(len(r.get("failed", [])) for r in history["rounds"])
    accuracy = f"val acc {final['val_accuracy']:.4f}, " if final.get("val_accuracy") is not None else ""
    print(f"global model: {accuracy}val loss {final['val_loss']:.4f} -> {args.out / 'global_checkpoint'}")
    if left_out:
        print(f"clients left out: {left_out} time(s) in {len(history['rounds']) - 1} rounds (reasons in history.json)")
    print(f"inference model: {args.out / 'inference_model.onnx'} (outputs {', '.join(inference.get('outputs', []))})")
    files = ["global_checkpoint", "inference_model.onnx", "history.json"]
    if (args.out / "federated.png").is_file() and not args.no_plot:
        files.append("federated.png")
    print(f"wrote {', '.join(str(args.out / f) for f in files)} in {time.monotonic() - started:.1f} s")
    if not args.no_plot and "federated.png" not in files:
        print("no plot: matplotlib is not installed (pip install matplotlib)", file=sys.stderr)
    if inference.get("val_accuracy") is not None:
        print(f"inference model accuracy on validation: {inference['val_accuracy']:.4f}")
    return 0


_STOPPING = threading.Event()


def _interrupt(signum: int, frame: Any) -> None:
    """SIGINT or SIGTERM: a KeyboardInterrupt, once. The run's processes are then stopped and its history
    marked (a second or two); a second Ctrl-C meanwhile would break that off, so it is ignored."""
    if _STOPPING.is_set():
        return
    _STOPPING.set()
    raise KeyboardInterrupt


def _saved_history(out: Path) -> Dict[str, Any]:
    try:
        doc = json.loads((Path(out) / "history.json").read_text())
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def _version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "?"


if __name__ == "__main__":
    sys.exit(main())
