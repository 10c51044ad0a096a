"""Export the real-model zoo of ``tests/zoo`` : small, seeded models written out by the exporters
people use (torch.onnx's TorchScript exporter, transformers models built from a config, skl2onnx), each with a
tiny learnable dataset in the trainer's ``.npz`` format, and ``zoo.json``, the manifest the tests read.

Run once; the outputs are committed, so that the tests need neither torch nor transformers nor scikit-learn.
torch is never a dependency of ort_cffi: it lives only in the separate virtual environment made here.

    python3.11 -m venv /work/zoo-venv                    # outside the repository
    /work/zoo-venv/bin/pip install torch==2.13.0 "onnx<1.17" "numpy<2.3" scikit-learn skl2onnx
    /work/zoo-venv/bin/pip install --no-deps transformers==4.57.6
    /work/zoo-venv/bin/pip install "huggingface-hub>=0.34,<1.0" "tokenizers>=0.22,<=0.23" \\
        safetensors regex pyyaml packaging filelock requests tqdm
    /work/zoo-venv/bin/python scripts/export_zoo.py --out tests/zoo

torch's default exporter (``dynamo=True``, the ``*_dynamo`` models) also needs onnxscript 0.7, which asks for
onnx 1.17; it runs with 1.16.2 installed beside it (``pip install --no-deps onnxscript==0.7.2`` into the same
environment, with what it imports: ``onnx_ir==1.1.0 ml_dtypes==0.7.0 packaging``): its
``_framework_apis.torch_2_11`` is what torch 2.13 imports. The models added for issue 31
alone are exported with

    /work/zoo-venv/bin/python scripts/export_zoo.py --out tests/zoo --only bilstm_tagger bilstm_tagger_dynamo \\
        bigru_classifier bigru_classifier_dynamo einsum_attention einsum_attention_dynamo atan_cumsum \\
        atan_cumsum_dynamo cnn_dynamo transformer_dynamo

which leaves every other file as it is (their entries too; each new entry records its own ``versions``).

(``torch==2.13.0`` is the CPU wheel this machine keeps on disk; transformers goes in without its
dependencies, which would pull another torch. No weights are downloaded: every model is randomly
initialised from a seed.) torchvision is not installed: PyPI's build does not import beside the CPU
torch 2.13.0 ("operator torchvision::nms does not exist"), so the MobileNets are written here after
``torchvision/models/mobilenetv2.py`` and ``mobilenetv3.py`` (same blocks, same initialisation, small
``width_mult``), which export the same ONNX operators.

Then record what ONNX Runtime's generator says about each model as exported (``prepare=False``; the baseline
column of the zoo table in tests/zoo/zoo.json), with the repository's own environment, which has ONNX
Runtime's training layer and no torch:

    PYTHONPATH=. .venv/bin/python scripts/export_zoo.py --out tests/zoo --baseline

The export is deterministic: the same versions write the same bytes (``--twice`` exports into a temporary
folder a second time and compares the sha256 of every file). A re-export keeps each model's recorded
baseline while its file's sha256 is unchanged.

Every torch export is opset 17, ``dynamo=False`` (the TorchScript exporter), IR version 8, except the
``*_dynamo`` models: torch's default exporter (``dynamo=True``), its default opset (20) and IR version (10),
the batch dimension made dynamic with ``dynamic_shapes`` (``export_dynamo``); skl2onnx writes its default
opsets. Each file is checked for ONNX Runtime 1.19's limits (IR version <= 10, default opset
<= 21). All models take a symbolic batch dimension ``N``. The exporter merges initializers of equal values
(norm weights all start at 1, biases and running means at 0; summarised in zoo.json), so parameters and batch-norm statistics that start constant are nudged by
U(-0.01, 0.01) from the model's seed before export.

Datasets (``<name>.npz``): ``train_<input>`` and ``val_<input>`` for every input of the training model, as
``ort_cffi/trainer/data.py`` reads them: the model's own inputs (``train_input_ids``, ``train_attention_mask``
for the BERT model) and the input the loss adds (``labels`` for cross-entropy, ``target`` for MSE). Labels
have their task's shape ([N] per sample, [N, T] per token, [N, H, W] per pixel), which is not always the
shape ONNX Runtime's cross-entropy block declares (it drops the last dimension of the output). Labels come
from simple seeded rules, so validation loss falls within a few epochs; each entry of zoo.json records the
rule and a short torch fit on a copy of the exported model (val loss before and after 3 epochs).
"""
from __future__ import annotations

import argparse
import copy
import hashlib
import io
import json
import math
import shutil
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
OPSET = 17
N_TRAIN, N_VAL = 256, 64
IMAGE = 32
CLASSES = 4  # image classifiers
MAX_IR, MAX_OPSET = 10, 21  # what ONNX Runtime 1.19.2 loads
MANIFEST = "zoo.json"
# What ort_cffi's gradient builder (generate_artifacts' default) does with the models added for issue 31,
# measured with tests/apps/test_zoo.py; the older models train.
BIDI = ("train (ort_cffi's builder: {op} in both directions; ONNX Runtime's {op} gradient kernel runs the forward "
        "direction only)")
EXPECTED: Dict[str, str] = {
    "bilstm_tagger": BIDI.format(op="LSTM"), "bilstm_tagger_dynamo": BIDI.format(op="LSTM"),
    "bigru_classifier": BIDI.format(op="GRU"), "bigru_classifier_dynamo": BIDI.format(op="GRU"),
    "einsum_attention": "train (ort_cffi's builder: the Einsum rule; ONNX Runtime's generator has none)",
    "einsum_attention_dynamo": "train (ort_cffi's builder: the Einsum rule; ONNX Runtime's generator has none)",
    "atan_cumsum": "train (ort_cffi's builder: Atan and CumSum rules; ONNX Runtime's generator refuses Atan)",
    "atan_cumsum_dynamo": "train (ort_cffi's builder: Atan and CumSum rules; ONNX Runtime's generator refuses Atan)",
    "cnn_dynamo": "train (the exporter folded BatchNorm into the convolutions: nothing left to prepare)",
    "transformer_dynamo": "train (LayerNormalization's optional outputs declared)",
}
Arrays = Dict[str, np.ndarray]


# --- files --------------------------------------------------------------------------------------------------

def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_npz(path: Path, arrays: Arrays) -> None:
    """numpy.savez_compressed, but byte-for-byte reproducible: numpy stamps each member with the current time."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for key, array in arrays.items():
            info = zipfile.ZipInfo(key + ".npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            buffer = io.BytesIO()
            np.lib.format.write_array(buffer, np.ascontiguousarray(array), allow_pickle=False)
            zf.writestr(info, buffer.getvalue())


def describe_onnx(path: Path) -> Dict[str, Any]:
    """IR version, opsets, inputs, outputs, operator counts and parameter count of a saved model; refuses
    what ONNX Runtime 1.19.2 would not load."""
    import onnx

    model = onnx.load(str(path))
    opsets = {op.domain or "": op.version for op in model.opset_import}
    if model.ir_version > MAX_IR or opsets.get("", 0) > MAX_OPSET:
        raise SystemExit(f"{path}: IR {model.ir_version}, opset {opsets}: ONNX Runtime 1.19 loads IR <= {MAX_IR}, opset <= {MAX_OPSET}")
    onnx.checker.check_model(model)

    def value(v: Any) -> Dict[str, Any]:
        t = v.type
        if t.HasField("tensor_type"):
            dims = [d.dim_param if d.HasField("dim_param") else (d.dim_value if d.HasField("dim_value") else None)
                    for d in t.tensor_type.shape.dim]
            return {"name": v.name, "dtype": onnx.helper.tensor_dtype_to_np_dtype(t.tensor_type.elem_type).name,
                    "shape": dims}
        return {"name": v.name, "type": onnx.helper.printable_type(t)}

    ops: Dict[str, int] = {}
    for node in model.graph.node:
        key = f"{node.domain}:{node.op_type}" if node.domain else node.op_type
        ops[key] = ops.get(key, 0) + 1
    floats = [i for i in model.graph.initializer if i.data_type in (1, 10, 11, 16)]
    return {
        "ir_version": model.ir_version,
        "opsets": opsets,
        "producer": f"{model.producer_name} {model.producer_version}".strip(),
        "inputs": [value(v) for v in model.graph.input],
        "outputs": [value(v) for v in model.graph.output],
        "operators": dict(sorted(ops.items())),
        "float_initializers": len(floats),
        "float_parameters": int(sum(math.prod(i.dims) for i in floats)),
    }


# --- torch helpers ------------------------------------------------------------------------------------------

def torch_seed(seed: int) -> None:
    import torch

    torch.manual_seed(seed)
    np.random.seed(seed)


def nudge(model: Any, seed: int) -> None:
    """Move parameters and batch-norm statistics that start constant (norm weights 1, biases 0, running
    mean 0, running variance 1) by U(-0.01, 0.01), so that the exporter does not merge equal initializers."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        tensors = list(model.named_parameters()) + [
            (n, b) for n, b in model.named_buffers() if n.endswith(("running_mean", "running_var"))]
        for name, t in tensors:
            if t.numel() > 1 and t.is_floating_point() and bool((t == t.flatten()[0]).all()):
                delta = (torch.rand(t.shape, generator=gen) * 2 - 1) * 0.01
                t.add_(delta.abs() if name.endswith("running_var") else delta)


def calibrate_batchnorm(model: Any, images: np.ndarray, batch: int = 64) -> bool:
    """Set batch-norm running statistics to the training images' (cumulative average over train-mode
    forward passes, no gradient), as a trained model has them. With the initial statistics (mean 0,
    variance 1) an eval-mode MobileNet passes almost no signal: its depthwise convolutions start with a
    tiny variance that only batch statistics make up for. Returns whether the model has batch norm."""
    import torch

    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if not norms:
        return False
    momenta = [m.momentum for m in norms]
    for m in norms:
        m.reset_running_stats()
        m.momentum = None
    was_training = model.training
    model.train()
    with torch.no_grad():
        for start in range(0, len(images), batch):
            model(torch.from_numpy(images[start:start + batch]))
    for m, momentum in zip(norms, momenta):
        m.momentum = momentum
    model.train(was_training)
    return True


def export_torch(model: Any, args: Tuple[Any, ...], path: Path, inputs: Sequence[str], outputs: Sequence[str],
                 dynamic: Dict[str, Dict[int, str]], mode: str = "EVAL", fold: bool = True,
                 opset: int = OPSET) -> Dict[str, Any]:
    """torch.onnx.export with the TorchScript exporter; returns how it was called, for zoo.json."""
    import warnings

    import torch

    training = getattr(torch.onnx.TrainingMode, mode)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, args, str(path), input_names=list(inputs), output_names=list(outputs),
                          dynamic_axes=dynamic, opset_version=opset, dynamo=False, training=training,
                          do_constant_folding=fold)
    return {"tool": "torch.onnx.export", "torch": torch.__version__, "dynamo": False, "opset_version": opset,
            "training": f"TrainingMode.{mode}", "module_mode": "train" if model.training else "eval",
            "do_constant_folding": fold}


def export_dynamo(model: Any, args: Tuple[Any, ...], path: Path, inputs: Sequence[str], outputs: Sequence[str],
                  batch_inputs: Sequence[str]) -> Dict[str, Any]:
    """torch.onnx.export with torch's default exporter (dynamo=True, its own opset), the first dimension of
    ``batch_inputs`` dynamic (Dim "N"). Each node's ``pkg.torch.onnx.stack_trace`` metadata is dropped: it
    names files of the machine that exported (this script's path, torch's), so the bytes would change with
    the checkout; the rest of the metadata (namespace, name_scopes, fx_node, the graph signature), which
    names the modules, stays as exported."""
    import warnings

    import onnx
    import torch

    batch = torch.export.Dim("N")
    # by position (a dict's keys would be the forward's argument names, not the graph's input names)
    dynamic = tuple({0: batch} if name in batch_inputs else {} for name in inputs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(model, args, input_names=list(inputs), output_names=list(outputs), dynamo=True,
                                    dynamic_shapes=dynamic, verbose=False)
    program.save(str(path))
    exported = onnx.load(str(path))
    for node in exported.graph.node:
        kept = [copy.deepcopy(p) for p in node.metadata_props if p.key != "pkg.torch.onnx.stack_trace"]
        del node.metadata_props[:]
        node.metadata_props.extend(kept)
    onnx.save(exported, str(path))
    return {"tool": "torch.onnx.export", "torch": torch.__version__, "dynamo": True,
            "opset_version": f"the exporter's default ({ {o.domain: o.version for o in exported.opset_import}.get('')})",
            "dynamic_shapes": [({0: "Dim('N')"} if name in batch_inputs else {}) for name in inputs],
            "module_mode": "train" if model.training else "eval", "optimize": "default (True)",
            "metadata": "pkg.torch.onnx.stack_trace removed from every node (it names local paths)"}


def torch_fit(model: Any, forward: Callable[[Any, List[Any]], Any], loss: Callable[[Any, Any], Any],
              train: Tuple[List[np.ndarray], np.ndarray], val: Tuple[List[np.ndarray], np.ndarray],
              epochs: int = 3, lr: float = 3e-3, batch: int = 32, inplace: bool = False) -> Dict[str, Any]:
    """Val loss before and after each of a few epochs of AdamW on a copy of the exported model: evidence
    that the dataset is learnable from the exported weights (the files are written before this runs). The
    copy stays in the mode it was exported in, as its graph computes: batch norm from running statistics
    and no dropout for an eval-mode export (what training the ONNX file does), batch statistics for
    TrainingMode.TRAINING."""
    import torch

    model = model if inplace else copy.deepcopy(model)
    gen = torch.Generator().manual_seed(0)
    xs = [torch.from_numpy(a) for a in train[0]]
    y = torch.from_numpy(train[1])
    vxs = [torch.from_numpy(a) for a in val[0]]
    vy = torch.from_numpy(val[1])

    def val_loss() -> float:
        with torch.no_grad():
            return round(float(loss(forward(model, vxs), vy)), 4)

    history = [val_loss()]
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    for _ in range(epochs):
        order = torch.randperm(len(y), generator=gen)
        for start in range(0, len(y), batch):
            idx = order[start:start + batch]
            opt.zero_grad()
            loss(forward(model, [x[idx] for x in xs]), y[idx]).backward()
            opt.step()
        history.append(val_loss())
    return {"optimizer": f"AdamW lr {lr}, batch {batch}", "module_mode": "train" if model.training else "eval",
            "val_loss_per_epoch": history}


# --- datasets -----------------------------------------------------------------------------------------------

PATTERNS = [(0,), (1,), (2,), (0, 1)]  # colour channels of the square of each image class


def image_classes(rng: np.random.Generator, n: int) -> Tuple[np.ndarray, np.ndarray]:
    """[n, 3, 32, 32] float32 images: quantised noise (compresses well) and one square whose colour
    channels give the class (0: red, 1: green, 2: blue, 3: red+green)."""
    x = rng.integers(0, 4, size=(n, 3, IMAGE, IMAGE)).astype(np.float32) * np.float32(0.125)
    y = rng.integers(0, CLASSES, size=n).astype(np.int64)
    for i in range(n):
        h, w = rng.integers(8, 17, size=2)
        top, left = rng.integers(0, IMAGE - h + 1), rng.integers(0, IMAGE - w + 1)
        for c in PATTERNS[y[i]]:
            x[i, c, top:top + h, left:left + w] += 1.0
    return x, y


IMAGE_RULE = ("image [3, 32, 32]: quantised noise (multiples of 0.125 up to 0.375) plus one square (8-16 px) "
              "adding 1.0 to the channels of its class: 0 red, 1 green, 2 blue, 3 red+green")


def image_dataset(seed: int) -> Tuple[Arrays, Tuple[Any, Any]]:
    rng = np.random.default_rng(seed)
    xt, yt = image_classes(rng, N_TRAIN)
    xv, yv = image_classes(rng, N_VAL)
    return ({"train_input": xt, "train_labels": yt, "val_input": xv, "val_labels": yv},
            (([xt], yt), ([xv], yv)))


def segmentation(rng: np.random.Generator, n: int, classes: int) -> Tuple[np.ndarray, np.ndarray]:
    """Label maps of 1-3 rectangles of classes 1..classes-1 on background 0; image channel k holds
    (label == k + 1) plus quantised noise."""
    y = np.zeros((n, IMAGE, IMAGE), np.int64)
    for i in range(n):
        for _ in range(rng.integers(1, 4)):
            h, w = rng.integers(6, 17, size=2)
            top, left = rng.integers(0, IMAGE - h + 1), rng.integers(0, IMAGE - w + 1)
            y[i, top:top + h, left:left + w] = rng.integers(1, classes)
    x = rng.integers(0, 4, size=(n, classes - 1, IMAGE, IMAGE)).astype(np.float32) * np.float32(0.125)
    for k in range(classes - 1):
        x[:, k] += (y == k + 1)
    return x, y


def marker_tokens(rng: np.random.Generator, n: int, length: int, vocab: int, markers: Sequence[int],
                  first_plain: int, min_length: int, cls: Optional[int] = None,
                  last: Optional[int] = None) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Token sequences holding exactly one marker token, whose index is the class; padded with 0 after a
    random length (mask 0 there). ``cls``: a token put first (BERT's [CLS]); ``last``: the marker lies
    within the last ``last`` tokens."""
    ids = np.zeros((n, length), np.int64)
    mask = np.zeros((n, length), np.int64)
    y = rng.integers(0, len(markers), size=n).astype(np.int64)
    for i in range(n):
        size = int(rng.integers(min_length, length + 1))
        ids[i, :size] = rng.integers(first_plain, vocab, size=size)
        mask[i, :size] = 1
        start = 0
        if cls is not None:
            ids[i, 0] = cls
            start = 1
        if last is not None:
            start = max(start, size - last)
        ids[i, rng.integers(start, size)] = markers[y[i]]
    return ids, mask, y


# --- architectures (torch) ----------------------------------------------------------------------------------

def _make_divisible(v: float, divisor: int = 8, min_value: Optional[int] = None) -> int:
    """torchvision.models._utils._make_divisible."""
    if min_value is None:
        min_value = divisor
    new_v = max(min_value, int(v + divisor / 2) // divisor * divisor)
    if new_v < 0.9 * v:
        new_v += divisor
    return new_v


def torch_modules() -> Dict[str, Any]:
    """The architectures, defined once torch is imported (``--baseline`` runs without torch)."""
    import torch
    from torch import nn
    from torch.nn import functional as F

    class ConvNormActivation(nn.Sequential):
        """torchvision.ops.misc.Conv2dNormActivation (BatchNorm2d, bias only without a norm)."""

        def __init__(self, cin: int, cout: int, kernel: int = 3, stride: int = 1, groups: int = 1,
                     norm: Any = nn.BatchNorm2d, act: Any = nn.ReLU) -> None:
            layers: List[nn.Module] = [nn.Conv2d(cin, cout, kernel, stride, (kernel - 1) // 2, groups=groups,
                                                 bias=norm is None)]
            if norm is not None:
                layers.append(norm(cout))
            if act is not None:
                layers.append(act(inplace=True))
            super().__init__(*layers)

    def torchvision_init(model: nn.Module) -> None:
        """The weight initialisation of torchvision's MobileNets."""
        for m in model.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out")
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, (nn.BatchNorm2d, nn.GroupNorm)):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, 0.01)
                nn.init.zeros_(m.bias)

    # MobileNetV2, after torchvision/models/mobilenetv2.py
    class InvertedResidualV2(nn.Module):
        def __init__(self, inp: int, oup: int, stride: int, expand_ratio: int) -> None:
            super().__init__()
            hidden = int(round(inp * expand_ratio))
            self.use_res_connect = stride == 1 and inp == oup
            layers: List[nn.Module] = []
            if expand_ratio != 1:
                layers.append(ConvNormActivation(inp, hidden, kernel=1, act=nn.ReLU6))
            layers += [ConvNormActivation(hidden, hidden, stride=stride, groups=hidden, act=nn.ReLU6),
                       nn.Conv2d(hidden, oup, 1, 1, 0, bias=False), nn.BatchNorm2d(oup)]
            self.conv = nn.Sequential(*layers)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + self.conv(x) if self.use_res_connect else self.conv(x)

    class MobileNetV2(nn.Module):
        def __init__(self, num_classes: int, width_mult: float, round_nearest: int = 8) -> None:
            super().__init__()
            setting = [[1, 16, 1, 1], [6, 24, 2, 2], [6, 32, 3, 2], [6, 64, 4, 2], [6, 96, 3, 1], [6, 160, 3, 2],
                       [6, 320, 1, 1]]
            channels = _make_divisible(32 * width_mult, round_nearest)
            self.last_channel = _make_divisible(1280 * max(1.0, width_mult), round_nearest)
            features: List[nn.Module] = [ConvNormActivation(3, channels, stride=2, act=nn.ReLU6)]
            for t, c, n, s in setting:
                out = _make_divisible(c * width_mult, round_nearest)
                for i in range(n):
                    features.append(InvertedResidualV2(channels, out, s if i == 0 else 1, t))
                    channels = out
            features.append(ConvNormActivation(channels, self.last_channel, kernel=1, act=nn.ReLU6))
            self.features = nn.Sequential(*features)
            self.classifier = nn.Sequential(nn.Dropout(p=0.2), nn.Linear(self.last_channel, num_classes))
            torchvision_init(self)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = self.features(x)
            x = F.adaptive_avg_pool2d(x, (1, 1))
            return self.classifier(torch.flatten(x, 1))

    # MobileNetV3, after torchvision/models/mobilenetv3.py (and torchvision.ops.SqueezeExcitation)
    class SqueezeExcitation(nn.Module):
        def __init__(self, channels: int, squeeze: int) -> None:
            super().__init__()
            self.avgpool = nn.AdaptiveAvgPool2d(1)
            self.fc1 = nn.Conv2d(channels, squeeze, 1)
            self.fc2 = nn.Conv2d(squeeze, channels, 1)
            self.activation = nn.ReLU()
            self.scale_activation = nn.Hardsigmoid()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            scale = self.scale_activation(self.fc2(self.activation(self.fc1(self.avgpool(x)))))
            return scale * x

    class InvertedResidualV3(nn.Module):
        def __init__(self, cin: int, kernel: int, expanded: int, cout: int, use_se: bool, act: str, stride: int,
                     width_mult: float) -> None:
            super().__init__()
            cin, expanded, cout = (_make_divisible(c * width_mult, 8) for c in (cin, expanded, cout))
            self.use_res_connect = stride == 1 and cin == cout
            norm = lambda c: nn.BatchNorm2d(c, eps=0.001, momentum=0.01)  # noqa: E731
            activation = nn.Hardswish if act == "HS" else nn.ReLU
            layers: List[nn.Module] = []
            if expanded != cin:
                layers.append(ConvNormActivation(cin, expanded, kernel=1, norm=norm, act=activation))
            layers.append(ConvNormActivation(expanded, expanded, kernel=kernel, stride=stride, groups=expanded,
                                             norm=norm, act=activation))
            if use_se:
                layers.append(SqueezeExcitation(expanded, _make_divisible(expanded // 4, 8)))
            layers.append(ConvNormActivation(expanded, cout, kernel=1, norm=norm, act=None))
            self.block = nn.Sequential(*layers)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            result = self.block(x)
            return result + x if self.use_res_connect else result

    class MobileNetV3Small(nn.Module):
        SETTING = [(16, 3, 16, 16, True, "RE", 2), (16, 3, 72, 24, False, "RE", 2), (24, 3, 88, 24, False, "RE", 1),
                   (24, 5, 96, 40, True, "HS", 2), (40, 5, 240, 40, True, "HS", 1), (40, 5, 240, 40, True, "HS", 1),
                   (40, 5, 120, 48, True, "HS", 1), (48, 5, 144, 48, True, "HS", 1), (48, 5, 288, 96, True, "HS", 2),
                   (96, 5, 576, 96, True, "HS", 1), (96, 5, 576, 96, True, "HS", 1)]

        def __init__(self, num_classes: int, width_mult: float) -> None:
            super().__init__()
            norm = lambda c: nn.BatchNorm2d(c, eps=0.001, momentum=0.01)  # noqa: E731
            first = _make_divisible(16 * width_mult, 8)
            layers: List[nn.Module] = [ConvNormActivation(3, first, stride=2, norm=norm, act=nn.Hardswish)]
            layers += [InvertedResidualV3(*s, width_mult=width_mult) for s in self.SETTING]
            last_in = _make_divisible(96 * width_mult, 8)
            layers.append(ConvNormActivation(last_in, 6 * last_in, kernel=1, norm=norm, act=nn.Hardswish))
            self.features = nn.Sequential(*layers)
            self.avgpool = nn.AdaptiveAvgPool2d(1)
            last_channel = _make_divisible(1024 * width_mult, 8)
            self.classifier = nn.Sequential(nn.Linear(6 * last_in, last_channel), nn.Hardswish(inplace=True),
                                            nn.Dropout(p=0.2, inplace=True), nn.Linear(last_channel, num_classes))
            torchvision_init(self)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))

    # A small ResNet: torchvision's BasicBlock, three stages of one block (16, 32, 64 channels)
    class BasicBlock(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.relu = nn.ReLU(inplace=True)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.downsample = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                               if stride != 1 or cin != cout else None)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            identity = x if self.downsample is None else self.downsample(x)
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            return self.relu(out + identity)

    class SmallResNet(nn.Module):
        def __init__(self, num_classes: int) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(3, 16, 3, 1, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(16)
            self.relu = nn.ReLU(inplace=True)
            self.layer1 = BasicBlock(16, 16, 1)
            self.layer2 = BasicBlock(16, 32, 2)
            self.layer3 = BasicBlock(32, 64, 2)
            self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
            self.fc = nn.Linear(64, num_classes)
            for m in self.modules():  # torchvision.models.resnet's initialisation
                if isinstance(m, nn.Conv2d):
                    nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = self.relu(self.bn1(self.conv1(x)))
            x = self.layer3(self.layer2(self.layer1(x)))
            return self.fc(torch.flatten(self.avgpool(x), 1))

    class LSTMClassifier(nn.Module):
        def __init__(self, vocab: int, classes: int) -> None:
            super().__init__()
            self.embedding = nn.Embedding(vocab, 32)
            self.lstm = nn.LSTM(32, 48, batch_first=True)
            self.fc = nn.Linear(48, classes)

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            out, _ = self.lstm(self.embedding(tokens))
            return self.fc(out[:, -1])

    class Conv1dRegressor(nn.Module):
        def __init__(self, channels: int, outputs: int) -> None:
            super().__init__()
            self.conv1 = nn.Conv1d(channels, 32, 5, padding=2)
            self.norm1 = nn.LayerNorm(32)
            self.conv2 = nn.Conv1d(32, 32, 5, padding=2)
            self.norm2 = nn.LayerNorm(32)
            self.head = nn.Linear(32, outputs)

        def forward(self, x: torch.Tensor) -> torch.Tensor:  # x [N, C, T]
            x = F.gelu(self.norm1(self.conv1(x).transpose(1, 2))).transpose(1, 2)
            x = F.gelu(self.norm2(self.conv2(x).transpose(1, 2)))
            return self.head(x.mean(dim=1))

    class GroupNormCNN(nn.Module):
        def __init__(self, classes: int) -> None:
            super().__init__()
            self.features = nn.Sequential(
                nn.Conv2d(3, 16, 3, padding=1), nn.GroupNorm(4, 16), nn.ReLU(), nn.MaxPool2d(2),
                nn.Conv2d(16, 32, 3, padding=1), nn.GroupNorm(8, 32), nn.ReLU(), nn.MaxPool2d(2),
                nn.Conv2d(32, 64, 3, padding=1), nn.GroupNorm(8, 64), nn.ReLU())
            self.fc = nn.Linear(64, classes)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(self.features(x).mean(dim=(2, 3)))

    class MishCNN(nn.Module):
        def __init__(self, classes: int) -> None:
            super().__init__()
            self.features = nn.Sequential(
                nn.Conv2d(3, 16, 3, padding=1), nn.Mish(), nn.MaxPool2d(2),
                nn.Conv2d(16, 32, 3, padding=1), nn.Mish(), nn.MaxPool2d(2),
                nn.Conv2d(32, 64, 3, padding=1), nn.Mish(), nn.AdaptiveAvgPool2d(1), nn.Flatten())
            self.fc = nn.Linear(64, classes)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(self.features(x))

    class SegNet(nn.Module):
        """Encoder (two stride-2 convs), decoder (two stride-2 ConvTranspose), a 1x1 classifier per pixel."""

        def __init__(self, cin: int, classes: int) -> None:
            super().__init__()
            self.enc1 = nn.Conv2d(cin, 16, 3, 2, 1)
            self.enc2 = nn.Conv2d(16, 32, 3, 2, 1)
            self.dec1 = nn.ConvTranspose2d(32, 16, 4, 2, 1)
            self.dec2 = nn.ConvTranspose2d(16, 16, 4, 2, 1)
            self.classifier = nn.Conv2d(16, classes, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            e1 = F.relu(self.enc1(x))
            x = F.relu(self.dec1(F.relu(self.enc2(e1))))
            x = F.relu(self.dec2(x + e1))
            return self.classifier(x)

    class BiLSTMTagger(nn.Module):
        """A tag per token from a bidirectional LSTM: the tag depends on what comes before and after."""

        def __init__(self, vocab: int, tags: int) -> None:
            super().__init__()
            self.embedding = nn.Embedding(vocab, 16)
            self.lstm = nn.LSTM(16, 24, batch_first=True, bidirectional=True)
            self.fc = nn.Linear(48, tags)

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            return self.fc(self.lstm(self.embedding(tokens))[0])

    class BiGRUClassifier(nn.Module):
        def __init__(self, vocab: int, classes: int) -> None:
            super().__init__()
            self.embedding = nn.Embedding(vocab, 16)
            self.gru = nn.GRU(16, 24, batch_first=True, bidirectional=True)
            self.fc = nn.Linear(48, classes)

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            return self.fc(self.gru(self.embedding(tokens))[0].mean(dim=1))

    class EinsumAttention(nn.Module):
        """One head of self-attention whose products are torch.einsum, over learned positions."""

        def __init__(self, vocab: int, length: int, classes: int, width: int = 32) -> None:
            super().__init__()
            self.embedding = nn.Embedding(vocab, width)
            self.position = nn.Parameter(torch.randn(length, width) * 0.1)
            self.query = nn.Linear(width, width)
            self.key = nn.Linear(width, width)
            self.value = nn.Linear(width, width)
            self.classifier = nn.Linear(width, classes)
            self.scale = width ** -0.5

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            x = self.embedding(tokens) + self.position
            scores = torch.einsum("nqd,nkd->nqk", self.query(x), self.key(x)) * self.scale
            context = torch.einsum("nqk,nkd->nqd", scores.softmax(dim=-1), self.value(x))
            return self.classifier(context.mean(dim=1))

    class AtanCumsum(nn.Module):
        """atan of a per-step Linear, a running sum over time (cumsum), its mean over time, a Linear head."""

        def __init__(self, channels: int, outputs: int, width: int = 16) -> None:
            super().__init__()
            self.proj = nn.Linear(channels, width)
            self.head = nn.Linear(width, outputs)

        def forward(self, x: torch.Tensor) -> torch.Tensor:  # x [N, T, C]
            running = torch.cumsum(torch.atan(self.proj(x)), dim=1) / x.shape[1]
            return self.head(running.mean(dim=1))

    class BatchNormCNN(nn.Module):
        def __init__(self, classes: int) -> None:
            super().__init__()
            self.features = nn.Sequential(
                nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
                nn.Conv2d(16, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
                nn.AdaptiveAvgPool2d(1), nn.Flatten())
            self.classifier = nn.Linear(32, classes)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.classifier(self.features(x))

    class TransformerClassifier(nn.Module):
        def __init__(self, vocab: int, length: int, classes: int, width: int = 32) -> None:
            super().__init__()
            self.embedding = nn.Embedding(vocab, width)
            self.position = nn.Parameter(torch.randn(length, width) * 0.1)
            layer = nn.TransformerEncoderLayer(width, 2, 64, dropout=0.0, batch_first=True)
            self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
            # TransformerEncoder deep-copies its layer, so a fresh encoder's layers hold equal weights, which the
            # exporter merges into shared initializers: each copy is initialised afresh, as training would part them.
            for copied in self.encoder.layers[1:]:
                for module in copied.modules():
                    reset = getattr(module, "_reset_parameters", None) or getattr(module, "reset_parameters", None)
                    if module is not copied and reset is not None:
                        reset()
            self.classifier = nn.Linear(width, classes)

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            return self.classifier(self.encoder(self.embedding(tokens) + self.position).mean(dim=1))

    return {k: v for k, v in locals().items() if isinstance(v, type)}


# --- the zoo ------------------------------------------------------------------------------------------------

def ce(logits: Any, labels: Any) -> Any:
    """Cross-entropy with classes in dimension 1 ([N, C], [N, C, H, W]) or last ([N, T, V])."""
    import torch.nn.functional as F

    if logits.dim() == 3:  # [N, T, V]: per token
        return F.cross_entropy(logits.flatten(0, 1), labels.flatten())
    return F.cross_entropy(logits, labels)


def mse(pred: Any, target: Any) -> Any:
    import torch.nn.functional as F

    return F.mse_loss(pred, target)


def first(model: Any, xs: List[Any]) -> Any:
    out = model(*xs)
    return out[0] if isinstance(out, (tuple, list)) else out


BATCH = {0: "N"}


def image_entry(name: str, seed: int, model: Any, mode: str, fold: bool, architecture: str, source: str,
                out: Path, module_mode: str = "eval", pretrain: bool = False) -> Dict[str, Any]:
    import torch

    nudge(model, seed)
    data, (train, val) = image_dataset(seed)
    pretrained = None
    if pretrain:  # a backbone trained elsewhere, with a fresh head: what fine-tuning starts from
        _, (other, other_val) = image_dataset(seed + 100)
        model.train()
        pretrained = torch_fit(model, first, ce, other, other_val, epochs=10, lr=1e-2, inplace=True)
        pretrained["data"] = f"another draw of the same rule (seed {seed + 100}), in train mode; then a fresh last Linear"
        head = model.classifier[-1]
        torch.nn.init.normal_(head.weight, 0, 0.01)
        torch.nn.init.zeros_(head.bias)
        nudge(head, seed)
    calibrated = calibrate_batchnorm(model, train[0][0])
    model.train(module_mode == "train")
    dummy = torch.zeros(2, 3, IMAGE, IMAGE)
    exporter = export_torch(model, (dummy,), out / f"{name}.onnx", ["input"], ["logits"],
                            {"input": BATCH, "logits": BATCH}, mode=mode, fold=fold)
    if calibrated:
        exporter["batchnorm_statistics"] = "the training split's (calibrate_batchnorm), as a trained model has them"
    write_npz(out / f"{name}.npz", data)
    return {
        "architecture": architecture, "source": source, "exporter": exporter, **({"pretraining": pretrained} if pretrained else {}),
        "task": "classification", "classes": CLASSES, "loss": "cross-entropy", "loss_reads": "logits",
        "label_input": "labels", "label_shape": ["N"], "rule": IMAGE_RULE,
        "torch_fit": torch_fit(model, first, ce, train, val),
    }


def zoo(out: Path) -> Dict[str, Callable[[], Dict[str, Any]]]:
    """name -> a function that writes ``name.onnx`` and ``name.npz`` into ``out`` and returns its entry."""
    m: Dict[str, Any] = {}

    def T() -> Dict[str, Any]:
        if not m:
            import torch

            torch.set_num_threads(1)  # gentle on a shared machine, and reproducible
            m.update(torch_modules())
        return m

    def mobilenet_v3_small() -> Dict[str, Any]:
        torch_seed(1)
        model = T()["MobileNetV3Small"](CLASSES, width_mult=0.5)
        return image_entry("mobilenet_v3_small", 1, model, "EVAL", True,
                           "MobileNetV3-small, width_mult 0.5: Hardswish, Hardsigmoid, squeeze-excitation, BatchNorm",
                           "written after torchvision/models/mobilenetv3.py (mobilenet_v3_small)", out, pretrain=True)

    def resnet_preserve() -> Dict[str, Any]:
        torch_seed(2)
        return image_entry("resnet_preserve", 2, T()["SmallResNet"](CLASSES), "PRESERVE", False,
                           "ResNet, torchvision's BasicBlock, stages of 16/32/64 channels, BatchNorm kept",
                           "torchvision/models/resnet.py's BasicBlock and initialisation, smaller", out)

    def resnet_training() -> Dict[str, Any]:
        torch_seed(2)  # the same weights as resnet_preserve
        return image_entry("resnet_training", 2, T()["SmallResNet"](CLASSES), "TRAINING", False,
                           "ResNet, torchvision's BasicBlock, stages of 16/32/64 channels, BatchNorm in training mode",
                           "torchvision/models/resnet.py's BasicBlock and initialisation, smaller", out,
                           module_mode="train")

    def mobilenet_v2() -> Dict[str, Any]:
        torch_seed(8)
        return image_entry("mobilenet_v2", 8, T()["MobileNetV2"](CLASSES, width_mult=0.25), "PRESERVE", False,
                           "MobileNetV2, width_mult 0.25 (last channel 1280), ReLU6, BatchNorm kept",
                           "written after torchvision/models/mobilenetv2.py (mobilenet_v2)", out, pretrain=True)

    def groupnorm_cnn() -> Dict[str, Any]:
        torch_seed(6)
        return image_entry("groupnorm_cnn", 6, T()["GroupNormCNN"](CLASSES), "EVAL", True,
                           "three Conv2d + GroupNorm + ReLU stages, spatial mean, Linear", "hand-written", out)

    def mish_cnn() -> Dict[str, Any]:
        torch_seed(7)
        return image_entry("mish_cnn", 7, T()["MishCNN"](CLASSES), "EVAL", True,
                           "three Conv2d + Mish stages, global average pool, Linear", "hand-written", out)

    def bert_tiny() -> Dict[str, Any]:
        import torch
        from transformers import BertConfig, BertForSequenceClassification

        T()
        torch_seed(3)
        vocab, length, classes = 512, 24, 3
        config = BertConfig(vocab_size=vocab, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                            intermediate_size=128, max_position_embeddings=64, num_labels=classes, return_dict=False)
        model = BertForSequenceClassification(config).eval()
        nudge(model, 3)
        ids = torch.ones(2, length, dtype=torch.int64)
        exporter = export_torch(model, (ids, torch.ones_like(ids)), out / "bert_tiny.onnx",
                                ["input_ids", "attention_mask"], ["logits"],
                                {"input_ids": {0: "N", 1: "T"}, "attention_mask": {0: "N", 1: "T"}, "logits": BATCH})
        exporter["attn_implementation"] = model.config._attn_implementation
        rng = np.random.default_rng(3)
        markers = [5, 6, 7]
        ti, tm, ty = marker_tokens(rng, N_TRAIN, length, vocab, markers, 10, 8, cls=2)
        vi, vm, vy = marker_tokens(rng, N_VAL, length, vocab, markers, 10, 8, cls=2)
        write_npz(out / "bert_tiny.npz", {"train_input_ids": ti, "train_attention_mask": tm, "train_labels": ty,
                                          "val_input_ids": vi, "val_attention_mask": vm, "val_labels": vy})
        return {
            "architecture": "BERT encoder, 2 layers, hidden 64, 2 heads, vocab 512, classification head (pooler + Linear)",
            "source": "transformers BertForSequenceClassification(BertConfig(...)), random init", "exporter": exporter,
            "task": "classification", "classes": classes, "loss": "cross-entropy", "loss_reads": "logits",
            "label_input": "labels", "label_shape": ["N"],
            "rule": f"24 tokens: [CLS]=2 first, then tokens 10-511 up to a random length 8-24, pad 0 (attention_mask 0) "
                    f"after; exactly one marker token {markers} before the padding, whose index is the class",
            "torch_fit": torch_fit(model, lambda mod, xs: mod(input_ids=xs[0], attention_mask=xs[1])[0], ce,
                                   ([ti, tm], ty), ([vi, vm], vy)),
        }

    def lstm_text() -> Dict[str, Any]:
        import torch

        torch_seed(4)
        vocab, length, classes = 64, 20, 4
        model = T()["LSTMClassifier"](vocab, classes).eval()
        nudge(model, 4)
        exporter = export_torch(model, (torch.ones(2, length, dtype=torch.int64),), out / "lstm_text.onnx",
                                ["tokens"], ["logits"], {"tokens": BATCH, "logits": BATCH})
        rng = np.random.default_rng(4)
        markers = [1, 2, 3, 4]
        tt, _, ty = marker_tokens(rng, N_TRAIN, length, vocab, markers, 5, length, last=6)
        vt, _, vy = marker_tokens(rng, N_VAL, length, vocab, markers, 5, length, last=6)
        write_npz(out / "lstm_text.npz", {"train_tokens": tt, "train_labels": ty, "val_tokens": vt, "val_labels": vy})
        return {
            "architecture": "Embedding(64, 32) -> LSTM(32, 48, batch_first) -> last step -> Linear(48, 4)",
            "source": "hand-written (torch.nn.LSTM)", "exporter": exporter,
            "task": "classification", "classes": classes, "loss": "cross-entropy", "loss_reads": "logits",
            "label_input": "labels", "label_shape": ["N"],
            "rule": f"20 tokens from 5-63 with exactly one marker {markers} among the last 6; the marker's index is "
                    "the class",
            "torch_fit": torch_fit(model, first, ce, ([tt], ty), ([vt], vy)),
        }

    def conv1d_regressor() -> Dict[str, Any]:
        import torch
        from torch import nn

        torch_seed(5)
        channels, length, outputs = 4, 64, 2
        model = T()["Conv1dRegressor"](channels, outputs).eval()
        nudge(model, 5)
        exporter = export_torch(model, (torch.zeros(2, channels, length),), out / "conv1d_regressor.onnx",
                                ["input"], ["prediction"], {"input": BATCH, "prediction": BATCH})
        teacher = nn.Sequential(nn.Conv1d(channels, 8, 5, padding=2), nn.Tanh())  # torch_seed(5) drew the model first
        head = nn.Linear(8, outputs)
        rng = np.random.default_rng(5)
        x = rng.standard_normal((N_TRAIN + N_VAL, channels, length)).astype(np.float32)
        with torch.no_grad():
            y = head(teacher(torch.from_numpy(x)).mean(dim=2)).numpy()
        y = ((y - y.mean(0)) / y.std(0)).astype(np.float32)
        write_npz(out / "conv1d_regressor.npz", {"train_input": x[:N_TRAIN], "train_target": y[:N_TRAIN],
                                                 "val_input": x[N_TRAIN:], "val_target": y[N_TRAIN:]})
        return {
            "architecture": "Conv1d(4, 32, 5) -> LayerNorm(32) -> GELU -> Conv1d(32, 32, 5) -> LayerNorm -> GELU "
                            "-> mean over time -> Linear(32, 2)",
            "source": "hand-written", "exporter": exporter,
            "task": "regression", "loss": "mse", "loss_reads": "prediction", "label_input": "target",
            "label_shape": ["N", outputs],
            "rule": "input [4, 64] standard normal; target = a fixed random teacher (Conv1d(4, 8, 5), tanh, mean over "
                    "time, Linear(8, 2)), standardised per column",
            "torch_fit": torch_fit(model, first, mse, ([x[:N_TRAIN]], y[:N_TRAIN]), ([x[N_TRAIN:]], y[N_TRAIN:])),
        }

    def gpt2_tiny() -> Dict[str, Any]:
        import torch
        from transformers import GPT2Config, GPT2LMHeadModel

        T()
        torch_seed(9)
        vocab, length = 128, 16
        config = GPT2Config(vocab_size=vocab, n_positions=64, n_embd=64, n_layer=2, n_head=2, use_cache=False,
                            return_dict=False)
        class GPT2Logits(GPT2LMHeadModel):
            """The logits alone, from input_ids alone. The exporter feeds every forward argument with a default
            other than None as a graph input: GPT2LMHeadModel's logits_to_keep=0 became an int64 input and
            hidden_states[:, logits_to_keep] a Gather of one position ([N, V] logits)."""

            def forward(self, input_ids: Any) -> Any:  # type: ignore[override]
                return super().forward(input_ids=input_ids)[0]

        model = GPT2Logits(config).eval()
        nudge(model, 9)
        # transformers 4.57 builds the causal mask with torch.vmap, which the TorchScript tracer cannot follow
        # ("RuntimeError: unordered_map::at", also in its builder for older torch). For the export only, the
        # same mask functions are evaluated on broadcast index tensors instead, as exporters patch it
        # (optimum's model patcher has such a vmap-free sdpa_mask).
        from transformers import masking_utils

        def sdpa_mask_without_vmap(batch_size: int, cache_position: Any, kv_length: int, kv_offset: int = 0,
                                   mask_function: Any = masking_utils.causal_mask_function,
                                   attention_mask: Any = None, **_: Any) -> Any:
            padding = masking_utils.prepare_padding_mask(attention_mask, kv_length, kv_offset)
            if padding is not None:
                mask_function = masking_utils.and_masks(mask_function, masking_utils.padding_mask_function(padding))
            kv = torch.arange(kv_length, device=cache_position.device) + kv_offset
            b = torch.arange(batch_size, device=cache_position.device)[:, None, None, None]
            h = torch.zeros(1, 1, 1, 1, dtype=torch.int64, device=cache_position.device)
            mask = mask_function(b, h, cache_position[None, None, :, None], kv[None, None, None, :])
            return mask.expand(batch_size, 1, cache_position.shape[0], kv_length)

        mapping = masking_utils.ALL_MASK_ATTENTION_FUNCTIONS._global_mapping
        saved = masking_utils.sdpa_mask, mapping["sdpa"], masking_utils.find_packed_sequence_indices
        masking_utils.sdpa_mask = mapping["sdpa"] = sdpa_mask_without_vmap
        # Packed-sequence detection from position_ids uses aten::diff, which opset 17 lacks; these inputs are
        # never packed (one sequence per row), which is what None says.
        masking_utils.find_packed_sequence_indices = lambda position_ids: None
        try:
            exporter = export_torch(model, (torch.ones(2, length, dtype=torch.int64),), out / "gpt2_tiny.onnx",
                                    ["input_ids"], ["logits"], {"input_ids": {0: "N", 1: "T"}, "logits": {0: "N", 1: "T"}})
        finally:
            masking_utils.sdpa_mask, mapping["sdpa"], masking_utils.find_packed_sequence_indices = saved
        exporter["attn_implementation"] = model.config._attn_implementation
        exporter["patch"] = ("transformers.masking_utils.sdpa_mask replaced during export by a vmap-free builder "
                             "(the vmap-based one does not trace): sdpa_mask_without_vmap in scripts/export_zoo.py; "
                             "find_packed_sequence_indices -> None (aten::diff has no opset-17 export)")
        rng = np.random.default_rng(9)
        successor = rng.permutation(vocab)
        seq = np.zeros((N_TRAIN + N_VAL, length + 1), np.int64)
        seq[:, 0] = rng.integers(0, vocab, size=len(seq))
        for t in range(length):
            seq[:, t + 1] = successor[seq[:, t]]
        x, y = seq[:, :-1].copy(), seq[:, 1:].copy()
        write_npz(out / "gpt2_tiny.npz", {"train_input_ids": x[:N_TRAIN], "train_labels": y[:N_TRAIN],
                                          "val_input_ids": x[N_TRAIN:], "val_labels": y[N_TRAIN:]})
        return {
            "architecture": "GPT-2 causal LM, 2 layers, n_embd 64, 2 heads, vocab 128, tied lm_head",
            "source": "transformers GPT2LMHeadModel(GPT2Config(..., use_cache=False)), random init; forward(input_ids) -> logits", "exporter": exporter,
            "task": "per-token", "classes": vocab, "loss": "cross-entropy", "loss_reads": "logits",
            "label_input": "labels", "label_shape": ["N", "T"],
            "rule": "16 tokens following a fixed random successor permutation from a random first token; labels are "
                    "the next tokens (input shifted by one)",
            "torch_fit": torch_fit(model, first, ce, ([x[:N_TRAIN]], y[:N_TRAIN]), ([x[N_TRAIN:]], y[N_TRAIN:])),
        }

    def segnet() -> Dict[str, Any]:
        import torch

        torch_seed(10)
        classes = 4
        model = T()["SegNet"](classes - 1, classes).eval()
        nudge(model, 10)
        exporter = export_torch(model, (torch.zeros(2, classes - 1, IMAGE, IMAGE),), out / "segnet.onnx",
                                ["input"], ["logits"], {"input": BATCH, "logits": BATCH})
        rng = np.random.default_rng(10)
        xt, yt = segmentation(rng, N_TRAIN, classes)
        xv, yv = segmentation(rng, N_VAL, classes)
        write_npz(out / "segnet.npz", {"train_input": xt, "train_labels": yt, "val_input": xv, "val_labels": yv})
        return {
            "architecture": "Conv2d s2 -> Conv2d s2 -> ConvTranspose2d s2 -> (+ skip) ConvTranspose2d s2 -> 1x1 Conv2d, ReLU",
            "source": "hand-written", "exporter": exporter,
            "task": "per-pixel", "classes": classes, "loss": "cross-entropy", "loss_reads": "logits",
            "label_input": "labels", "label_shape": ["N", IMAGE, IMAGE],
            "rule": "1-3 rectangles of classes 1-3 on background 0; input channel k is (label == k+1) plus quantised "
                    "noise",
            "torch_fit": torch_fit(model, first, ce, ([xt], yt), ([xv], yv)),
        }

    # Issue 31's architectures, each with the TorchScript exporter (opset 17) and torch's default exporter
    # (dynamo=True, "<name>_dynamo"); a BatchNorm CNN and a TransformerEncoder with the default exporter only.
    def export_either(model: Any, args: Tuple[Any, ...], name: str, inputs: Sequence[str], outputs: Sequence[str],
                      dynamo: bool) -> Dict[str, Any]:
        if dynamo:
            return export_dynamo(model, args, out / f"{name}.onnx", inputs, outputs, inputs)
        return export_torch(model, args, out / f"{name}.onnx", inputs, outputs,
                            {n: BATCH for n in list(inputs) + list(outputs)})

    def token_data(seed: int, vocab: int, length: int, markers: Sequence[int]) -> Tuple[np.ndarray, ...]:
        """Full-length sequences of plain tokens (after the markers in the vocabulary) holding exactly one
        marker: train and validation tokens, and the marker's index in ``markers`` of each."""
        rng = np.random.default_rng(seed)
        first_plain = max(markers) + 1
        tt, _, ty = marker_tokens(rng, N_TRAIN, length, vocab, markers, first_plain, length)
        vt, _, vy = marker_tokens(rng, N_VAL, length, vocab, markers, first_plain, length)
        return tt, ty, vt, vy

    def token_entry(name: str, model: Any, dynamo: bool, length: int, tokens: Tuple[np.ndarray, np.ndarray],
                    labels: Tuple[np.ndarray, np.ndarray], entry: Dict[str, Any]) -> Dict[str, Any]:
        import torch

        exporter = export_either(model, (torch.ones(2, length, dtype=torch.int64),), name, ["tokens"], ["logits"],
                                 dynamo)
        (tt, vt), (ty, vy) = tokens, labels
        write_npz(out / f"{name}.npz", {"train_tokens": tt, "train_labels": ty, "val_tokens": vt, "val_labels": vy})
        return {**entry, "exporter": exporter, "loss": "cross-entropy", "loss_reads": "logits",
                "label_input": "labels", "torch_fit": torch_fit(model, first, ce, ([tt], ty), ([vt], vy)),
                "expected": EXPECTED.get(name, "train")}

    def bilstm_tagger(dynamo: bool) -> Dict[str, Any]:
        torch_seed(21)
        vocab, length, tags = 32, 12, 3
        model = T()["BiLSTMTagger"](vocab, tags).eval()
        nudge(model, 21)
        tt, _, vt, _ = token_data(21, vocab, length, [1])

        def tag(tokens: np.ndarray) -> np.ndarray:  # 0 before the marker, 1 on it, 2 after it
            at = np.argmax(tokens == 1, axis=1)[:, None]
            steps = np.arange(tokens.shape[1])[None, :]
            return np.where(steps < at, 0, np.where(steps == at, 1, 2)).astype(np.int64)

        return token_entry("bilstm_tagger" + ("_dynamo" if dynamo else ""), model, dynamo, length, (tt, vt),
                           (tag(tt), tag(vt)), {
            "architecture": "Embedding(32, 16) -> LSTM(16, 24, bidirectional, batch_first) -> Linear(48, 3) per token",
            "source": "hand-written (torch.nn.LSTM(bidirectional=True))", "task": "per-token", "classes": tags,
            "label_shape": ["N", length],
            "rule": "12 tokens from 2-31 with exactly one marker token 1; each token's tag is 0 before the marker, "
                    "1 on it, 2 after it (a tag needs both directions)"})

    def bigru_classifier(dynamo: bool) -> Dict[str, Any]:
        torch_seed(22)
        vocab, length, markers = 32, 12, [1, 2, 3]
        model = T()["BiGRUClassifier"](vocab, len(markers)).eval()
        nudge(model, 22)
        tt, ty, vt, vy = token_data(22, vocab, length, markers)
        return token_entry("bigru_classifier" + ("_dynamo" if dynamo else ""), model, dynamo, length, (tt, vt),
                           (ty, vy), {
            "architecture": "Embedding(32, 16) -> GRU(16, 24, bidirectional, batch_first) -> mean over time "
                            "-> Linear(48, 3)",
            "source": "hand-written (torch.nn.GRU(bidirectional=True))", "task": "classification",
            "classes": len(markers), "label_shape": ["N"],
            "rule": f"12 tokens from 4-31 with exactly one marker {markers} anywhere; the marker's index is the class"})

    def einsum_attention(dynamo: bool) -> Dict[str, Any]:
        torch_seed(23)
        vocab, length, markers = 32, 12, [1, 2, 3, 4]
        model = T()["EinsumAttention"](vocab, length, len(markers)).eval()
        nudge(model, 23)
        tt, ty, vt, vy = token_data(23, vocab, length, markers)
        return token_entry("einsum_attention" + ("_dynamo" if dynamo else ""), model, dynamo, length, (tt, vt),
                           (ty, vy), {
            "architecture": "Embedding(32, 32) + learned positions -> one attention head whose products are "
                            "torch.einsum ('nqd,nkd->nqk', softmax, 'nqk,nkd->nqd'), query/key/value Linear(32, 32) "
                            "-> mean over time -> Linear(32, 4)",
            "source": "hand-written (torch.einsum)", "task": "classification", "classes": len(markers),
            "label_shape": ["N"],
            "rule": f"12 tokens from 5-31 with exactly one marker {markers} anywhere; the marker's index is the class"})

    def atan_cumsum(dynamo: bool) -> Dict[str, Any]:
        import torch

        torch_seed(24)
        channels, length, outputs = 4, 16, 2
        model = T()["AtanCumsum"](channels, outputs).eval()
        nudge(model, 24)
        teacher = T()["AtanCumsum"](channels, outputs).eval()  # drawn after the model, from the same seed
        rng = np.random.default_rng(24)
        x = rng.standard_normal((N_TRAIN + N_VAL, length, channels)).astype(np.float32)
        with torch.no_grad():
            y = teacher(torch.from_numpy(x)).numpy()
        y = ((y - y.mean(0)) / y.std(0)).astype(np.float32)
        name = "atan_cumsum" + ("_dynamo" if dynamo else "")
        exporter = export_either(model, (torch.zeros(2, length, channels),), name, ["input"], ["prediction"], dynamo)
        write_npz(out / f"{name}.npz", {"train_input": x[:N_TRAIN], "train_target": y[:N_TRAIN],
                                        "val_input": x[N_TRAIN:], "val_target": y[N_TRAIN:]})
        return {
            "architecture": "Linear(4, 16) per step -> atan -> cumsum over time / T -> mean over time -> Linear(16, 2)",
            "source": "hand-written (torch.atan, torch.cumsum)", "exporter": exporter,
            "task": "regression", "loss": "mse", "loss_reads": "prediction", "label_input": "target",
            "label_shape": ["N", outputs],
            "rule": "input [16, 4] standard normal; target = a fixed random teacher of the same architecture, "
                    "standardised per column",
            "torch_fit": torch_fit(model, first, mse, ([x[:N_TRAIN]], y[:N_TRAIN]), ([x[N_TRAIN:]], y[N_TRAIN:])),
            "expected": EXPECTED.get(name, "train"),
        }

    def cnn_dynamo() -> Dict[str, Any]:
        import torch

        torch_seed(25)
        model = T()["BatchNormCNN"](CLASSES)
        nudge(model, 25)
        data, (train, val) = image_dataset(25)
        calibrate_batchnorm(model, train[0][0])
        model.eval()
        exporter = export_dynamo(model, (torch.zeros(2, 3, IMAGE, IMAGE),), out / "cnn_dynamo.onnx", ["input"],
                                 ["logits"], ["input"])
        exporter["batchnorm_statistics"] = "the training split's (calibrate_batchnorm), as a trained model has them"
        write_npz(out / "cnn_dynamo.npz", data)
        return {
            "architecture": "Conv2d(3, 16) -> BatchNorm -> ReLU -> MaxPool -> Conv2d(16, 32) -> BatchNorm -> ReLU "
                            "-> global average pool -> Linear(32, 4) ('features', 'classifier')",
            "source": "hand-written", "exporter": exporter,
            "task": "classification", "classes": CLASSES, "loss": "cross-entropy", "loss_reads": "logits",
            "label_input": "labels", "label_shape": ["N"], "rule": IMAGE_RULE,
            "torch_fit": torch_fit(model, first, ce, train, val), "expected": EXPECTED.get("cnn_dynamo", "train"),
        }

    def transformer_dynamo() -> Dict[str, Any]:
        torch_seed(26)
        vocab, length, markers = 32, 12, [1, 2, 3]
        model = T()["TransformerClassifier"](vocab, length, len(markers)).eval()
        nudge(model, 26)
        tt, ty, vt, vy = token_data(26, vocab, length, markers)
        return token_entry("transformer_dynamo", model, True, length, (tt, vt), (ty, vy), {
            "architecture": "Embedding(32, 32) + learned positions -> nn.TransformerEncoder (2 layers, d 32, 2 heads, "
                            "feed-forward 64, no dropout, batch_first) -> mean over time -> Linear(32, 3) ('classifier')",
            "source": "hand-written (torch.nn.TransformerEncoder)", "task": "classification",
            "classes": len(markers), "label_shape": ["N"],
            "rule": f"12 tokens from 4-31 with exactly one marker {markers} anywhere; the marker's index is the class"})

    def sklearn_data(seed: int) -> Tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng(seed)
        x = rng.standard_normal((N_TRAIN + N_VAL, 8)).astype(np.float32)
        w = rng.standard_normal((8, 3))
        return x, np.argmax(x @ w, axis=1).astype(np.int64)

    SKLEARN_RULE = "8 standard-normal features; the class is the argmax of a fixed random linear teacher (3 classes)"

    def sklearn_entry(name: str, estimator: Any, options: Optional[Dict[str, Any]], seed: int,
                      architecture: str, expected: str) -> Dict[str, Any]:
        import warnings

        import skl2onnx
        import sklearn
        from skl2onnx import convert_sklearn
        from skl2onnx.common.data_types import FloatTensorType

        x, y = sklearn_data(seed)
        from threadpoolctl import threadpool_limits

        # One BLAS thread: with more, the fitted coefficients' last bits depend on how many threads BLAS had
        # (a full export, after torch set its own, gave another LogisticRegression than --only did).
        with warnings.catch_warnings(), threadpool_limits(1):
            warnings.simplefilter("ignore")  # MLPClassifier's ConvergenceWarning
            estimator.fit(x[:N_TRAIN], y[:N_TRAIN])
        # name: the graph's name, else a fresh uuid4 each run (the only part that is not reproducible)
        onx = convert_sklearn(estimator, name=name, initial_types=[("input", FloatTensorType([None, 8]))],
                              options=options)
        # skl2onnx lists the opsets in set order, which changes with Python's string hashing from run to run
        imports = sorted((copy.deepcopy(o) for o in onx.opset_import), key=lambda o: o.domain)
        del onx.opset_import[:]
        onx.opset_import.extend(imports)
        (out / f"{name}.onnx").write_bytes(onx.SerializeToString())
        write_npz(out / f"{name}.npz", {"train_input": x[:N_TRAIN], "train_labels": y[:N_TRAIN],
                                        "val_input": x[N_TRAIN:], "val_labels": y[N_TRAIN:]})
        return {
            "architecture": architecture, "source": f"scikit-learn {sklearn.__version__}",
            "exporter": {"tool": "skl2onnx.convert_sklearn", "skl2onnx": skl2onnx.__version__,
                         "options": ({getattr(k, "__name__", str(k)): v for k, v in options.items()} if options
                                     else "default (ZipMap on)"), "target_opset": "default"},
            "task": "classification", "classes": 3, "loss": "cross-entropy",
            "loss_reads": "output_probability" if options is None else "probabilities",
            "label_input": "labels", "label_shape": ["N"], "rule": SKLEARN_RULE,
            "sklearn_accuracy": {"train": round(float(estimator.score(x[:N_TRAIN], y[:N_TRAIN])), 4),
                                 "val": round(float(estimator.score(x[N_TRAIN:], y[N_TRAIN:])), 4)},
            "expected": expected,
        }

    def mlp(zipmap: bool) -> Dict[str, Any]:
        from sklearn.neural_network import MLPClassifier

        est = MLPClassifier(hidden_layer_sizes=(32,), max_iter=50, random_state=11)
        name = "sklearn_mlp_zipmap" if zipmap else "sklearn_mlp"
        expected = ("train from the probabilities tensor: the ZipMap output (a sequence of maps) cannot take a loss, "
                    "and output_probability is Softmax probabilities, not logits" if zipmap else
                    "train (the loss reads output_probability, Softmax probabilities rather than logits)")
        return sklearn_entry(name, est, None if zipmap else {MLPClassifier: {"zipmap": False}}, 11,
                             "MLPClassifier(hidden_layer_sizes=(32,)), ReLU, softmax output", expected)

    def logreg() -> Dict[str, Any]:
        from sklearn.linear_model import LogisticRegression

        return sklearn_entry("sklearn_logreg", LogisticRegression(max_iter=200), None, 12,
                             "LogisticRegression (multinomial), skl2onnx default (ai.onnx.ml LinearClassifier + ZipMap)",
                             "refuse clearly: ai.onnx.ml LinearClassifier has no gradient in ONNX Runtime; "
                             "the coefficients are node attributes, not initializers")

    return {
        "mobilenet_v3_small": mobilenet_v3_small,
        "resnet_preserve": resnet_preserve,
        "resnet_training": resnet_training,
        "bert_tiny": bert_tiny,
        "lstm_text": lstm_text,
        "conv1d_regressor": conv1d_regressor,
        "groupnorm_cnn": groupnorm_cnn,
        "mish_cnn": mish_cnn,
        "mobilenet_v2": mobilenet_v2,
        "gpt2_tiny": gpt2_tiny,
        "segnet": segnet,
        "sklearn_mlp_zipmap": lambda: mlp(True),
        "sklearn_mlp": lambda: mlp(False),
        "sklearn_logreg": logreg,
        "bilstm_tagger": lambda: bilstm_tagger(False),
        "bilstm_tagger_dynamo": lambda: bilstm_tagger(True),
        "bigru_classifier": lambda: bigru_classifier(False),
        "bigru_classifier_dynamo": lambda: bigru_classifier(True),
        "einsum_attention": lambda: einsum_attention(False),
        "einsum_attention_dynamo": lambda: einsum_attention(True),
        "atan_cumsum": lambda: atan_cumsum(False),
        "atan_cumsum_dynamo": lambda: atan_cumsum(True),
        "cnn_dynamo": cnn_dynamo,
        "transformer_dynamo": transformer_dynamo,
    }


def versions() -> Dict[str, str]:
    from importlib import metadata

    found = {}
    for dist in ("torch", "onnxscript", "transformers", "onnx", "numpy", "scikit-learn", "skl2onnx", "protobuf"):
        try:
            found[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    found["python"] = sys.version.split()[0]
    return found


def export(out: Path, only: Optional[Sequence[str]]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    previous, earlier = {}, {}
    if (out / MANIFEST).is_file():
        earlier = json.loads((out / MANIFEST).read_text())
        previous = earlier.get("models", {})
    builders = zoo(out)
    names = list(builders) if not only else list(only)
    models: Dict[str, Any] = dict(previous) if only else {}
    for name in names:
        print(f"export {name}", flush=True)
        entry = builders[name]()
        onnx_path, data_path = out / f"{name}.onnx", out / f"{name}.npz"
        info = describe_onnx(onnx_path)
        with np.load(data_path) as npz:
            arrays = {k: {"dtype": npz[k].dtype.name, "shape": list(npz[k].shape)} for k in npz.files}
        record = {"file": onnx_path.name, "bytes": onnx_path.stat().st_size, "sha256": sha256(onnx_path)}
        record.update(entry)
        record.setdefault("expected", "train")
        record.update(info)
        record["dataset"] = {"file": data_path.name, "bytes": data_path.stat().st_size, "sha256": sha256(data_path),
                             "arrays": arrays}
        if only and earlier.get("versions") and earlier["versions"] != versions():
            record["versions"] = versions()  # exported later than the rest, with these
        old = previous.get(name, {})
        if old.get("sha256") == record["sha256"] and "generator_onnxruntime_1_19_2" in old:
            record["generator_onnxruntime_1_19_2"] = old["generator_onnxruntime_1_19_2"]
        models[name] = record
    total = sum(m["bytes"] + m["dataset"]["bytes"] for m in models.values())
    manifest = {
        "about": earlier["about"] if only and "about" in earlier else "Small seeded models exported by their real exporters, with learnable datasets. "
                 "Made by scripts/export_zoo.py (its docstring says how); generator_onnxruntime_1_19_2 is what "
                 "ort_cffi.artifacts.generate_artifacts (ONNX Runtime 1.19.2's generator) said, recorded by "
                 "scripts/export_zoo.py --baseline.",
        "datasets": "train_<input> / val_<input> for every input of the training model (ort_cffi/trainer/data.py): "
                    "the model's inputs, then the loss's labels (int64) or target (float32). Multi-input models "
                    "(bert_tiny) have one array per input. Labels keep their task's shape: [N] per sample, [N, T] "
                    "per token, [N, H, W] per pixel; N_train 256, N_val 64.",
        "nudge": "parameters and batch-norm statistics that start constant are moved by U(-0.01, 0.01) from the "
                 "model's seed before export, or torch's exporter merges initializers of equal values",
        "versions": earlier["versions"] if only and earlier.get("versions") else versions(),
        "total_bytes": total,
        "models": models,
    }
    if "versions_baseline" in earlier and any("generator_onnxruntime_1_19_2" in m for m in models.values()):
        manifest["versions_baseline"] = earlier["versions_baseline"]
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"wrote {len(models)} models, {total:,} bytes in all, and {out / MANIFEST}")


# --- baseline: what ONNX Runtime's generator says -----------------------------------------------------------

def generator_options(entry: Dict[str, Any]) -> Dict[str, Any]:
    """The generate_artifacts options a user would give: the task's loss; the output it reads when the model
    has several."""
    options: Dict[str, Any] = {"loss": entry["loss"]}
    if len(entry["outputs"]) > 1:
        options["loss_input_names"] = [entry["loss_reads"]]
    return options


def summary(message: str) -> str:
    """An ONNX Runtime error without the source path and C++ signature it starts with: what went wrong."""
    import re

    while True:
        found = re.search(r"/onnxruntime_src/\S+:\d+ ", message)
        if not found:
            return message
        depth, i = 0, message.find("(", found.end())
        while i != -1 and i < len(message):
            depth += {"(": 1, ")": -1}.get(message[i], 0)
            i += 1
            if depth == 0:
                break
        rest = message[i:].lstrip()
        rest = rest[len("const"):].lstrip() if rest.startswith("const") else rest
        message = message[:found.start()] + rest


def trainer_smoke(out: Path, entry: Dict[str, Any], options: Dict[str, Any], tmp: Path) -> Dict[str, Any]:
    """ort-cffi-train --model on the model and its dataset for 3 epochs: what the trainer says today."""
    import subprocess

    command = [sys.executable, "-m", "ort_cffi.cli.train", "--model", str(out / entry["file"]), "--data",
               str(out / entry["dataset"]["file"]), "--out", str(tmp / "run"), "--epochs", "3", "--lr", "0.001",
               "--threads", "1", "--no-progress", "--no-plot", "--loss", options["loss"], "--generator", "onnxruntime"]
    if "loss_input_names" in options:
        command += ["--loss-input", *options["loss_input_names"]]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    said: Dict[str, Any] = {"command": "ort-cffi-train --model M.onnx --data M.npz --epochs 3 --lr 0.001 "
                            "--generator onnxruntime --loss "
                            + options["loss"] + "".join(f" --loss-input {n}" for n in options.get("loss_input_names", [])),
                            "exit": done.returncode}
    said["says"] = [summary(line).split(" -> ")[0]  # not the temporary folder it wrote into
                    for line in lines if line.startswith(("before training", "epoch", "best", "error"))][-6:]
    if done.returncode and not said["says"]:
        said["says"] = [summary(line) for line in lines[-2:]]
    return said


def baseline(out: Path, only: Optional[Sequence[str]]) -> None:
    """Generate artifacts for each model with ort_cffi.artifacts (ONNX Runtime 1.19.2's generator) into a
    temporary folder, and record ok or the error's first line; also whether the model runs for inference."""
    import onnxruntime

    from ort_cffi.artifacts import ALL_PARAMETERS, MODEL_OUTPUTS, ArtifactsError, generate_artifacts

    manifest = json.loads((out / MANIFEST).read_text())
    for name, entry in manifest["models"].items():
        if only and name not in only:
            continue
        path = out / entry["file"]
        options = generator_options(entry)
        with tempfile.TemporaryDirectory(prefix=f"zoo-{name}-") as tmp:
            try:
                # the model as exported (prepare=False): what ONNX Runtime's generator itself says of it
                made = generate_artifacts(path, ALL_PARAMETERS, optimizer="adamw", artifact_directory=Path(tmp) / "artifacts",
                                          additional_output_names=MODEL_OUTPUTS, generator="onnxruntime",
                                          prepare=False, **options)
                said = {"result": "ok", "training_inputs": [str(s) for s in made.training_inputs],
                        "trainable_tensors": len(made.trainable), "eval_outputs": list(made.eval_outputs)}
            except ArtifactsError as exc:
                lines = [line for line in str(exc).splitlines() if line.strip()]
                import re

                message = lines[0] if lines else ""  # the temporary folders' names change from run to run
                message = re.sub(re.escape(tmp) + r"/artifacts(/\.ort_cffi-artifacts-[^/]+/out)?", "<artifacts>", message)
                said = {"result": "error", "error": type(exc).__name__, "message": message}
                said["summary"] = summary(said["message"])
            if said["result"] == "ok":
                said["trainer"] = trainer_smoke(out, entry, options, Path(tmp))
        said["options"] = options
        try:  # does ONNX Runtime run it for inference, on the first validation samples?
            session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
            with np.load(out / entry["dataset"]["file"]) as npz:
                feeds = {i.name: npz[f"val_{i.name}"][:4] for i in session.get_inputs()}
            results = session.run(None, feeds)
            said["inference"] = "ok: " + ", ".join(
                f"{o.name} {list(np.shape(r)) if isinstance(r, np.ndarray) else type(r).__name__}"
                for o, r in zip(session.get_outputs(), results))
        except Exception as exc:  # noqa: BLE001 - recorded, not raised
            said["inference"] = f"error: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
        entry["generator_onnxruntime_1_19_2"] = said
        print(f"{name}: {said['result']} {said.get('summary', '')} | inference {said['inference']}"
              f"{' | trainer ' + str(said['trainer']) if 'trainer' in said else ''}", flush=True)
    manifest["versions_baseline"] = {"onnxruntime": onnxruntime.__version__, "python": sys.version.split()[0]}
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "tests" / "zoo", help="default: tests/zoo")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="export (or check) only these models")
    parser.add_argument("--baseline", action="store_true",
                        help="record what ONNX Runtime's generator says about each exported model (needs "
                             "onnxruntime-training and ort_cffi, not torch)")
    parser.add_argument("--twice", action="store_true",
                        help="export again into a temporary folder and compare every file's sha256")
    args = parser.parse_args(argv)
    if args.baseline:
        baseline(args.out, args.only)
        return 0
    export(args.out, args.only)
    if args.twice:
        with tempfile.TemporaryDirectory() as tmp:
            again = Path(tmp)
            if args.only:
                shutil.copy(args.out / MANIFEST, again / MANIFEST)
            export(again, args.only)
            first_run = json.loads((args.out / MANIFEST).read_text())["models"]
            second = json.loads((again / MANIFEST).read_text())["models"]
            differ = [n for n in second if (second[n]["sha256"], second[n]["dataset"]["sha256"])
                      != (first_run[n]["sha256"], first_run[n]["dataset"]["sha256"])]
            print("deterministic: every file the same" if not differ else f"NOT deterministic: {differ}")
            return 1 if differ else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
