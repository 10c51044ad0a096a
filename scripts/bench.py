#!/usr/bin/env python
"""ort_cffi's benchmark, in one command and (for the step loops) one process.

    .venv/bin/python scripts/bench.py [--rounds N] [--quick] [--json PATH]

Step loops, interleaved in blocks over ``--rounds`` rounds, the order reversed every other round
(one intra-op thread; every variant but c drives one and the same ort_cffi training session, see
NOTE_SHARED; c has its own, in the runtime image ``import onnxruntime`` loads):

    a   the Java-style facade: trainStep over tensors made once, the loss read from the Result,
        optimizerStep, lazyResetGrad
    a'  the same, with the loss as a pinned output over a numpy scalar
    b   the same loop through the raw layer (ort_cffi.capi: cffi calls on the runtime's tables)
    b'  the raw layer with the loss as a pinned output: the floor of a'
    e   the raw layer plus the facade's guarantees, inline (session lock, pinned inputs, owned
        output, type and shape read): what any Python facade keeping them costs at least
    e'  the same for the pinned loss (session lock, inputs and loss tensor pinned): the floor of a'
        for a facade that keeps the guarantees
    c   ONNX Runtime's own Python training layer (onnxruntime.capi._pybind_state, OrtValue inputs
        made once, train_step_with_ort_values), the reference
    d   the same loop in C (scripts/bench_floor.c, compiled here with cffi in API mode, calling the
        same OrtTrainingApi table on the session and inputs ort_cffi made), the floor

on the tiny MLP (784-16-10, batch 4: overhead-bound) and a 784-500-10 MLP (batch 64: compute-bound).
Every block starts from the checkpoint's parameters, restored outside the timed region (see
NOTE_RESET). Each variant reports its median time per step; the paired ratios (same round) against
c and d report their median and p25-p75. Also measured (scripts/bench_startup.py, in child processes):
import + runtime load (cold and warm image cache), fresh processes to their first training step
against ONNX Runtime's own Python layer (time and peak memory), the extra resident memory of a tensor
over a 256 MiB array; the speed-up of two sessions trained in two threads over the same two one
after the other; and the tensor figures: the time to create and close one tensor (over a numpy
array, the zero-copy path; from a Python scalar) and to read one back (``getValue``, ``getInfo``),
which ``--tensors`` measures alone; and the facade against ONNX Runtime's Python layer per step on three
models of the zoo (scripts/bench_zoo.py), which ``--zoo-only`` measures alone. Results go to stdout (a table, target PASS/FAIL lines) and JSON.

``import onnxruntime`` happens only after ort_cffi has loaded its private runtime image; no object of
one image ever reaches the other. ``torch`` is blocked from being imported (the bench needs none).
"""
from __future__ import annotations

import argparse
import gc
import hashlib
import importlib.util
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from bench_startup import measure_first_step, measure_import, measure_rss, print_startup
from bench_zoo import measure_zoo, print_zoo

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "tests" / "artifacts"
FLOOR_SOURCE = Path(__file__).resolve().parent / "bench_floor.c"

VARIANTS = ("a", "a'", "b", "b'", "e", "e'", "c", "d")
LABELS = {
    "a": "facade (Result loss)",
    "a'": "facade (pinned loss)",
    "b": "raw cffi layer",
    "b'": "raw, pinned loss",
    "e": "raw + guarantees",
    "e'": "raw + guar., pinned",
    "c": "ORT Python (pybind)",
    "d": "C floor",
}
MODELS = {  # name: (artifacts folder, batch)
    "tiny": ("tiny", 4),
    "big": ("big", 64),
}
RATIOS = (
    ("a", "c"), ("a'", "c"), ("b", "c"), ("b'", "c"), ("e", "c"), ("e'", "c"), ("d", "c"),
    ("a", "d"), ("a'", "d"), ("b", "d"), ("b'", "d"), ("e", "d"), ("e'", "d"), ("c", "d"),
    ("a", "e"), ("a'", "e'"),  # the API's structure alone, over the guarantees' floor
)
MIB = 2**20
NOTE_RESET = (
    "every block starts from the checkpoint's parameters (restored outside the timed region): trained on one "
    "batch on and on, the softmax saturates into denormal floats and a step gets about 3.5x slower (tiny model: "
    "36 -> 126 us/step after ~800 steps), which would drift the blocks and dilute every ratio"
)

NOTE_SHARED = (
    "every variant but c drives one and the same ort_cffi training session, so that their ratios compare the calling "
    "code alone (with a session each, they also compared where the runtime placed each session's buffers, which "
    "moved the big model's ratios by a few per cent from run to run: more than the Python overhead measured there)"
)

# --- statistics ------------------------------------------------------------------------------------


def facade_loop(session: Any, inputs: Any) -> Callable[[int], float]:
    """(a): the Java-style loop — train step, read the loss from the Result, optimizer step, reset."""
    def loop(n: int) -> float:
        loss = math.nan
        for _ in range(n):
            with session.trainStep(inputs) as result:
                loss = float(result.get(0).getValue())
            session.optimizerStep()
            session.lazyResetGrad()
        return loss

    return loop


def summary(values: List[float]) -> Dict[str, float]:
    """Median, quartiles (p25-p75), min and max of a sample."""
    ordered = sorted(values)
    if len(ordered) >= 2:
        p25, _, p75 = statistics.quantiles(ordered, n=4, method="inclusive")
    else:
        p25 = p75 = ordered[0]
    return {
        "median": statistics.median(ordered),
        "p25": p25,
        "p75": p75,
        "min": ordered[0],
        "max": ordered[-1],
        "n": len(ordered),
    }


# --- tensors: create + close, read back ------------------------------------------------------------

TENSOR_CASES = (
    # (label, what is timed per operation)
    ("create+close float32 [4, 784] (over numpy)", "create"),
    ("create+close float32 scalar (over numpy)", "create_scalar"),
    ("create+close int64 [4] (over numpy)", "create_labels"),
    ("create+close from a Python float", "create_python"),
    ("getValue float32 [4, 784]", "get_value"),
    ("getValue float32 scalar (runtime-allocated)", "get_value_output"),
    ("getInfo float32 [4, 784]", "get_info"),
)


def measure_tensors(rounds: int, per_round: int) -> dict:
    """Microseconds per tensor operation: the median over ``rounds`` rounds of ``per_round`` operations each,
    the cases interleaved round by round (so that a busy moment of the machine hits them all alike)."""
    from ort_cffi import OnnxTensor, OrtEnvironment

    env = OrtEnvironment.getEnvironment()
    batch = np.ones((4, 784), np.float32)
    scalar = np.zeros((), np.float32)
    labels = np.arange(4, dtype=np.int64)
    held = OnnxTensor.createTensor(env, batch)
    identity = _identity_session(env)  # for a runtime-allocated output to read
    output = identity.run({"x": scalar})

    def create(n: int) -> None:
        for _ in range(n):
            OnnxTensor.createTensor(env, batch).close()

    def create_scalar(n: int) -> None:
        for _ in range(n):
            OnnxTensor.createTensor(env, scalar).close()

    def create_labels(n: int) -> None:
        for _ in range(n):
            OnnxTensor.createTensor(env, labels).close()

    def create_python(n: int) -> None:
        for _ in range(n):
            OnnxTensor.createTensor(env, 1.5).close()

    def get_value(n: int) -> None:
        for _ in range(n):
            held.getValue()

    value = output[0]

    def get_value_output(n: int) -> None:
        for _ in range(n):
            value.getValue()

    def get_info(n: int) -> None:
        for _ in range(n):
            held.getInfo()

    functions = {
        "create": create, "create_scalar": create_scalar, "create_labels": create_labels,
        "create_python": create_python, "get_value": get_value, "get_value_output": get_value_output, "get_info": get_info,
    }
    samples: Dict[str, List[float]] = {key: [] for _, key in TENSOR_CASES}
    try:
        for fn in functions.values():
            fn(per_round // 10 or 1)  # warm-up
        for round_index in range(rounds):
            order = [key for _, key in TENSOR_CASES]
            if round_index % 2:
                order.reverse()
            for key in order:
                t0 = time.perf_counter()
                functions[key](per_round)
                samples[key].append((time.perf_counter() - t0) / per_round * 1e6)
    finally:
        output.close()
        identity.close()
        held.close()
    return {key: {"label": label, "us": summary(samples[key])} for label, key in TENSOR_CASES}


def _identity_session(env: Any) -> Any:
    """An inference session of one Identity node over a float32 tensor of any shape, built as bytes
    with ``onnx`` (the test extra installs it)."""
    import onnx  # type: ignore[import-untyped]
    from onnx import helper

    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, None)
    y = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "identity", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return env.createSession(model.SerializeToString())


def print_tensors(tensors: dict) -> None:
    print("\ntensors: microseconds per operation (median, p25-p75)")
    for entry in tensors.values():
        s = entry["us"]
        print(f"  {entry['label']:<46} {s['median']:>8.2f} {s['p25']:>8.2f}-{s['p75']:<8.2f}")


# --- the C floor ------------------------------------------------------------------------------------

_FLOOR_CDEF = """
struct floor_slots {
    int get_tensor_mutable_data, release_value, release_status, get_error_code;
    int train_step, optimizer_step, lazy_reset_grad;
};
int bench_floor_loop(uintptr_t api_addr, uintptr_t training_api_addr, const struct floor_slots *slots,
                     uintptr_t session_addr, const uintptr_t *inputs, size_t inputs_len, size_t outputs_len,
                     long steps, float *loss);
"""


def build_floor() -> Any:
    """Compile scripts/bench_floor.c (cffi API mode) into a cache folder keyed by its source; import it."""
    import cffi

    source = FLOOR_SOURCE.read_text()
    key = hashlib.sha256((source + _FLOOR_CDEF + sys.version + cffi.__version__).encode()).hexdigest()[:16]
    name = f"_ort_cffi_bench_floor_{key}"
    build_dir = Path(tempfile.gettempdir()) / f"ort_cffi_bench_floor_{os.getuid()}" / key
    build_dir.mkdir(parents=True, exist_ok=True)
    path = build_dir / f"{name}.so"
    if not path.is_file():
        ffi = cffi.FFI()
        ffi.cdef(_FLOOR_CDEF)
        ffi.set_source(name, source, extra_compile_args=["-O2"])
        with tempfile.TemporaryDirectory(dir=build_dir) as tmp:  # a concurrent run never sees half a file
            os.replace(ffi.compile(tmpdir=tmp, verbose=False), path)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def floor_loop(floor: Any, session: Any, inputs: List[Any]) -> Callable[[int], float]:
    """``loop(n)``: n steps of the C floor on an ort_cffi session, ``inputs`` (OnnxTensors) in model order.
    The session's lock is not taken: the caller makes sure nothing else uses the session meanwhile."""
    from ort_cffi.capi import ffi, get_runtime

    rt = get_runtime()
    slot = ffi.sizeof("void*")
    slots = floor.ffi.new(
        "struct floor_slots*",
        {
            "get_tensor_mutable_data": ffi.offsetof("OrtApi", "GetTensorMutableData") // slot,
            "release_value": ffi.offsetof("OrtApi", "ReleaseValue") // slot,
            "release_status": ffi.offsetof("OrtApi", "ReleaseStatus") // slot,
            "get_error_code": ffi.offsetof("OrtApi", "GetErrorCode") // slot,
            "train_step": ffi.offsetof("OrtTrainingApi", "TrainStep") // slot,
            "optimizer_step": ffi.offsetof("OrtTrainingApi", "OptimizerStep") // slot,
            "lazy_reset_grad": ffi.offsetof("OrtTrainingApi", "LazyResetGrad") // slot,
        },
    )

    def address(pointer: Any) -> int:
        return int(ffi.cast("uintptr_t", pointer))

    inputs_addr = floor.ffi.new("uintptr_t[]", [address(t._ptr) for t in inputs])
    api_addr, tapi_addr = address(rt.api), address(rt.training_api)
    output_count = len(session.getTrainOutputNames())

    def loop(n: int) -> float:
        loss = floor.ffi.new("float*")
        rc = floor.lib.bench_floor_loop(
            api_addr, tapi_addr, slots, address(session._handle()), inputs_addr, len(inputs), output_count, n, loss
        )
        if rc:
            raise RuntimeError(f"the C floor failed: phase {rc // 1000}, OrtErrorCode {rc % 1000}")
        return float(loss[0])

    loop.keep = (slots, inputs_addr, inputs)  # type: ignore[attr-defined]
    return loop


# --- the variants -------------------------------------------------------------------------------


def _paths(folder: str) -> Tuple[str, str, str, str]:
    """checkpoint, training, eval and optimizer model of an artifacts folder."""
    art = ARTIFACTS / folder
    return (str(art / "checkpoint"), str(art / "training_model.onnx"), str(art / "eval_model.onnx"),
            str(art / "optimizer_model.onnx"))


def _batch(batch: int, seed: int) -> Tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.random((batch, 784), dtype=np.float32)
    y = rng.integers(0, 10, size=batch).astype(np.int64)
    return x, y


class Bench:
    """Sessions and step loops for one model. ``loops[v](n)`` runs n steps and returns the last loss."""

    def __init__(self, model: str, floor: Any, C: Any) -> None:
        from ort_cffi import OnnxTensor, OrtEnvironment, SessionOptions
        from ort_cffi._native.handles import close_values, pin_all, unpin_all
        from ort_cffi.capi import check_status, ffi, get_runtime
        from ort_cffi._facade.tensors.outputs import adopt_outputs, check_outputs
        from ort_cffi._facade.tensors.value_info import value_tensor_info

        folder, batch = MODELS[model]
        self.paths = paths = _paths(folder)
        self.batch = batch
        self.env = env = OrtEnvironment.getEnvironment()
        self.keep: List[Any] = []  # everything the loops use, kept alive and closed at the end
        self.loops: Dict[str, Callable[[int], float]] = {}
        self.resets: Dict[str, Callable[[], None]] = {}  # back to the checkpoint's parameters
        rt = get_runtime()

        shared: List[Any] = []  # (session, inputs): one for every variant but c (see NOTE_SHARED)

        def facade_session():
            if shared:
                return shared[0]
            options = SessionOptions()
            options.setIntraOpNumThreads(1)
            options.setInterOpNumThreads(1)
            session = env.createTrainingSession(paths[0], paths[1], paths[2], paths[3], options)
            options.close()
            x, y = _batch(batch, 0)
            tensors = {"input": OnnxTensor.createTensor(env, x), "labels": OnnxTensor.createTensor(env, y)}
            self.keep += [session, *tensors.values()]
            shared.append((session, tensors))
            return session, tensors

        def resetter(session: Any) -> Callable[[], None]:
            initial = session.copyParametersToBuffer(True)
            return lambda: session.copyBufferToParameters(initial, True)

        # (a) the Java-style facade
        session_a, inputs_a = facade_session()

        loop_a = facade_loop(session_a, inputs_a)

        # (a') the loss as a pinned output over a numpy scalar
        session_p, inputs_p = facade_session()
        loss_name = session_p.getTrainOutputNames()[0]
        loss_buffer = np.zeros((), np.float32)
        loss_tensor = OnnxTensor.createTensor(env, loss_buffer)
        self.keep.append(loss_tensor)
        pinned = {loss_name: loss_tensor}

        def loop_p(n: int) -> float:
            session, inputs, outputs, buffer = session_p, inputs_p, pinned, loss_buffer
            loss = math.nan
            for _ in range(n):
                with session.trainStep(inputs, outputs):
                    loss = float(buffer)
                session.optimizerStep()
                session.lazyResetGrad()
            return loss

        # (b) the raw layer, on the same session (made by the facade; only its pointer is used)
        session_b, inputs_b = facade_session()
        input_names = list(session_b.getTrainInputNames())
        output_count = len(session_b.getTrainOutputNames())
        if output_count != 1:
            raise SystemExit(f"the bench expects training models with one output (the loss), got {output_count}")
        in_values = ffi.new("OrtValue*[]", [inputs_b[n]._ptr for n in input_names])
        out_values = ffi.new("OrtValue*[]", 1)
        data = ffi.new("void**")

        def loop_b(n: int) -> float:
            tapi, api = rt.training_api, rt.api
            train_step, optimizer_step, lazy_reset = tapi.TrainStep, tapi.OptimizerStep, tapi.LazyResetGrad
            get_data, release_value, NULL = api.GetTensorMutableData, api.ReleaseValue, ffi.NULL
            ptr, ins, outs, count = session_b._ptr, in_values, out_values, len(input_names)
            float_view = ffi.cast("float**", data)  # the loss read with two index operations, no cast per step
            loss = math.nan
            for _ in range(n):
                outs[0] = NULL
                status = train_step(ptr, NULL, count, ins, 1, outs)
                if status:
                    check_status(status, "TrainStep")
                value = outs[0]
                status = get_data(value, data)
                if status:
                    release_value(value)
                    check_status(status, "GetTensorMutableData")
                loss = float_view[0][0]
                release_value(value)
                status = optimizer_step(ptr, NULL)
                if status:
                    check_status(status, "OptimizerStep")
                status = lazy_reset(ptr)
                if status:
                    check_status(status, "LazyResetGrad")
            return loss

        # (b') the raw layer with the loss as a pinned output: the floor of (a')
        pinned_out_values = ffi.new("OrtValue*[]", [loss_tensor._ptr])

        def loop_bp(n: int) -> float:
            tapi = rt.training_api
            train_step, optimizer_step, lazy_reset = tapi.TrainStep, tapi.OptimizerStep, tapi.LazyResetGrad
            ptr, ins, outs, count, buffer, NULL = session_b._ptr, in_values, pinned_out_values, len(input_names), loss_buffer, ffi.NULL
            loss = math.nan
            for _ in range(n):
                status = train_step(ptr, NULL, count, ins, 1, outs)
                if status:
                    check_status(status, "TrainStep")
                loss = float(buffer)
                status = optimizer_step(ptr, NULL)
                if status:
                    check_status(status, "OptimizerStep")
                status = lazy_reset(ptr)
                if status:
                    check_status(status, "LazyResetGrad")
            return loss

        # (e) the raw layer plus what the facade's guarantees cost, inline, with the facade's own
        # pieces: the session lock around each call, the inputs pinned, the output owned (registered,
        # closed), its type and shape read, the loss copied into an array. (a) - (e) is the cost of
        # the API's structure (calls, Result, argument forms); (e) bounds any Python facade that keeps
        # these guarantees.
        input_tensors = [inputs_b[n] for n in input_names]

        def loop_e(n: int) -> float:
            tapi, api = rt.training_api, rt.api
            train_step, optimizer_step, lazy_reset = tapi.TrainStep, tapi.OptimizerStep, tapi.LazyResetGrad
            get_data, NULL, lock, dtype = api.GetTensorMutableData, ffi.NULL, session_b._lock, np.dtype(np.float32)
            ptr, ins, outs, count, tensors = session_b._ptr, in_values, out_values, len(input_names), input_tensors
            float_view = ffi.cast("float**", data)
            loss = math.nan
            for _ in range(n):
                lock.acquire()
                try:
                    pin_all(tensors)
                    try:
                        outs[0] = NULL
                        status = train_step(ptr, NULL, count, ins, 1, outs)
                        produced = adopt_outputs(outs, 1)
                    finally:
                        unpin_all(tensors)
                finally:
                    lock.release()
                check_outputs(status, produced, "TrainStep")
                value = produced[0]
                assert value is not None  # a step that succeeded filled every output
                info = value_tensor_info(value._ptr)
                if info.shape or info.onnxType != 1:
                    raise SystemExit(f"expected a float32 scalar loss, got {info}")
                status = get_data(value._ptr, data)
                if status:
                    check_status(status, "GetTensorMutableData")
                loss = float(np.array(float_view[0][0], dtype=dtype))
                close_values([value])
                lock.acquire()
                try:
                    status = optimizer_step(ptr, NULL)
                finally:
                    lock.release()
                if status:
                    check_status(status, "OptimizerStep")
                lock.acquire()
                try:
                    status = lazy_reset(ptr)
                finally:
                    lock.release()
                if status:
                    check_status(status, "LazyResetGrad")
            return loss

        # (e') the same guarantees around the pinned-loss loop: the session lock around each call, the
        # inputs and the loss tensor pinned for the step; the loss is read from its numpy scalar.
        # (a') - (e') is the cost of the API's structure; (e') bounds (a') for any Python facade that keeps them.
        pinned_in_use = input_tensors + [loss_tensor]

        def loop_ep(n: int) -> float:
            tapi = rt.training_api
            train_step, optimizer_step, lazy_reset = tapi.TrainStep, tapi.OptimizerStep, tapi.LazyResetGrad
            ptr, ins, outs, count, in_use = session_b._ptr, in_values, pinned_out_values, len(input_names), pinned_in_use
            buffer, NULL, lock = loss_buffer, ffi.NULL, session_b._lock
            loss = math.nan
            for _ in range(n):
                lock.acquire()
                try:
                    pin_all(in_use)
                    try:
                        status = train_step(ptr, NULL, count, ins, 1, outs)
                    finally:
                        unpin_all(in_use)
                finally:
                    lock.release()
                if status:
                    check_status(status, "TrainStep")
                loss = float(buffer)
                lock.acquire()
                try:
                    status = optimizer_step(ptr, NULL)
                finally:
                    lock.release()
                if status:
                    check_status(status, "OptimizerStep")
                lock.acquire()
                try:
                    status = lazy_reset(ptr)
                finally:
                    lock.release()
                if status:
                    check_status(status, "LazyResetGrad")
            return loss

        # (c) ONNX Runtime's own Python layer (the runtime image `import onnxruntime` loaded)
        options_c = C.SessionOptions()
        options_c.intra_op_num_threads = 1
        options_c.inter_op_num_threads = 1
        device = C.OrtDevice(C.OrtDevice.cpu(), C.OrtDevice.default_memory(), 0)
        state_c = C.load_checkpoint(self.paths[0])
        module_c = C.Module(self.paths[1], state_c, self.paths[2], device, options_c)
        optimizer_c = C.Optimizer(self.paths[3], state_c, device, options_c)
        x_c, y_c = _batch(batch, 0)  # the OrtValues read these arrays in place: kept alive below
        feeds_c = C.OrtValueVector()
        feeds_c.reserve(2)
        order_c = {"input": x_c, "labels": y_c}
        values_c = [C.OrtValue.ortvalue_from_numpy(order_c[n], device) for n in module_c.input_names(True)]
        for value in values_c:
            feeds_c.push_back(value)
        fetches_c = C.OrtValueVector()  # train_step_with_ort_values clears it: reused (the cheapest way)
        self.keep_c = [options_c, device, state_c, module_c, optimizer_c, x_c, y_c, feeds_c, values_c, fetches_c]

        def loop_c(n: int) -> float:
            module, optimizer, feeds, fetches = module_c, optimizer_c, feeds_c, fetches_c
            loss = math.nan
            for _ in range(n):
                module.train_step_with_ort_values(feeds, fetches)
                loss = float(fetches[0].numpy())
                optimizer.optimizer_step()
                module.lazy_reset_grad()
            return loss

        initial_c = np.zeros(module_c.get_parameters_size(True), np.float32)
        initial_value_c = C.OrtValue.ortvalue_from_numpy(initial_c, device)  # over initial_c: kept alive below
        module_c.copy_parameters_to_buffer(initial_value_c, True)
        self.keep_c += [initial_c, initial_value_c]

        self.loops.update({"a": loop_a, "a'": loop_p, "b": loop_b, "b'": loop_bp, "e": loop_e, "e'": loop_ep, "c": loop_c})
        self.resets.update(
            {
                "a": resetter(session_a),
                "a'": resetter(session_p),
                "b": resetter(session_b),
                "b'": resetter(session_b),
                "e": resetter(session_b),
                "e'": resetter(session_b),
                "c": lambda: module_c.copy_buffer_to_parameters(initial_value_c, True),
            }
        )

        # (d) the C floor, on the same session
        if floor is not None:
            session_d, inputs_d = facade_session()
            self.loops["d"] = floor_loop(floor, session_d, [inputs_d[n] for n in input_names])
            self.resets["d"] = resetter(session_d)

    def close(self) -> None:
        self.keep_c = []
        for handle in reversed(self.keep):
            handle.close()
        self.keep = []


def run_interleaved(bench: Bench, rounds: int, steps: int, warmup_blocks: int) -> dict:
    """``rounds`` rounds of one block of ``steps`` steps per variant, order reversed every other round."""
    names = [v for v in VARIANTS if v in bench.loops]
    for _ in range(warmup_blocks):
        for name in names:
            bench.resets[name]()
            bench.loops[name](steps)
    per_step: Dict[str, List[float]] = {name: [] for name in names}
    losses: Dict[str, List[float]] = {name: [] for name in names}
    for r in range(rounds):
        order = names if r % 2 == 0 else names[::-1]
        for name in order:
            loop = bench.loops[name]
            bench.resets[name]()  # every block trains from the checkpoint's parameters (see NOTE_RESET)
            t0 = time.perf_counter()
            loss = loop(steps)
            elapsed = time.perf_counter() - t0
            per_step[name].append(elapsed / steps * 1e6)
            losses[name].append(loss)
    result: dict = {"steps_per_block": steps, "rounds": rounds, "variants": {}, "ratios": {}}
    for name in names:
        result["variants"][name] = {
            "label": LABELS[name],
            "us_per_step": summary(per_step[name]),
            "blocks_us_per_step": per_step[name],
            "block_end_loss": summary(losses[name]),
            "last_loss": losses[name][-1],
        }
    for num, den in RATIOS:
        if num in per_step and den in per_step:
            paired = [x / y for x, y in zip(per_step[num], per_step[den])]
            result["ratios"][f"{num}/{den}"] = summary(paired)
    return result


# --- two sessions, two threads ------------------------------------------------------------------------


def measure_threads(steps: int, reps: int, floor: Any) -> dict:
    """Two facade sessions on the big model (batch 64, one intra-op thread each): ``steps`` steps each,
    in two threads vs one after the other; ``reps`` pairs, the order alternating, every run from the
    checkpoint's parameters. The same with the C floor as the control: what the machine allows."""
    from ort_cffi import OnnxTensor, OrtEnvironment, SessionOptions

    env = OrtEnvironment.getEnvironment()
    folder, batch = MODELS["big"]
    paths = _paths(folder)
    handles: List[Any] = []
    sessions = []
    for seed in (1, 2):
        options = SessionOptions()
        options.setIntraOpNumThreads(1)
        options.setInterOpNumThreads(1)
        session = env.createTrainingSession(paths[0], paths[1], paths[2], paths[3], options)
        options.close()
        x, y = _batch(batch, seed)
        inputs = {"input": OnnxTensor.createTensor(env, x), "labels": OnnxTensor.createTensor(env, y)}
        handles += [session, *inputs.values()]
        sessions.append((session, inputs, session.copyParametersToBuffer(True)))

    kinds = {"facade": [facade_loop(s, i) for s, i, _ in sessions]}
    if floor is not None:
        kinds["floor"] = [floor_loop(floor, s, [i[n] for n in s.getTrainInputNames()]) for s, i, _ in sessions]

    def reset() -> None:
        for session, _, initial in sessions:
            session.copyBufferToParameters(initial, True)

    def sequential(loops: List[Callable[[int], float]]) -> Tuple[float, float]:
        reset()
        c0, t0 = time.process_time(), time.perf_counter()
        for loop in loops:
            loop(steps)
        return time.perf_counter() - t0, time.process_time() - c0

    def parallel(loops: List[Callable[[int], float]]) -> Tuple[float, float]:
        reset()
        threads = [threading.Thread(target=loop, args=(steps,)) for loop in loops]
        c0, t0 = time.process_time(), time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return time.perf_counter() - t0, time.process_time() - c0

    result: dict = {"model": "big", "batch": batch, "steps_per_session": steps, "reps": reps}
    try:
        for loops in kinds.values():  # warm-up
            for loop in loops:
                loop(max(1, steps // 5))
        for kind, loops in kinds.items():
            seq: List[Tuple[float, float]] = []
            par: List[Tuple[float, float]] = []
            for r in range(reps):
                if r % 2 == 0:
                    seq.append(sequential(loops))
                    par.append(parallel(loops))
                else:
                    par.append(parallel(loops))
                    seq.append(sequential(loops))
            result[kind] = {
                "sequential_s": [w for w, _ in seq],
                "two_threads_s": [w for w, _ in par],
                "two_threads_cpu_s": [c for _, c in par],
                "speedup": summary([s[0] / p[0] for s, p in zip(seq, par)]),
                # CPU seconds per wall second while the two threads ran: 2.0 = both on a core all along
                "two_threads_parallelism": summary([c / w for w, c in par]),
            }
    finally:
        for handle in reversed(handles):
            handle.close()
    return result


# --- report ------------------------------------------------------------------------------------------


def targets(results: dict) -> List[dict]:
    out = []

    def add(name: str, value: Optional[float], op: str, limit: float, unit: str = "", caveat: str = "") -> None:
        if value is None:
            status = "SKIP"
        else:
            ok = {"<=": value <= limit, "<": value < limit, ">=": value >= limit}[op]
            status = "PASS" if ok else "FAIL"
        entry = {"target": name, "value": value, "op": op, "limit": limit, "unit": unit, "status": status}
        if caveat:
            entry["caveat"] = caveat
        out.append(entry)

    def ratio(model: str, key: str) -> Optional[float]:
        r = results["steps"].get(model, {}).get("ratios", {}).get(key)
        return r["median"] if r else None

    add("tiny (a)/(c) paired median", ratio("tiny", "a/c"), "<=", 1.10)
    add("tiny (a')/(c) paired median", ratio("tiny", "a'/c"), "<=", 1.00)
    add("tiny (a)/(d) paired median", ratio("tiny", "a/d"), "<=", 1.25)
    add("big (a)/(d) paired median", ratio("big", "a/d"), "<=", 1.02)
    imp = results.get("import")
    add("cold import + load (in child)", imp["cold"]["import_load_s"] if imp else None, "<", 0.5, "s")
    add("warm import + load (in child)", imp["warm_import_load_s"] if imp else None, "<", 0.3, "s")
    rss = results.get("tensor_rss")
    add("tensor over 256 MiB: extra RSS", rss["extra_rss_mib"] if rss else None, "<", 16.0, "MiB")
    thr = results.get("threads")
    caveat = ""
    if thr and "floor" in thr and thr["floor"]["speedup"]["median"] < 1.5:
        caveat = (f"the C floor control reached only {thr['floor']['speedup']['median']:.2f}x: the machine had no second "
                  "core free, so this is no verdict on ort_cffi")
    add("two sessions, two threads: speed-up", thr["facade"]["speedup"]["median"] if thr else None, ">=", 1.5, "x", caveat)
    return out


def print_report(results: dict) -> None:
    meta = results["meta"]
    print(f"\nort_cffi bench  ({meta['runtime_version']}, Python {meta['python']}, {meta['cpus']} CPUs, "
          f"load avg {meta['loadavg_start']} -> {meta['loadavg_end']}, {meta['total_s']:.0f} s)")
    print_startup(results)
    if results.get("tensors"):
        print_tensors(results["tensors"])
    for model, res in results["steps"].items():
        folder, batch = MODELS[model]
        print(f"\n{model} model ({'784-16-10' if model == 'tiny' else '784-500-10'}, batch {batch}): "
              f"{res['rounds']} rounds x {res['steps_per_block']} steps per block")
        print(f"  {'variant':<26} {'median us/step':>15} {'p25-p75':>19}")
        for name, v in res["variants"].items():
            s = v["us_per_step"]
            print(f"  ({name}) {v['label']:<21} {s['median']:>15.1f} {s['p25']:>9.1f}-{s['p75']:<9.1f}")
        print(f"  {'paired ratio':<26} {'median':>15} {'p25-p75':>19}")
        for key, s in res["ratios"].items():
            print(f"  {key:<26} {s['median']:>15.3f} {s['p25']:>9.3f}-{s['p75']:<9.3f}")
    print_zoo(results.get("zoo", {}))
    thr = results.get("threads")
    if thr:
        print(f"\ntwo sessions (big, batch {thr['batch']}, {thr['steps_per_session']} steps each, {thr['reps']} pairs), "
              "two threads vs one after the other")
        for kind in ("facade", "floor"):
            if kind in thr:
                t = thr[kind]
                s, par = t["speedup"], t["two_threads_parallelism"]
                print(f"  {kind:<7} speed-up {s['median']:.2f}x (p25-p75 {s['p25']:.2f}-{s['p75']:.2f}); sequential "
                      f"{statistics.median(t['sequential_s']):.3f} s, threads {statistics.median(t['two_threads_s']):.3f} s, "
                      f"CPU/wall in threads {par['median']:.2f}")
        if "floor" in thr:
            print("  (the floor is the control: a floor speed-up well under 2x or CPU/wall well under 2 means the machine "
                  "had no second core free)")
    if results.get("notes"):
        print()
        for note in results["notes"]:
            print(f"note: {note}")
    print("\ntargets")
    for t in results["targets"]:
        value = "n/a" if t["value"] is None else f"{t['value']:.3f}{t['unit']}"
        print(f"  {t['status']:<4}  {t['target']:<40} {value:>12}  (target {t['op']} {t['limit']}{t['unit']})")
        if t.get("caveat"):
            print(f"        ({t['caveat']})")
    tiny = results["steps"].get("tiny", {}).get("ratios", {})
    if all(key in tiny for key in ("b'/c", "e'/c", "e/c")):
        raw_pinned, guarantees_pinned, guarantees = (tiny[key]["median"] for key in ("b'/c", "e'/c", "e/c"))
        print(f"  floors on the tiny model (the guarantees alone, no API around them): (a')/(c) >= (e')/(c) = "
              f"{guarantees_pinned:.3f}, (a)/(c) >= (e)/(c) = {guarantees:.3f}; with no guarantees at all, "
              f"(b')/(c) = {raw_pinned:.3f}")


def _git_commit() -> Optional[str]:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True, text=True, timeout=10)
        return out.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "") if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


def zoo_only(rounds: int, steps: int, loadavg_start: Tuple[float, ...], out: Path) -> int:
    """``--zoo-only``: the zoo's models alone, facade against ONNX Runtime's Python layer."""
    if "torch" not in sys.modules:
        sys.modules["torch"] = None  # type: ignore[assignment]
    from ort_cffi import OrtEnvironment

    OrtEnvironment.getEnvironment()  # ort_cffi's runtime first: `import onnxruntime` comes after, images apart
    import onnxruntime  # type: ignore[import-untyped]  # noqa: F401
    from onnxruntime.capi import _pybind_state as C  # type: ignore[import-untyped]

    zoo = measure_zoo(C, rounds, steps)
    print_zoo(zoo)
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").exists() else platform.processor()
    meta = {"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "cpu": cpu, "cpus": os.cpu_count(),
            "python": platform.python_version(), "git_commit": _git_commit(),
            "loadavg_start": [round(x, 2) for x in loadavg_start], "loadavg_end": [round(x, 2) for x in os.getloadavg()]}
    print(f"\n({meta['date']}, {cpu}, {meta['cpus']} CPUs, Python {meta['python']}, load avg {meta['loadavg_start']} -> "
          f"{meta['loadavg_end']}, commit {meta['git_commit']})")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"zoo": zoo, "meta": meta}, indent=1))
    print(f"results written to {out}")
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, help="interleaved rounds per model (default 30; 8 with --quick)")
    parser.add_argument("--tiny-steps", type=int, help="steps per block, tiny model (default 200; 100 with --quick)")
    parser.add_argument("--big-steps", type=int, help="steps per block, big model (default 20; 10 with --quick)")
    parser.add_argument("--thread-steps", type=int, help="steps per session in the threads test (default 200; 40 with --quick)")
    parser.add_argument("--quick", action="store_true", help="a fast smoke run (about 20 s)")
    parser.add_argument("--torch-python", help="an interpreter with torch and the training wheel, for the first-step "
                        "reference (default: .cache/bench-torch, created on first use)")
    parser.add_argument("--no-first-step", action="store_true", help="skip the first-step comparison (it needs torch)")
    parser.add_argument("--tensors", action="store_true", help="measure only the tensor figures (about 20 s)")
    parser.add_argument("--zoo-only", action="store_true", help="measure only the zoo models, facade vs ONNX Runtime's "
                        "Python layer (about a minute with --quick)")
    parser.add_argument("--zoo-rounds", type=int, help="interleaved rounds per zoo model (default 12; 6 with --quick)")
    parser.add_argument("--zoo-steps", type=int, help="steps per block, zoo models (default 10; 5 with --quick)")
    parser.add_argument("--json", default=str(ROOT / "runs" / "bench.json"), help="where to write the results (default runs/bench.json)")
    args = parser.parse_args(argv)
    quick = args.quick
    rounds = args.rounds or (8 if quick else 30)
    tiny_steps = args.tiny_steps or (100 if quick else 200)
    big_steps = args.big_steps or (10 if quick else 20)
    thread_steps = args.thread_steps or (40 if quick else 200)
    thread_reps = 3 if quick else 7
    zoo_rounds = args.zoo_rounds or (6 if quick else 12)
    zoo_steps = args.zoo_steps or (5 if quick else 10)
    warm_runs = 1 if quick else 3

    t_start = time.perf_counter()
    loadavg_start = os.getloadavg()
    if args.tensors:
        if "torch" not in sys.modules:
            sys.modules["torch"] = None  # type: ignore[assignment]
        tensors = measure_tensors(rounds=15, per_round=2000)
        print_tensors(tensors)
        print(f"\n({platform.python_version()}, {os.cpu_count()} CPUs, load avg {[round(x, 2) for x in loadavg_start]} -> "
              f"{[round(x, 2) for x in os.getloadavg()]}, commit {_git_commit()})")
        return 0
    if args.zoo_only:
        return zoo_only(zoo_rounds, zoo_steps, loadavg_start, Path(args.json))
    results: dict = {"steps": {}, "notes": [NOTE_RESET, NOTE_SHARED]}
    torch_installed = importlib.util.find_spec("torch") is not None

    # 1. Child processes first, before this process loads anything.
    print("measuring import + load (child processes)...", flush=True)
    results["import"] = measure_import(warm_runs)
    if not args.no_first_step:
        print("measuring fresh processes to their first training step, ort_cffi and ONNX Runtime's Python layer...", flush=True)
        results["first_step"] = measure_first_step(1 if quick else 5, args.torch_python)
    print("measuring the RSS of a tensor over 256 MiB (child process)...", flush=True)
    results["tensor_rss"] = measure_rss()

    # 2. ort_cffi's private runtime, then the C floor, then (only now) `import onnxruntime`.
    if "torch" not in sys.modules:
        sys.modules["torch"] = None  # type: ignore[assignment]  # the bench needs no torch: keep it out
    from ort_cffi import OrtEnvironment
    from ort_cffi.capi import get_runtime

    rt = get_runtime()
    OrtEnvironment.getEnvironment()
    try:
        floor = build_floor()
    except Exception as exc:  # noqa: BLE001 - no compiler: report without (d)
        floor = None
        results["notes"].append(f"the C floor (d) could not be built, so it is skipped: {type(exc).__name__}: {exc}")
    import onnxruntime  # type: ignore[import-untyped]  # noqa: F401  # after ort_cffi's runtime: images stay apart
    from onnxruntime.capi import _pybind_state as C  # type: ignore[import-untyped]

    # 3. The step loops.
    for model, steps in (("tiny", tiny_steps), ("big", big_steps)):
        print(f"timing the step loops on the {model} model...", flush=True)
        bench = Bench(model, floor, C)
        try:
            results["steps"][model] = run_interleaved(bench, rounds, steps, warmup_blocks=2)
        finally:
            bench.close()
        del bench
        gc.collect()

    # 3b. The zoo's models, facade against ONNX Runtime's Python layer.
    results["zoo"] = measure_zoo(C, zoo_rounds, zoo_steps)

    # 4. Tensors: create + close, read back.
    print("timing tensor creation and reads...", flush=True)
    results["tensors"] = measure_tensors(rounds=8 if quick else 15, per_round=1000 if quick else 2000)

    # 5. Two sessions in two threads.
    print("timing two sessions in two threads...", flush=True)
    results["threads"] = measure_threads(thread_steps, thread_reps, floor)

    for model, res in results["steps"].items():
        bad = [name for name, v in res["variants"].items() if not math.isfinite(v["last_loss"])]
        if bad:
            results["notes"].append(f"{model}: non-finite loss in {bad}")
    results["meta"] = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "runtime_version": rt.version,
        "runtime_kind": rt.kind,
        "onnxruntime_python_version": onnxruntime.__version__,
        "numpy": np.__version__,
        "git_commit": _git_commit(),
        "intra_op_threads": 1,
        "torch_installed": torch_installed,
        "quick": quick,
        "rounds": rounds,
        "steps_per_block": {"tiny": tiny_steps, "big": big_steps},
        "loadavg_start": [round(x, 2) for x in loadavg_start],
        "loadavg_end": [round(x, 2) for x in os.getloadavg()],
        "total_s": time.perf_counter() - t_start,
    }
    results["targets"] = targets(results)
    print_report(results)
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1))
    print(f"\nresults written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
