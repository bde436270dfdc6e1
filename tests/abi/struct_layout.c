/*
 * The public structs' layout on x86-64 (LP64), pinned: an accidental ABI
 * change (a field moved, resized or inserted anywhere but at the end) fails
 * the build. Growing a struct at its end is the allowed change: append the
 * new field's PIN_FIELD and update PIN_SIZE. Enum values are pinned too:
 * they are never renumbered.
 *
 * C99 has no static assertion, so each check is a typedef of an array whose
 * size is negative when the check fails; the typedef's name says which.
 */
#include <fmha_splitk/fmha_splitk.h>
#include <stddef.h>

#if !defined(__x86_64__)
#error "struct_layout.c pins x86-64 numbers"
#endif

#define PIN(name, condition) typedef char name[(condition) ? 1 : -1]
#define PIN_SIZE(type, size) PIN(size_of_##type, sizeof(type) == (size))
#define PIN_FIELD(type, field, offset, size) \
  PIN(layout_of_##type##_##field, offsetof(type, field) == (offset) && sizeof(((type *)0)->field) == (size))
#define PIN_VALUE(name, value) PIN(value_of_##name, (name) == (value))

PIN_SIZE(fmha_splitk_problem, 176);
PIN_FIELD(fmha_splitk_problem, struct_size, 0, 8);
PIN_FIELD(fmha_splitk_problem, backend, 8, 4);
PIN_FIELD(fmha_splitk_problem, device_id, 12, 4);
PIN_FIELD(fmha_splitk_problem, batch, 16, 8);
PIN_FIELD(fmha_splitk_problem, max_q_seqlen, 24, 8);
PIN_FIELD(fmha_splitk_problem, max_kv_seqlen, 32, 8);
PIN_FIELD(fmha_splitk_problem, groups, 40, 4);
PIN_FIELD(fmha_splitk_problem, heads_q, 44, 4);
PIN_FIELD(fmha_splitk_problem, heads_kv, 48, 4);
PIN_FIELD(fmha_splitk_problem, head_dim_qk, 52, 4);
PIN_FIELD(fmha_splitk_problem, head_dim_v, 56, 4);
PIN_FIELD(fmha_splitk_problem, q_layout, 60, 4);
PIN_FIELD(fmha_splitk_problem, kv_layout, 64, 4);
PIN_FIELD(fmha_splitk_problem, page_size, 68, 4);
PIN_FIELD(fmha_splitk_problem, q_dtype, 72, 4);
PIN_FIELD(fmha_splitk_problem, kv_dtype, 76, 4);
PIN_FIELD(fmha_splitk_problem, o_dtype, 80, 4);
PIN_FIELD(fmha_splitk_problem, kv_quant, 84, 4);
PIN_FIELD(fmha_splitk_problem, kv_quant_groups, 88, 4);
PIN_FIELD(fmha_splitk_problem, fp8_format, 92, 4);
PIN_FIELD(fmha_splitk_problem, kv_scale_kind, 96, 4);
PIN_FIELD(fmha_splitk_problem, kv_scale_granularity, 100, 4);
PIN_FIELD(fmha_splitk_problem, q_scale_granularity, 104, 4);
PIN_FIELD(fmha_splitk_problem, mask, 108, 4);
PIN_FIELD(fmha_splitk_problem, window_left, 112, 4);
PIN_FIELD(fmha_splitk_problem, window_right, 116, 4);
PIN_FIELD(fmha_splitk_problem, has_bias, 120, 4);
PIN_FIELD(fmha_splitk_problem, has_sinks, 124, 4);
PIN_FIELD(fmha_splitk_problem, softmax_scale, 128, 4);
PIN_FIELD(fmha_splitk_problem, softcap, 132, 4);
PIN_FIELD(fmha_splitk_problem, split_k, 136, 4);
PIN_FIELD(fmha_splitk_problem, kv_chunk_size, 140, 4);
PIN_FIELD(fmha_splitk_problem, flags, 144, 4);
PIN_FIELD(fmha_splitk_problem, reserved0, 148, 4);
PIN_FIELD(fmha_splitk_problem, kv_seqlen_hint, 152, 8);
PIN_FIELD(fmha_splitk_problem, num_pages, 160, 8);
PIN_FIELD(fmha_splitk_problem, max_pages_per_seq, 168, 8);

PIN_SIZE(fmha_splitk_args, 184);
PIN_FIELD(fmha_splitk_args, struct_size, 0, 8);
PIN_FIELD(fmha_splitk_args, q, 8, 8);
PIN_FIELD(fmha_splitk_args, k, 16, 8);
PIN_FIELD(fmha_splitk_args, v, 24, 8);
PIN_FIELD(fmha_splitk_args, o, 32, 8);
PIN_FIELD(fmha_splitk_args, lse, 40, 8);
PIN_FIELD(fmha_splitk_args, bias, 48, 8);
PIN_FIELD(fmha_splitk_args, sinks, 56, 8);
PIN_FIELD(fmha_splitk_args, kv_seqlen, 64, 8);
PIN_FIELD(fmha_splitk_args, kv_seqstart, 72, 8);
PIN_FIELD(fmha_splitk_args, q_seqstart, 80, 8);
PIN_FIELD(fmha_splitk_args, block_table, 88, 8);
PIN_FIELD(fmha_splitk_args, kv_indptr, 96, 8);
PIN_FIELD(fmha_splitk_args, kv_indices, 104, 8);
PIN_FIELD(fmha_splitk_args, kv_last_page_len, 112, 8);
PIN_FIELD(fmha_splitk_args, k_scale, 120, 8);
PIN_FIELD(fmha_splitk_args, v_scale, 128, 8);
PIN_FIELD(fmha_splitk_args, q_scale, 136, 8);
PIN_FIELD(fmha_splitk_args, o_partial, 144, 8);
PIN_FIELD(fmha_splitk_args, lse_partial, 152, 8);
PIN_FIELD(fmha_splitk_args, workspace, 160, 8);
PIN_FIELD(fmha_splitk_args, workspace_size, 168, 8);
PIN_FIELD(fmha_splitk_args, stream, 176, 8);

PIN_SIZE(fmha_splitk_plan_info, 256);
PIN_FIELD(fmha_splitk_plan_info, struct_size, 0, 8);
PIN_FIELD(fmha_splitk_plan_info, backend, 8, 4);
PIN_FIELD(fmha_splitk_plan_info, device_id, 12, 4);
PIN_FIELD(fmha_splitk_plan_info, split_k, 16, 4);
PIN_FIELD(fmha_splitk_plan_info, kv_chunk_size, 20, 4);
PIN_FIELD(fmha_splitk_plan_info, num_workers, 24, 4);
PIN_FIELD(fmha_splitk_plan_info, max_partials, 28, 4);
PIN_FIELD(fmha_splitk_plan_info, workspace_size, 32, 8);
PIN_FIELD(fmha_splitk_plan_info, backend_name, 40, 16);
PIN_FIELD(fmha_splitk_plan_info, kernel_name, 56, 96);
PIN_FIELD(fmha_splitk_plan_info, device_name, 152, 96);
PIN_FIELD(fmha_splitk_plan_info, config_index, 248, 4);
PIN_FIELD(fmha_splitk_plan_info, config_source, 252, 4);

PIN_SIZE(fmha_splitk_config, 160);
PIN_FIELD(fmha_splitk_config, struct_size, 0, 8);
PIN_FIELD(fmha_splitk_config, index, 8, 4);
PIN_FIELD(fmha_splitk_config, heuristic, 12, 4);
PIN_FIELD(fmha_splitk_config, selected, 16, 4);
PIN_FIELD(fmha_splitk_config, waves, 20, 4);
PIN_FIELD(fmha_splitk_config, num_ranges, 24, 4);
PIN_FIELD(fmha_splitk_config, min_chunk_keys, 28, 4);
PIN_FIELD(fmha_splitk_config, split_k, 32, 4);
PIN_FIELD(fmha_splitk_config, tune_state, 36, 4);
PIN_FIELD(fmha_splitk_config, time_us, 40, 8);
PIN_FIELD(fmha_splitk_config, error_ratio, 48, 8);
PIN_FIELD(fmha_splitk_config, workspace_size, 56, 8);
PIN_FIELD(fmha_splitk_config, name, 64, 96);

PIN_SIZE(fmha_splitk_autotune_options, 32);
PIN_FIELD(fmha_splitk_autotune_options, struct_size, 0, 8);
PIN_FIELD(fmha_splitk_autotune_options, warmup_runs, 8, 4);
PIN_FIELD(fmha_splitk_autotune_options, timed_runs, 12, 4);
PIN_FIELD(fmha_splitk_autotune_options, max_total_ms, 16, 8);
PIN_FIELD(fmha_splitk_autotune_options, flags, 24, 4);
PIN_FIELD(fmha_splitk_autotune_options, reserved0, 28, 4);

PIN_SIZE(fmha_merge_args, 72);
PIN_FIELD(fmha_merge_args, struct_size, 0, 8);
PIN_FIELD(fmha_merge_args, o_stacked, 8, 8);
PIN_FIELD(fmha_merge_args, lse_stacked, 16, 8);
PIN_FIELD(fmha_merge_args, num_partials, 24, 8);
PIN_FIELD(fmha_merge_args, o_list, 32, 8);
PIN_FIELD(fmha_merge_args, lse_list, 40, 8);
PIN_FIELD(fmha_merge_args, o, 48, 8);
PIN_FIELD(fmha_merge_args, lse, 56, 8);
PIN_FIELD(fmha_merge_args, stream, 64, 8);

PIN_SIZE(fmha_merge_backward_args, 120);
PIN_FIELD(fmha_merge_backward_args, struct_size, 0, 8);
PIN_FIELD(fmha_merge_backward_args, o_stacked, 8, 8);
PIN_FIELD(fmha_merge_backward_args, lse_stacked, 16, 8);
PIN_FIELD(fmha_merge_backward_args, num_partials, 24, 8);
PIN_FIELD(fmha_merge_backward_args, o_list, 32, 8);
PIN_FIELD(fmha_merge_backward_args, lse_list, 40, 8);
PIN_FIELD(fmha_merge_backward_args, o, 48, 8);
PIN_FIELD(fmha_merge_backward_args, lse, 56, 8);
PIN_FIELD(fmha_merge_backward_args, grad_o, 64, 8);
PIN_FIELD(fmha_merge_backward_args, grad_lse, 72, 8);
PIN_FIELD(fmha_merge_backward_args, grad_o_stacked, 80, 8);
PIN_FIELD(fmha_merge_backward_args, grad_lse_stacked, 88, 8);
PIN_FIELD(fmha_merge_backward_args, grad_o_list, 96, 8);
PIN_FIELD(fmha_merge_backward_args, grad_lse_list, 104, 8);
PIN_FIELD(fmha_merge_backward_args, stream, 112, 8);

PIN_SIZE(fmha_backend_info, 904);
PIN_FIELD(fmha_backend_info, struct_size, 0, 8);
PIN_FIELD(fmha_backend_info, backend, 8, 4);
PIN_FIELD(fmha_backend_info, available, 12, 4);
PIN_FIELD(fmha_backend_info, score, 16, 4);
PIN_FIELD(fmha_backend_info, device_count, 20, 4);
PIN_FIELD(fmha_backend_info, name, 24, 16);
PIN_FIELD(fmha_backend_info, path, 40, 512);
PIN_FIELD(fmha_backend_info, reason, 552, 256);
PIN_FIELD(fmha_backend_info, device_name, 808, 96);

PIN_SIZE(fmha_quantize_kv_args, 56);
PIN_FIELD(fmha_quantize_kv_args, struct_size, 0, 8);
PIN_FIELD(fmha_quantize_kv_args, src, 8, 8);
PIN_FIELD(fmha_quantize_kv_args, dst, 16, 8);
PIN_FIELD(fmha_quantize_kv_args, scale, 24, 8);
PIN_FIELD(fmha_quantize_kv_args, kv_quant, 32, 4);
PIN_FIELD(fmha_quantize_kv_args, kv_quant_groups, 36, 4);
PIN_FIELD(fmha_quantize_kv_args, fp8_format, 40, 4);
PIN_FIELD(fmha_quantize_kv_args, kv_scale_kind, 44, 4);
PIN_FIELD(fmha_quantize_kv_args, scale_granularity, 48, 4);
PIN_FIELD(fmha_quantize_kv_args, reserved0, 52, 4);

/* DLPack's structs cross the ABI inside ours (Debian's libdlpack-dev, DLPack
 * 0.6): a DLPack whose layout differs would break every caller silently. */
PIN_SIZE(DLDevice, 8);
PIN_FIELD(DLDevice, device_type, 0, 4);
PIN_FIELD(DLDevice, device_id, 4, 4);
PIN_SIZE(DLDataType, 4);
PIN_FIELD(DLDataType, code, 0, 1);
PIN_FIELD(DLDataType, bits, 1, 1);
PIN_FIELD(DLDataType, lanes, 2, 2);
PIN_SIZE(DLTensor, 48);
PIN_FIELD(DLTensor, data, 0, 8);
PIN_FIELD(DLTensor, device, 8, 8);
PIN_FIELD(DLTensor, ndim, 16, 4);
PIN_FIELD(DLTensor, dtype, 20, 4);
PIN_FIELD(DLTensor, shape, 24, 8);
PIN_FIELD(DLTensor, strides, 32, 8);
PIN_FIELD(DLTensor, byte_offset, 40, 8);
PIN_VALUE(kDLCPU, 1);
PIN_VALUE(kDLCUDA, 2);
PIN_VALUE(kDLROCM, 10);
PIN_VALUE(kDLInt, 0);
PIN_VALUE(kDLUInt, 1);
PIN_VALUE(kDLFloat, 2);
PIN_VALUE(kDLBfloat, 4);

/* Enum-typed return values and parameters are 4 bytes wide. */
PIN_SIZE(fmha_status, 4);
PIN_SIZE(fmha_backend_kind, 4);

PIN_VALUE(FMHA_STATUS_SUCCESS, 0);
PIN_VALUE(FMHA_STATUS_INVALID_ARGUMENT, 1);
PIN_VALUE(FMHA_STATUS_NOT_SUPPORTED, 2);
PIN_VALUE(FMHA_STATUS_BACKEND_UNAVAILABLE, 3);
PIN_VALUE(FMHA_STATUS_INSUFFICIENT_WORKSPACE, 4);
PIN_VALUE(FMHA_STATUS_OUT_OF_MEMORY, 5);
PIN_VALUE(FMHA_STATUS_DEVICE_ERROR, 6);
PIN_VALUE(FMHA_STATUS_INTERNAL_ERROR, 7);

PIN_VALUE(FMHA_BACKEND_AUTO, 0);
PIN_VALUE(FMHA_BACKEND_CPU, 1);
PIN_VALUE(FMHA_BACKEND_CUDA, 2);
PIN_VALUE(FMHA_BACKEND_HIP, 3);

PIN_VALUE(FMHA_DTYPE_DEFAULT, 0);
PIN_VALUE(FMHA_DTYPE_F16, 1);
PIN_VALUE(FMHA_DTYPE_BF16, 2);
PIN_VALUE(FMHA_DTYPE_F32, 3);
PIN_VALUE(FMHA_DTYPE_FP8, 4);

PIN_VALUE(FMHA_KV_QUANT_NONE, 0);
PIN_VALUE(FMHA_KV_QUANT_INT4, 1);
PIN_VALUE(FMHA_KV_QUANT_FP8, 2);

PIN_VALUE(FMHA_FP8_E4M3FN, 0);
PIN_VALUE(FMHA_FP8_E4M3FNUZ, 1);

PIN_VALUE(FMHA_KV_SCALE_F16X2_SCALE_SHIFT, 0);
PIN_VALUE(FMHA_KV_SCALE_F32, 1);

PIN_VALUE(FMHA_SCALE_PER_ROW, 0);
PIN_VALUE(FMHA_SCALE_PER_HEAD, 1);
PIN_VALUE(FMHA_SCALE_PER_TENSOR, 2);

PIN_VALUE(FMHA_KV_DENSE, 0);
PIN_VALUE(FMHA_KV_PADDED, 1);
PIN_VALUE(FMHA_KV_GAPPY, 2);
PIN_VALUE(FMHA_KV_PAGED, 3);
PIN_VALUE(FMHA_KV_RAGGED, 4);

PIN_VALUE(FMHA_Q_FIXED, 0);
PIN_VALUE(FMHA_Q_VARLEN, 1);

PIN_VALUE(FMHA_MASK_NONE, 0);
PIN_VALUE(FMHA_MASK_CAUSAL, 1);
PIN_VALUE(FMHA_MASK_LOCAL, 2);
PIN_VALUE(FMHA_MASK_CAUSAL_LOCAL, 3);

PIN_VALUE(FMHA_FLAG_BATCH_INVARIANT, 1);
PIN_VALUE(FMHA_FLAG_WRITE_PARTIALS, 2);
PIN_VALUE(FMHA_FLAG_V_FROM_K, 4);
PIN_VALUE(FMHA_FLAG_FP8_QK, 8);
PIN_VALUE(FMHA_FLAG_FP8_PV, 16);
PIN_VALUE(FMHA_FLAG_CHECKED, 32);
PIN_VALUE(FMHA_FLAG_EXTERNAL_WORKSPACE, 64);

PIN_VALUE(FMHA_CONFIG_HEURISTIC, 0);
PIN_VALUE(FMHA_CONFIG_TUNING_CACHE, 1);
PIN_VALUE(FMHA_CONFIG_AUTOTUNE, 2);

PIN_VALUE(FMHA_TUNE_UNTIMED, 0);
PIN_VALUE(FMHA_TUNE_ACCEPTED, 1);
PIN_VALUE(FMHA_TUNE_REJECTED, 2);
PIN_VALUE(FMHA_TUNE_SKIPPED, 3);
PIN_VALUE(FMHA_TUNE_FAILED, 4);

PIN_VALUE(FMHA_AUTOTUNE_NO_CACHE_STORE, 1);
PIN_VALUE(FMHA_AUTOTUNE_KEEP_L2, 2);
