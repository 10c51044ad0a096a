"""ort_cffi: a cffi (ABI mode) binding to ONNX Runtime's on-device training C API."""
from setuptools import setup

TRAINING_RUNTIME = "1.19.2"  # the last training build on PyPI; the table layout ort_cffi declares
# Flower's Message API (flwr.app, flwr.clientapp, flwr.serverapp.strategy) and the Fleet API over HTTP:
# 1.42 is the floor, with no ceiling (ort_cffi uses no deprecated Flower API).
FLOWER = "flwr[simulation]>=1.42; python_version >= '3.11'"

setup(
    name="ort_cffi",
    version="0.1.0",
    description="Python binding (cffi, ABI mode) to ONNX Runtime's training C API, "
    "with the Java OrtTrainingSession API",
    python_requires=">=3.9",
    # The C declarations live as text in the top-level include/ folder and ship inside the
    # package as ort_cffi/include/*.h.
    packages=["ort_cffi", "ort_cffi.flower", "ort_cffi.include"],
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
        # ort-cffi-federated and ort_cffi.flower: Flower's client/server apps, SuperLink/SuperNode and its
        # Ray simulation engine (flwr[simulation]); the plot.
        "federated": [FLOWER, "matplotlib>=3.5"],
        "test": [
            f"onnxruntime-training-cpu=={TRAINING_RUNTIME}",  # the real runtime and its Python oracle
            "onnx>=1.14,<1.17",  # building small test models (newer onnx writes IR versions 1.19 refuses)
            "pytest>=7",
            "hypothesis>=6",  # property tests of tensor round trips
            "mypy>=1.5",  # the package is typed; CI checks it
            "tqdm>=4.60",
            "matplotlib>=3.5",
            FLOWER,  # the federated tests run simulations and a SuperLink with SuperNodes on loopback
            "cryptography>=42",  # the TLS test makes its own CA, certificates and SuperNode keys
        ],
        # Regenerating the committed artifacts (scripts/make_artifacts.py) only; a CPU build.
        "artifacts": ["torch==2.13.0", "onnx>=1.14,<1.17", "scikit-learn>=1.2"],
    },
    entry_points={
        "console_scripts": [
            "ort-cffi-train=ort_cffi.train:main",
            "ort-cffi-federated=ort_cffi.federated:main",
        ]
    },
)
