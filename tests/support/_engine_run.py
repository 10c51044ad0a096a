"""A training run through the facade, in a child process, on the backend its environment chooses: the same
artifacts and the same batches, so that the training build and the engine can be compared step by step.

    python _engine_run.py ARTIFACTS DATASET STEPS OUT.npz [--batch B] [--accumulate K] [--lr LR]

DATASET holds ``train_<input>`` arrays for the training model's inputs (tests/zoo's datasets, the embedded
digits). The run records the training outputs of every step, an eval at the end, the trainable parameters
before and after, the learning rate, the backend and the runtime's version.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("artifacts")
    parser.add_argument("dataset")
    parser.add_argument("steps", type=int)
    parser.add_argument("out")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--accumulate", type=int, default=1)
    parser.add_argument("--lr", type=float, default=None)
    parser.add_argument("--nudge", action="store_true",
                        help="move every trainable parameter one float32 step up before training: the rounding "
                             "noise a run is measured against")
    args = parser.parse_args()
    import ort_cffi
    from ort_cffi import OrtEnvironment

    art = Path(args.artifacts)
    data = np.load(args.dataset)
    records = {}
    env = OrtEnvironment.getEnvironment()
    with env.createTrainingSession(str(art / "checkpoint"), str(art / "training_model.onnx"),
                                   str(art / "eval_model.onnx"), str(art / "optimizer_model.onnx")) as session:
        if args.lr is not None:
            session.setLearningRate(args.lr)
        names = list(session.getTrainInputNames())
        count = len(data[f"train_{names[0]}"])

        def batch(name: str, step: int) -> np.ndarray:
            start = (step * args.batch) % max(1, count - args.batch + 1)
            return data[f"train_{name}"][start:start + args.batch]

        if args.nudge:
            start = session.copyParametersToBuffer()
            session.copyBufferToParameters(np.nextafter(start, np.float32(np.inf)))
        records["before"] = session.copyParametersToBuffer()
        losses = []
        for step in range(args.steps):
            with session.trainStep({name: batch(name, step) for name in names}) as result:
                losses.append(np.asarray(result.get(0).getValue(), np.float32).reshape(-1)[0])
            if (step + 1) % args.accumulate == 0:
                session.optimizerStep()
                session.lazyResetGrad()
        eval_names = list(session.getEvalInputNames())
        with session.evalStep({name: batch(name, 0) for name in eval_names}) as result:
            records["eval"] = np.asarray(result.get(0).getValue(), np.float32)
        records["losses"] = np.array(losses, np.float32)
        records["after"] = session.copyParametersToBuffer()
        records["lr"] = np.float32(session.getLearningRate())
    records["backend"] = np.array(ort_cffi.backend())
    records["version"] = np.array(env.getVersion())
    np.savez(args.out, **records)


if __name__ == "__main__":
    sys.exit(main())
