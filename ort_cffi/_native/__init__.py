"""The native layer (private): errors and C strings, files, the loader that finds a training-enabled runtime
(``loader``, with ``elf`` and ``store``), the cffi declarations (``ffi``, made from ``include/``), the loaded
tables with the one status chokepoint (``tables``), and the handles (``handles``: one owner per native
handle). It imports nothing of ort_cffi above it; ``ort_cffi.capi`` is its public face."""
