"""Differential tests: ort_cffi against ONNX Runtime's own Python training layer, bit for bit.

The same programs run on both sides: here through ort_cffi (the C training API, in a private image of
the runtime), and in a child process through ``onnxruntime.capi._pybind_state`` (tests/support/oracle_child.py),
on the project's committed artifacts (scripts/make_artifacts.py). Arrays come back through .npz files;
no object of one runtime image ever reaches the other. Every comparison is exact (byte equality of
float32 arrays): the two sides run the same kernels on the same inputs with one intra-op thread, so any
difference is a binding bug (wrong input order, a lost learning rate, an optimizer state not saved, ...).

A program is a list of ops, ``[name, *args]``, run by ``_CffiSide`` here and by ``Oracle`` in the child:

- ``open [checkpoint]``: (re)create the training session, from the artifacts' checkpoint or the given one.
- ``set_lr lr`` / ``lr tag``: set / record the learning rate.
- ``scheduler tag warmup total lr``: register the linear scheduler (C API semantics), record the rate.
- ``train tag data first count [scheduler]``: ``count`` × (trainStep on batch i, record every output and
  the rate the coming optimizer step uses, optimizerStep, [schedulerStep], lazyResetGrad).
- ``eval tag data index``: evalStep, record every output.
- ``params tag``: record the trainable parameters (CopyParametersToBuffer).
- ``save path optimizer_state`` / ``export path names``: save a checkpoint / export an inference model.
- ``infer tag model data index``: run an inference model (here ``env.createSession``, there
  ``onnxruntime.InferenceSession``), record every output.

Records are ``{tag}.{j}`` (output j, stacked over the steps), ``{tag}.lr``, ``{tag}:names`` (the output
names).

The learning-rate scheduler: ort_cffi follows the C API (registering sets the rate to the initial rate
until the first schedulerStep; each schedulerStep sets initial × factor(optimizer step count)). The
Python layer's public ``LinearLRScheduler`` swaps warmup and total and applies factor(0) at once; the
oracle undoes both (see ``Oracle.op_scheduler``), so both sides follow one schedule and the rates can be
compared exactly. ``test_learning_rates_under_linear_scheduler`` also checks them against the C API's
formula evaluated in float32, so that agreeing on a wrong schedule would not pass.
"""
from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any, Dict, List

import numpy as np
import pytest

from ort_cffi import OrtEnvironment, SessionOptions

# ONNX Runtime's own Python layer, imported in this process, is the oracle here.
pytestmark = pytest.mark.needs_onnxruntime_python

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "tests" / "artifacts"
DIGITS = ROOT / "ort_cffi" / "data" / "digits"
CHILD = Path(__file__).resolve().parents[1] / "support" / "oracle_child.py"

MODELS = {"twoout": ARTIFACTS / "twoout", "tiny": ARTIFACTS / "tiny", "digits": DIGITS}
STEPS = 100  # training batches 0..STEPS-1
HELD_OUT = 10  # batches STEPS..STEPS+HELD_OUT-1, for eval and inference only
PREP_STEPS = 30  # the state whose checkpoint and inference model cross sides
RESUME_AT = 40
SCHEDULES = {  # data set: (warmup, total, initial lr, steps)
    "twoout": (10, 60, 0.01, 80),  # warm-up, decay, then 20 steps clamped at 0
    "digits": (0, 50, 0.05, 60),  # no warm-up
}


# --- data and programs -----------------------------------------------------------------------------


def make_data(path: Path) -> None:
    """Fixed batches for each model: ``{key}_input`` [batches, batch, features], ``{key}_labels``."""
    arrays: Dict[str, Any] = {}
    count = STEPS + HELD_OUT
    for key, (features, classes, batch, seed) in {"twoout": (20, 3, 8, 11), "tiny": (784, 10, 4, 12)}.items():
        rng = np.random.default_rng(seed)
        arrays[f"{key}_input"] = rng.standard_normal((count, batch, features)).astype(np.float32)
        arrays[f"{key}_labels"] = rng.integers(0, classes, size=(count, batch)).astype(np.int64)
    with np.load(DIGITS / "digits.npz") as digits:
        x, y = digits["train_input"], digits["train_labels"]
    batch = 16
    order = np.random.default_rng(13).permutation(len(y))
    index = order[np.arange(count * batch) % len(y)].reshape(count, batch)
    arrays["digits_input"] = np.ascontiguousarray(x[index], dtype=np.float32)
    arrays["digits_labels"] = np.ascontiguousarray(y[index], dtype=np.int64)
    np.savez(path, **arrays)


def programs(side: str, tmp: Path) -> Dict[str, Dict[str, Any]]:
    """The programs both sides run; ``side`` ("cffi" or "oracle") names the files a side writes."""
    def prog(model: str, ops: List[list]) -> Dict[str, Any]:
        return {"artifacts": str(MODELS[model]), "ops": ops}

    other = "oracle" if side == "cffi" else "cffi"
    out: Dict[str, Dict[str, Any]] = {}
    for model in MODELS:
        out[f"losses_{model}"] = prog(model, [["open"], ["train", "t", model, 0, STEPS], ["params", "p"], ["eval", "e", model, STEPS]])
    for model, (warmup, total, lr, steps) in SCHEDULES.items():
        scheduled: List[list] = [
            ["open"], ["scheduler", "registered", warmup, total, lr], ["train", "t", model, 0, steps, True], ["lr", "end"],
        ]
        out[f"schedule_{model}"] = prog(model, scheduled)
    interleaved: List[list] = [["open"], ["eval", "e", "twoout", STEPS]]
    for i in range(60):
        interleaved += [["train", "t", "twoout", i, 1], ["eval", "e", "twoout", STEPS + i % HELD_OUT]]
    out["eval"] = prog("twoout", interleaved)
    prep: List[list] = [["open"], ["train", "t", "twoout", 0, PREP_STEPS],
                        ["save", str(tmp / f"{side}_ckpt"), True], ["save", str(tmp / f"{side}_ckpt_params"), False],
                        ["export", str(tmp / f"{side}_infer.onnx"), ["logits"]], ["params", "p"]]
    prep += [["eval", "e", "twoout", STEPS + k] for k in range(HELD_OUT)]
    out["prep"] = prog("twoout", prep)
    # Continue from the other side's checkpoint (with optimizer state); the prep programs write them.
    out["cross"] = prog("twoout", [["open", str(tmp / f"{other}_ckpt")], ["lr", "lr0"],
                                   ["train", "t", "twoout", PREP_STEPS, STEPS - PREP_STEPS], ["params", "p"]])
    out["resume"] = prog("twoout", [
        ["open"], ["train", "t", "twoout", 0, RESUME_AT], ["save", str(tmp / f"{side}_resume_ckpt"), True],
        ["open", str(tmp / f"{side}_resume_ckpt")], ["train", "t", "twoout", RESUME_AT, STEPS - RESUME_AT], ["params", "p"],
    ])
    infer: List[list] = []
    for source in ("cffi", "oracle"):
        infer += [["infer", f"{source}{k}", str(tmp / f"{source}_infer.onnx"), "twoout", STEPS + k] for k in range(HELD_OUT)]
    out["infer"] = prog("twoout", infer)
    return out


# --- the ort_cffi side -----------------------------------------------------------------------------


class _CffiSide:
    """The ort_cffi interpreter of a program (the twin of oracle_child.Oracle)."""

    def __init__(self, artifacts: Path, data: Dict[str, np.ndarray]) -> None:
        self.env = OrtEnvironment.getEnvironment()
        self.artifacts = artifacts
        self.data = data
        self.records: Dict[str, list] = defaultdict(list)
        self.session: Any = None

    @staticmethod
    def options() -> SessionOptions:
        options = SessionOptions()
        options.setIntraOpNumThreads(1)
        options.setInterOpNumThreads(1)
        return options

    def batch(self, key: str, index: int) -> Dict[str, np.ndarray]:
        return {"input": self.data[f"{key}_input"][index], "labels": self.data[f"{key}_labels"][index]}

    def record(self, tag: str, value: Any) -> None:
        self.records[tag].append(np.asarray(value))

    def record_result(self, tag: str, result: Any) -> None:
        self.records[f"{tag}:names"] = [np.array(result.keys())]
        for j, (_, value) in enumerate(result):
            self.record(f"{tag}.{j}", value.getValue())

    def lr(self) -> np.float32:
        return np.float32(self.session.getLearningRate())

    def op_open(self, checkpoint: "str | None" = None) -> None:
        self.close()
        a = self.artifacts
        with self.options() as options:
            self.session = self.env.createTrainingSession(
                checkpoint or str(a / "checkpoint"), str(a / "training_model.onnx"), str(a / "eval_model.onnx"),
                str(a / "optimizer_model.onnx"), options,
            )

    def op_set_lr(self, lr: float) -> None:
        self.session.setLearningRate(lr)

    def op_lr(self, tag: str) -> None:
        self.record(tag, self.lr())

    def op_scheduler(self, tag: str, warmup: int, total: int, lr: float) -> None:
        self.session.registerLinearLRScheduler(warmup, total, lr)
        self.record(tag, self.lr())

    def op_train(self, tag: str, key: str, first: int, count: int, scheduler: bool = False) -> None:
        s = self.session
        for i in range(first, first + count):
            with s.trainStep(self.batch(key, i)) as result:
                self.record_result(tag, result)
            self.record(f"{tag}.lr", self.lr())
            s.optimizerStep()
            if scheduler:
                s.schedulerStep()
            s.lazyResetGrad()

    def op_eval(self, tag: str, key: str, index: int) -> None:
        with self.session.evalStep(self.batch(key, index)) as result:
            self.record_result(tag, result)

    def op_params(self, tag: str) -> None:
        self.record(tag, self.session.copyParametersToBuffer(True))

    def op_save(self, path: str, optimizer_state: bool) -> None:
        self.session.saveCheckpoint(path, optimizer_state)

    def op_export(self, path: str, names: List[str]) -> None:
        self.session.exportModelForInference(path, names)

    def op_infer(self, tag: str, model: str, key: str, index: int) -> None:
        with self.options() as options, self.env.createSession(model, options) as session:
            batch = self.batch(key, index)
            with session.run({name: batch[name] for name in session.getInputNames()}) as result:
                self.record_result(tag, result)

    def close(self) -> None:
        if self.session is not None:
            self.session.close()
            self.session = None


def run_cffi(program: Dict[str, Any], data: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
    side = _CffiSide(Path(program["artifacts"]), data)
    try:
        for op, *args in program["ops"]:
            getattr(side, f"op_{op}")(*args)
    finally:
        side.close()
    return {tag: np.stack(values) for tag, values in side.records.items()}


# --- fixtures --------------------------------------------------------------------------------------


class Run:
    """Both sides' files and the oracle's records, shared by the module's tests."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        make_data(tmp / "data.npz")
        with np.load(tmp / "data.npz") as npz:
            self.data = {k: npz[k] for k in npz.files}
        self.cffi_programs = programs("cffi", tmp)
        # The ort_cffi prep writes the checkpoint and inference model the oracle reads.
        self.cffi_prep = run_cffi(self.cffi_programs["prep"], self.data)
        plan = {"data": str(tmp / "data.npz"), "out": str(tmp), "programs": programs("oracle", tmp)}
        (tmp / "plan.json").write_text(json.dumps(plan))
        proc = subprocess.run([sys.executable, str(CHILD), str(tmp / "plan.json")], capture_output=True, text=True,
                              cwd=str(ROOT), timeout=600)
        if proc.returncode != 0:
            raise AssertionError(f"oracle child exited with {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}")
        self.oracle: Dict[str, Dict[str, np.ndarray]] = {}
        for name in plan["programs"]:
            with np.load(tmp / f"{name}.npz") as npz:
                self.oracle[name] = {k: npz[k] for k in npz.files}

    def cffi(self, name: str) -> Dict[str, np.ndarray]:
        return self.cffi_prep if name == "prep" else run_cffi(self.cffi_programs[name], self.data)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return Run(tmp_path_factory.mktemp("oracle"))


# --- comparisons -----------------------------------------------------------------------------------


def assert_identical(ours: np.ndarray, theirs: np.ndarray, what: str, sides: "tuple[str, str]" = ("ort_cffi", "oracle")) -> None:
    """Same dtype, same shape, same bytes (NaN-safe, and -0.0 differs from 0.0)."""
    a, b = sides
    assert ours.dtype == theirs.dtype, f"{what}: dtype {ours.dtype} ({a}) != {theirs.dtype} ({b})"
    assert ours.shape == theirs.shape, f"{what}: shape {ours.shape} ({a}) != {theirs.shape} ({b})"
    if ours.tobytes() != theirs.tobytes():
        bits = f"u{ours.itemsize}"
        differ = np.flatnonzero(ours.reshape(-1).view(bits) != theirs.reshape(-1).view(bits))
        first = tuple(int(i) for i in np.unravel_index(differ[0], ours.shape))
        raise AssertionError(
            f"{what}: {differ.size} of {ours.size} values differ; first at {first}: {a} {ours[first]!r}, {b} {theirs[first]!r}"
        )


def assert_same_records(ours: Dict[str, np.ndarray], theirs: Dict[str, np.ndarray], what: str) -> None:
    assert sorted(ours) == sorted(theirs), f"{what}: records {sorted(ours)} (ort_cffi) != {sorted(theirs)} (oracle)"
    for tag in ours:  # in the order the ops made them: the first difference reported is the earliest
        if tag.endswith(":names"):
            assert ours[tag].tolist() == theirs[tag].tolist(), f"{what}: output names of {tag}"
        else:
            assert_identical(ours[tag], theirs[tag], f"{what} {tag}")


def linear_factor_lr(initial: float, warmup: int, total: int, step: int) -> np.float32:
    """The C API's linear schedule in float32 (onnxruntime/orttraining/training_api/lr_scheduler.cc)."""
    if step < warmup:
        factor = np.float32(step) / np.float32(max(1, warmup))
    else:
        factor = max(np.float32(0), np.float32(total - step) / np.float32(max(1, total - warmup)))
    return np.float32(np.float32(initial) * np.float32(factor))


# --- tests -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("model", list(MODELS))
def test_training_losses_and_outputs(run: Run, model: str) -> None:
    """STEPS × (trainStep, optimizerStep, lazyResetGrad): every training output (the loss, and the logits
    where the model has them), the rate, the final parameters and a final eval: identical."""
    ours, theirs = run.cffi(f"losses_{model}"), run.oracle[f"losses_{model}"]
    assert ours["t.0"].shape == (STEPS,)
    if model != "tiny":  # two training outputs: the loss and the logits
        assert ours["t:names"].tolist()[0][1] == "logits" and ours["t.1"].shape[0] == STEPS
    assert np.all(np.isfinite(ours["t.0"])) and ours["t.0"][-10:].mean() < ours["t.0"][:10].mean(), "no training happened"
    assert_same_records(ours, theirs, model)


@pytest.mark.parametrize("model", list(SCHEDULES))
def test_learning_rates_under_linear_scheduler(run: Run, model: str) -> None:
    """The rate after registering and before every optimizer step, under warm-up, decay and the clamp
    at 0, and the losses it gives: identical, and equal to the C API's formula in float32."""
    warmup, total, lr, steps = SCHEDULES[model]
    ours, theirs = run.cffi(f"schedule_{model}"), run.oracle[f"schedule_{model}"]
    assert_same_records(ours, theirs, f"schedule {model}")
    # The C API: the initial rate until the first schedulerStep, then initial × factor(optimizer steps).
    expected = np.array([np.float32(lr)] + [linear_factor_lr(lr, warmup, total, k) for k in range(1, steps + 1)])
    formula = ("ort_cffi", "C API formula")
    assert_identical(ours["registered"], expected[:1], "rate right after registering", formula)
    assert_identical(ours["t.lr"], expected[:steps], "rate of each optimizer step", formula)
    assert_identical(ours["end"], expected[steps:], "rate after the last schedulerStep", formula)
    assert ours["t.lr"].max() == np.float32(lr) and ours["t.lr"][-1] == 0


def test_eval_losses_interleaved_with_training(run: Run) -> None:
    """An eval before training, then 60 × (train + optimizer step, evalStep on a held-out batch): the
    eval loss and logits after every step, and the training outputs, identical."""
    ours, theirs = run.cffi("eval"), run.oracle["eval"]
    assert ours["e.0"].shape == (61,) and ours["e:names"].tolist()[0] == ["onnx::loss::20", "logits"]
    assert_same_records(ours, theirs, "interleaved eval")


def test_checkpoints_cross_sides(run: Run) -> None:
    """A checkpoint with optimizer state saved by ort_cffi after PREP_STEPS steps, trained on by the
    oracle, and one saved by the oracle, trained on by ort_cffi: the continued training (outputs, rates,
    final parameters) is identical, and equal to uninterrupted training."""
    # The two prep runs reached the same state and saved it (checkpoint files, with and without the
    # optimizer state, byte for byte).
    assert_same_records(run.cffi_prep, run.oracle["prep"], "prep")
    for name in ("ckpt", "ckpt_params"):
        assert (run.tmp / f"cffi_{name}").read_bytes() == (run.tmp / f"oracle_{name}").read_bytes(), name
    ours_from_oracle, oracle_from_ours = run.cffi("cross"), run.oracle["cross"]
    assert_same_records(ours_from_oracle, oracle_from_ours, "continued from the other side's checkpoint")
    # ...and equal to the uninterrupted run (so the optimizer state, step count included, crossed).
    uninterrupted = run.oracle["losses_twoout"]
    for tag in ("t.0", "t.1", "t.lr"):
        assert_identical(ours_from_oracle[tag], uninterrupted[tag][PREP_STEPS:], tag, ("ort_cffi continued", "oracle uninterrupted"))
    assert_identical(ours_from_oracle["p"], uninterrupted["p"], "final parameters", ("ort_cffi continued", "oracle uninterrupted"))


def test_resumed_training_equals_uninterrupted(run: Run) -> None:
    """Train RESUME_AT steps, save (with optimizer state), reopen from the file, train the rest: equal, on
    each side, to the other side's uninterrupted run of STEPS steps."""
    for resumed, uninterrupted, sides in (
        (run.cffi("resume"), run.oracle["losses_twoout"], ("ort_cffi resumed", "oracle uninterrupted")),
        (run.oracle["resume"], run.cffi("losses_twoout"), ("oracle resumed", "ort_cffi uninterrupted")),
    ):
        for tag in ("t.0", "t.1", "t.lr", "p"):
            assert_identical(resumed[tag], uninterrupted[tag], tag, sides)


def test_exported_inference_models(run: Run) -> None:
    """The inference models both sides exported after PREP_STEPS steps are the same file, and each, run
    by ort_cffi's OrtSession and by onnxruntime.InferenceSession, gives the same logits on held-out
    batches: the same as the eval step's at that state."""
    assert (run.tmp / "cffi_infer.onnx").read_bytes() == (run.tmp / "oracle_infer.onnx").read_bytes()
    ours, theirs = run.cffi("infer"), run.oracle["infer"]
    assert_same_records(ours, theirs, "inference")
    eval_logits = run.cffi_prep["e.1"]
    for source in ("cffi", "oracle"):
        for k in range(HELD_OUT):
            assert ours[f"{source}{k}:names"].tolist() == [["logits"]]
            assert_identical(ours[f"{source}{k}.0"][0], eval_logits[k], f"batch {k}", (f"{source}-exported model", "ort_cffi evalStep"))
