"""ort_cffi: a cffi (ABI mode) binding to ONNX Runtime's on-device training C API."""
from setuptools import find_packages, setup

TRAINING_RUNTIME = "1.19.2"  # the last training build on PyPI; the table layout ort_cffi declares
# Where pip can install that build: it was published for CPython 3.8-3.12 (CUDA: 3.8-3.11), and the markers
# take it on x86_64 (ort_cffi loads it on Linux). Elsewhere `[cpu]`/`[cuda]` install nothing and
# `ort-cffi-runtime install` fetches the runtime's native libraries (the nearest CPython's build) into
# ort_cffi's cache instead; `[onnxruntime]` is the runtime there.
CPU_WHEEL = f"onnxruntime-training-cpu=={TRAINING_RUNTIME}; python_version < '3.13' and platform_machine == 'x86_64'"
CUDA_WHEEL = f"onnxruntime-training=={TRAINING_RUNTIME}; python_version < '3.12' and platform_machine == 'x86_64'"
# What the training wheel's Python package needs to run the generator, for interpreters where that package
# comes from the runtime store (3.13 and later, see "onnxruntime-generator" below); elsewhere the wheel brings them as its
# own dependencies. Measured on 3.13: generating imports onnx, protobuf and flatbuffers; the others are the
# wheel's dependencies that other modules of its layer import (kept so that its whole layer works as pip
# would have installed it).
NEWER = "; python_version >= '3.13'"
GENERATOR_DEPENDENCIES = [
    "onnx>=1.18,<1.24" + NEWER,  # the first onnx with CPython 3.13 wheels (no compiler needed)
    "flatbuffers" + NEWER,  # imported by import_generator (onnxruntime.tools' ORT-format model utilities)
    "protobuf" + NEWER,  # the model protos of onnx and onnxblock
    "sympy" + NEWER,  # onnxruntime.tools' symbolic shape inference (a dependency of the wheel)
    "packaging" + NEWER,  # version checks in onnxruntime.training's modules (a dependency of the wheel)
    "coloredlogs" + NEWER,  # the logging of onnxruntime's tools and transformers
]
# Flower's Message API (flwr.app, flwr.clientapp, flwr.serverapp.strategy) and the Fleet API over HTTP:
# 1.42 is the floor, with no ceiling (ort_cffi uses no deprecated Flower API).
FLOWER = "flwr[simulation]>=1.42; python_version >= '3.11'"
# The runtimes. `onnxruntime`, `onnxruntime-gpu` and `onnxruntime-training(-cpu)` all install the same `onnxruntime/`
# package folder: one environment cannot hold two of them (uninstalling one removes files of the other). So the
# bare install carries no runtime (it never replaces an `onnxruntime` the environment already has), and each
# runtime is an extra of its own, of which an install line names one: `[onnxruntime]` (the default in the docs:
# the current CPU build, for every platform and CPython ONNX Runtime ships, ort_cffi's engine trains on it),
# `[gpu]` (its CUDA build), `[cpu]`/`[cuda]` (the 1.19.2 training build, bit-identical with ONNX Runtime's own
# training). Where pip has no wheel (an interpreter newer than the newest: CPython 3.15), `ort-cffi-runtime
# install --inference` fetches the current C library instead. tests/guarantees/test_install_extras.py checks that
# no documented install line puts two runtimes in one environment.
INFERENCE_RUNTIME = "onnxruntime>=1.19"  # 1.19: the oldest inference build ort_cffi's tables accept; 1.31.1 is current
GPU_RUNTIME = "onnxruntime-gpu>=1.19"

TEST_CORE = [
    CPU_WHEEL,  # the real runtime and its Python oracle
    # building small test models: onnx 1.17+ writes IR versions 1.19 refuses by default, and 1.17 has
    # no CPython 3.13 build; the tests set the IR version they need on 3.13 and later
    "onnx>=1.14,<1.17; python_version < '3.13'",  # also the artifact generator's child
    "onnx>=1.18,<1.19; python_version == '3.13'",
    "onnx>=1.23.2,<1.24; python_version >= '3.14'",  # 1.18 has no 3.14 wheel (its source build fails)
    "pytest>=7",
    "hypothesis>=6",  # property tests of tensor round trips
    "mypy>=1.5",  # the package is typed; CI checks it
    "cffi>=1.16",  # the tests compile ONNX Runtime's custom-op hook as an oracle for the static finder
]

DOCS = [
    "mkdocs>=1.6,<2",  # the site generator
    "mkdocs-material>=9.5",  # its theme
    "mkdocstrings[python]>=0.26",  # the API reference, generated from docstrings and signatures
    "ruff>=0.4",  # mkdocstrings formats the reference's signatures with it
]

setup(
    name="ort_cffi",
    version="0.1.0",
    description="Python binding (cffi, ABI mode) to ONNX Runtime's training C API, "
    "with the Java OrtTrainingSession API",
    python_requires=">=3.9",
    # The C declarations live as text in the top-level include/ folder and ship inside the
    # package as ort_cffi/include/*.h.
    # Folders by layer: _native (loader, declarations, tables, handles), _facade (the Java classes), the
    # applications (artifacts, trainer, runtime, flower) and cli (the four commands).
    packages=find_packages(include=["ort_cffi", "ort_cffi.*"]) + ["ort_cffi.include"],
    py_modules=["ort_cffi_commands"],  # the commands' entry points, light enough to catch Ctrl-C as they start
    package_dir={"ort_cffi.include": "include"},
    package_data={"ort_cffi": ["py.typed", "data/*", "data/*/*"], "ort_cffi.include": ["*.h"]},
    install_requires=[
        "cffi>=1.16",  # the binding itself: ABI-mode declarations and calls (no compiler needed)
        "numpy>=1.22",  # tensors in and out; the loader reads relocation tables as arrays
        "pyelftools>=0.29",  # the loader finds OrtApiBase in the runtime's ELF file statically
        "platformdirs>=3",  # where the private runtime images and fetched runtimes are kept
        "filelock>=3.12",  # that cache may be written by two processes at once
        # ort_cffi's engine (training on inference builds of ONNX Runtime) reads the artifacts' models and
        # writes them with their training operators lowered to standard ones: onnx's protobuf classes and helpers.
        "onnx>=1.14",
    ],
    extras_require={
        # The runtime: one of these four (see "The runtimes" above); the bare package works with a runtime fetched by
        # `ort-cffi-runtime install` or an explicit library (ORT_CFFI_LIBRARY).
        "onnxruntime": [INFERENCE_RUNTIME],
        "gpu": [GPU_RUNTIME],
        "cpu": [CPU_WHEEL],
        "cuda": [CUDA_WHEEL],
        # The command-line trainer's progress bar and plots.
        "demo": ["tqdm>=4.60", "matplotlib>=3.5"],
        # ort-cffi-train --data on a folder of images, and ort-cffi-predict on image files: Pillow reads, converts
        # and resizes them (9.1: Image.Resampling).
        "images": ["Pillow>=9.1"],
        # ort-cffi-train --tokenizer tokenizer.json and ort-cffi-predict for a model trained with one: Hugging
        # Face's tokenizers reads that format (a vocabulary built from the data needs nothing).
        "text": ["tokenizers>=0.13"],
        # ort-cffi-federated and ort_cffi.flower: Flower's client/server apps, SuperLink/SuperNode and its
        # Ray simulation engine (flwr[simulation]); the plot.
        "federated": [FLOWER, "matplotlib>=3.5"],
        # What the loader, raw-layer, facade and Java-port tests need, on every supported CPython
        # (scripts/test.sh runs them on 3.10-3.15; on 3.13 and later the runtime is fetched, see above).
        "test-core": TEST_CORE,
        "test": TEST_CORE + [
            "tqdm>=4.60",
            "matplotlib>=3.5",
            "sybil>=9",  # runs every Python example of the README and the documentation
            FLOWER,  # the federated tests run simulations and a SuperLink with SuperNodes on loopback
            "cryptography>=42",  # the TLS test makes its own CA, certificates and SuperNode keys
            "Pillow>=9.1",  # the trainer's image-folder tests write PNG and JPEG files and train on them
            "tokenizers>=0.13",  # the text tests train with a tokenizer.json
        ],
        # The documentation site (scripts/docs.sh).
        "docs": DOCS,
        # ort_cffi.artifacts / ort-cffi-artifacts: ort_cffi's own gradient builder works on the onnx protobuf, in
        # this process, on every interpreter: onnx is all it needs (the runtime, which checks that the artifacts
        # load, is a runtime extra of its own: `[onnxruntime,artifacts]`). onnx from 1.14 (tested: 1.16, 1.18,
        # 1.23; pip takes the newest with wheels for the interpreter, 1.23 on 3.14 and 3.15): what it writes is
        # kept to IR version 10 and opset 21.
        "artifacts": ["onnx>=1.14,<1.24"],
        # ONNX Runtime's own generator (generate_artifacts(generator="onnxruntime")), run in a child process: its
        # Python training layer, from the training wheel on 3.8-3.12; on 3.13 the one `ort-cffi-runtime install`
        # keeps from the fetched wheel (pip cannot install that wheel there), with what that layer imports
        # itself, which pip would have pulled in as the wheel's dependencies. No torch: the child bypasses the
        # package init that imports it. The tests use it as the oracle of ort_cffi's builder. It is the training
        # build: it goes with `[cpu]`, never with `[onnxruntime]` or `[gpu]`.
        "onnxruntime-generator": [CPU_WHEEL, "onnx>=1.14,<1.24; python_version < '3.13'"] + GENERATOR_DEPENDENCIES,
    },
    entry_points={
        "console_scripts": [
            # Through ort_cffi_commands, outside the package: Ctrl-C while a command starts (imports
            # included) ends with one line and exit status 130 (that module says why).
            "ort-cffi-train=ort_cffi_commands:train",
            "ort-cffi-federated=ort_cffi_commands:federated",
            "ort-cffi-runtime=ort_cffi_commands:runtime",
            "ort-cffi-artifacts=ort_cffi_commands:artifacts",
            "ort-cffi-predict=ort_cffi_commands:predict",
        ]
    },
)
