/* ONNX Runtime 1.19 training C API (ORT_API_VERSION 19) declarations for cffi ABI mode.
 * Written from the public onnxruntime_training_c_api.h; cdef() it after ort_c_api.h,
 * which supplies the core types. Slot order must match the runtime's OrtTrainingApi. */

typedef struct OrtTrainingSession OrtTrainingSession;
typedef struct OrtCheckpointState OrtCheckpointState;

typedef enum OrtPropertyType {
    OrtIntProperty = 0,
    OrtFloatProperty = 1,
    OrtStringProperty = 2
} OrtPropertyType;

struct OrtTrainingApi {
    /* 0 */
    OrtStatus* (*LoadCheckpoint)(const ORTCHAR_T* checkpoint_path, OrtCheckpointState** checkpoint_state);
    OrtStatus* (*SaveCheckpoint)(OrtCheckpointState* checkpoint_state, const ORTCHAR_T* checkpoint_path,
                                 const bool include_optimizer_state);
    OrtStatus* (*CreateTrainingSession)(const OrtEnv* env, const OrtSessionOptions* options,
                                        OrtCheckpointState* checkpoint_state, const ORTCHAR_T* train_model_path,
                                        const ORTCHAR_T* eval_model_path, const ORTCHAR_T* optimizer_model_path,
                                        OrtTrainingSession** out);
    OrtStatus* (*CreateTrainingSessionFromBuffer)(const OrtEnv* env, const OrtSessionOptions* options,
                                                  OrtCheckpointState* checkpoint_state,
                                                  const void* train_model_data, size_t train_data_length,
                                                  const void* eval_model_data, size_t eval_data_length,
                                                  const void* optim_model_data, size_t optim_data_length,
                                                  OrtTrainingSession** out);
    OrtStatus* (*TrainingSessionGetTrainingModelOutputCount)(const OrtTrainingSession* sess, size_t* out);
    OrtStatus* (*TrainingSessionGetEvalModelOutputCount)(const OrtTrainingSession* sess, size_t* out);
    OrtStatus* (*TrainingSessionGetTrainingModelOutputName)(const OrtTrainingSession* sess, size_t index,
                                                            OrtAllocator* allocator, char** output);
    OrtStatus* (*TrainingSessionGetEvalModelOutputName)(const OrtTrainingSession* sess, size_t index,
                                                        OrtAllocator* allocator, char** output);
    OrtStatus* (*LazyResetGrad)(OrtTrainingSession* session);
    OrtStatus* (*TrainStep)(OrtTrainingSession* sess, const OrtRunOptions* run_options, size_t inputs_len,
                            const OrtValue* const* inputs, size_t outputs_len, OrtValue** outputs);
    /* 10 */
    OrtStatus* (*EvalStep)(const OrtTrainingSession* sess, const OrtRunOptions* run_options, size_t inputs_len,
                           const OrtValue* const* inputs, size_t outputs_len, OrtValue** outputs);
    OrtStatus* (*SetLearningRate)(OrtTrainingSession* sess, float learning_rate);
    OrtStatus* (*GetLearningRate)(OrtTrainingSession* sess, float* learning_rate);
    OrtStatus* (*OptimizerStep)(OrtTrainingSession* sess, const OrtRunOptions* run_options);
    OrtStatus* (*RegisterLinearLRScheduler)(OrtTrainingSession* sess, const int64_t warmup_step_count,
                                            const int64_t total_step_count, const float initial_lr);
    OrtStatus* (*SchedulerStep)(OrtTrainingSession* sess);
    OrtStatus* (*GetParametersSize)(OrtTrainingSession* sess, size_t* out, bool trainable_only);
    OrtStatus* (*CopyParametersToBuffer)(OrtTrainingSession* sess, OrtValue* parameters_buffer, bool trainable_only);
    OrtStatus* (*CopyBufferToParameters)(OrtTrainingSession* sess, OrtValue* parameters_buffer, bool trainable_only);
    void (*ReleaseTrainingSession)(OrtTrainingSession* input);
    /* 20 */
    void (*ReleaseCheckpointState)(OrtCheckpointState* input);
    OrtStatus* (*ExportModelForInferencing)(OrtTrainingSession* sess, const ORTCHAR_T* inference_model_path,
                                            size_t graph_outputs_len, const char* const* graph_output_names);
    OrtStatus* (*SetSeed)(const int64_t seed);
    OrtStatus* (*TrainingSessionGetTrainingModelInputCount)(const OrtTrainingSession* sess, size_t* out);
    OrtStatus* (*TrainingSessionGetEvalModelInputCount)(const OrtTrainingSession* sess, size_t* out);
    OrtStatus* (*TrainingSessionGetTrainingModelInputName)(const OrtTrainingSession* sess, size_t index,
                                                           OrtAllocator* allocator, char** output);
    OrtStatus* (*TrainingSessionGetEvalModelInputName)(const OrtTrainingSession* sess, size_t index,
                                                       OrtAllocator* allocator, char** output);
    OrtStatus* (*AddProperty)(OrtCheckpointState* checkpoint_state, const char* property_name,
                              enum OrtPropertyType property_type, void* property_value);
    OrtStatus* (*GetProperty)(const OrtCheckpointState* checkpoint_state, const char* property_name,
                              OrtAllocator* allocator, enum OrtPropertyType* property_type, void** property_value);
    OrtStatus* (*LoadCheckpointFromBuffer)(const void* checkpoint_buffer, const size_t num_bytes,
                                           OrtCheckpointState** checkpoint_state);
    /* 30 */
    OrtStatus* (*GetParameterTypeAndShape)(const OrtCheckpointState* checkpoint_state, const char* parameter_name,
                                           OrtTensorTypeAndShapeInfo** parameter_type_and_shape);
    OrtStatus* (*UpdateParameter)(OrtCheckpointState* checkpoint_state, const char* parameter_name,
                                  OrtValue* parameter);
    OrtStatus* (*GetParameter)(const OrtCheckpointState* checkpoint_state, const char* parameter_name,
                               OrtAllocator* allocator, OrtValue** parameter);
};

typedef struct OrtTrainingApi OrtTrainingApi;
