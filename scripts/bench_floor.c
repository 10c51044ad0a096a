/* The floor for scripts/bench.py: the benchmark's training loop in C, over the same runtime tables
 * (OrtApi, OrtTrainingApi) and the same session and input values that ort_cffi made.
 *
 * Built at benchmark time by cffi in API mode (never installed, never part of ort_cffi). Only the
 * slots used are declared: each table is read as an array of function pointers, and bench.py passes
 * the slot indices it computes from ort_cffi's own declarations (ffi.offsetof(...) / sizeof(void*)).
 * No ONNX Runtime header is needed.
 *
 * One step = TrainStep (output slots NULL: the runtime allocates them), read the float loss of output 0
 * (GetTensorMutableData), ReleaseValue of every output, OptimizerStep, LazyResetGrad.
 */
#include <stddef.h>
#include <stdint.h>

typedef void OrtStatusX;
typedef OrtStatusX *(*train_step_fn)(void *session, const void *run_options, size_t inputs_len,
                                     void *const *inputs, size_t outputs_len, void **outputs);
typedef OrtStatusX *(*optimizer_step_fn)(void *session, const void *run_options);
typedef OrtStatusX *(*lazy_reset_grad_fn)(void *session);
typedef OrtStatusX *(*get_tensor_mutable_data_fn)(void *value, void **out);
typedef void (*release_value_fn)(void *value);
typedef void (*release_status_fn)(OrtStatusX *status);
typedef int (*get_error_code_fn)(const OrtStatusX *status);

#define FLOOR_MAX_OUTPUTS 16

/* The slot indices (OrtApi ones, then OrtTrainingApi ones). */
struct floor_slots {
    int get_tensor_mutable_data, release_value, release_status, get_error_code;
    int train_step, optimizer_step, lazy_reset_grad;
};

/* 0 on success; otherwise 1000 * phase + the OrtErrorCode (phase 1 TrainStep, 2 GetTensorMutableData,
 * 3 OptimizerStep, 4 LazyResetGrad), or -1 for bad arguments. *loss gets the last step's loss. */
int bench_floor_loop(uintptr_t api_addr, uintptr_t training_api_addr, const struct floor_slots *slots,
                     uintptr_t session_addr, const uintptr_t *inputs, size_t inputs_len, size_t outputs_len,
                     long steps, float *loss)
{
    void *const *api = (void *const *)api_addr;
    void *const *tapi = (void *const *)training_api_addr;
    void *session = (void *)session_addr;
    train_step_fn train_step = (train_step_fn)tapi[slots->train_step];
    optimizer_step_fn optimizer_step = (optimizer_step_fn)tapi[slots->optimizer_step];
    lazy_reset_grad_fn lazy_reset_grad = (lazy_reset_grad_fn)tapi[slots->lazy_reset_grad];
    get_tensor_mutable_data_fn get_data = (get_tensor_mutable_data_fn)api[slots->get_tensor_mutable_data];
    release_value_fn release_value = (release_value_fn)api[slots->release_value];
    release_status_fn release_status = (release_status_fn)api[slots->release_status];
    get_error_code_fn get_error_code = (get_error_code_fn)api[slots->get_error_code];
    void *outputs[FLOOR_MAX_OUTPUTS];
    void *const *in_values = (void *const *)inputs;
    OrtStatusX *status;
    int phase = 0;
    long step;
    size_t i;

    if (!session || outputs_len == 0 || outputs_len > FLOOR_MAX_OUTPUTS || !inputs)
        return -1;
    for (step = 0; step < steps; step++) {
        void *data = NULL;
        for (i = 0; i < outputs_len; i++)
            outputs[i] = NULL;
        status = train_step(session, NULL, inputs_len, in_values, outputs_len, outputs);
        if (status) { phase = 1; goto fail; }
        status = get_data(outputs[0], &data);
        if (status) {
            for (i = 0; i < outputs_len; i++) release_value(outputs[i]);
            phase = 2;
            goto fail;
        }
        *loss = *(const float *)data;
        for (i = 0; i < outputs_len; i++)
            release_value(outputs[i]);
        status = optimizer_step(session, NULL);
        if (status) { phase = 3; goto fail; }
        status = lazy_reset_grad(session);
        if (status) { phase = 4; goto fail; }
    }
    return 0;
fail: {
        int code = get_error_code(status);
        release_status(status);
        return 1000 * phase + code;
    }
}
