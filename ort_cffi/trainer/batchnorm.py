"""BatchNorm statistics re-estimated for the weights a model has now, as ``torch.optim.swa_utils.update_bn``
does: one pass over training batches, each BatchNormalization normalising with the batch's statistics, and
its running mean and variance set to the plain average of the per-batch statistics (torch's
``momentum=None``, a cumulative average).

A short fine-tuning leaves running statistics that trail the weights (they follow training with momentum,
and mostly describe the weights of earlier steps): validation measures a model with mismatched statistics.
Re-estimated over the training set with the trained weights, they describe the model as it is.

The pass runs the training model (the artifacts make its BatchNormalization nodes output their updated
running statistics: ``artifacts.json``'s ``batchnorm_statistics``). With the running statistics set to zero
during the pass, each step's outputs are ``(1 - momentum) * batch``: the batch mean, and the batch variance
in the convention the artifacts record (torch's unbiased one). The step's gradients are discarded
(``lazyResetGrad``) and no optimizer step is taken, so the weights stay as they were. Everything other than
BatchNormalization runs as the training model runs it; the exporters' eval-mode forms leave no Dropout in it,
but a model exported in training mode keeps its Dropout active during the pass.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Sequence, Tuple, Union

import numpy as np

from ort_cffi import OrtTrainingSession
from ort_cffi.artifacts import read_manifest

Layout = Union[str, "os.PathLike[str]", Sequence[Mapping[str, Any]]]


@dataclass(frozen=True)
class Reestimated:
    """What `reestimate_batchnorm` did: the BatchNormalization layers re-estimated, the batches averaged, the
    seconds it took, and the layers it left as they were (``skipped``: momentum 1, their statistics never move)."""

    layers: int
    batches: int
    seconds: float
    skipped: Tuple[str, ...] = ()

    def describe(self) -> str:
        """One line that says what was done, for a log."""
        skipped = f"; left as they were: {', '.join(self.skipped)} (momentum 1)" if self.skipped else ""
        layers, batches = f"{self.layers} layer{'s' if self.layers != 1 else ''}", \
            f"{self.batches} training batch{'es' if self.batches != 1 else ''}"
        return f"BatchNorm statistics re-estimated: {layers} over {batches} in {self.seconds:.2f} s{skipped}"


def batchnorm_layout(artifacts: Layout) -> List[Dict[str, Any]]:
    """The running statistics of an artifacts folder (its ``artifacts.json``'s ``batchnorm_statistics``), or
    the list itself when given one; each entry names the frozen parameters ``mean`` and ``var``, the training
    outputs ``mean_output`` and ``var_output``, and the ``momentum``. ValueError for an entry without them."""
    if isinstance(artifacts, (str, os.PathLike)):
        manifest = read_manifest(Path(os.fspath(artifacts)))
        if manifest is None:
            raise ValueError(f"{os.fspath(artifacts)!r} holds no readable artifacts.json: the BatchNorm statistics "
                             "are listed there (generate the artifacts with ort_cffi.artifacts.generate_artifacts)")
        entries = manifest.get("batchnorm_statistics") or []
    else:
        entries = list(artifacts)
    layout = []
    for entry in entries:
        missing = [key for key in ("mean", "var", "mean_output", "var_output", "momentum") if key not in entry]
        if missing:
            raise ValueError(f"a batchnorm_statistics entry lacks {', '.join(missing)}: {dict(entry)!r}")
        layout.append(dict(entry))
    return layout


def reestimate_batchnorm(session: OrtTrainingSession, artifacts: Layout,
                         batches: Iterable[Mapping[str, Any]]) -> Reestimated:
    """Set the BatchNorm running statistics of ``session`` to their average over ``batches`` (the training
    model's inputs, labels included, one mapping per batch), with the session's current weights.

    ``artifacts`` is the artifacts folder, or its ``batchnorm_statistics`` list. Each batch counts once (a
    last, smaller batch as much as the others), as in torch's ``update_bn``. The weights, the optimizer state
    and the learning rate are left as they were; the gradients of the pass are discarded. If a step fails,
    the statistics are put back as they were before the pass.

    Raises:
        ValueError: The session's training model does not output a statistic the layout names, or
            ``batches`` is empty.
        OrtException: The runtime refuses a batch.
    """
    started = time.monotonic()
    layout = batchnorm_layout(artifacts)
    outputs = set(session.getTrainOutputNames())
    absent = [name for entry in layout for name in (entry["mean_output"], entry["var_output"]) if name not in outputs]
    if absent:
        raise ValueError(f"the training model does not output {', '.join(absent[:4])}"
                         f"{' ...' if len(absent) > 4 else ''}: these artifacts are not the ones the layout describes")
    moving = [entry for entry in layout if float(entry["momentum"]) != 1.0]
    skipped = tuple(str(entry.get("node", entry["mean"])) for entry in layout if entry not in moving)
    if not moving:
        return Reestimated(0, 0, time.monotonic() - started, skipped)
    state = session.getCheckpointState()
    names = [entry[key] for entry in moving for key in ("mean", "var")]
    wanted = [entry[key] for entry in moving for key in ("mean_output", "var_output")]
    scale = np.repeat([1.0 / (1.0 - float(entry["momentum"])) for entry in moving], 2)
    before = {name: state.getParameter(name) for name in names}
    sums = [np.zeros(before[name].shape, np.float64) for name in names]
    count = 0
    try:
        for name in names:  # zero running statistics: each step outputs (1 - momentum) * batch
            state.updateParameter(name, np.zeros_like(before[name]))
        for batch in batches:
            with session.trainStep(dict(batch), wanted) as result:
                for index in range(len(wanted)):
                    sums[index] += np.asarray(result.get(index).getValue(), np.float64) * scale[index]
            count += 1
        if not count:
            raise ValueError("no batch to re-estimate the BatchNorm statistics over")
        for name, total in zip(names, sums):
            state.updateParameter(name, (total / count).astype(before[name].dtype))
    except BaseException:
        for name, value in before.items():
            state.updateParameter(name, value)
        raise
    finally:
        session.lazyResetGrad()  # the pass's gradients never reach an optimizer step
    return Reestimated(len(moving), count, time.monotonic() - started, skipped)
