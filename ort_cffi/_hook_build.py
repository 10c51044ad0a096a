"""cffi builder (API mode) for ``ort_cffi._hook``: the only compiled piece of ort_cffi.

The training wheel does not export ONNX Runtime's C API. Its documented custom-op library hook
(``SessionOptions.register_custom_ops_library(path)``) dlopens ``path`` and calls the exported
``RegisterCustomOps(OrtSessionOptions*, const OrtApiBase*)``. This extension module *is* such a
library: it remembers the ``OrtApiBase*`` it is handed and returns NULL (success). It is used only
in the short child process that measures where the API base lies in the runtime image
(see ``ort_cffi/_loader.py``); the user's process never runs it.
"""
from cffi import FFI

ffibuilder = FFI()
ffibuilder.cdef("const void* ort_cffi_received_api_base(void);")
ffibuilder.set_source(
    "ort_cffi._hook",
    r"""
static const void* received_api_base = 0;

/* Exported with default visibility whatever the compiler flags: ONNX Runtime looks it up by name. */
__attribute__((visibility("default")))
void* RegisterCustomOps(void* session_options, const void* api_base) {
    (void)session_options;
    received_api_base = api_base;
    return 0; /* a NULL OrtStatus* means success */
}

static const void* ort_cffi_received_api_base(void) { return received_api_base; }
""",
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
