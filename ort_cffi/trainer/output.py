"""The files ``ort-cffi-train`` writes besides checkpoints: ``metrics.json`` (crash-safe) and the plot
``training.png``, and the folders a run made, to remove again when its pre-flight fails.
``ort_cffi.flower`` uses ``write_json``, ``save_figure`` and ``MadeFolders`` too."""
from __future__ import annotations

import json
import os
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, List, Optional, Tuple

from ort_cffi import OrtException
from ort_cffi._facade.files import atomic_write
from ort_cffi.trainer.errors import OutputError


class MadeFolders:
    """The folders that making ``out`` will create (``out`` and the parents it lacks), noted before it is
    made, so that a failed pre-flight can leave the file system as it found it: ``remove()`` takes away
    what was made and never a folder that was there before."""

    def __init__(self, out: Path) -> None:
        self.made = [folder for folder in (out, *out.parents) if not os.path.lexists(folder)]  # deepest first

    def remove(self, with_contents: bool) -> None:
        """Remove the made folders, deepest first: ``out`` with what it holds when ``with_contents`` (all of
        it is the run's), else only while empty; each parent only while empty."""
        if self.made and with_contents:
            shutil.rmtree(self.made[0], ignore_errors=True)
        for folder in self.made[1 if with_contents else 0:] if self.made else ():
            try:
                folder.rmdir()
            except OSError:
                break


@contextmanager
def writing(path: Path) -> Iterator[None]:
    """Turn a failure to write ``path`` (OSError from Python, OrtException from the runtime's own writes)
    into an OutputError naming it, so that the job can say what was kept instead of a traceback."""
    try:
        yield
    except OSError as error:
        raise OutputError(path, error.strerror or str(error)) from error
    except OrtException as error:
        raise OutputError(path, str(error)) from error


def write_json(path: Path, data: Any, what: str = "JSON file") -> None:
    """Crash-safe like the checkpoints: a temporary file of its own beside ``path``, fsynced, then renamed
    over the old one (a crash leaves the old file or the new one, and concurrent runs never share it)."""
    def write(tmp: str) -> None:
        with open(tmp, "w") as file:
            json.dump(data, file, indent=1)
            file.write("\n")

    atomic_write(str(path), write, what)


def load_history(out: Path, epoch: int, step: int) -> Tuple[List[dict], List[dict], Optional[dict]]:
    """The step and epoch records of the run being resumed, cut back to the checkpoint's epoch and step
    (records a crashed run wrote past its last checkpoint would be replaced anyway), and its validation
    before training (None if unknown)."""
    try:
        metrics = json.loads((out / "metrics.json").read_text())
        steps = [s for s in metrics["steps"] if s["step"] <= step]
        epochs = [e for e in metrics["epochs"] if e["epoch"] <= epoch]
        before = metrics.get("before")
        return steps, epochs, before if isinstance(before, dict) else None
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return [], [], None


def plot(path: Path, steps: List[dict], epochs: List[dict], title: str) -> None:
    """Train loss per step, validation loss (and accuracy) per epoch, learning rate per step.
    ``Figure`` without pyplot: no GUI backend and no global state, even when called in-process."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 6), constrained_layout=True)
    loss_ax, lr_ax = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": (2, 1)})
    x = [s["step"] for s in steps]
    loss_ax.plot(x, [s["loss"] for s in steps], color="tab:blue", alpha=0.35, linewidth=0.8, label="train loss (step)")
    ends = [e["step"] for e in epochs]
    loss_ax.plot(ends, [e["train_loss"] for e in epochs], "o-", color="tab:blue", markersize=3, label="train loss (epoch)")
    loss_ax.plot(ends, [e["val_loss"] for e in epochs], "s-", color="tab:orange", markersize=3, label="validation loss")
    loss_ax.set_yscale("log")
    loss_ax.set_ylabel("loss")
    loss_ax.grid(alpha=0.3)
    handles, labels = loss_ax.get_legend_handles_labels()
    if epochs and epochs[0].get("val_accuracy") is not None:
        acc_ax = loss_ax.twinx()
        (line,) = acc_ax.plot(ends, [e["val_accuracy"] for e in epochs], "^-", color="tab:green", markersize=3)
        acc_ax.set_ylabel("validation accuracy")
        handles.append(line)
        labels.append("validation accuracy")
    loss_ax.legend(handles, labels, loc="lower left", fontsize="small")
    loss_ax.set_title(title)
    lr_ax.plot(x, [s["lr"] for s in steps], color="tab:red")
    lr_ax.set_xlabel("optimizer step")
    lr_ax.set_ylabel("learning rate")
    lr_ax.grid(alpha=0.3)
    save_figure(fig, path, "plot")


def save_figure(fig: Any, path: Path, what: str) -> None:
    """``fig.savefig`` made crash-safe like the other files: the format named by the suffix (the
    temporary file's own suffix is .tmp), written beside ``path`` and renamed over it."""
    atomic_write(str(path), lambda tmp: fig.savefig(tmp, dpi=100, format=path.suffix.lstrip(".") or "png"), what)
