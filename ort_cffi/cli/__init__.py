"""The four commands (``ort-cffi-train``, ``ort-cffi-artifacts``, ``ort-cffi-runtime``,
``ort-cffi-federated``): argparse and exit codes only, over the applications. Nothing in the library
imports them; ``python -m ort_cffi.artifacts`` and ``python -m ort_cffi.runtime`` run them through a
``__main__`` module."""
