"""The server's files in its output folder, written after every round so that a server killed at any
moment can be resumed from its last completed round:

- ``global_checkpoint``: the global model with a ``round`` property (the commit point of a round);
- ``history.json``: the run's settings, the sha256 of its dataset and artifacts (`run_files`), its status
  and one record per round (who was left out and why);
- ``server_state/round-N.npz``: a stateful strategy's state (FedAdam's moments) after round N.

Each file is written to a temporary file and renamed over the old one. A round is committed in the order
state, history, checkpoint: a crash between two of them leaves a checkpoint of the previous round beside
newer state and history, which a resume cuts back to the checkpoint's round. Also here: the progress line
of a round and the plot of the history.
"""
from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from ort_cffi import OrtCheckpointState, OrtException, __version__
from ort_cffi._facade.files import atomic_write, file_sha256
from ort_cffi.flower.model import FederatedError, GlobalModel
from ort_cffi.trainer.data import find_artifacts, find_dataset
from ort_cffi.trainer.output import save_figure, write_json

CHECKPOINT, HISTORY, STATE_DIR, PLOT, INFERENCE = (
    "global_checkpoint", "history.json", "server_state", "federated.png", "inference_model.onnx")

#: Settings a resumed run must share with the run it continues (they shape its schedule and its data).
RESUME_KEYS = ("artifacts", "data", "clients", "rounds", "local_epochs", "batch_size", "lr", "lr_decay", "seed",
               "partitioning", "alpha", "strategy", "proximal_mu", "trim_beta", "krum_f", "server_lr",
               "dp_clipping", "dp_noise", "dp_side", "fraction_fit")

#: The run's files whose content a resume compares (`run_files`), and how a refusal names them.
FILE_ROLES = {"data": "the dataset", "checkpoint": "the artifacts' checkpoint", "train": "the training model",
              "eval": "the eval model", "optimizer": "the optimizer model"}


def run_files(artifacts: Any, data: Any = None) -> Dict[str, str]:
    """The sha256 of a run's dataset (``data``, default: the one .npz in ``artifacts``) and of its four
    artifact files, by role (`FILE_ROLES`): what ``history.json`` records, so that a resume can refuse
    files changed in place. Raises ``SetupError`` for a file that is missing."""
    folder = Path(artifacts)
    paths = find_artifacts(folder)
    dataset = find_dataset(Path(data) if data else None, folder)
    return {role: file_sha256(path) for role, path in {"data": dataset, **paths}.items()}


class RunStore:
    """The run files of one output folder (see the module's description)."""

    def __init__(self, out: Path) -> None:
        self.out = Path(out)
        self.checkpoint = self.out / CHECKPOINT
        self.history_path = self.out / HISTORY
        self.state_dir = self.out / STATE_DIR

    # -- reading --

    def read_history(self) -> Optional[Dict[str, Any]]:
        """The saved ``history.json``, or None when there is none (or it cannot be read)."""
        try:
            doc = json.loads(self.history_path.read_text())
        except (OSError, ValueError):
            return None
        return doc if isinstance(doc, dict) else None

    def checkpoint_round(self) -> Optional[int]:
        """The round of the saved global checkpoint, or None when there is none."""
        if not self.checkpoint.is_file():
            return None
        try:
            with OrtCheckpointState.loadCheckpoint(self.checkpoint) as state:
                return state.getIntProperty("round")
        except OrtException as exc:
            raise FederatedError(f"{self.checkpoint} is not a global checkpoint of a federated run: {exc}") from None

    def check_fresh(self, overwrite: bool = False) -> None:
        """Refuse to start a new run over a run in this folder, so nothing is lost: one that stopped before
        its end (the refusal suggests resume) or one that completed (it suggests overwrite). A folder whose
        run never completed a round holds nothing to lose. ``overwrite`` lets the new run replace either."""
        doc = self.read_history()
        done = self.checkpoint_round()
        if overwrite or doc is None or done is None:
            return
        total = doc.get("config", {}).get("rounds", "?")
        if doc.get("status") == "completed":
            raise FederatedError(
                f"{self.out} holds a completed run ({total} rounds): a run is never overwritten unless asked. "
                "To run again in this folder, replacing it, pass --overwrite (run-config overwrite=true); or "
                "write the new run to another output folder")
        if done < 1:
            return
        raise FederatedError(
            f"{self.out} holds a run that stopped after round {done} of {total}: continue it with --resume "
            "(run-config resume=true), or write to another output folder (--overwrite would discard it)")

    def resume_point(self, config: Mapping[str, Any], files: Optional[Mapping[str, str]] = None
                     ) -> Optional[Tuple[int, List[Dict[str, Any]], Dict[str, np.ndarray], Dict[str, Any]]]:
        """What a resumed server continues from: the checkpoint's round, the history's records up to it,
        the strategy's state after it, and the saved history document; None when there is nothing to
        resume (no checkpoint yet). Raises `FederatedError` when the saved run's settings differ
        from ``config`` in a key of `RESUME_KEYS`, when the content of its dataset or artifacts differs
        from ``files`` (`run_files`; a history written before ort_cffi recorded them has only the paths
        compared), or when its files are inconsistent."""
        done = self.checkpoint_round()
        doc = self.read_history()
        if done is None or doc is None:
            return None
        saved = doc.get("config", {})
        changed = [f"{key} {saved.get(key)!r} -> {config.get(key)!r}" for key in RESUME_KEYS
                   if key in saved and key in config and saved.get(key) != config.get(key)]
        recorded = doc.get("sha256")
        recorded = recorded if isinstance(recorded, dict) else {}
        altered = [f"{FILE_ROLES.get(role, role)}: sha256 {recorded[role][:12]}... -> {digest[:12]}..."
                   for role, digest in (files or {}).items() if role in recorded and recorded[role] != digest]
        if changed or altered:
            reasons = ([f"with other settings ({'; '.join(changed)})"] if changed else []) + (
                [f"with files changed since it started ({'; '.join(altered)})"] if altered else [])
            raise FederatedError(
                f"cannot resume the run in {self.out} {' and '.join(reasons)}: resume with the run's own settings "
                "and files, or write a new run to another output folder")
        records = [r for r in doc.get("rounds", []) if isinstance(r, dict) and r.get("round", math.inf) <= done]
        if [r["round"] for r in records] != list(range(done + 1)):
            raise FederatedError(f"{self.history_path} lacks records of rounds 0..{done}, which {self.checkpoint} "
                                 "has completed: the run cannot be resumed")
        state: Dict[str, np.ndarray] = {}
        state_file = self.state_dir / f"round-{done}.npz"
        if state_file.is_file():
            with np.load(state_file, allow_pickle=False) as npz:
                state = {key: npz[key] for key in npz.files}
        elif doc.get("stateful"):
            raise FederatedError(f"{state_file} (the strategy's state after round {done}) is missing: "
                                 "the run cannot be resumed exactly")
        return done, records, state, doc

    # -- writing --

    def clear(self) -> None:
        """A fresh run in a used folder: forget the previous run's strategy state, saved updates, inference
        model and plot (its checkpoint and history are replaced by the new run's first commit)."""
        for folder in (self.state_dir, self.out / "updates"):
            for old in folder.glob("round-*.npz") if folder.is_dir() else []:
                old.unlink(missing_ok=True)
        for name in (INFERENCE, PLOT):
            (self.out / name).unlink(missing_ok=True)

    def mark_interrupted(self, resume: str) -> Optional[Dict[str, Any]]:
        """Record in the history that the run was stopped from outside (Ctrl-C, SIGTERM) after its
        last committed round, and the command that continues it: status ``interrupted``, ``resume``,
        ``interrupted`` (the checkpoint's round, the time). Only once no process of the run is left to
        write. Returns the document (None when there is no history)."""
        doc = self.read_history()
        if doc is None:
            return None
        try:
            done = self.checkpoint_round()
        except FederatedError:
            done = None
        doc.update(status="interrupted", error=None, resume=resume,
                   interrupted={"after_round": done, "at": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
        self.write_history(doc)
        return doc

    def write_history(self, doc: Mapping[str, Any]) -> None:
        """``history.json``, crash-safe."""
        self.out.mkdir(parents=True, exist_ok=True)
        write_json(self.history_path, _jsonable(doc), "history")

    def commit(self, model: GlobalModel, server_round: int, doc: Mapping[str, Any], state: Mapping[str, np.ndarray]) -> None:
        """Round ``server_round`` done: the strategy state, the history, then the checkpoint (the commit
        point), then older state files removed."""
        self.out.mkdir(parents=True, exist_ok=True)
        if state:
            self.state_dir.mkdir(exist_ok=True)
            target = self.state_dir / f"round-{server_round}.npz"

            def write(tmp: str) -> None:
                with open(tmp, "wb") as file:
                    save_arrays(file, **{key: np.asarray(value) for key, value in state.items()})

            atomic_write(str(target), write, "strategy state")
        self.write_history(doc)
        model.save(self.checkpoint, server_round)
        if self.state_dir.is_dir():
            for old in self.state_dir.glob("round-*.npz"):
                if old.name != f"round-{server_round}.npz":
                    old.unlink(missing_ok=True)


def new_history(config: Mapping[str, Any], *, layout: Mapping[str, Any], stateful: bool,
                files: Optional[Mapping[str, str]] = None) -> Dict[str, Any]:
    """A fresh history document: settings, the sha256 of the run's ``files`` (`run_files`), the model's
    layout, status ``running``, no rounds yet."""
    return {"ort_cffi": __version__, "status": "running", "error": None, "config": dict(config),
            "sha256": dict(files or {}), "layout": dict(layout), "stateful": stateful, "resumed": [], "rounds": [],
            "inference": None, "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


def _jsonable(value: Any) -> Any:
    """JSON-safe copy: numpy scalars as Python numbers, non-finite floats as None."""
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (np.floating, float)):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, np.integer):
        return int(value)
    return value


# --- progress line and plot ----------------------------------------------------------------------

def format_round(record: Mapping[str, Any], rounds: int) -> str:
    """One progress line: ``round  3/10  train loss 0.2345  val loss 0.1987  val acc 0.9472  lr 9.76e-03``,
    then the seconds since the run started and, when clients were left out, how many."""
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
    if record.get("failed"):
        parts.append(f"({len(record['failed'])} client(s) left out)")
    return "  ".join(parts)


def plot_history(path: Path, history: Sequence[Mapping[str, Any]], title: str) -> bool:
    """Accuracy and loss per round (a PNG, crash-safe); False when matplotlib is missing."""
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
    if acc_ax.get_legend_handles_labels()[0]:
        acc_ax.legend(loc="lower right", fontsize="small")
    acc_ax.set_title(title)
    loss_ax.plot(rounds, [r["val_loss"] for r in history], "o-", color="tab:green", markersize=3, label="validation loss")
    with_loss = [r for r in history if r.get("train_loss") is not None]
    loss_ax.plot([r["round"] for r in with_loss], [r["train_loss"] for r in with_loss], "^-", color="tab:blue",
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
    save_figure(fig, path, "plot")
    return True


def save_arrays(file: Any, **arrays: np.ndarray) -> None:
    """``np.savez`` of named arrays (numpy's stubs mistake a ``**`` mapping for its ``allow_pickle``)."""
    save: Any = np.savez
    save(file, **arrays)
