"""``ort-cffi-federated``: federated learning of a set of ONNX Runtime training artifacts with Flower,
simulated on Flower's simulation engine: N clients each train their share of the dataset through
ort_cffi, the server aggregates their models with one of Flower's strategies and evaluates each round's
global model through ort_cffi.

The simulation runs the way Flower 1.42 supports: ``flwr run`` against a local SuperLink started in
simulation mode (:mod:`ort_cffi.flower.deploy`), on a free loopback port, in a Flower home folder of its
own; the command shows the server's progress lines from the run's log stream.

With no arguments it runs the embedded default (the digits MLP of ``ort-cffi-train``, 10 IID clients,
20 rounds of FedAvg). Needs ``pip install 'ort_cffi[federated]'`` (Flower with its Ray simulation backend).

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
import shutil
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Sequence

import numpy as np

from . import __version__
from . import train as _train
from ._errors import OrtException

INSTALL_HINT = "pip install 'ort_cffi[federated]'"
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
A killed run continues from its last completed round with --resume.

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
    p.add_argument("--artifacts", type=Path, default=_train.DEFAULT_ARTIFACTS, metavar="DIR",
                   help="training artifacts folder (default: the embedded digits MLP)")
    p.add_argument("--data", type=Path, metavar="FILE.npz",
                   help="dataset, as ort-cffi-train reads it (default: the one .npz in the artifacts folder)")
    p.add_argument("--out", type=Path, default=Path("runs") / "federated", metavar="DIR",
                   help="output folder (default: runs/federated)")
    p.add_argument("--resume", action="store_true",
                   help="continue the run in --out from its last completed round, with its own settings")
    p.add_argument("--clients", type=_train._positive_int, default=10, metavar="N", help="simulated clients (default: 10)")
    p.add_argument("--rounds", type=_train._positive_int, default=20, metavar="R", help="rounds (default: 20)")
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
    strategy = p.add_argument_group("aggregation")
    strategy.add_argument("--strategy", choices=STRATEGY_NAMES, default="fedavg",
                          help="Flower strategy that aggregates the clients' models (default: fedavg; see below)")
    strategy.add_argument("--proximal-mu", type=_non_negative_float, default=0.01, metavar="MU",
                          help="fedprox: pull of the global model on the clients (default: 0.01)")
    strategy.add_argument("--trim-beta", type=_fraction, default=0.2, metavar="BETA",
                          help="trimmedavg: share of values cut at each end (default: 0.2)")
    strategy.add_argument("--krum-f", type=_train._non_negative_int, default=1, metavar="F",
                          help="krum: hostile clients to tolerate; needs 2F+3 clients a round (default: 1)")
    strategy.add_argument("--server-lr", type=_train._positive_float, default=0.01, metavar="ETA",
                          help="fedadam: the server's learning rate (default: 0.01)")
    strategy.add_argument("--dp-clipping", type=_train._positive_float, metavar="NORM",
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
    rounds.add_argument("--min-fit-clients", type=_train._positive_int, metavar="N",
                        help="fewest usable updates a round aggregates; fewer end the run (default: half the clients)")
    rounds.add_argument("--round-timeout", type=_train._positive_float, default=3600.0, metavar="S",
                        help="a client that has not replied after S seconds is left out of the round (default: 3600)")
    p.add_argument("--export-outputs", metavar="NAMES",
                   help="the inference model's outputs, comma-separated (default: the eval model's outputs after the loss)")
    p.add_argument("--save-updates", action="store_true",
                   help="keep every round's accepted client updates in --out/updates (for audits)")
    p.add_argument("--client-app", default=CLIENT_APP, metavar="MODULE:ATTR",
                   help=f"the ClientApp the simulated clients run (default: {CLIENT_APP})")
    p.add_argument("--seed", type=int, default=0, help="partitions and shuffling (default: 0)")
    p.add_argument("--cpus", type=_train._positive_int, metavar="N",
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


ANSI = re.compile(r"\x1b\[[0-9;]*m")


def simulate(out: Any = Path("runs") / "federated", *, cpus: Optional[int] = None, verbose: bool = False,
             report: Optional[Callable[[str], None]] = None, client_app: str = CLIENT_APP,
             env: Optional[Dict[str, str]] = None, **settings: Any) -> Dict[str, Any]:
    """Run a simulated federation and return its history (the ``history.json`` document).

    ``settings`` are :class:`~ort_cffi.flower.ServerSettings` fields (``clients``, ``rounds``,
    ``strategy``, ``partitioning``, ``resume``, ...); ``out`` is where the run's files go. Everything that
    would fail at the end is checked here first, in this process, before Flower starts. The run itself
    goes through ``flwr run`` and a local SuperLink in simulation mode; ``report`` gets the server's
    progress lines (default: none), ``verbose`` prints all of Flower's output. ``client_app`` names the
    ``ClientApp`` the clients run; ``env`` adds to the Flower processes' environment.

    Raises ``UsageError`` (bad settings, artifacts or data), ``StrategyError``, or ``FederatedError`` (the
    run failed; the history in ``out`` says where, and ``--resume`` continues it)."""
    require_flower()
    from .flower import FederatedError, LOG_MARK, ServerSettings
    from .flower import deploy

    out_dir = Path(out).resolve()
    resolved = _absolute_paths(dict(settings))
    server = ServerSettings(out=str(out_dir), **resolved)
    preflight(server)
    run_config = dict(server.to_run_config())
    run_config.pop("server-threads", None)
    home = Path(tempfile.mkdtemp(prefix="ort-cffi-federated-"))
    logs = out_dir / "logs"
    started = time.time()

    def on_line(line: str) -> None:
        text = ANSI.sub("", line)
        if LOG_MARK in text:
            if report is not None:
                report(text.split(LOG_MARK, 1)[1])
        elif verbose:
            print(text, flush=True)

    superlink = None
    try:
        superlink = deploy.SuperLink(home=home / "superlink", log=logs / "superlink.log", simulation=True, env=env)
        superlink.wait_ready()
        deploy.write_connection(home, "local", superlink.address)
        app = deploy.write_app(home / "app", run_config=run_config, clientapp=client_app)
        cpu_count = min(cpus or os.cpu_count() or 1, server.clients)
        federation = {"num-supernodes": server.clients, "client-resources-num-cpus": 1, "client-resources-num-gpus": 0,
                      "init-args-num-cpus": cpu_count, "init-args-num-gpus": 0,
                      "init-args-logging-level": "INFO" if verbose else "ERROR",
                      "init-args-log-to-driver": verbose, "verbose": verbose}
        code = deploy.run_app(app, "local", home=home, federation_config=federation, on_line=on_line, env=env,
                              log=logs / "run.log")
    finally:
        if superlink is not None:
            superlink.stop()
        shutil.rmtree(home, ignore_errors=True)
    doc = _read(out_dir / "history.json")
    if doc is not None and doc.get("status") == "completed" and _stamp(doc) >= started:
        return doc
    if doc is not None and doc.get("status") == "failed" and doc.get("error") and _stamp(doc) >= started:
        raise FederatedError(str(doc["error"]))
    tail = "\n".join((logs / "run.log").read_text(errors="replace").splitlines()[-15:]) if (logs / "run.log").is_file() else ""
    raise FederatedError(f"the simulation ended before its last round (flwr run exited {code}); Flower's log is in "
                         f"{logs / 'run.log'}:\n{ANSI.sub('', tail)}")


def _stamp(doc: Dict[str, Any]) -> float:
    """When a history document was last written (its file's time is what matters: written this run?)."""
    return float(doc.get("_mtime", 0.0))


def _read(path: Path) -> Optional[Dict[str, Any]]:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if isinstance(doc, dict):
        doc["_mtime"] = path.stat().st_mtime
        return doc
    return None


def _absolute_paths(settings: Dict[str, Any]) -> Dict[str, Any]:
    """The Flower processes run in other folders: artifacts and data as absolute paths."""
    for key in ("artifacts", "data"):
        if settings.get(key) is not None:
            settings[key] = str(Path(settings[key]).resolve())
    return settings


def preflight(settings: Any) -> None:
    """Everything that would stop the run later, checked now in this process (``UsageError``,
    ``StrategyError``, ``FederatedError``): settings, artifacts, dataset, enough training samples for the
    clients, the batch size a model may fix, the inference export, and the output folder's run."""
    from .flower import GlobalModel
    from .flower.store import RunStore

    settings.check()
    artifacts = Path(settings.artifacts)
    _train.find_artifacts(artifacts)
    data_path = _train.find_dataset(Path(settings.data) if settings.data else None, artifacts)
    n_train = _train_samples(data_path)
    if n_train is not None and settings.clients > n_train:
        raise _train.UsageError(
            f"--clients {settings.clients} is more than the {n_train} training samples of dataset {str(data_path)!r}: "
            f"every client needs training data, so use at most {n_train} clients")
    store = RunStore(Path(settings.out))
    if settings.resume:
        point = store.resume_point(settings.history_config())
        checkpoint = store.checkpoint if point is not None else None
    else:
        store.check_fresh()
        checkpoint = None
    exports = [n.strip() for n in settings.export_outputs.split(",") if n.strip()] if settings.export_outputs else None
    with GlobalModel(artifacts, data_path, checkpoint=checkpoint, export_outputs=exports) as model:
        if model.fixed_batch is not None and settings.batch_size != model.fixed_batch:
            raise _train.UsageError(f"the model's inputs fix the batch size at {model.fixed_batch}: "
                                    f"pass --batch-size {model.fixed_batch}")
        model.check_export(Path(settings.out))


def _train_samples(path: Path) -> Optional[int]:
    """The number of training samples (of the first ``train_`` array) in the dataset, read from the .npy
    header only; None when the file cannot be read so (the full checks, later, say why)."""
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


def settings_from_args(args: argparse.Namespace) -> Dict[str, Any]:
    """The ServerSettings fields the command line sets."""
    values = {name: getattr(args, name) for name in SETTING_ARGS}
    values.update(artifacts=str(args.artifacts), data=str(args.data) if args.data else None,
                  plot=not args.no_plot, resume=args.resume)
    return values


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``ort-cffi-federated``: 0 when the run completed, 1 when it failed, 2 for a usage error, 130 on Ctrl-C."""
    args = parse_args(argv)
    started = time.monotonic()
    try:
        require_flower()
        from .flower import FederatedError, StrategySettings, StrategyError
    except ImportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        from .environment import OrtEnvironment

        env = OrtEnvironment.getEnvironment()
        embedded = " (the embedded digits example)" if Path(args.artifacts) == _train.DEFAULT_ARTIFACTS else ""
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
    except _train.UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except StrategyError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (FederatedError, OrtException, RuntimeError, ValueError) as exc:
        message = re.sub(r"^(FederatedError|UsageError): ", "", str(exc))
        hint = "" if args.verbose else f"\n(Flower's log: {args.out / 'logs' / 'run.log'}; --verbose shows it as it runs)"
        print(f"error: {message}{hint}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"\ninterrupted: the last global model is in {args.out / 'global_checkpoint'}; "
              "continue with --resume", file=sys.stderr)
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
