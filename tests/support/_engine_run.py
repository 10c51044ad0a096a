"""A training run through the facade, in a child process, on the backend its environment chooses: the same
artifacts, the same seeded batches, so that the training build and the engine can be compared step by step.

    python _engine_run.py ARTIFACTS STEPS OUT.npz [--accumulate K] [--lr LR]

writes the training outputs of every step, the eval outputs at the end, the final trainable parameters, the
backend and the runtime's version.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("artifacts")
    parser.add_argument("steps", type=int)
    parser.add_argument("out")
    parser.add_argument("--accumulate", type=int, default=1)
    parser.add_argument("--lr", type=float, default=None)
    parser.add_argument("--feeds", required=True, help="an .npz of the feeds, one array per input and step")
    args = parser.parse_args()
    import ort_cffi
    from ort_cffi import OrtEnvironment

    art = Path(args.artifacts)
    feeds = np.load(args.feeds)
    records = {}
    env = OrtEnvironment.getEnvironment()
    with env.createTrainingSession(str(art / "checkpoint"), str(art / "training_model.onnx"),
                                   str(art / "eval_model.onnx"), str(art / "optimizer_model.onnx")) as session:
        if args.lr is not None:
            session.setLearningRate(args.lr)
        names = list(session.getTrainInputNames())
        before = session.copyParametersToBuffer()
        losses = []
        for step in range(args.steps):
            feed = {name: feeds[f"{name}.{step}"] for name in names}
            with session.trainStep(feed) as result:
                losses.append(np.asarray(result.get(0).getValue(), np.float32).reshape(-1)[0])
            if (step + 1) % args.accumulate == 0:
                session.optimizerStep()
                session.lazyResetGrad()
        eval_names = list(session.getEvalInputNames())
        with session.evalStep({name: feeds[f"{name}.0"] for name in eval_names}) as result:
            records["eval"] = np.asarray(result.get(0).getValue(), np.float32)
        records["losses"] = np.array(losses, np.float32)
        records["before"] = before
        records["after"] = session.copyParametersToBuffer()
        records["lr"] = np.float32(session.getLearningRate())
    records["backend"] = np.array(ort_cffi.backend())
    records["version"] = np.array(env.getVersion())
    np.savez(args.out, **records)


if __name__ == "__main__":
    sys.exit(main())
