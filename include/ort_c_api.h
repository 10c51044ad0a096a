/* ONNX Runtime 1.19 C API (ORT_API_VERSION 19) declarations for cffi ABI mode.
 * Written from the public onnxruntime_c_api.h; plain C with no preprocessor lines,
 * so cffi's cdef() can parse it. Struct layouts and slot order must match the runtime. */

typedef enum ONNXTensorElementDataType {
    ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED = 0,
    ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT = 1,
    ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8 = 2,
    ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8 = 3,
    ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT16 = 4,
    ONNX_TENSOR_ELEMENT_DATA_TYPE_INT16 = 5,
    ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32 = 6,
    ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64 = 7,
    ONNX_TENSOR_ELEMENT_DATA_TYPE_STRING = 8,
    ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL = 9,
    ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16 = 10,
    ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE = 11,
    ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT32 = 12,
    ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT64 = 13,
    ONNX_TENSOR_ELEMENT_DATA_TYPE_COMPLEX64 = 14,
    ONNX_TENSOR_ELEMENT_DATA_TYPE_COMPLEX128 = 15,
    ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16 = 16,
    ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT8E4M3FN = 17,
    ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT8E4M3FNUZ = 18,
    ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT8E5M2 = 19,
    ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT8E5M2FNUZ = 20,
    ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT4 = 21,
    ONNX_TENSOR_ELEMENT_DATA_TYPE_INT4 = 22
} ONNXTensorElementDataType;

typedef enum ONNXType {
    ONNX_TYPE_UNKNOWN = 0,
    ONNX_TYPE_TENSOR = 1,
    ONNX_TYPE_SEQUENCE = 2,
    ONNX_TYPE_MAP = 3,
    ONNX_TYPE_OPAQUE = 4,
    ONNX_TYPE_SPARSETENSOR = 5,
    ONNX_TYPE_OPTIONAL = 6
} ONNXType;

typedef enum OrtSparseFormat {
    ORT_SPARSE_UNDEFINED = 0,
    ORT_SPARSE_COO = 1,
    ORT_SPARSE_CSRC = 2,
    ORT_SPARSE_BLOCK_SPARSE = 4
} OrtSparseFormat;

enum OrtSparseIndicesFormat {
    ORT_SPARSE_COO_INDICES = 0,
    ORT_SPARSE_CSR_INNER_INDICES = 1,
    ORT_SPARSE_CSR_OUTER_INDICES = 2,
    ORT_SPARSE_BLOCK_SPARSE_INDICES = 3
};

typedef enum OrtLoggingLevel {
    ORT_LOGGING_LEVEL_VERBOSE = 0,
    ORT_LOGGING_LEVEL_INFO = 1,
    ORT_LOGGING_LEVEL_WARNING = 2,
    ORT_LOGGING_LEVEL_ERROR = 3,
    ORT_LOGGING_LEVEL_FATAL = 4
} OrtLoggingLevel;

typedef enum OrtErrorCode {
    ORT_OK = 0,
    ORT_FAIL = 1,
    ORT_INVALID_ARGUMENT = 2,
    ORT_NO_SUCHFILE = 3,
    ORT_NO_MODEL = 4,
    ORT_ENGINE_ERROR = 5,
    ORT_RUNTIME_EXCEPTION = 6,
    ORT_INVALID_PROTOBUF = 7,
    ORT_MODEL_LOADED = 8,
    ORT_NOT_IMPLEMENTED = 9,
    ORT_INVALID_GRAPH = 10,
    ORT_EP_FAIL = 11
} OrtErrorCode;

typedef enum OrtOpAttrType {
    ORT_OP_ATTR_UNDEFINED = 0,
    ORT_OP_ATTR_INT = 1,
    ORT_OP_ATTR_INTS = 2,
    ORT_OP_ATTR_FLOAT = 3,
    ORT_OP_ATTR_FLOATS = 4,
    ORT_OP_ATTR_STRING = 5,
    ORT_OP_ATTR_STRINGS = 6
} OrtOpAttrType;

/* Opaque handle types. */
typedef struct OrtEnv OrtEnv;
typedef struct OrtStatus OrtStatus;
typedef struct OrtMemoryInfo OrtMemoryInfo;
typedef struct OrtIoBinding OrtIoBinding;
typedef struct OrtSession OrtSession;
typedef struct OrtValue OrtValue;
typedef struct OrtRunOptions OrtRunOptions;
typedef struct OrtTypeInfo OrtTypeInfo;
typedef struct OrtTensorTypeAndShapeInfo OrtTensorTypeAndShapeInfo;
typedef struct OrtMapTypeInfo OrtMapTypeInfo;
typedef struct OrtSequenceTypeInfo OrtSequenceTypeInfo;
typedef struct OrtOptionalTypeInfo OrtOptionalTypeInfo;
typedef struct OrtSessionOptions OrtSessionOptions;
typedef struct OrtCustomOpDomain OrtCustomOpDomain;
typedef struct OrtModelMetadata OrtModelMetadata;
typedef struct OrtThreadPoolParams OrtThreadPoolParams;
typedef struct OrtThreadingOptions OrtThreadingOptions;
typedef struct OrtArenaCfg OrtArenaCfg;
typedef struct OrtPrepackedWeightsContainer OrtPrepackedWeightsContainer;
typedef struct OrtTensorRTProviderOptionsV2 OrtTensorRTProviderOptionsV2;
typedef struct OrtCUDAProviderOptionsV2 OrtCUDAProviderOptionsV2;
typedef struct OrtCANNProviderOptions OrtCANNProviderOptions;
typedef struct OrtDnnlProviderOptions OrtDnnlProviderOptions;
typedef struct OrtOp OrtOp;
typedef struct OrtOpAttr OrtOpAttr;
typedef struct OrtLogger OrtLogger;
typedef struct OrtShapeInferContext OrtShapeInferContext;

typedef OrtStatus* OrtStatusPtr;

typedef char ORTCHAR_T;

typedef struct OrtAllocator {
    uint32_t version;
    void* (*Alloc)(struct OrtAllocator* this_, size_t size);
    void (*Free)(struct OrtAllocator* this_, void* p);
    const struct OrtMemoryInfo* (*Info)(const struct OrtAllocator* this_);
    void* (*Reserve)(struct OrtAllocator* this_, size_t size);
} OrtAllocator;

typedef void (*OrtLoggingFunction)(void* param, OrtLoggingLevel severity, const char* category,
                                   const char* logid, const char* code_location, const char* message);

typedef enum GraphOptimizationLevel {
    ORT_DISABLE_ALL = 0,
    ORT_ENABLE_BASIC = 1,
    ORT_ENABLE_EXTENDED = 2,
    ORT_ENABLE_ALL = 99
} GraphOptimizationLevel;

typedef enum ExecutionMode {
    ORT_SEQUENTIAL = 0,
    ORT_PARALLEL = 1
} ExecutionMode;

typedef enum OrtLanguageProjection {
    ORT_PROJECTION_C = 0,
    ORT_PROJECTION_CPLUSPLUS = 1,
    ORT_PROJECTION_CSHARP = 2,
    ORT_PROJECTION_PYTHON = 3,
    ORT_PROJECTION_JAVA = 4,
    ORT_PROJECTION_WINML = 5,
    ORT_PROJECTION_NODEJS = 6
} OrtLanguageProjection;

typedef struct OrtKernelInfo OrtKernelInfo;
typedef struct OrtKernelContext OrtKernelContext;
typedef struct OrtCustomOp OrtCustomOp;

typedef enum OrtAllocatorType {
    OrtInvalidAllocator = -1,
    OrtDeviceAllocator = 0,
    OrtArenaAllocator = 1
} OrtAllocatorType;

typedef enum OrtMemType {
    OrtMemTypeCPUInput = -2,
    OrtMemTypeCPUOutput = -1,
    OrtMemTypeCPU = -1,
    OrtMemTypeDefault = 0
} OrtMemType;

typedef enum OrtMemoryInfoDeviceType {
    OrtMemoryInfoDeviceType_CPU = 0,
    OrtMemoryInfoDeviceType_GPU = 1,
    OrtMemoryInfoDeviceType_FPGA = 2
} OrtMemoryInfoDeviceType;

typedef enum OrtCudnnConvAlgoSearch {
    OrtCudnnConvAlgoSearchExhaustive = 0,
    OrtCudnnConvAlgoSearchHeuristic = 1,
    OrtCudnnConvAlgoSearchDefault = 2
} OrtCudnnConvAlgoSearch;

typedef struct OrtCUDAProviderOptions {
    int device_id;
    OrtCudnnConvAlgoSearch cudnn_conv_algo_search;
    size_t gpu_mem_limit;
    int arena_extend_strategy;
    int do_copy_in_default_stream;
    int has_user_compute_stream;
    void* user_compute_stream;
    OrtArenaCfg* default_memory_arena_cfg;
    int tunable_op_enable;
    int tunable_op_tuning_enable;
    int tunable_op_max_tuning_duration_ms;
} OrtCUDAProviderOptions;

typedef struct OrtROCMProviderOptions {
    int device_id;
    int miopen_conv_exhaustive_search;
    size_t gpu_mem_limit;
    int arena_extend_strategy;
    int do_copy_in_default_stream;
    int has_user_compute_stream;
    void* user_compute_stream;
    OrtArenaCfg* default_memory_arena_cfg;
    int enable_hip_graph;
    int tunable_op_enable;
    int tunable_op_tuning_enable;
    int tunable_op_max_tuning_duration_ms;
} OrtROCMProviderOptions;

typedef struct OrtTensorRTProviderOptions {
    int device_id;
    int has_user_compute_stream;
    void* user_compute_stream;
    int trt_max_partition_iterations;
    int trt_min_subgraph_size;
    size_t trt_max_workspace_size;
    int trt_fp16_enable;
    int trt_int8_enable;
    const char* trt_int8_calibration_table_name;
    int trt_int8_use_native_calibration_table;
    int trt_dla_enable;
    int trt_dla_core;
    int trt_dump_subgraphs;
    int trt_engine_cache_enable;
    const char* trt_engine_cache_path;
    int trt_engine_decryption_enable;
    const char* trt_engine_decryption_lib_path;
    int trt_force_sequential_engine_build;
} OrtTensorRTProviderOptions;

typedef struct OrtMIGraphXProviderOptions {
    int device_id;
    int migraphx_fp16_enable;
    int migraphx_int8_enable;
    int migraphx_use_native_calibration_table;
    const char* migraphx_int8_calibration_table_name;
    int migraphx_save_compiled_model;
    const char* migraphx_save_model_path;
    int migraphx_load_compiled_model;
    const char* migraphx_load_model_path;
    bool migraphx_exhaustive_tune;
    size_t migraphx_mem_limit;
    int migraphx_arena_extend_strategy;
} OrtMIGraphXProviderOptions;

typedef struct OrtOpenVINOProviderOptions {
    const char* device_type;
    unsigned char enable_npu_fast_compile;
    const char* device_id;
    size_t num_of_threads;
    const char* cache_dir;
    void* context;
    unsigned char enable_opencl_throttling;
    unsigned char enable_dynamic_shapes;
} OrtOpenVINOProviderOptions;

typedef struct OrtApi OrtApi;
typedef struct OrtTrainingApi OrtTrainingApi;

struct OrtApiBase {
    const OrtApi* (*GetApi)(uint32_t version);
    const char* (*GetVersionString)(void);
};
typedef struct OrtApiBase OrtApiBase;

typedef void (*OrtThreadWorkerFn)(void* ort_worker_fn_param);

struct OrtCustomHandleType {
    char __place_holder;
};
typedef const struct OrtCustomHandleType* OrtCustomThreadHandle;

typedef OrtCustomThreadHandle (*OrtCustomCreateThreadFn)(void* ort_custom_thread_creation_options,
                                                         OrtThreadWorkerFn ort_thread_worker_fn,
                                                         void* ort_worker_fn_param);

typedef void (*OrtCustomJoinThreadFn)(OrtCustomThreadHandle ort_custom_thread_handle);

typedef OrtStatus* (*RegisterCustomOpsFn)(OrtSessionOptions* options, const OrtApiBase* api);

typedef void (*RunAsyncCallbackFn)(void* user_data, OrtValue** outputs, size_t num_outputs, OrtStatusPtr status);

/* OrtCustomOpInputOutputCharacteristic and struct OrtCustomOp are declared after OrtApi. */

struct OrtApi {
    /* 0 */
    OrtStatus* (*CreateStatus)(OrtErrorCode code, const char* msg);
    OrtErrorCode (*GetErrorCode)(const OrtStatus* status);
    const char* (*GetErrorMessage)(const OrtStatus* status);
    OrtStatus* (*CreateEnv)(OrtLoggingLevel log_severity_level, const char* logid, OrtEnv** out);
    OrtStatus* (*CreateEnvWithCustomLogger)(OrtLoggingFunction logging_function, void* logger_param,
                                            OrtLoggingLevel log_severity_level, const char* logid, OrtEnv** out);
    OrtStatus* (*EnableTelemetryEvents)(const OrtEnv* env);
    OrtStatus* (*DisableTelemetryEvents)(const OrtEnv* env);
    OrtStatus* (*CreateSession)(const OrtEnv* env, const ORTCHAR_T* model_path,
                                const OrtSessionOptions* options, OrtSession** out);
    OrtStatus* (*CreateSessionFromArray)(const OrtEnv* env, const void* model_data, size_t model_data_length,
                                         const OrtSessionOptions* options, OrtSession** out);
    OrtStatus* (*Run)(OrtSession* session, const OrtRunOptions* run_options,
                      const char* const* input_names, const OrtValue* const* inputs, size_t input_len,
                      const char* const* output_names, size_t output_names_len, OrtValue** outputs);
    /* 10 */
    OrtStatus* (*CreateSessionOptions)(OrtSessionOptions** options);
    OrtStatus* (*SetOptimizedModelFilePath)(OrtSessionOptions* options, const ORTCHAR_T* optimized_model_filepath);
    OrtStatus* (*CloneSessionOptions)(const OrtSessionOptions* in_options, OrtSessionOptions** out_options);
    OrtStatus* (*SetSessionExecutionMode)(OrtSessionOptions* options, ExecutionMode execution_mode);
    OrtStatus* (*EnableProfiling)(OrtSessionOptions* options, const ORTCHAR_T* profile_file_prefix);
    OrtStatus* (*DisableProfiling)(OrtSessionOptions* options);
    OrtStatus* (*EnableMemPattern)(OrtSessionOptions* options);
    OrtStatus* (*DisableMemPattern)(OrtSessionOptions* options);
    OrtStatus* (*EnableCpuMemArena)(OrtSessionOptions* options);
    OrtStatus* (*DisableCpuMemArena)(OrtSessionOptions* options);
    /* 20 */
    OrtStatus* (*SetSessionLogId)(OrtSessionOptions* options, const char* logid);
    OrtStatus* (*SetSessionLogVerbosityLevel)(OrtSessionOptions* options, int session_log_verbosity_level);
    OrtStatus* (*SetSessionLogSeverityLevel)(OrtSessionOptions* options, int session_log_severity_level);
    OrtStatus* (*SetSessionGraphOptimizationLevel)(OrtSessionOptions* options,
                                                   GraphOptimizationLevel graph_optimization_level);
    OrtStatus* (*SetIntraOpNumThreads)(OrtSessionOptions* options, int intra_op_num_threads);
    OrtStatus* (*SetInterOpNumThreads)(OrtSessionOptions* options, int inter_op_num_threads);
    OrtStatus* (*CreateCustomOpDomain)(const char* domain, OrtCustomOpDomain** out);
    OrtStatus* (*CustomOpDomain_Add)(OrtCustomOpDomain* custom_op_domain, const OrtCustomOp* op);
    OrtStatus* (*AddCustomOpDomain)(OrtSessionOptions* options, OrtCustomOpDomain* custom_op_domain);
    OrtStatus* (*RegisterCustomOpsLibrary)(OrtSessionOptions* options, const char* library_path, void** library_handle);
    /* 30 */
    OrtStatus* (*SessionGetInputCount)(const OrtSession* session, size_t* out);
    OrtStatus* (*SessionGetOutputCount)(const OrtSession* session, size_t* out);
    OrtStatus* (*SessionGetOverridableInitializerCount)(const OrtSession* session, size_t* out);
    OrtStatus* (*SessionGetInputTypeInfo)(const OrtSession* session, size_t index, OrtTypeInfo** type_info);
    OrtStatus* (*SessionGetOutputTypeInfo)(const OrtSession* session, size_t index, OrtTypeInfo** type_info);
    OrtStatus* (*SessionGetOverridableInitializerTypeInfo)(const OrtSession* session, size_t index,
                                                           OrtTypeInfo** type_info);
    OrtStatus* (*SessionGetInputName)(const OrtSession* session, size_t index, OrtAllocator* allocator, char** value);
    OrtStatus* (*SessionGetOutputName)(const OrtSession* session, size_t index, OrtAllocator* allocator, char** value);
    OrtStatus* (*SessionGetOverridableInitializerName)(const OrtSession* session, size_t index,
                                                       OrtAllocator* allocator, char** value);
    OrtStatus* (*CreateRunOptions)(OrtRunOptions** out);
    /* 40 */
    OrtStatus* (*RunOptionsSetRunLogVerbosityLevel)(OrtRunOptions* options, int log_verbosity_level);
    OrtStatus* (*RunOptionsSetRunLogSeverityLevel)(OrtRunOptions* options, int log_severity_level);
    OrtStatus* (*RunOptionsSetRunTag)(OrtRunOptions* options, const char* run_tag);
    OrtStatus* (*RunOptionsGetRunLogVerbosityLevel)(const OrtRunOptions* options, int* log_verbosity_level);
    OrtStatus* (*RunOptionsGetRunLogSeverityLevel)(const OrtRunOptions* options, int* log_severity_level);
    OrtStatus* (*RunOptionsGetRunTag)(const OrtRunOptions* options, const char** run_tag);
    OrtStatus* (*RunOptionsSetTerminate)(OrtRunOptions* options);
    OrtStatus* (*RunOptionsUnsetTerminate)(OrtRunOptions* options);
    OrtStatus* (*CreateTensorAsOrtValue)(OrtAllocator* allocator, const int64_t* shape, size_t shape_len,
                                         ONNXTensorElementDataType type, OrtValue** out);
    OrtStatus* (*CreateTensorWithDataAsOrtValue)(const OrtMemoryInfo* info, void* p_data, size_t p_data_len,
                                                 const int64_t* shape, size_t shape_len,
                                                 ONNXTensorElementDataType type, OrtValue** out);
    /* 50 */
    OrtStatus* (*IsTensor)(const OrtValue* value, int* out);
    OrtStatus* (*GetTensorMutableData)(OrtValue* value, void** out);
    OrtStatus* (*FillStringTensor)(OrtValue* value, const char* const* s, size_t s_len);
    OrtStatus* (*GetStringTensorDataLength)(const OrtValue* value, size_t* len);
    OrtStatus* (*GetStringTensorContent)(const OrtValue* value, void* s, size_t s_len,
                                         size_t* offsets, size_t offsets_len);
    OrtStatus* (*CastTypeInfoToTensorInfo)(const OrtTypeInfo* type_info, const OrtTensorTypeAndShapeInfo** out);
    OrtStatus* (*GetOnnxTypeFromTypeInfo)(const OrtTypeInfo* type_info, enum ONNXType* out);
    OrtStatus* (*CreateTensorTypeAndShapeInfo)(OrtTensorTypeAndShapeInfo** out);
    OrtStatus* (*SetTensorElementType)(OrtTensorTypeAndShapeInfo* info, enum ONNXTensorElementDataType type);
    OrtStatus* (*SetDimensions)(OrtTensorTypeAndShapeInfo* info, const int64_t* dim_values, size_t dim_count);
    /* 60 */
    OrtStatus* (*GetTensorElementType)(const OrtTensorTypeAndShapeInfo* info, enum ONNXTensorElementDataType* out);
    OrtStatus* (*GetDimensionsCount)(const OrtTensorTypeAndShapeInfo* info, size_t* out);
    OrtStatus* (*GetDimensions)(const OrtTensorTypeAndShapeInfo* info, int64_t* dim_values, size_t dim_values_length);
    OrtStatus* (*GetSymbolicDimensions)(const OrtTensorTypeAndShapeInfo* info, const char** dim_params,
                                        size_t dim_params_length);
    OrtStatus* (*GetTensorShapeElementCount)(const OrtTensorTypeAndShapeInfo* info, size_t* out);
    OrtStatus* (*GetTensorTypeAndShape)(const OrtValue* value, OrtTensorTypeAndShapeInfo** out);
    OrtStatus* (*GetTypeInfo)(const OrtValue* value, OrtTypeInfo** out);
    OrtStatus* (*GetValueType)(const OrtValue* value, enum ONNXType* out);
    OrtStatus* (*CreateMemoryInfo)(const char* name, enum OrtAllocatorType type, int id,
                                   enum OrtMemType mem_type, OrtMemoryInfo** out);
    OrtStatus* (*CreateCpuMemoryInfo)(enum OrtAllocatorType type, enum OrtMemType mem_type, OrtMemoryInfo** out);
    /* 70 */
    OrtStatus* (*CompareMemoryInfo)(const OrtMemoryInfo* info1, const OrtMemoryInfo* info2, int* out);
    OrtStatus* (*MemoryInfoGetName)(const OrtMemoryInfo* ptr, const char** out);
    OrtStatus* (*MemoryInfoGetId)(const OrtMemoryInfo* ptr, int* out);
    OrtStatus* (*MemoryInfoGetMemType)(const OrtMemoryInfo* ptr, OrtMemType* out);
    OrtStatus* (*MemoryInfoGetType)(const OrtMemoryInfo* ptr, OrtAllocatorType* out);
    OrtStatus* (*AllocatorAlloc)(OrtAllocator* ort_allocator, size_t size, void** out);
    OrtStatus* (*AllocatorFree)(OrtAllocator* ort_allocator, void* p);
    OrtStatus* (*AllocatorGetInfo)(const OrtAllocator* ort_allocator, const struct OrtMemoryInfo** out);
    OrtStatus* (*GetAllocatorWithDefaultOptions)(OrtAllocator** out);
    OrtStatus* (*AddFreeDimensionOverride)(OrtSessionOptions* options, const char* dim_denotation, int64_t dim_value);
    /* 80 */
    OrtStatus* (*GetValue)(const OrtValue* value, int index, OrtAllocator* allocator, OrtValue** out);
    OrtStatus* (*GetValueCount)(const OrtValue* value, size_t* out);
    OrtStatus* (*CreateValue)(const OrtValue* const* in, size_t num_values, enum ONNXType value_type, OrtValue** out);
    OrtStatus* (*CreateOpaqueValue)(const char* domain_name, const char* type_name, const void* data_container,
                                    size_t data_container_size, OrtValue** out);
    OrtStatus* (*GetOpaqueValue)(const char* domain_name, const char* type_name, const OrtValue* in,
                                 void* data_container, size_t data_container_size);
    OrtStatus* (*KernelInfoGetAttribute_float)(const OrtKernelInfo* info, const char* name, float* out);
    OrtStatus* (*KernelInfoGetAttribute_int64)(const OrtKernelInfo* info, const char* name, int64_t* out);
    OrtStatus* (*KernelInfoGetAttribute_string)(const OrtKernelInfo* info, const char* name, char* out, size_t* size);
    OrtStatus* (*KernelContext_GetInputCount)(const OrtKernelContext* context, size_t* out);
    OrtStatus* (*KernelContext_GetOutputCount)(const OrtKernelContext* context, size_t* out);
    /* 90 */
    OrtStatus* (*KernelContext_GetInput)(const OrtKernelContext* context, size_t index, const OrtValue** out);
    OrtStatus* (*KernelContext_GetOutput)(OrtKernelContext* context, size_t index, const int64_t* dim_values,
                                          size_t dim_count, OrtValue** out);
    void (*ReleaseEnv)(OrtEnv* input);
    void (*ReleaseStatus)(OrtStatus* input);
    void (*ReleaseMemoryInfo)(OrtMemoryInfo* input);
    void (*ReleaseSession)(OrtSession* input);
    void (*ReleaseValue)(OrtValue* input);
    void (*ReleaseRunOptions)(OrtRunOptions* input);
    void (*ReleaseTypeInfo)(OrtTypeInfo* input);
    void (*ReleaseTensorTypeAndShapeInfo)(OrtTensorTypeAndShapeInfo* input);
    /* 100 */
    void (*ReleaseSessionOptions)(OrtSessionOptions* input);
    void (*ReleaseCustomOpDomain)(OrtCustomOpDomain* input);
    OrtStatus* (*GetDenotationFromTypeInfo)(const OrtTypeInfo* type_info, const char** denotation, size_t* len);
    OrtStatus* (*CastTypeInfoToMapTypeInfo)(const OrtTypeInfo* type_info, const OrtMapTypeInfo** out);
    OrtStatus* (*CastTypeInfoToSequenceTypeInfo)(const OrtTypeInfo* type_info, const OrtSequenceTypeInfo** out);
    OrtStatus* (*GetMapKeyType)(const OrtMapTypeInfo* map_type_info, enum ONNXTensorElementDataType* out);
    OrtStatus* (*GetMapValueType)(const OrtMapTypeInfo* map_type_info, OrtTypeInfo** type_info);
    OrtStatus* (*GetSequenceElementType)(const OrtSequenceTypeInfo* sequence_type_info, OrtTypeInfo** type_info);
    void (*ReleaseMapTypeInfo)(OrtMapTypeInfo* input);
    void (*ReleaseSequenceTypeInfo)(OrtSequenceTypeInfo* input);
    /* 110 */
    OrtStatus* (*SessionEndProfiling)(OrtSession* session, OrtAllocator* allocator, char** out);
    OrtStatus* (*SessionGetModelMetadata)(const OrtSession* session, OrtModelMetadata** out);
    OrtStatus* (*ModelMetadataGetProducerName)(const OrtModelMetadata* model_metadata, OrtAllocator* allocator,
                                               char** value);
    OrtStatus* (*ModelMetadataGetGraphName)(const OrtModelMetadata* model_metadata, OrtAllocator* allocator,
                                            char** value);
    OrtStatus* (*ModelMetadataGetDomain)(const OrtModelMetadata* model_metadata, OrtAllocator* allocator,
                                         char** value);
    OrtStatus* (*ModelMetadataGetDescription)(const OrtModelMetadata* model_metadata, OrtAllocator* allocator,
                                              char** value);
    OrtStatus* (*ModelMetadataLookupCustomMetadataMap)(const OrtModelMetadata* model_metadata,
                                                       OrtAllocator* allocator, const char* key, char** value);
    OrtStatus* (*ModelMetadataGetVersion)(const OrtModelMetadata* model_metadata, int64_t* value);
    void (*ReleaseModelMetadata)(OrtModelMetadata* input);
    OrtStatus* (*CreateEnvWithGlobalThreadPools)(OrtLoggingLevel log_severity_level, const char* logid,
                                                 const OrtThreadingOptions* tp_options, OrtEnv** out);
    /* 120 */
    OrtStatus* (*DisablePerSessionThreads)(OrtSessionOptions* options);
    OrtStatus* (*CreateThreadingOptions)(OrtThreadingOptions** out);
    void (*ReleaseThreadingOptions)(OrtThreadingOptions* input);
    OrtStatus* (*ModelMetadataGetCustomMetadataMapKeys)(const OrtModelMetadata* model_metadata,
                                                        OrtAllocator* allocator, char*** keys, int64_t* num_keys);
    OrtStatus* (*AddFreeDimensionOverrideByName)(OrtSessionOptions* options, const char* dim_name, int64_t dim_value);
    OrtStatus* (*GetAvailableProviders)(char*** out_ptr, int* provider_length);
    OrtStatus* (*ReleaseAvailableProviders)(char** ptr, int providers_length);
    OrtStatus* (*GetStringTensorElementLength)(const OrtValue* value, size_t index, size_t* out);
    OrtStatus* (*GetStringTensorElement)(const OrtValue* value, size_t s_len, size_t index, void* s);
    OrtStatus* (*FillStringTensorElement)(OrtValue* value, const char* s, size_t index);
    /* 130 */
    OrtStatus* (*AddSessionConfigEntry)(OrtSessionOptions* options, const char* config_key, const char* config_value);
    OrtStatus* (*CreateAllocator)(const OrtSession* session, const OrtMemoryInfo* mem_info, OrtAllocator** out);
    void (*ReleaseAllocator)(OrtAllocator* input);
    OrtStatus* (*RunWithBinding)(OrtSession* session, const OrtRunOptions* run_options,
                                 const OrtIoBinding* binding_ptr);
    OrtStatus* (*CreateIoBinding)(OrtSession* session, OrtIoBinding** out);
    void (*ReleaseIoBinding)(OrtIoBinding* input);
    OrtStatus* (*BindInput)(OrtIoBinding* binding_ptr, const char* name, const OrtValue* val_ptr);
    OrtStatus* (*BindOutput)(OrtIoBinding* binding_ptr, const char* name, const OrtValue* val_ptr);
    OrtStatus* (*BindOutputToDevice)(OrtIoBinding* binding_ptr, const char* name, const OrtMemoryInfo* mem_info_ptr);
    OrtStatus* (*GetBoundOutputNames)(const OrtIoBinding* binding_ptr, OrtAllocator* allocator, char** buffer,
                                      size_t** lengths, size_t* count);
    /* 140 */
    OrtStatus* (*GetBoundOutputValues)(const OrtIoBinding* binding_ptr, OrtAllocator* allocator,
                                       OrtValue*** output, size_t* output_count);
    void (*ClearBoundInputs)(OrtIoBinding* binding_ptr);
    void (*ClearBoundOutputs)(OrtIoBinding* binding_ptr);
    OrtStatus* (*TensorAt)(OrtValue* value, const int64_t* location_values, size_t location_values_count, void** out);
    OrtStatus* (*CreateAndRegisterAllocator)(OrtEnv* env, const OrtMemoryInfo* mem_info, const OrtArenaCfg* arena_cfg);
    OrtStatus* (*SetLanguageProjection)(const OrtEnv* ort_env, OrtLanguageProjection projection);
    OrtStatus* (*SessionGetProfilingStartTimeNs)(const OrtSession* session, uint64_t* out);
    OrtStatus* (*SetGlobalIntraOpNumThreads)(OrtThreadingOptions* tp_options, int intra_op_num_threads);
    OrtStatus* (*SetGlobalInterOpNumThreads)(OrtThreadingOptions* tp_options, int inter_op_num_threads);
    OrtStatus* (*SetGlobalSpinControl)(OrtThreadingOptions* tp_options, int allow_spinning);
    /* 150 */
    OrtStatus* (*AddInitializer)(OrtSessionOptions* options, const char* name, const OrtValue* val);
    OrtStatus* (*CreateEnvWithCustomLoggerAndGlobalThreadPools)(OrtLoggingFunction logging_function,
                                                                void* logger_param,
                                                                OrtLoggingLevel log_severity_level,
                                                                const char* logid,
                                                                const struct OrtThreadingOptions* tp_options,
                                                                OrtEnv** out);
    OrtStatus* (*SessionOptionsAppendExecutionProvider_CUDA)(OrtSessionOptions* options,
                                                             const OrtCUDAProviderOptions* cuda_options);
    OrtStatus* (*SessionOptionsAppendExecutionProvider_ROCM)(OrtSessionOptions* options,
                                                             const OrtROCMProviderOptions* rocm_options);
    OrtStatus* (*SessionOptionsAppendExecutionProvider_OpenVINO)(OrtSessionOptions* options,
                                                                 const OrtOpenVINOProviderOptions* provider_options);
    OrtStatus* (*SetGlobalDenormalAsZero)(OrtThreadingOptions* tp_options);
    OrtStatus* (*CreateArenaCfg)(size_t max_mem, int arena_extend_strategy, int initial_chunk_size_bytes,
                                 int max_dead_bytes_per_chunk, OrtArenaCfg** out);
    void (*ReleaseArenaCfg)(OrtArenaCfg* input);
    OrtStatus* (*ModelMetadataGetGraphDescription)(const OrtModelMetadata* model_metadata, OrtAllocator* allocator,
                                                   char** value);
    OrtStatus* (*SessionOptionsAppendExecutionProvider_TensorRT)(OrtSessionOptions* options,
                                                                 const OrtTensorRTProviderOptions* tensorrt_options);
    /* 160 */
    OrtStatus* (*SetCurrentGpuDeviceId)(int device_id);
    OrtStatus* (*GetCurrentGpuDeviceId)(int* device_id);
    OrtStatus* (*KernelInfoGetAttributeArray_float)(const OrtKernelInfo* info, const char* name, float* out,
                                                    size_t* size);
    OrtStatus* (*KernelInfoGetAttributeArray_int64)(const OrtKernelInfo* info, const char* name, int64_t* out,
                                                    size_t* size);
    OrtStatus* (*CreateArenaCfgV2)(const char* const* arena_config_keys, const size_t* arena_config_values,
                                   size_t num_keys, OrtArenaCfg** out);
    OrtStatus* (*AddRunConfigEntry)(OrtRunOptions* options, const char* config_key, const char* config_value);
    OrtStatus* (*CreatePrepackedWeightsContainer)(OrtPrepackedWeightsContainer** out);
    void (*ReleasePrepackedWeightsContainer)(OrtPrepackedWeightsContainer* input);
    OrtStatus* (*CreateSessionWithPrepackedWeightsContainer)(const OrtEnv* env, const ORTCHAR_T* model_path,
                                                             const OrtSessionOptions* options,
                                                             OrtPrepackedWeightsContainer* prepacked_weights_container,
                                                             OrtSession** out);
    OrtStatus* (*CreateSessionFromArrayWithPrepackedWeightsContainer)(const OrtEnv* env, const void* model_data,
                                                                      size_t model_data_length,
                                                                      const OrtSessionOptions* options,
                                                                      OrtPrepackedWeightsContainer* prepacked_weights_container,
                                                                      OrtSession** out);
    /* 170 */
    OrtStatus* (*SessionOptionsAppendExecutionProvider_TensorRT_V2)(OrtSessionOptions* options,
                                                                    const OrtTensorRTProviderOptionsV2* tensorrt_options);
    OrtStatus* (*CreateTensorRTProviderOptions)(OrtTensorRTProviderOptionsV2** out);
    OrtStatus* (*UpdateTensorRTProviderOptions)(OrtTensorRTProviderOptionsV2* tensorrt_options,
                                                const char* const* provider_options_keys,
                                                const char* const* provider_options_values, size_t num_keys);
    OrtStatus* (*GetTensorRTProviderOptionsAsString)(const OrtTensorRTProviderOptionsV2* tensorrt_options,
                                                     OrtAllocator* allocator, char** ptr);
    void (*ReleaseTensorRTProviderOptions)(OrtTensorRTProviderOptionsV2* input);
    OrtStatus* (*EnableOrtCustomOps)(OrtSessionOptions* options);
    OrtStatus* (*RegisterAllocator)(OrtEnv* env, OrtAllocator* allocator);
    OrtStatus* (*UnregisterAllocator)(OrtEnv* env, const OrtMemoryInfo* mem_info);
    OrtStatus* (*IsSparseTensor)(const OrtValue* value, int* out);
    OrtStatus* (*CreateSparseTensorAsOrtValue)(OrtAllocator* allocator, const int64_t* dense_shape,
                                               size_t dense_shape_len, ONNXTensorElementDataType type,
                                               OrtValue** out);
    /* 180 */
    OrtStatus* (*FillSparseTensorCoo)(OrtValue* ort_value, const OrtMemoryInfo* data_mem_info,
                                      const int64_t* values_shape, size_t values_shape_len, const void* values,
                                      const int64_t* indices_data, size_t indices_num);
    OrtStatus* (*FillSparseTensorCsr)(OrtValue* ort_value, const OrtMemoryInfo* data_mem_info,
                                      const int64_t* values_shape, size_t values_shape_len, const void* values,
                                      const int64_t* inner_indices_data, size_t inner_indices_num,
                                      const int64_t* outer_indices_data, size_t outer_indices_num);
    OrtStatus* (*FillSparseTensorBlockSparse)(OrtValue* ort_value, const OrtMemoryInfo* data_mem_info,
                                              const int64_t* values_shape, size_t values_shape_len,
                                              const void* values, const int64_t* indices_shape_data,
                                              size_t indices_shape_len, const int32_t* indices_data);
    OrtStatus* (*CreateSparseTensorWithValuesAsOrtValue)(const OrtMemoryInfo* info, void* p_data,
                                                         const int64_t* dense_shape, size_t dense_shape_len,
                                                         const int64_t* values_shape, size_t values_shape_len,
                                                         ONNXTensorElementDataType type, OrtValue** out);
    OrtStatus* (*UseCooIndices)(OrtValue* ort_value, int64_t* indices_data, size_t indices_num);
    OrtStatus* (*UseCsrIndices)(OrtValue* ort_value, int64_t* inner_data, size_t inner_num,
                                int64_t* outer_data, size_t outer_num);
    OrtStatus* (*UseBlockSparseIndices)(OrtValue* ort_value, const int64_t* indices_shape, size_t indices_shape_len,
                                        int32_t* indices_data);
    OrtStatus* (*GetSparseTensorFormat)(const OrtValue* ort_value, enum OrtSparseFormat* out);
    OrtStatus* (*GetSparseTensorValuesTypeAndShape)(const OrtValue* ort_value, OrtTensorTypeAndShapeInfo** out);
    OrtStatus* (*GetSparseTensorValues)(const OrtValue* ort_value, const void** out);
    /* 190 */
    OrtStatus* (*GetSparseTensorIndicesTypeShape)(const OrtValue* ort_value, enum OrtSparseIndicesFormat indices_format,
                                                  OrtTensorTypeAndShapeInfo** out);
    OrtStatus* (*GetSparseTensorIndices)(const OrtValue* ort_value, enum OrtSparseIndicesFormat indices_format,
                                         size_t* num_indices, const void** indices);
    OrtStatus* (*HasValue)(const OrtValue* value, int* out);
    OrtStatus* (*KernelContext_GetGPUComputeStream)(const OrtKernelContext* context, void** out);
    OrtStatus* (*GetTensorMemoryInfo)(const OrtValue* value, const OrtMemoryInfo** mem_info);
    OrtStatus* (*GetExecutionProviderApi)(const char* provider_name, uint32_t version, const void** provider_api);
    OrtStatus* (*SessionOptionsSetCustomCreateThreadFn)(OrtSessionOptions* options,
                                                        OrtCustomCreateThreadFn ort_custom_create_thread_fn);
    OrtStatus* (*SessionOptionsSetCustomThreadCreationOptions)(OrtSessionOptions* options,
                                                               void* ort_custom_thread_creation_options);
    OrtStatus* (*SessionOptionsSetCustomJoinThreadFn)(OrtSessionOptions* options,
                                                      OrtCustomJoinThreadFn ort_custom_join_thread_fn);
    OrtStatus* (*SetGlobalCustomCreateThreadFn)(OrtThreadingOptions* tp_options,
                                                OrtCustomCreateThreadFn ort_custom_create_thread_fn);
    /* 200 */
    OrtStatus* (*SetGlobalCustomThreadCreationOptions)(OrtThreadingOptions* tp_options,
                                                       void* ort_custom_thread_creation_options);
    OrtStatus* (*SetGlobalCustomJoinThreadFn)(OrtThreadingOptions* tp_options,
                                              OrtCustomJoinThreadFn ort_custom_join_thread_fn);
    OrtStatus* (*SynchronizeBoundInputs)(OrtIoBinding* binding_ptr);
    OrtStatus* (*SynchronizeBoundOutputs)(OrtIoBinding* binding_ptr);
    OrtStatus* (*SessionOptionsAppendExecutionProvider_CUDA_V2)(OrtSessionOptions* options,
                                                                const OrtCUDAProviderOptionsV2* cuda_options);
    OrtStatus* (*CreateCUDAProviderOptions)(OrtCUDAProviderOptionsV2** out);
    OrtStatus* (*UpdateCUDAProviderOptions)(OrtCUDAProviderOptionsV2* cuda_options,
                                            const char* const* provider_options_keys,
                                            const char* const* provider_options_values, size_t num_keys);
    OrtStatus* (*GetCUDAProviderOptionsAsString)(const OrtCUDAProviderOptionsV2* cuda_options,
                                                 OrtAllocator* allocator, char** ptr);
    void (*ReleaseCUDAProviderOptions)(OrtCUDAProviderOptionsV2* input);
    OrtStatus* (*SessionOptionsAppendExecutionProvider_MIGraphX)(OrtSessionOptions* options,
                                                                 const OrtMIGraphXProviderOptions* migraphx_options);
    /* 210 */
    OrtStatus* (*AddExternalInitializers)(OrtSessionOptions* options, const char* const* initializer_names,
                                          const OrtValue* const* initializers, size_t num_initializers);
    OrtStatus* (*CreateOpAttr)(const char* name, const void* data, int len, OrtOpAttrType type, OrtOpAttr** op_attr);
    void (*ReleaseOpAttr)(OrtOpAttr* input);
    OrtStatus* (*CreateOp)(const OrtKernelInfo* info, const char* op_name, const char* domain, int version,
                           const char** type_constraint_names,
                           const ONNXTensorElementDataType* type_constraint_values, int type_constraint_count,
                           const OrtOpAttr* const* attr_values, int attr_count, int input_count, int output_count,
                           OrtOp** ort_op);
    OrtStatus* (*InvokeOp)(const OrtKernelContext* context, const OrtOp* ort_op, const OrtValue* const* input_values,
                           int input_count, OrtValue* const* output_values, int output_count);
    void (*ReleaseOp)(OrtOp* input);
    OrtStatus* (*SessionOptionsAppendExecutionProvider)(OrtSessionOptions* options, const char* provider_name,
                                                        const char* const* provider_options_keys,
                                                        const char* const* provider_options_values,
                                                        size_t num_keys);
    OrtStatus* (*CopyKernelInfo)(const OrtKernelInfo* info, OrtKernelInfo** info_copy);
    void (*ReleaseKernelInfo)(OrtKernelInfo* input);
    const OrtTrainingApi* (*GetTrainingApi)(uint32_t version);
    /* 220 */
    OrtStatus* (*SessionOptionsAppendExecutionProvider_CANN)(OrtSessionOptions* options,
                                                             const OrtCANNProviderOptions* cann_options);
    OrtStatus* (*CreateCANNProviderOptions)(OrtCANNProviderOptions** out);
    OrtStatus* (*UpdateCANNProviderOptions)(OrtCANNProviderOptions* cann_options,
                                            const char* const* provider_options_keys,
                                            const char* const* provider_options_values, size_t num_keys);
    OrtStatus* (*GetCANNProviderOptionsAsString)(const OrtCANNProviderOptions* cann_options,
                                                 OrtAllocator* allocator, char** ptr);
    void (*ReleaseCANNProviderOptions)(OrtCANNProviderOptions* input);
    void (*MemoryInfoGetDeviceType)(const OrtMemoryInfo* ptr, OrtMemoryInfoDeviceType* out);
    OrtStatus* (*UpdateEnvWithCustomLogLevel)(OrtEnv* ort_env, OrtLoggingLevel log_severity_level);
    OrtStatus* (*SetGlobalIntraOpThreadAffinity)(OrtThreadingOptions* tp_options, const char* affinity_string);
    OrtStatus* (*RegisterCustomOpsLibrary_V2)(OrtSessionOptions* options, const ORTCHAR_T* library_name);
    OrtStatus* (*RegisterCustomOpsUsingFunction)(OrtSessionOptions* options, const char* registration_func_name);
    /* 230 */
    OrtStatus* (*KernelInfo_GetInputCount)(const OrtKernelInfo* info, size_t* out);
    OrtStatus* (*KernelInfo_GetOutputCount)(const OrtKernelInfo* info, size_t* out);
    OrtStatus* (*KernelInfo_GetInputName)(const OrtKernelInfo* info, size_t index, char* out, size_t* size);
    OrtStatus* (*KernelInfo_GetOutputName)(const OrtKernelInfo* info, size_t index, char* out, size_t* size);
    OrtStatus* (*KernelInfo_GetInputTypeInfo)(const OrtKernelInfo* info, size_t index, OrtTypeInfo** type_info);
    OrtStatus* (*KernelInfo_GetOutputTypeInfo)(const OrtKernelInfo* info, size_t index, OrtTypeInfo** type_info);
    OrtStatus* (*KernelInfoGetAttribute_tensor)(const OrtKernelInfo* info, const char* name, OrtAllocator* allocator,
                                                OrtValue** out);
    OrtStatus* (*HasSessionConfigEntry)(const OrtSessionOptions* options, const char* config_key, int* out);
    OrtStatus* (*GetSessionConfigEntry)(const OrtSessionOptions* options, const char* config_key,
                                        char* config_value, size_t* size);
    OrtStatus* (*SessionOptionsAppendExecutionProvider_Dnnl)(OrtSessionOptions* options,
                                                             const OrtDnnlProviderOptions* dnnl_options);
    /* 240 */
    OrtStatus* (*CreateDnnlProviderOptions)(OrtDnnlProviderOptions** out);
    OrtStatus* (*UpdateDnnlProviderOptions)(OrtDnnlProviderOptions* dnnl_options,
                                            const char* const* provider_options_keys,
                                            const char* const* provider_options_values, size_t num_keys);
    OrtStatus* (*GetDnnlProviderOptionsAsString)(const OrtDnnlProviderOptions* dnnl_options,
                                                 OrtAllocator* allocator, char** ptr);
    void (*ReleaseDnnlProviderOptions)(OrtDnnlProviderOptions* input);
    OrtStatus* (*KernelInfo_GetNodeName)(const OrtKernelInfo* info, char* out, size_t* size);
    OrtStatus* (*KernelInfo_GetLogger)(const OrtKernelInfo* info, const OrtLogger** logger);
    OrtStatus* (*KernelContext_GetLogger)(const OrtKernelContext* context, const OrtLogger** logger);
    OrtStatus* (*Logger_LogMessage)(const OrtLogger* logger, OrtLoggingLevel log_severity_level, const char* message,
                                    const ORTCHAR_T* file_path, int line_number, const char* func_name);
    OrtStatus* (*Logger_GetLoggingSeverityLevel)(const OrtLogger* logger, OrtLoggingLevel* out);
    OrtStatus* (*KernelInfoGetConstantInput_tensor)(const OrtKernelInfo* info, size_t index, int* is_constant,
                                                    const OrtValue** out);
    /* 250 */
    OrtStatus* (*CastTypeInfoToOptionalTypeInfo)(const OrtTypeInfo* type_info, const OrtOptionalTypeInfo** out);
    OrtStatus* (*GetOptionalContainedTypeInfo)(const OrtOptionalTypeInfo* optional_type_info, OrtTypeInfo** out);
    OrtStatus* (*GetResizedStringTensorElementBuffer)(OrtValue* value, size_t index, size_t length_in_bytes,
                                                      char** buffer);
    OrtStatus* (*KernelContext_GetAllocator)(const OrtKernelContext* context, const OrtMemoryInfo* mem_info,
                                             OrtAllocator** out);
    const char* (*GetBuildInfoString)(void);
    OrtStatus* (*CreateROCMProviderOptions)(OrtROCMProviderOptions** out);
    OrtStatus* (*UpdateROCMProviderOptions)(OrtROCMProviderOptions* rocm_options,
                                            const char* const* provider_options_keys,
                                            const char* const* provider_options_values, size_t num_keys);
    OrtStatus* (*GetROCMProviderOptionsAsString)(const OrtROCMProviderOptions* rocm_options,
                                                 OrtAllocator* allocator, char** ptr);
    void (*ReleaseROCMProviderOptions)(OrtROCMProviderOptions* input);
    OrtStatus* (*CreateAndRegisterAllocatorV2)(OrtEnv* env, const char* provider_type, const OrtMemoryInfo* mem_info,
                                               const OrtArenaCfg* arena_cfg, const char* const* provider_options_keys,
                                               const char* const* provider_options_values, size_t num_keys);
    /* 260 */
    OrtStatus* (*RunAsync)(OrtSession* session, const OrtRunOptions* run_options, const char* const* input_names,
                           const OrtValue* const* input, size_t input_len, const char* const* output_names,
                           size_t output_names_len, OrtValue** output, RunAsyncCallbackFn run_async_callback,
                           void* user_data);
    OrtStatus* (*UpdateTensorRTProviderOptionsWithValue)(OrtTensorRTProviderOptionsV2* tensorrt_options,
                                                         const char* key, void* value);
    OrtStatus* (*GetTensorRTProviderOptionsByName)(const OrtTensorRTProviderOptionsV2* tensorrt_options,
                                                   const char* key, void** ptr);
    OrtStatus* (*UpdateCUDAProviderOptionsWithValue)(OrtCUDAProviderOptionsV2* cuda_options, const char* key,
                                                     void* value);
    OrtStatus* (*GetCUDAProviderOptionsByName)(const OrtCUDAProviderOptionsV2* cuda_options, const char* key,
                                               void** ptr);
    OrtStatus* (*KernelContext_GetResource)(const OrtKernelContext* context, int resouce_version, int resource_id,
                                            void** resource);
    OrtStatus* (*SetUserLoggingFunction)(OrtSessionOptions* options, OrtLoggingFunction user_logging_function,
                                         void* user_logging_param);
    OrtStatus* (*ShapeInferContext_GetInputCount)(const OrtShapeInferContext* context, size_t* out);
    OrtStatus* (*ShapeInferContext_GetInputTypeShape)(const OrtShapeInferContext* context, size_t index,
                                                      OrtTensorTypeAndShapeInfo** info);
    OrtStatus* (*ShapeInferContext_GetAttribute)(const OrtShapeInferContext* context, const char* attr_name,
                                                 const OrtOpAttr** attr);
    /* 270 */
    OrtStatus* (*ShapeInferContext_SetOutputTypeShape)(const OrtShapeInferContext* context, size_t index,
                                                       const OrtTensorTypeAndShapeInfo* info);
    OrtStatus* (*SetSymbolicDimensions)(OrtTensorTypeAndShapeInfo* info, const char** dim_params,
                                        size_t dim_params_length);
    OrtStatus* (*ReadOpAttr)(const OrtOpAttr* op_attr, OrtOpAttrType type, void* data, size_t len, size_t* out);
    OrtStatus* (*SetDeterministicCompute)(OrtSessionOptions* options, bool value);
    OrtStatus* (*KernelContext_ParallelFor)(const OrtKernelContext* context, void (*fn)(void*, size_t), size_t total,
                                            size_t num_batch, void* usr_data);
    OrtStatus* (*SessionOptionsAppendExecutionProvider_OpenVINO_V2)(OrtSessionOptions* options,
                                                                    const char* const* provider_options_keys,
                                                                    const char* const* provider_options_values,
                                                                    size_t num_keys);
    OrtStatus* (*SessionOptionsAppendExecutionProvider_VitisAI)(OrtSessionOptions* options,
                                                                const char* const* provider_options_keys,
                                                                const char* const* provider_options_values,
                                                                size_t num_keys);
    OrtStatus* (*KernelContext_GetScratchBuffer)(const OrtKernelContext* context, const OrtMemoryInfo* mem_info,
                                                 size_t count_or_bytes, void** out);
    OrtStatus* (*KernelInfoGetAllocator)(const OrtKernelInfo* info, OrtMemType mem_type, OrtAllocator** out);
    OrtStatus* (*AddExternalInitializersFromFilesInMemory)(OrtSessionOptions* options,
                                                           const ORTCHAR_T* const* external_initializer_file_names,
                                                           char* const* external_initializer_file_buffer_array,
                                                           const size_t* external_initializer_file_lengths,
                                                           size_t num_external_initializer_files);
    /* 280 slots in total for API version 19; version 20 appends CreateLoraAdapter and later slots. */
};

typedef enum OrtCustomOpInputOutputCharacteristic {
    INPUT_OUTPUT_REQUIRED = 0,
    INPUT_OUTPUT_OPTIONAL = 1,
    INPUT_OUTPUT_VARIADIC = 2
} OrtCustomOpInputOutputCharacteristic;

struct OrtCustomOp {
    uint32_t version;
    void* (*CreateKernel)(const struct OrtCustomOp* op, const OrtApi* api, const OrtKernelInfo* info);
    const char* (*GetName)(const struct OrtCustomOp* op);
    const char* (*GetExecutionProviderType)(const struct OrtCustomOp* op);
    ONNXTensorElementDataType (*GetInputType)(const struct OrtCustomOp* op, size_t index);
    size_t (*GetInputTypeCount)(const struct OrtCustomOp* op);
    ONNXTensorElementDataType (*GetOutputType)(const struct OrtCustomOp* op, size_t index);
    size_t (*GetOutputTypeCount)(const struct OrtCustomOp* op);
    void (*KernelCompute)(void* op_kernel, OrtKernelContext* context);
    void (*KernelDestroy)(void* op_kernel);
    OrtCustomOpInputOutputCharacteristic (*GetInputCharacteristic)(const struct OrtCustomOp* op, size_t index);
    OrtCustomOpInputOutputCharacteristic (*GetOutputCharacteristic)(const struct OrtCustomOp* op, size_t index);
    OrtMemType (*GetInputMemoryType)(const struct OrtCustomOp* op, size_t index);
    int (*GetVariadicInputMinArity)(const struct OrtCustomOp* op);
    int (*GetVariadicInputHomogeneity)(const struct OrtCustomOp* op);
    int (*GetVariadicOutputMinArity)(const struct OrtCustomOp* op);
    int (*GetVariadicOutputHomogeneity)(const struct OrtCustomOp* op);
    OrtStatusPtr (*CreateKernelV2)(const struct OrtCustomOp* op, const OrtApi* api, const OrtKernelInfo* info,
                                   void** kernel);
    OrtStatusPtr (*KernelComputeV2)(void* op_kernel, OrtKernelContext* context);
    OrtStatusPtr (*InferOutputShapeFn)(const struct OrtCustomOp* op, OrtShapeInferContext* context);
    int (*GetStartVersion)(const struct OrtCustomOp* op);
    int (*GetEndVersion)(const struct OrtCustomOp* op);
    size_t (*GetMayInplace)(int** input_index, int** output_index);
    void (*ReleaseMayInplace)(int* input_index, int* output_index);
    size_t (*GetAliasMap)(int** input_index, int** output_index);
    void (*ReleaseAliasMap)(int* input_index, int* output_index);
};

/* The one exported entry point of libonnxruntime. */
const OrtApiBase* OrtGetApiBase(void);
