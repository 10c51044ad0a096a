"""ort_cffi: a cffi (ABI mode) binding to ONNX Runtime's on-device training C API."""
from setuptools import setup

TRAINING_RUNTIME = "1.19.2"  # the last training build on PyPI; the table layout ort_cffi declares
FLOWER = "flwr[simulation]>=1.42,<1.43; python_version >= '3.11'"

setup(
    name="ort_cffi",
    version="0.1.0",
    description="Python binding (cffi, ABI mode) to ONNX Runtime's training C API, "
    "with the Java OrtTrainingSession API",
    python_requires=">=3.9",
    # The C declarations live as text in the top-level include/ folder and ship inside the
    # package as ort_cffi/include/*.h.
    packages=["ort_cffi", "ort_cffi.include"],
    package_dir={"ort_cffi.include": "include"},
    package_data={"ort_cffi": ["py.typed", "data/*", "data/*/*"], "ort_cffi.include": ["*.h"]},
    # The one compiled piece: the custom-op hook that is handed the runtime's OrtApiBase*.
    cffi_modules=["ort_cffi/_hook_build.py:ffibuilder"],
    setup_requires=["cffi>=1.16"],
    install_requires=[
        "cffi>=1.16",  # the binding itself: ABI-mode declarations and calls, plus the hook build
        "numpy>=1.22",  # tensors in and out
        "platformdirs>=3",  # where the measured runtime offset is cached
        "filelock>=3.12",  # that cache may be written by two processes at once
    ],
    extras_require={
        # The runtime: the bare package works with an explicit library (ORT_CFFI_LIBRARY).
        "cpu": [f"onnxruntime-training-cpu=={TRAINING_RUNTIME}"],
        "cuda": [f"onnxruntime-training=={TRAINING_RUNTIME}"],
        # The command-line trainer's progress bar and plots.
        "demo": ["tqdm>=4.60", "matplotlib>=3.5"],
        # ort-cffi-federated and ort_cffi.flower: Flower's client/server apps and its Ray simulation
        # engine. Pinned below 1.43: run_simulation and NumPyClient are deprecated in 1.42.
        "federated": [FLOWER, "matplotlib>=3.5"],
        "test": [
            f"onnxruntime-training-cpu=={TRAINING_RUNTIME}",  # the real runtime and its Python oracle
            "onnx>=1.14,<1.17",  # test models (newer onnx writes IR versions 1.19 refuses) and the generator's child
            "pytest>=7",
            "hypothesis>=6",  # property tests of tensor round trips
            "mypy>=1.5",  # the package is typed; CI checks it
            "tqdm>=4.60",
            "matplotlib>=3.5",
            FLOWER,  # the federated tests run a small Ray simulation
        ],
        # ort_cffi.artifacts / ort-cffi-artifacts (and scripts/make_artifacts.py): ONNX Runtime's generator,
        # run in a child process, needs its Python training layer (wheels for Python 3.8-3.12; on 3.13+ name
        # another interpreter with --python) and onnx. No torch: the child bypasses the package init that
        # imports it. onnx from 1.14 (tested: 1.16, 1.23): what a newer onnx writes is brought down to IR
        # version 10 and opset 21, which 1.19 accepts (with 1.23 the artifacts matched 1.16's byte for byte).
        "artifacts": [f"onnxruntime-training-cpu=={TRAINING_RUNTIME}; python_version < '3.13'", "onnx>=1.14,<1.24"],
    },
    entry_points={
        "console_scripts": [
            "ort-cffi-train=ort_cffi.train:main",
            "ort-cffi-federated=ort_cffi.federated:main",
            "ort-cffi-artifacts=ort_cffi.artifacts_cli:main",
        ]
    },
)
