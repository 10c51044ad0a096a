"""GPU check: a training session on CUDA gives the same losses as on the CPU, to within 1e-5.

    pip install -e ".[cuda]"          # onnxruntime-training==1.19.2, the CUDA build, and a CUDA 12 GPU
    python scripts/check_cuda.py [--steps 50] [--device 0]

Trains the same artifacts (tests/artifacts/big: 784-500-10, batch 64) from the same checkpoint on
both providers, step by step, and compares the losses. On a runtime without CUDA it says so and
exits 2 (the error path the CPU test suite checks through SessionOptions.addCUDA).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from ort_cffi import OrtEnvironment, OrtException, OrtTrainingSession, SessionOptions

ARTIFACTS = Path(__file__).resolve().parent.parent / "tests" / "artifacts" / "big"


def losses(env: OrtEnvironment, options: SessionOptions, batches: "list[dict]") -> "list[float]":
    out = []
    with env.createTrainingSession(
        str(ARTIFACTS / "checkpoint"), str(ARTIFACTS / "training_model.onnx"), None,
        str(ARTIFACTS / "optimizer_model.onnx"), options,
    ) as session:
        for batch in batches:
            with session.trainStep(batch) as result:
                out.append(float(result.get(0).getValue()))
            session.optimizerStep()
            session.lazyResetGrad()
    return out


def main(argv: "list[str] | None" = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--device", type=int, default=0)
    parser.add_argument("--tolerance", type=float, default=1e-5)
    args = parser.parse_args(argv)

    env = OrtEnvironment.getEnvironment()
    rng = np.random.default_rng(0)
    batches = [
        {"input": rng.standard_normal((64, 784)).astype(np.float32), "labels": rng.integers(0, 10, 64).astype(np.int64)}
        for _ in range(args.steps)
    ]
    OrtTrainingSession.setSeed(0)
    with SessionOptions() as cpu_options:
        cpu = losses(env, cpu_options, batches)
    with SessionOptions() as cuda_options:
        try:
            cuda_options.addCUDA(args.device)
        except OrtException as error:
            print(f"error: no CUDA here: {error}", file=sys.stderr)
            return 2
        OrtTrainingSession.setSeed(0)
        cuda = losses(env, cuda_options, batches)
    worst = max(abs(a - b) for a, b in zip(cpu, cuda))
    print(f"{args.steps} steps: first loss CPU {cpu[0]:.7f} CUDA {cuda[0]:.7f}; last CPU {cpu[-1]:.7f} CUDA {cuda[-1]:.7f}")
    print(f"largest |CPU - CUDA| loss difference: {worst:.3g} (tolerance {args.tolerance:g})")
    if worst > args.tolerance:
        print("FAIL")
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
