"""The child process behind ``ort_cffi.artifacts.generate_artifacts``: runs ONNX Runtime's own generator.

Run as a script, ``python _child.py REQUEST.json``, by ``ort_cffi.artifacts``. It may run under
another interpreter than ort_cffi's (the one named by ``--python`` or ``ORT_CFFI_ARTIFACTS_PYTHON``), where
ort_cffi need not be installed; on interpreters the training wheel does not install into, the request names
the runtime store's copy of ONNX Runtime's Python layer (``layer``), which goes first on ``sys.path``. It
also answers a ``probe`` request (which generator would run) without generating. It uses the standard
library, ``onnx`` and ``onnxruntime`` only, and keeps to Python 3.8's syntax (the oldest interpreter ONNX
Runtime 1.19 has wheels for); so do the modules of this folder it loads by file location (``load_sibling``).

Why a child: the generator (``onnxruntime.training.artifacts``, ``onnxblock``) lives in ONNX Runtime's
Python training layer. Importing ``onnxruntime`` into ort_cffi's process would load a second, Python-owned
runtime there, and ``onnxruntime.training``'s package init imports torch (through ``optim``), which the
generator never uses (ONNX Runtime issue #22070). Here those inits are bypassed: ``onnxruntime.training``
and ``onnxruntime.tools`` are created from their specs without running their ``__init__``, and
``onnxruntime.training.ortmodule`` (which ``import onnxruntime`` probes) is marked absent, so torch is never
imported, installed or not.

Besides running the generator, the child does what needs the ``onnx`` package: it resolves the names and
glob patterns of trainable and frozen parameters (``parameter_selection.py``), checks the model's outputs
against the loss, brings models saved by a newer ``onnx`` down to the IR version and opset ONNX Runtime 1.19
accepts (``ir_opset.py``; also the optimizer model, which the generator stamps with the installed ``onnx``'s
IR version), and describes what it wrote.

The result is a JSON file (its path is in the request): ``{"ok": true, ...}`` or
``{"ok": false, "kind": ..., "message": ...}`` for a problem with the request; any other failure is a
traceback on stderr and a non-zero exit.
"""
import importlib.util
import json
import os
import re
import sys
import traceback
from typing import Any, Dict, List, Tuple

LOSS_NAMES = {
    "CrossEntropyLoss": "cross-entropy",
    "MSELoss": "MSE",
    "BCEWithLogitsLoss": "BCE-with-logits",
    "L1Loss": "L1",
}


# Modules of this folder the child loads by file location (ort_cffi need not be importable here), and the
# siblings each one takes from sys.modules (graph_facts.py says why): those are loaded first.
HERE = os.path.dirname(os.path.abspath(__file__))
SIBLING_PREFIX = "_ort_cffi_artifacts_"  # graph_facts.SIBLING_PREFIX, needed here to load graph_facts itself
SIBLINGS_NEEDED = {"rewrites": ["rewrite_rules"], "parameter_selection": ["refusal"], "ir_opset": ["refusal"],
                   "exported_parameters": ["module_names"]}


LOST_REASON = ("no longer in the model: torch's exporter dropped it with the operation that read it, and the model "
               "computes without it (torch.onnx.export(..., optimize=False) keeps it)")


def load_sibling(name):
    """This folder's module ``name`` (Python 3.8 syntax, standard library, numpy and onnx only), loaded by
    file location under ``SIBLING_PREFIX + name``, after graph_facts and the siblings it needs."""
    key = SIBLING_PREFIX + name
    if key not in sys.modules:
        for needed in ([] if name == "graph_facts" else ["graph_facts"]) + SIBLINGS_NEEDED.get(name, []):
            load_sibling(needed)
        spec = importlib.util.spec_from_file_location(key, os.path.join(HERE, name + ".py"))
        if spec is None or spec.loader is None:
            raise Refusal("unavailable", "ort_cffi's {}.py is missing beside {}".format(name, __file__))
        module = importlib.util.module_from_spec(spec)
        sys.modules[key] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[key]  # not half a module for the next one to take
            raise
    return sys.modules[key]


# Element types, the opset and shapes as the graph modules read them (standard library only at import time).
graph_facts = load_sibling("graph_facts")
FLOAT_TYPES = graph_facts.FLOAT_TYPES
type_name = graph_facts.type_name
# A problem with the request (refusal.py), raised here and by the modules below.
Refusal = load_sibling("refusal").Refusal
# Which parameters train: the request's names and glob patterns resolved (parameter_selection.py).
selection = load_sibling("parameter_selection")
# Models brought to what ONNX Runtime 1.19 loads (ir_opset.py), before and after generation.
ir_opset = load_sibling("ir_opset")
inline_functions = ir_opset.inline_functions
bring_down = ir_opset.bring_down


# --- the generator, without the torch-importing package inits ---------------------------------------------

def _package_without_init(name, folder):
    """Put package ``name`` (at ``folder``) into sys.modules without running its ``__init__``."""
    spec = importlib.util.spec_from_file_location(
        name, os.path.join(folder, "__init__.py"), submodule_search_locations=[folder]
    )
    if spec is None:
        raise Refusal("unavailable", "ONNX Runtime's Python package has no {} ({})".format(name, folder))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    return module


def import_generator():
    """(onnx, onnxruntime, onnxruntime.training.artifacts), or a Refusal of kind 'unavailable'."""
    try:
        import onnx
    except ImportError as exc:
        raise Refusal("unavailable", "the onnx package is not installed ({})".format(exc))
    spec = importlib.util.find_spec("onnxruntime")  # a top-level find_spec imports nothing
    if spec is None or not spec.submodule_search_locations:
        raise Refusal("unavailable", "ONNX Runtime's Python package (onnxruntime) is not installed")
    root = list(spec.submodule_search_locations)[0]
    training = os.path.join(root, "training")
    if not os.path.isfile(os.path.join(training, "artifacts.py")):
        raise Refusal(
            "unavailable",
            "the installed onnxruntime ({}) is an inference build: its Python layer has no training "
            "artifacts generator".format(root),
        )
    # onnxruntime/training/__init__.py imports torch (through optim), onnxruntime/tools/__init__.py imports
    # it when it is installed, and `import onnxruntime` probes training.ortmodule, which imports it too.
    # The generator needs none of these.
    training_package = _package_without_init("onnxruntime.training", training)
    tools_package = _package_without_init("onnxruntime.tools", os.path.join(root, "tools"))
    sys.modules["onnxruntime.training.ortmodule"] = None  # type: ignore[assignment]  # an ImportError
    try:
        onnxruntime = importlib.import_module("onnxruntime")
        setattr(onnxruntime, "training", training_package)
        setattr(onnxruntime, "tools", tools_package)
        artifacts = importlib.import_module("onnxruntime.training.artifacts")
        pybind = importlib.import_module("onnxruntime.capi._pybind_state")
    except ImportError as exc:
        raise Refusal("unavailable", "ONNX Runtime's Python training layer does not import here: {}".format(exc))
    pybind.set_default_logger_severity(3)  # errors only: the graph transformers log every pass at INFO
    return onnx, onnxruntime, artifacts


# --- describing tensors -------------------------------------------------------------------------------------

def value_spec(onnx, value):
    """{"name", "dtype", "shape"} of a graph input or output; shape entries are ints, names or null."""
    kind = value.type.WhichOneof("value")
    if kind != "tensor_type":
        return {"name": value.name, "dtype": kind or "unknown", "shape": None}
    tensor = value.type.tensor_type
    return {"name": value.name, "dtype": type_name(onnx, tensor.elem_type), "shape": graph_facts.shape_dims(tensor)}


def parameter(onnx, initializer, module_names):
    """The record of a parameter; "module_name": the torch name the exporter renamed it from (module_names.py)."""
    size = 1
    for dim in initializer.dims:
        size *= dim
    record = {"name": initializer.name, "dtype": type_name(onnx, initializer.data_type),
              "shape": list(initializer.dims), "size": size}
    if initializer.name in module_names:
        record["module_name"] = module_names[initializer.name]
    return record


def _elements(dims):
    count = 1
    for size in dims:
        count *= size
    return count


# --- the loss -----------------------------------------------------------------------------------------------

def loss_plan(onnx, model, loss, loss_input_names, reading=None, class_axis=None):
    """Check that the loss has a usable output to read; returns (loss input, target input name, the
    loss_input_names to pass on, the model, how the loss reads it, preparation records). ``reading``: the
    loss_reading module, which fits a cross-entropy's input to ONNX Runtime's loss (None: no fitting)."""
    graph = model.graph
    outputs = dict((o.name, o) for o in graph.output)
    output_names = [o.name for o in graph.output]
    shown = ", ".join(output_names) or "none"
    if loss is None:
        if not output_names:
            raise Refusal("loss", "the model has no outputs: with no loss, its first output must be the loss")
        spec = value_spec(onnx, graph.output[0])
        if spec["dtype"] not in graph_facts.FLOAT_TYPE_NAMES.values():
            raise Refusal("loss", "with no loss, the model's first output is the loss, but {!r} is {} {}, not a "
                                  "floating-point scalar".format(spec["name"], spec["dtype"], graph_facts.show_dims(spec["shape"])))
        if spec["shape"] and any(d != 1 for d in spec["shape"]):
            raise Refusal("loss", "with no loss, the model's first output is the loss, but {!r} has shape {}, not "
                                  "a scalar: add a loss (cross-entropy, MSE, ...) or make the model output "
                                  "one".format(spec["name"], graph_facts.show_dims(spec["shape"])))
        return spec["name"], None, loss_input_names, model, None, []
    described = LOSS_NAMES[loss]
    if loss_input_names:
        if len(loss_input_names) > 2:
            raise Refusal("loss", "loss_input_names has {} names; the {} loss takes two at most: the output it "
                                  "reads and the name of its target input".format(len(loss_input_names), described))
        scores = loss_input_names[0]
        if scores not in outputs:
            raise Refusal("loss", "loss_input_names names {!r}, which is not an output of the model (its "
                                  "outputs: {})".format(scores, shown))
    else:
        if not output_names:
            raise Refusal("loss", "the model has no outputs: the {} loss has nothing to read".format(described))
        if len(output_names) > 1:
            raise Refusal("loss", "the model has {} outputs ({}): name the one the {} loss reads with "
                                  "loss_input_names=[NAME] (--loss-input NAME)".format(len(output_names), shown, described))
        scores = output_names[0]
    fitted, records = None, []
    if reading is not None and loss == "CrossEntropyLoss":
        try:
            model, fitted, records = reading.fit_cross_entropy(model, scores, class_axis)
        except reading.LossReadingError as exc:
            raise Refusal("loss", str(exc))
        graph = model.graph
        outputs = dict((o.name, o) for o in graph.output)
    loss_tensor = fitted["tensor"] if fitted else scores
    spec = value_spec(onnx, outputs[loss_tensor])
    if spec["dtype"] not in graph_facts.FLOAT_TYPE_NAMES.values():
        raise Refusal("loss", "the {} loss needs a floating-point tensor to read, but the model's output {!r} is "
                              "{} {}".format(described, loss_tensor, spec["dtype"], graph_facts.show_dims(spec["shape"])))
    if loss == "CrossEntropyLoss" and (spec["shape"] is None or len(spec["shape"]) < 2):
        raise Refusal("loss", "cross-entropy needs one score per class, an output of shape [N, classes], but the "
                              "model's output {!r} is {} {}".format(loss_tensor, spec["dtype"], graph_facts.show_dims(spec["shape"])))
    target = loss_input_names[1] if loss_input_names and len(loss_input_names) > 1 else (
        "labels" if loss == "CrossEntropyLoss" else "target")
    inputs = set(i.name for i in graph.input)
    produced = set(name for node in graph.node for name in node.output) | set(i.name for i in graph.initializer)
    if target not in inputs and target in produced:
        raise Refusal("loss", "the loss adds an input named {!r}, but the model already has a value of that name: "
                              "name the loss's input otherwise with loss_input_names=[{!r}, 'OTHER'] (--loss-input {} "
                              "OTHER)".format(target, scores, scores))
    if records:  # the loss reads a tensor the graph now outputs: name it (and the labels) to the generator
        loss_input_names = [loss_tensor, target]
    return loss_tensor, target, loss_input_names, model, fitted, records


# --- generation ---------------------------------------------------------------------------------------------

class OnnxRuntimeBackend(object):
    """ONNX Runtime's own generator (``onnxruntime.training.artifacts``), as ``generate`` calls a generator:
    ``generate(model, ...)`` writes the files, ``unreached(error)`` names the parameters a failure says no
    gradient reaches, ``explain(error)`` says what went wrong. ort_cffi's own builder has the same face
    (``ort_cffi.artifacts.builder.files.BuilderBackend``), and runs in ort_cffi's process."""

    name = "onnxruntime"

    def __init__(self):
        self.onnx, self.onnxruntime, self.artifacts = import_generator()
        self.versions = {"onnx": self.onnx.__version__, "onnxruntime": self.onnxruntime.__version__}

    def generate(self, model, requires_grad, frozen_params, loss, optimizer, out, prefix, additional_output_names,
                 nominal_checkpoint, loss_input_names):
        graph_utils = importlib.import_module("onnxruntime.training.onnxblock._graph_utils")
        setattr(graph_utils, "_GRAPH_TOKEN", 0)  # names like onnx::loss::2 count from here, as in a fresh process
        self.artifacts.generate_artifacts(
            model, requires_grad=requires_grad, frozen_params=frozen_params,
            loss=None if loss is None else self.artifacts.LossType[loss],
            optimizer=None if optimizer is None else self.artifacts.OptimType[optimizer],
            artifact_directory=out, prefix=prefix, additional_output_names=additional_output_names,
            nominal_checkpoint=nominal_checkpoint, loss_input_names=loss_input_names)

    def unreached(self, error):
        # A parameter the static check let through but no gradient reaches (say, a threshold feeding only a
        # comparison): the gradient builder names the first such one.
        missing = (re.search(r"failed to find NodeArg by name: (.+)_grad\b", str(error))
                   or re.search(r"Cannot compute the partial derivative for '(.+)' as it's unreachable", str(error)))
        return [missing.group(1)] if missing else []

    def explain(self, error):
        return "ONNX Runtime's generator failed: {}".format(_runtime_message(error))


def refuse_missing_external_data(onnx, model, path, what):
    """Refuse a model whose initializers keep their data in files (``model.onnx.data``) that are not beside
    it, naming them: an export of a large model writes two files, and copying one is easy."""
    folder = os.path.dirname(os.path.abspath(path))
    missing = []
    for tensor in model.graph.initializer:
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        location = dict((entry.key, entry.value) for entry in tensor.external_data).get("location")
        if location and location not in missing and not os.path.isfile(os.path.join(folder, location)):
            missing.append(location)
    if missing:
        several = len(missing) > 1
        raise Refusal("model", "{} keeps its weights in external data file{} {}, missing from {}: copy {} beside "
                               "the model".format(what, "s" if several else "", ", ".join(repr(m) for m in missing),
                                                  folder, "them" if several else "it"))


def generate(request, backend=None):
    """Generate the artifacts ``request`` asks for with ``backend`` (default: ONNX Runtime's generator)."""
    if backend is None:
        backend = OnnxRuntimeBackend()
    onnx = backend.onnx
    what = request.get("model_label") or "the model"
    def check_external_data(model):
        refuse_missing_external_data(onnx, model, request["model"], what)

    try:
        # A generator may load the model its own way (ort_cffi's builder sets the weights aside, after the check)
        if getattr(backend, "load_model", None) is not None:
            model = backend.load_model(request["model"], check_external_data)
        else:
            model = onnx.load(request["model"])
    except Refusal:
        raise
    except Exception as exc:
        try:  # a model whose weights file is missing is a model all the same: say what is missing
            refuse_missing_external_data(onnx, onnx.load(request["model"], load_external_data=False),
                                         request["model"], what)
        except Refusal:
            raise
        except Exception:
            pass
        raise Refusal("model", "{} is not an ONNX model that onnx {} can read: {}".format(
            what, onnx.__version__, str(exc).strip() or type(exc).__name__))
    original = {"ir_version": model.ir_version, "opset": graph_facts.default_opset(model),
                "inputs": [value_spec(onnx, v) for v in model.graph.input if v.name not in
                           set(i.name for i in model.graph.initializer)],
                "outputs": [value_spec(onnx, v) for v in model.graph.output]}
    notes = inline_functions(model) + bring_down(onnx, model, what)

    loss = request.get("loss")
    preparing = request.get("prepare", True)
    own_outputs = [o.name for o in model.graph.output]
    scores, target, loss_input_names, model, reading, loss_records = loss_plan(
        onnx, model, loss, request.get("loss_input_names"), load_sibling("loss_reading") if preparing else None,
        request.get("class_axis"))
    additional = request.get("additional_output_names")
    if additional is None:  # by default the eval model keeps the model's outputs (to export for inference)
        additional = [] if loss is None else list(own_outputs)
        if reading and reading["extra_output"]:
            # In the ZipMap's place its input, the class scores: a session's outputs that the trainer reads
            # and exports are tensors (a sequence of maps has no TensorInfo), and accuracy needs the scores.
            additional = [reading["extra_output"] if name == reading["output"] else name for name in additional]
    known = set(v.name for v in list(model.graph.input) + list(model.graph.output)) | set(
        name for node in model.graph.node for name in node.output)
    for name in additional:
        if name not in known:
            raise Refusal("options", "additional_output_names names {!r}, which is no value of the model (its "
                                     "outputs: {})".format(name, ", ".join(o.name for o in model.graph.output) or "none"))

    torch_names = load_sibling("module_names")
    # what torch's default exporter merged, copied, dropped or folded of the module's parameters, made as the
    # module has them (exported_parameters.py); what it folded away for good, said
    exported = load_sibling("exported_parameters")
    weights = getattr(backend, "weights", None)  # where ort_cffi's builder set the large initializers aside
    merged_records = []  # type: List[Dict[str, Any]]
    if preparing:
        merged_records += exported.untie_merged(onnx, model, weights)
        merged_records += exported.retie_folded_copies(onnx, model, weights)
        merged_records += exported.restore_dropped_biases(onnx, model)
        merged_records += exported.retie_broadcast_copies(onnx, model, weights)
    merged_records += exported.unread_parameters(onnx, model)
    lost = exported.lost_parameters(onnx, model)  # not trained (left_out; no initializer holds them)
    patterns = request.get("requires_grad")
    notes.extend(selection.constants_as_parameters(model, patterns))
    initializers = list(model.graph.initializer)
    uses = selection.consumers(model.graph)
    graph_outputs = set(o.name for o in model.graph.output)
    renamed = torch_names.module_names(onnx, model)  # torch's names of what its default exporter renamed
    # Names as ONNX Runtime's generator takes them (docs/guides/porting-python.md); what is passed over is noted.
    skipped = []  # type: List[Tuple[str, str, str]]  # (option, name, why), noted by option and reason
    frozen = selection.resolve(onnx, request.get("frozen_params") or [], "frozen_params", initializers, renamed, skipped)
    if patterns is None:  # every parameter, not the numbers torch's default exporter wrote as initializers
        constants = torch_names.exporter_constants(onnx, model, renamed)
        wanted = dict((i.name, False) for i in initializers
                      if i.data_type in FLOAT_TYPES and i.name not in frozen and i.name not in constants)
    else:
        wanted = selection.resolve(onnx, patterns, "requires_grad", initializers, renamed, skipped)
        both = [name for name in wanted if name in frozen]
        if both:
            raise Refusal("options", "trainable and frozen at once: {} (requires_grad and frozen_params must not "
                                     "overlap)".format(", ".join(both)))
    for option, reason in sorted(set((option, reason) for option, _, reason in skipped), key=selection.skipped_order(skipped)):
        notes.append("{}: {}: {}".format(option, ", ".join(n for o, n, r in skipped if (o, r) == (option, reason)), reason))
    left_out = {}
    for name, exact in list(wanted.items()):
        reason = selection.no_gradient_reason(name, uses, graph_outputs)
        if reason is None:
            continue
        if exact:
            raise Refusal("gradient", "{!r} cannot be trained: {}".format(name, reason))
        del wanted[name]
        left_out[name] = reason
    # requires_grad=[] asks for nothing trained (ONNX Runtime's requires_grad=None): artifacts without an
    # optimizer model may then have no trainable parameter.
    nothing_asked = patterns is not None and not patterns and request.get("optimizer") is None
    if not wanted and not nothing_asked:
        constants = sorted(name for name, node in selection.float_constants(model).items()  # weights, not scalars
                           if any(a.name == "value" and _elements(a.t.dims) > 1 for a in node.attribute))
        hint = "" if not constants else (
            ". The model's floating-point Constant nodes ({}{}) are not parameters; name them in requires_grad to "
            "train them".format(", ".join(repr(n) for n in constants[:4]), ", ..." if len(constants) > 4 else ""))
        raise Refusal("options", "nothing to train: the selection leaves no floating-point parameter that a "
                                 "gradient reaches (requires_grad {}, frozen_params {}){}".format(
                                     patterns if patterns is not None else "all", request.get("frozen_params") or "none",
                                     hint))
    # BatchNormalization's running statistics follow training (batchnorm.py): frozen parameters that the
    # training model outputs updated, for the trainer to write back after each step.
    statistics, statistics_records = [], []
    if preparing:
        model, statistics, statistics_records = load_sibling("batchnorm").follow_batch_statistics(
            model, None if patterns is None and not frozen else set(wanted))
    statistics_outputs = [s[key] for s in statistics for key in ("mean_output", "var_output")]
    for name in [s[key] for s in statistics for key in ("mean", "var")]:
        wanted.pop(name, None)
        left_out.pop(name, None)
        frozen.setdefault(name, False)
    if statistics:  # shared statistics got copies of their own (batchnorm.py): the initializers as they are now
        initializers = list(model.graph.initializer)
        present = set(i.name for i in initializers)
        for names in (wanted, left_out, frozen):
            for name in [n for n in names if n not in present]:
                del names[name]

    rows = selection.frozen_rows_of(onnx, request.get("frozen_rows") or {}, initializers, renamed, wanted)
    if rows and getattr(backend, "name", None) != "ort_cffi":
        raise Refusal("options", "frozen_rows is ort_cffi's builder's: ONNX Runtime's generator trains every row")

    out = request["out"]
    prefix = request.get("prefix") or ""
    # Graph preparation (rewrites.py) changes only what stands between the trained parameters and the loss;
    # a model that needs nothing goes to the generator as the very object loaded, so that its artifacts are
    # byte for byte those of ONNX Runtime's own generator. prepare=False hands every model over as it is.
    rewrites = load_sibling("rewrites") if preparing else None
    while True:
        order = [i.name for i in initializers]
        requires_grad = [name for name in order if name in wanted]
        frozen_params = [name for name in order if name in frozen]
        prepared, preparation = model, []
        if rewrites is not None:
            try:
                prepared, preparation = rewrites.prepare(model, requires_grad=requires_grad, outputs=[scores],
                                                         native=getattr(backend, "native_ops", frozenset()))
            except rewrites.PreparationError as exc:
                raise Refusal("prepare", str(exc))
        try:
            kept_rows = dict((name, chosen) for name, chosen in rows.items() if name in wanted)
            backend.generate(prepared, requires_grad, frozen_params or None, loss, request.get("optimizer"), out,
                             prefix, (additional + statistics_outputs) or None, bool(request.get("nominal_checkpoint")),
                             loss_input_names or None, **({"frozen_rows": kept_rows} if kept_rows else {}))
            break
        except Exception as exc:  # pybind's RuntimeError mostly; onnx's errors for models it cannot handle
            # Parameters no gradient reaches: dropped when a pattern chose them, refused when named.
            names = backend.unreached(exc)
            if not names or any(name not in wanted for name in names):
                raise Refusal("generator", backend.explain(exc))
            for name in names:
                if wanted[name]:
                    raise Refusal("gradient", "{!r} cannot be trained: no gradient reaches it from the loss".format(name))
                del wanted[name]
                left_out[name] = "no gradient reaches it from the loss"
            if not wanted:
                raise Refusal("options", "nothing to train: no gradient reaches any selected parameter")

    files = {"checkpoint": prefix + "checkpoint", "training_model": prefix + "training_model.onnx",
             "eval_model": prefix + "eval_model.onnx"}
    if request.get("optimizer") is not None:
        files["optimizer_model"] = prefix + "optimizer_model.onnx"
    if request.get("nominal_checkpoint"):
        files["nominal_checkpoint"] = prefix + "nominal_checkpoint"
    described = {}
    eval_records = []
    for key in ("training_model", "eval_model", "optimizer_model"):
        if key not in files:
            continue
        path = os.path.join(out, files[key])
        written = onnx.load(path, load_external_data=False)
        changed = bring_down(onnx, written, "the generated " + files[key])
        if changed:  # the optimizer model carries the installed onnx's IR version
            notes.extend("{}: {}".format(files[key], note) for note in changed)
        # The loss block makes the labels the scores' shape less the LAST axis; with the classes moved to
        # axis 1 (or there already, per pixel) the labels are the scores less the class axis.
        if key != "optimizer_model" and reading and reading["labels_shape"] is not None:
            changed = set_input_shape(written, target, reading["labels_shape"]) or changed
        if key == "eval_model" and preparing:  # a training-mode export's eval model, in the form that loads
            kept = [o for o in written.graph.output if o.name not in statistics_outputs]
            if len(kept) < len(written.graph.output):  # the statistics are the training model's business
                del written.graph.output[:]
                written.graph.output.extend(kept)
                changed = True
            forms = load_sibling("eval_graph").inference_forms(written)
            eval_records.extend(forms)
            changed = bool(forms) or changed
        if changed:
            onnx.save(written, path)
        described[key] = written

    by_name = dict((i.name, i) for i in initializers)
    parameters = set(requires_grad) | set(frozen_params)
    training = described["training_model"]
    training_inputs = [value_spec(onnx, v) for v in training.graph.input
                       if v.name not in parameters and v.name != "lazy_reset_grad"
                       and not v.name.endswith("_grad.accumulation.buffer")]
    original_inputs = set(v["name"] for v in original["inputs"])
    floats = [i for i in initializers if i.data_type in FLOAT_TYPES]
    return {
        "files": files,
        "model": original,
        "notes": notes,
        "preparation": loss_records + merged_records + statistics_records + preparation + eval_records,
        "batchnorm_statistics": statistics,
        "loss_reading": None if reading is None else {
            "labels": target, "scores": reading["accuracy_scores"], "class_axis": reading["class_axis"],
            "labels_shape": reading["labels_shape"], "tensor": scores},
        "trainable": [parameter(onnx, by_name[n], renamed) for n in requires_grad],
        "frozen": [parameter(onnx, by_name[n], renamed) for n in frozen_params],
        "constants": [parameter(onnx, i, renamed) for i in floats if i.name not in parameters],
        "left_out": dict(left_out, **dict((name, LOST_REASON) for name in lost)),
        "loss_input": scores,
        "target": target,
        "additional_output_names": additional,
        "training_inputs": training_inputs,
        "added_inputs": [v["name"] for v in training_inputs if v["name"] not in original_inputs],
        "eval_outputs": [o.name for o in described["eval_model"].graph.output],
        "ir_version": training.ir_version,
        "versions": dict(backend.versions, generator=backend.name),
        "torch_imported": "torch" in sys.modules,
    }


# What the gradient builder's failed assertions mean, where their own text says little: the condition's
# text -> the explanation. Their message is the source location and a C++ signature, then
# "CONDITION was false.", then what the assertion says, if anything.
ASSERTIONS = {
    "OutputDefs().size()": "a gradient builder reads an optional output that a node of the model does not declare "
                           "(LayerNormalization's Mean and InvStdDev, Dropout's mask, training-mode "
                           "BatchNormalization's running statistics)",
    "gradient_builder != nullptr": "an operator on the way from the trained parameters to the loss has no gradient in "
                                   "ONNX Runtime",
}


def set_input_shape(model, name, dims):
    """Give graph input ``name`` of ``model`` the shape ``dims`` (ints, symbolic names, None for unknown);
    True when the input exists."""
    for value in model.graph.input:
        if value.name != name:
            continue
        shape = value.type.tensor_type.shape
        del shape.dim[:]
        for size in dims:
            dim = shape.dim.add()
            if isinstance(size, int):
                dim.dim_value = size
            elif size:
                dim.dim_param = size
        return True
    return False


def _runtime_message(exc):
    """ONNX Runtime's message without the C++ source location and signature it starts with; a failed
    assertion is explained in words, with the location it failed at kept at the end."""
    text = str(exc).strip()
    text = re.sub(r"^\S+\.cc:\d+ [^\[]*\[ONNXRuntimeError\] : \d+ : \w+ : ", "", text)
    assertion = re.match(r"^(\S+\.(?:cc|h):\d+) (.*?) was false\.\s*(.*)$", text, re.S)
    if assertion is None:
        return text
    where, condition, said = assertion.group(1), assertion.group(2), assertion.group(3).strip()
    meaning = next((why for key, why in ASSERTIONS.items() if key in condition), None)
    parts = [p for p in (meaning, said) if p]
    if not parts:
        parts = ["an internal check failed"]
    return "{} (ONNX Runtime's check at {})".format(": ".join(parts), where.rsplit("/", 1)[-1])


def probe():
    """What a ``probe`` request answers: the versions of the generator that would run."""
    onnx, onnxruntime, _ = import_generator()
    return {"versions": {"onnx": onnx.__version__, "onnxruntime": onnxruntime.__version__},
            "onnxruntime_path": os.path.dirname(os.path.abspath(onnxruntime.__file__))}


def main(argv):
    with open(argv[1]) as file:
        request = json.load(file)
    if request.get("layer"):
        # ONNX Runtime's Python layer from the runtime store (on interpreters its wheel does not install into),
        # prepared for this interpreter: first, so that no other onnxruntime package on the path is taken.
        sys.path.insert(0, request["layer"])
    try:
        result = probe() if request.get("probe") else generate(request)
        result["ok"] = True
    except Refusal as refusal:
        result = {"ok": False, "kind": refusal.kind, "message": str(refusal)}
    result["python"] = {"version": ".".join(str(v) for v in sys.version_info[:3]), "executable": sys.executable}
    with open(request["result"], "w") as file:
        json.dump(result, file)
    return 0


if __name__ == "__main__":
    # Run as a script, this file's folder (ort_cffi/artifacts/) is first on sys.path: its modules must not shadow others.
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    try:
        sys.exit(main(sys.argv))
    except Exception:
        traceback.print_exc()
        sys.exit(1)
