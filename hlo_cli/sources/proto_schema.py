"""Our own protobuf schema for the parts of XLA's protos that hold an HLO module.

The descriptors are built in code from the table below (no .proto file of XLA's, no generated
``_pb2`` module).  The field numbers and types are facts of XLA's wire format, read from XLA's
``xla/service/hlo.proto`` and ``xla/xla_data.proto``: HloModuleProto, HloProto (a module and its
buffer assignment), HloSnapshot (a module, the arguments of one execution and its result),
HloUnoptimizedSnapshot, and what they hold; of HloModuleConfigProto (``xla/xla.proto``, the
``config.pbtxt`` XLA dumps beside a module) the fields HLO text prints in a module's header.

A few fields are newer than those XLA sources (a fork's snapshot); their numbers come from the
descriptor of xla_data.proto that the XLA inside jaxlib 0.10.2 embeds (libjax_common.so):
PrimitiveType F6E3M2FN = 35 and F6E2M3FN = 36 with LiteralProto's f6e3m2fns = 35 / f6e2m3fns = 36,
OpMetadata.metadata_payload = 20 (a Payload), LiteralProto.dynamic_sizes = 34, and
MeshProto.iota_transform = 3 (reshape_dims = 1,
transpose_perm = 2: a mesh whose device order is an iota, printed ``device_ids=([2,4]T(1,0))``).

Two HloInstructionProto fields are newer still, seen in the .hlo.pb files XLA GPU in JAX 0.11.2
wrote (../shared/gpu/dumps) and in no XLA source we hold: 102, a string on every compare, "TOTAL",
"PARTIAL" (and XLA's third order, "WEAK"): the comparison order its text prints as ``order=``;
and 101, a message on every convolution, empty in each of those files (XLA's text of the same
modules prints nothing for it).  An empty one is read as absent; one with content is refused (its
meaning is unknown to us, so it may change what the convolution computes).

Table syntax: ``enum NAME`` then ``VALUE=N`` words; ``message NAME`` (nested messages as
``Outer.Inner``) then one field per line, ``NUMBER NAME TYPE`` where TYPE is a scalar type, an enum
or a message of the table, ``*TYPE`` for a repeated field, ``?TYPE`` for a proto3 optional one and
``{KEY,VALUE}`` for a map.  A field declared ``ignored`` is a message we do not read: it
is declared as bytes, so that its content is skipped as known (binary protos only).

    msgs = messages()                       # name -> message class
    m = msgs["HloModuleProto"]()
    m.ParseFromString(data)
"""
from __future__ import annotations

from functools import lru_cache

PACKAGE = "xla"

SCHEMA = """
enum PrimitiveType
  PRIMITIVE_TYPE_INVALID=0 PRED=1 S1=30 S2=26 S4=21 S8=2 S16=3 S32=4 S64=5 U1=31 U2=27 U4=22 U8=6
  U16=7 U32=8 U64=9 F16=10 F32=11 BF16=16 F64=12 F8E5M2=19 F8E4M3=28 F8E4M3FN=20 F8E4M3B11FNUZ=23
  F8E3M4=29 F8E5M2FNUZ=24 F8E4M3FNUZ=25 F4E2M1FN=32 F8E8M0FNU=33 C64=15 C128=18 TUPLE=13
  OPAQUE_TYPE=14 TOKEN=17 BUFFER=34 F6E3M2FN=35 F6E2M3FN=36
enum DimLevelType
  DIM_DENSE=0 DIM_COMPRESSED=1 DIM_SINGLETON=2 DIM_LOOSE_COMPRESSED=3
enum PaddingType
  PADDING_INVALID=0 PADDING_VALID=1 PADDING_SAME=2
enum FftType
  FFT=0 IFFT=1 RFFT=2 IRFFT=3
enum RandomDistribution
  RNG_INVALID=0 RNG_UNIFORM=1 RNG_NORMAL=2
enum RandomAlgorithm
  RNG_DEFAULT=0 RNG_THREE_FRY=1 RNG_PHILOX=2
enum CustomCallSchedule
  SCHEDULE_NONE=0 SCHEDULE_LATEST=1 SCHEDULE_EARLIEST=2
enum TriState
  TRI_STATE_UNSPECIFIED=0 TRI_STATE_TRUE=1 TRI_STATE_FALSE=2
enum ConvolutionKind
  CONVOLUTION_KIND_UNSET=0 CONVOLUTION_KIND_FPROP=1 CONVOLUTION_KIND_DGRAD=2 CONVOLUTION_KIND_WGRAD=3
enum CustomCallApiVersion
  API_VERSION_UNSPECIFIED=0 API_VERSION_ORIGINAL=1 API_VERSION_STATUS_RETURNING=2
  API_VERSION_STATUS_RETURNING_UNIFIED=3 API_VERSION_TYPED_FFI=4
enum Kind
  UNDEFINED_ALIAS=0 MAY_ALIAS=1 MUST_ALIAS=2
enum OpMetadataProfileType
  INVALID=0 WINDOW=1 FLAG=2 INTEGER=3
enum ProfileSource
  PROFILE_SOURCE_UNKNOWN_SOURCE=0 PROFILE_SOURCE_EMBEDDED=1 PROFILE_SOURCE_REMOTE=2
enum CompilationEvent
  COMPILATION_EVENT_UNKNOWN_EVENT=0 COMPILATION_EVENT_FIRST_COMPILATION=1 COMPILATION_EVENT_RECOMPILATION=2
enum ProfileGenerationStrategy
  PROFILE_GENERATION_STRATEGY_UNKNOWN=0 PROFILE_GENERATION_STRATEGY_GA=1 PROFILE_GENERATION_STRATEGY_FANTA=2
  PROFILE_GENERATION_STRATEGY_CFO=3 PROFILE_GENERATION_STRATEGY_EXHAUSTIVE=4 PROFILE_GENERATION_STRATEGY_LCM_GNN=5
  PROFILE_GENERATION_STRATEGY_LCM_MOE=6
enum HloModuleProto.ProfileType
  INVALID=0 FLAG=1 FUSION=2 LAYOUT=3 DOT=4 FLAGNET=5 SHARDING=6 SCHEDULE=7
enum HeapSimulatorTrace.Event.Kind
  ALLOC=0 FREE=1 SHARE_WITH=2
enum OpSharding.Type
  REPLICATED=0 MAXIMAL=1 TUPLE=2 OTHER=3 MANUAL=4 UNKNOWN=5 UNREDUCED=6
enum OpSharding.ShardGroupType
  AS=0 LIKE=1
enum TriangularSolveOptions.Transpose
  TRANSPOSE_INVALID=0 NO_TRANSPOSE=1 TRANSPOSE=2 ADJOINT=3
enum ResultAccuracy.Mode
  DEFAULT=0 HIGHEST=1
enum PrecisionConfig.Precision
  DEFAULT=0 HIGH=1 HIGHEST=2
enum PrecisionConfig.Algorithm
  ALG_UNSET=0 ALG_DOT_ANY_F8_ANY_F8_F32=1 ALG_DOT_ANY_F8_ANY_F8_F32_FAST_ACCUM=2 ALG_DOT_F16_F16_F16=3
  ALG_DOT_F16_F16_F32=4 ALG_DOT_BF16_BF16_BF16=5 ALG_DOT_BF16_BF16_F32=6 ALG_DOT_BF16_BF16_F32_X3=7
  ALG_DOT_BF16_BF16_F32_X6=8 ALG_DOT_TF32_TF32_F32=9 ALG_DOT_TF32_TF32_F32_X3=10 ALG_DOT_F32_F32_F32=11
  ALG_DOT_F64_F64_F64=12 ALG_DOT_BF16_BF16_F32_X9=13

message TileProto
  1 dimensions *int64
message SplitConfigProto
  1 dimension int64
  2 split_indices *int64
message LayoutProto
  1 minor_to_major *int64
  9 dim_level_types *DimLevelType
  13 dim_unique *bool
  14 dim_ordered *bool
  6 tiles *TileProto
  16 tail_padding_alignment_in_elements int64
  7 element_size_in_bits int64
  8 memory_space int64
  11 index_primitive_type PrimitiveType
  12 pointer_primitive_type PrimitiveType
  10 physical_shape ShapeProto
  15 dynamic_shape_metadata_prefix_bytes int64
  17 split_configs *SplitConfigProto
message ShapeProto
  2 element_type PrimitiveType
  3 dimensions *int64
  6 is_dynamic_dimension *bool
  4 tuple_shapes *ShapeProto
  5 layout LayoutProto
message ProgramShapeProto
  1 parameters *ShapeProto
  2 result ShapeProto
  3 parameter_names *string
message HloModuleConfigProto
  1 entry_computation_layout ProgramShapeProto
  4 replica_count int64
  5 num_partitions int64
  17 alias_passthrough_params bool
  27 allow_spmd_sharding_propagation_to_output *bool
  33 allow_spmd_sharding_propagation_to_parameters *bool
message OpMetadata.ProfileInfo
  1 profile_type *OpMetadataProfileType
  2 relative_speedup double
  3 profile_source ProfileSource
  4 compilation_event CompilationEvent
  5 profile_generation_strategy ProfileGenerationStrategy
message OpMetadata
  1 op_type string
  2 op_name string
  3 source_file string
  4 source_line int32
  17 source_end_line int32
  18 source_column int32
  19 source_end_column int32
  5 profile_type *OpMetadataProfileType
  8 size_of_generated_code_in_bytes int64
  9 size_of_memory_working_set_in_bytes int64
  10 profile_info OpMetadata.ProfileInfo
  12 deduplicated_name string
  15 stack_frame_id int32
  16 scheduling_name string
  20 metadata_payload Payload
message LiteralProto
  1 shape ShapeProto
  2 preds *bool
  30 s1s bytes
  26 s2s bytes
  21 s4s bytes
  15 s8s bytes
  31 u1s bytes
  27 u2s bytes
  22 u4s bytes
  3 u8s bytes
  4 s32s *int32
  5 s64s *int64
  6 u32s *uint32
  7 u64s *uint64
  8 f32s *float
  9 f64s *double
  12 c64s *float
  18 c128s *double
  10 tuple_literals *LiteralProto
  11 f16s bytes
  13 bf16s bytes
  16 u16s bytes
  17 s16s bytes
  32 f4e2m1fns bytes
  29 f8e3m4s bytes
  23 f8e4m3b11fnuzs bytes
  20 f8e4m3fns bytes
  25 f8e4m3fnuzs bytes
  28 f8e4m3s bytes
  24 f8e5m2fnuzs bytes
  19 f8e5m2s bytes
  33 f8e8m0fnus bytes
  35 f6e3m2fns bytes
  36 f6e2m3fns bytes
  14 sparse_indices *int64
  34 dynamic_sizes *int32
message WindowDimension
  1 size int64
  2 stride int64
  3 padding_low int64
  4 padding_high int64
  5 window_dilation int64
  6 base_dilation int64
  7 window_reversal bool
message Window
  1 dimensions *WindowDimension
message GatherDimensionNumbers
  1 offset_dims *int64
  2 collapsed_slice_dims *int64
  3 start_index_map *int64
  4 index_vector_dim int64
  5 operand_batching_dims *int64
  6 start_indices_batching_dims *int64
message ScatterDimensionNumbers
  1 update_window_dims *int64
  2 inserted_window_dims *int64
  3 scatter_dims_to_operand_dims *int64
  4 index_vector_dim int64
  5 input_batching_dims *int64
  6 scatter_indices_batching_dims *int64
message ConvolutionDimensionNumbers
  7 input_batch_dimension int64
  8 input_feature_dimension int64
  11 input_spatial_dimensions *int64
  3 kernel_input_feature_dimension int64
  4 kernel_output_feature_dimension int64
  6 kernel_spatial_dimensions *int64
  9 output_batch_dimension int64
  10 output_feature_dimension int64
  12 output_spatial_dimensions *int64
message SparsityConfig.TensorSparsityConfig
  1 num_non_zero int64
  2 block_size int64
  3 dimension int64
  4 stride int64
message SparsityConfig
  1 lhs SparsityConfig.TensorSparsityConfig
  2 rhs SparsityConfig.TensorSparsityConfig
message PaddingConfig.PaddingConfigDimension
  1 edge_padding_low int64
  2 edge_padding_high int64
  3 interior_padding int64
message PaddingConfig
  1 dimensions *PaddingConfig.PaddingConfigDimension
message DotDimensionNumbers
  1 lhs_contracting_dimensions *int64
  2 rhs_contracting_dimensions *int64
  3 lhs_batch_dimensions *int64
  4 rhs_batch_dimensions *int64
message RaggedDotDimensionNumbers
  1 dot_dimension_numbers DotDimensionNumbers
  2 lhs_ragged_dimensions *int64
  3 rhs_group_dimensions *int64
message TriangularSolveOptions
  1 left_side bool
  2 lower bool
  3 unit_diagonal bool
  4 transpose_a TriangularSolveOptions.Transpose
message CholeskyOptions
  1 lower bool
message FrontendAttributes
  1 map {string,string}
message MeshProto.MeshAxis
  1 name string
  2 size int64
message MeshProto.IotaTransform
  1 reshape_dims *int64
  2 transpose_perm *int64
message MeshProto
  1 axes *MeshProto.MeshAxis
  2 device_ids *int64
  3 iota_transform MeshProto.IotaTransform
message AxisRefProto.SubAxis
  1 pre_size int64
  2 size int64
message AxisRefProto
  1 mesh_axis_index int64
  2 sub_axis_info AxisRefProto.SubAxis
message NamedShardingProto.DimensionSharding
  1 axes *AxisRefProto
  2 is_closed bool
message NamedShardingProto
  2 mesh MeshProto
  3 dim_shardings *NamedShardingProto.DimensionSharding
  4 replicated_axes *AxisRefProto
  5 unreduced_axes *AxisRefProto
  7 manual_axes *AxisRefProto
  6 metadata *OpMetadata
message OpSharding
  1 type OpSharding.Type
  2 tile_shape ShapeProto
  3 tile_assignment_dimensions *int64
  4 tile_assignment_devices *int64
  5 tuple_shardings *OpSharding
  6 replicate_on_last_tile_dim bool
  7 metadata *OpMetadata
  8 last_tile_dims *OpSharding.Type
  9 iota_reshape_dims *int64
  10 iota_transpose_perm *int32
  11 is_shard_group bool
  12 shard_group_id int64
  13 shard_group_type OpSharding.ShardGroupType
  14 named_sharding NamedShardingProto
message ReplicaGroup
  1 replica_ids *int64
message MeshAxesReplicaGroupListProto
  1 mesh MeshProto
  2 axes *AxisRefProto
message IotaReplicaGroupListProto
  1 num_replica_groups int64
  2 num_devices_per_group int64
  3 iota_reshape_dims *int64
  4 iota_transpose_perm *int32
message CollectiveDeviceListProto
  1 replica_groups *ReplicaGroup
message SourceTarget
  1 source int64
  2 target int64
message ResultAccuracy.Tolerance
  1 atol double
  2 rtol double
  3 ulps int64
message ResultAccuracy
  1 mode ResultAccuracy.Mode
  2 tolerance ResultAccuracy.Tolerance
message PrecisionConfig
  1 operand_precision *PrecisionConfig.Precision
  2 algorithm PrecisionConfig.Algorithm
message ParameterReplication
  1 replicated_at_leaf_buffers *bool
message OutputOperandAliasing
  1 output_shape_index *int64
  2 operand_index int64
  3 operand_shape_index *int64
message OriginalArrayProto
  1 instruction_name string
  2 shape_index *int64
message OriginalValueElementProto
  1 shape_index *int64
  2 original_array OriginalArrayProto
message OriginalValueProto
  1 elements *OriginalValueElementProto
  2 is_synthetic_call bool
message Statistic
  1 stat_name string
  2 stat_val double
message StatisticsViz
  1 stat_index_to_visualize int64
  2 statistics *Statistic
message Payload
  1 value ?bytes
  2 id ?int64
message HloInstructionProto.SliceDimensions
  1 start int64
  2 limit int64
  3 stride int64
message HloInstructionProto
  1 name string
  2 opcode string
  3 shape ShapeProto
  7 metadata OpMetadata
  8 literal LiteralProto
  9 parameter_number int64
  11 fusion_kind string
  13 tuple_index int64
  14 dimensions *int64
  15 window Window
  16 convolution_dimension_numbers ConvolutionDimensionNumbers
  50 feature_group_count int64
  58 batch_group_count int64
  17 slice_dimensions *HloInstructionProto.SliceDimensions
  18 exponent_bits int32
  19 mantissa_bits int32
  20 dynamic_slice_sizes *int64
  21 padding_config PaddingConfig
  22 outfeed_config bytes
  23 distribution RandomDistribution
  24 epsilon float
  25 feature_index int64
  26 channel_id int64
  27 infeed_config bytes
  28 custom_call_target string
  29 outfeed_shape ShapeProto
  30 dot_dimension_numbers DotDimensionNumbers
  90 ragged_dot_dimension_numbers RaggedDotDimensionNumbers
  31 fft_type FftType
  32 fft_length *int64
  63 comparison_direction string
  33 gather_dimension_numbers GatherDimensionNumbers
  34 gather_slice_sizes *int64
  35 id int64
  36 operand_ids *int64
  37 control_predecessor_ids *int64
  38 called_computation_ids *int64
  40 sharding OpSharding
  43 backend_config bytes
  99 backend_config_payload Payload
  49 replica_groups *ReplicaGroup
  45 all_reduce_id int64
  71 use_global_device_ids bool
  47 is_host_transfer bool
  60 is_stable bool
  48 scatter_dimension_numbers ScatterDimensionNumbers
  51 precision_config PrecisionConfig
  52 source_target_pairs *SourceTarget
  54 domain_entry_sharding OpSharding
  55 domain_exit_sharding OpSharding
  56 constrain_layout bool
  57 operand_shapes_with_layout *ShapeProto
  59 triangular_solve_options TriangularSolveOptions
  62 cholesky_options CholeskyOptions
  61 parameter_replication ParameterReplication
  65 custom_call_has_side_effect bool
  74 output_operand_aliasing *OutputOperandAliasing
  76 custom_call_schedule CustomCallSchedule
  66 delta int64
  67 indices_are_sorted bool
  68 frontend_attributes FrontendAttributes
  69 unique_indices bool
  70 rng_algorithm RandomAlgorithm
  72 comparison_type string
  73 is_cross_program_prefetch bool
  80 cross_program_prefetch_index ?int32
  75 padding_type PaddingType
  77 custom_call_api_version CustomCallApiVersion
  79 async_execution_thread string
  81 k int64
  85 largest bool
  82 statistics_viz StatisticsViz
  87 collective_device_list CollectiveDeviceListProto
  92 iota_collective_device_list IotaReplicaGroupListProto
  93 mesh_axes_replica_group_list MeshAxesReplicaGroupListProto
  88 original_value OriginalValueProto
  89 is_composite bool
  91 result_accuracy ResultAccuracy
  94 is_reverse bool
  95 num_carries int64
  96 is_associative TriState
  97 conv_kind ConvolutionKind
  98 sparsity_config SparsityConfig
  101 convolution_field_101 bytes
  102 comparison_order string
message HloComputationProto
  1 name string
  2 instructions *HloInstructionProto
  4 program_shape ProgramShapeProto
  5 id int64
  6 root_id int64
  7 is_fusion_computation bool
  8 execution_thread string
message HloScheduleProto.InstructionSequence
  1 instruction_ids *int64
message HloScheduleProto
  1 sequences {int64,HloScheduleProto.InstructionSequence}
message HloInputOutputAliasProto.AliasEntryProto
  1 output_shape_index *int64
  2 parameter_number int64
  3 parameter_shape_index *int64
  4 kind Kind
message HloInputOutputAliasProto
  1 entries *HloInputOutputAliasProto.AliasEntryProto
message HloBufferDonorProto.BufferDonorEntryProto
  1 parameter_number int64
  2 parameter_shape_index *int64
message HloBufferDonorProto
  1 entries *HloBufferDonorProto.BufferDonorEntryProto
message CrossProgramPrefetch
  1 parameter int64
  2 index *int64
  3 offset int64
message StackFrameIndexProto.FileLocation
  1 file_name_id int32
  2 function_name_id int32
  3 line int32
  5 end_line int32
  4 column int32
  6 end_column int32
message StackFrameIndexProto.StackFrame
  1 file_location_id int32
  2 parent_frame_id int32
message StackFrameIndexProto
  1 file_names *string
  2 function_names *string
  3 file_locations *StackFrameIndexProto.FileLocation
  4 stack_frames *StackFrameIndexProto.StackFrame
message DeviceAssignmentProto.ComputationDevice
  1 replica_device_ids *int64
message DeviceAssignmentProto
  1 replica_count int32
  2 computation_count int32
  3 computation_devices *DeviceAssignmentProto.ComputationDevice
message OriginalValueRecoveryTableProto.Entry
  1 old_original_array OriginalArrayProto
  2 new_original_array OriginalArrayProto
  3 recovery_module HloModuleProto
message OriginalValueRecoveryTableProto
  1 entries *OriginalValueRecoveryTableProto.Entry
message HloModuleProto
  1 name string
  2 entry_computation_name string
  6 entry_computation_id int64
  3 computations *HloComputationProto
  4 host_program_shape ProgramShapeProto
  5 id int64
  23 pjrt_id int64
  7 schedule HloScheduleProto
  8 input_output_alias HloInputOutputAliasProto
  22 payloads *bytes
  18 buffer_donor HloBufferDonorProto
  10 cross_program_prefetches *CrossProgramPrefetch
  11 is_dynamic bool
  12 spmd_output_sharding OpSharding
  14 spmd_parameters_shardings *OpSharding
  16 use_auto_spmd_partitioning bool
  13 profile_info *HloModuleProto.ProfileInfo
  15 device_assignment DeviceAssignmentProto
  17 stack_frame_index StackFrameIndexProto
  19 frontend_attributes FrontendAttributes
  20 original_value_recovery_table OriginalValueRecoveryTableProto
  21 device_type string
message HloModuleProto.ProfileInfo
  1 profile_type HloModuleProto.ProfileType
  2 relative_speedup double
  3 profile_source ProfileSource
  4 compilation_event CompilationEvent
  5 fingerprint string
  6 profile_generation_strategy ProfileGenerationStrategy
  7 original_changelist int64
  8 changelist int64
message LogicalBufferProto.Location
  2 instruction_name string
  4 instruction_id int64
  3 shape_index *int64
message LogicalBufferProto
  1 id int64
  2 size int64
  3 defined_at LogicalBufferProto.Location
  4 color int64
message BufferAllocationProto.Assigned
  1 logical_buffer_id int64
  2 offset int64
  3 size int64
  4 element_type PrimitiveType
message BufferAllocationProto
  1 index int64
  2 size int64
  3 is_thread_local bool
  11 is_tuple bool
  5 is_entry_computation_parameter bool
  12 is_constant bool
  6 parameter_number int64
  10 parameter_shape_index *int64
  13 is_parameter_aliased_with_output bool
  7 maybe_live_out bool
  8 color int64
  9 assigned *BufferAllocationProto.Assigned
message HeapSimulatorTrace.Event
  1 kind HeapSimulatorTrace.Event.Kind
  2 buffer_id int64
  3 computation_name string
  4 instruction_name string
  5 share_with_canonical_id int64
message HeapSimulatorTrace
  1 events *HeapSimulatorTrace.Event
  2 whole_module_simulation bool
  3 buffer_allocation_index int64
message BufferAssignmentProto.BufferAlias
  1 source_buffer_id int64
  2 location LogicalBufferProto.Location
message BufferAssignmentProto.PeakBuffers
  1 index int64
  2 logical_buffer_ids *int64
message BufferAssignmentProto
  1 logical_buffers *LogicalBufferProto
  2 buffer_aliases *BufferAssignmentProto.BufferAlias
  3 buffer_allocations *BufferAllocationProto
  4 heap_simulator_traces *HeapSimulatorTrace
  5 peak_buffers *BufferAssignmentProto.PeakBuffers
message HloProto
  1 hlo_module HloModuleProto
  3 buffer_assignment BufferAssignmentProto
message HloSnapshot
  1 hlo HloProto
  2 arguments *LiteralProto
  3 result LiteralProto
  4 execution_platform string
message HloInputs.LiteralDescriptor
  1 version int32
  2 argument_size_bytes uint64
message HloInputs
  1 arguments *LiteralProto
  2 arguments_descriptors *HloInputs.LiteralDescriptor
message HloUnoptimizedSnapshot
  1 hlo_module HloModuleProto
  2 partitions *HloInputs
  3 version int32
"""

_SCALARS = {
    "double": 1, "float": 2, "int64": 3, "uint64": 4, "int32": 5, "bool": 8, "string": 9, "bytes": 12,
    "uint32": 13, "ignored": 12,
}
# messages whose content we never read; a field of ours of this name holds them as bytes
IGNORED = "ignored"


def _parse_schema(text: str):
    """[(kind, name, body)] in table order; body: enum (value, number) pairs or field tuples."""
    out = []
    for raw in text.strip("\n").split("\n"):
        line = raw.strip()
        if not line:
            continue
        if line.startswith(("enum ", "message ")):
            kind, name = line.split()
            out.append((kind, name, []))
        elif out[-1][0] == "enum":
            for word in line.split():
                k, v = word.split("=")
                out[-1][2].append((k, int(v)))
        else:
            number, name, typ = line.split()
            out[-1][2].append((int(number), name, typ))
    return out


def _file_descriptor():
    from google.protobuf import descriptor_pb2
    FDP = descriptor_pb2.FieldDescriptorProto
    table = _parse_schema(SCHEMA)
    enums = {name for kind, name, _ in table if kind == "enum"}
    fdp = descriptor_pb2.FileDescriptorProto(name="hlo_cli/xla_hlo_subset.proto", package=PACKAGE,
                                             syntax="proto3")
    # nested names (A.B) become nested types: enums inside messages too
    made: dict[str, object] = {}

    def container(name: str):
        if "." not in name:
            return fdp
        return made[name.rsplit(".", 1)[0]]

    # messages first (outer before inner), so nested enums find their message
    msg_order = [(n, body) for kind, n, body in table if kind == "message"]
    for name in sorted((n for n, _ in msg_order), key=lambda n: n.count(".")):
        parent = container(name)
        adder = parent.message_type if parent is fdp else parent.nested_type
        made[name] = adder.add(name=name.rsplit(".", 1)[-1])
    for kind, name, body in table:
        if kind != "enum":
            continue
        parent = container(name) if "." in name and name.rsplit(".", 1)[0] in made else fdp
        e = parent.enum_type.add(name=name.rsplit(".", 1)[-1])
        for k, v in body:
            e.value.add(name=k, number=v)
        if parent is fdp and "." in name:
            raise ValueError(f"enum {name}: no message {name.rsplit('.', 1)[0]}")
    # top-level enum values share the package's scope: ours do not clash (checked by protobuf)

    def type_ref(typ: str):
        if typ in _SCALARS:
            return _SCALARS[typ], None
        if typ in enums:
            return FDP.TYPE_ENUM, f".{PACKAGE}.{typ}"
        if typ in made:
            return FDP.TYPE_MESSAGE, f".{PACKAGE}.{typ}"
        raise ValueError(f"schema: unknown type {typ}")

    for name, body in msg_order:
        m = made[name]
        for number, fname, typ in body:
            f = m.field.add(name=fname, number=number)
            if typ.startswith("{"):
                key, value = typ[1:-1].split(",")
                entry = m.nested_type.add(name="".join(p.capitalize() for p in fname.split("_")) + "Entry")
                entry.options.map_entry = True
                for n, (ename, etyp) in enumerate((("key", key), ("value", value)), 1):
                    ef = entry.field.add(name=ename, number=n, label=FDP.LABEL_OPTIONAL)
                    ef.type, tn = type_ref(etyp)
                    if tn:
                        ef.type_name = tn
                f.label = FDP.LABEL_REPEATED
                f.type = FDP.TYPE_MESSAGE
                f.type_name = f".{PACKAGE}.{name}.{entry.name}"
                continue
            repeated = typ.startswith("*")
            optional = typ.startswith("?")          # proto3 `optional`: presence is kept
            typ = typ.lstrip("*?")
            if optional:
                f.proto3_optional = True
                f.oneof_index = len(m.oneof_decl)
                m.oneof_decl.add(name="_" + fname)
            f.label = FDP.LABEL_REPEATED if repeated else FDP.LABEL_OPTIONAL
            f.type, tn = type_ref(typ)
            if tn:
                f.type_name = tn
    return fdp


@lru_cache(maxsize=None)
def messages() -> dict:
    """Message classes by name (nested ones as 'Outer.Inner')."""
    from google.protobuf import descriptor_pool, message_factory
    pool = descriptor_pool.DescriptorPool()
    pool.Add(_file_descriptor())
    fd = pool.FindFileByName("hlo_cli/xla_hlo_subset.proto")
    out = {}

    def walk(descs, prefix):
        for d in descs:
            full = prefix + d.name
            out[full] = message_factory.GetMessageClass(d)
            walk(d.nested_types, full + ".")

    walk(fd.message_types_by_name.values(), "")
    return out


def ignored_fields() -> set[tuple[str, str]]:
    """(message, field) pairs declared `ignored` in the table."""
    return {(name, fname) for kind, name, body in _parse_schema(SCHEMA) if kind == "message"
            for _, fname, typ in body if typ.lstrip("*") == IGNORED}
