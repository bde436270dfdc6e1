// Merge of N partial attention results (O_i, LSE_i) and its gradients
// (DESIGN 5.8, 5.9) on canonical views: O-like tensors [B, M, G, H, D] with
// a contiguous D, LSE-like tensors [B, G, H, M], any other strides.
//
// Work mapping: a group of `lanes` consecutive threads (a power of two from
// 4 to 32, the fewest that cover D with one vector each) owns one row
// (b, m, g, h); each thread handles kVec consecutive elements of D per step,
// so accesses are up to 16 bytes wide whenever every tensor's rows are
// aligned for it. Partials are visited in index order with fp32
// accumulation and no atomics: results are bitwise reproducible.
//
// Partial addresses and strides travel in the kernel parameters
// (FMHA_GPU_GRID_CONSTANT, so indexing them by partial needs no local copy);
// nothing is allocated, so every launch is stream ordered and capturable.
//
// One source for both vendors: nvcc builds it into the CUDA plugin, clang
// (HIP) into the HIP plugin; what differs (16-bit float types, lane-group
// sums, kernel parameter limits, error text) comes from backends/gpu/vendor.h.
#include <algorithm>
#include <cstdint>

#include "backends/gpu/merge.h"
#include "backends/gpu/merge_math.cuh"
#include "backends/gpu/status.h"

namespace fmha::gpu {
namespace {

constexpr int kThreads = 128;
// Lanes of one row: few enough to sit in one warp (32) or wavefront (64).
constexpr int kMaxRowLanes = 32;
static_assert(kMaxRowLanes <= kWarpSize, "a row's lanes must share a warp");
// A backward partial carries four tensors; this keeps its launches' kernel
// parameters about as large as the forward's (half that under a small
// parameter limit).
constexpr int kBackwardPartialsPerLaunch = kMaxKernelParamBytes >= 8192 ? 32 : 16;
// Rows beyond kMaxBlocks blocks' worth are handled by a grid-stride loop.
constexpr int64_t kMaxBlocks = int64_t{1} << 20;

// ---------------------------------------------------------------- tensors --

struct RowIndex {
  int64_t b, m, g, h;
};

// An O-like tensor [B, M, G, H, D]: strides (elements) of B, M, G, H.
struct RowTensor {
  char *data;
  int64_t stride[4];
  int32_t elem;
  int32_t elem_bytes;

  __device__ __forceinline__ char *row(const RowIndex &r, int64_t shift = 0) const {
    return data + (shift + r.b * stride[0] + r.m * stride[1] + r.g * stride[2] + r.h * stride[3]) * elem_bytes;
  }
};

// An LSE-like float32 tensor [B, G, H, M].
struct LseTensor {
  float *data;
  int64_t stride[4];

  __device__ __forceinline__ float *at(const RowIndex &r, int64_t shift = 0) const {
    return data + shift + r.b * stride[0] + r.g * stride[1] + r.h * stride[2] + r.m * stride[3];
  }
};

__device__ __forceinline__ RowIndex row_index(int64_t row, int64_t M, int64_t G, int64_t H) {
  RowIndex r;
  r.h = row % H;
  row /= H;
  r.g = row % G;
  row /= G;
  r.m = row % M;
  r.b = row / M;
  return r;
}

// ------------------------------------------------------------ element I/O --

// The vendor's conversions of the 16-bit types, beside these (an
// unqualified call would otherwise see only the local overloads).
using fmha::gpu::to_float;
__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(double x) { return static_cast<float>(x); }

template <class T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ double from_float<double>(float x) {
  return x;
}
template <>
__device__ __forceinline__ half_t from_float<half_t>(float x) {
  return half_from_float(x);
}
template <>
__device__ __forceinline__ bf16_t from_float<bf16_t>(float x) {
  return bf16_from_float(x);
}

// kVec elements read or written as one access (the host picks kVec so that
// the access is at most 16 bytes and aligned).
template <class T, int kVec>
struct alignas(sizeof(T) * kVec) Pack {
  T v[kVec];
};

template <class T, int kVec>
__device__ __forceinline__ void load_pack(const char *p, float (&out)[kVec]) {
  const Pack<T, kVec> pack = *reinterpret_cast<const Pack<T, kVec> *>(p);
#pragma unroll
  for (int v = 0; v < kVec; ++v) out[v] = to_float(pack.v[v]);
}

template <class T, int kVec>
__device__ __forceinline__ void store_pack(char *p, const float (&in)[kVec]) {
  Pack<T, kVec> pack;
#pragma unroll
  for (int v = 0; v < kVec; ++v) pack.v[v] = from_float<T>(in[v]);
  *reinterpret_cast<Pack<T, kVec> *>(p) = pack;
}

// The dtype is a run-time value (every tensor may have its own); the switch
// is uniform across a warp, and the kernels are bound by memory anyway.
template <int kVec>
__device__ __forceinline__ void load_floats(const char *p, int32_t elem, float (&out)[kVec]) {
  switch (elem) {
    case FMHA_ELEM_F16:
      load_pack<half_t, kVec>(p, out);
      break;
    case FMHA_ELEM_BF16:
      load_pack<bf16_t, kVec>(p, out);
      break;
    case FMHA_ELEM_F64:
      load_pack<double, kVec>(p, out);
      break;
    default:
      load_pack<float, kVec>(p, out);
      break;  // F32 (the host admits only these four)
  }
}

template <int kVec>
__device__ __forceinline__ void store_floats(char *p, int32_t elem, const float (&in)[kVec]) {
  switch (elem) {
    case FMHA_ELEM_F16:
      store_pack<half_t, kVec>(p, in);
      break;
    case FMHA_ELEM_BF16:
      store_pack<bf16_t, kVec>(p, in);
      break;
    case FMHA_ELEM_F64:
      store_pack<double, kVec>(p, in);
      break;
    default:
      store_pack<float, kVec>(p, in);
      break;
  }
}

// ------------------------------------------------------------------ merge --

struct MergePartial {
  RowTensor o;
  LseTensor lse;
};

struct MergeParams {
  int64_t rows, M, G, H, D;
  int64_t num_partials;
  int32_t lanes;  // threads per row
  // Stacked: partial i is parts[0] shifted by i * stacked_*_stride elements.
  int32_t stacked;
  int64_t stacked_o_stride;
  int64_t stacked_lse_stride;
  RowTensor o;
  LseTensor lse;  // data NULL: not wanted
  MergePartial parts[kMaxListPartials];
};

static_assert(sizeof(MergeParams) <= kMaxKernelParamBytes, "merge kernel parameters too large");

__device__ __forceinline__ float partial_lse(const MergeParams &p, int64_t i, const RowIndex &r) {
  return p.stacked ? *p.parts[0].lse.at(r, i * p.stacked_lse_stride) : *p.parts[i].lse.at(r);
}

__device__ __forceinline__ const char *partial_o(const MergeParams &p, int64_t i, const RowIndex &r, int32_t *elem,
                                                 int32_t *elem_bytes) {
  const RowTensor &o = p.stacked ? p.parts[0].o : p.parts[i].o;
  *elem = o.elem;
  *elem_bytes = o.elem_bytes;
  return p.stacked ? o.row(r, i * p.stacked_o_stride) : o.row(r);
}

template <int kVec>
__global__ void __launch_bounds__(kThreads) merge_kernel(const FMHA_GPU_GRID_CONSTANT MergeParams p) {
  const int lanes = p.lanes;
  const int lane = static_cast<int>(threadIdx.x) & (lanes - 1);
  const int64_t row_step = static_cast<int64_t>(gridDim.x) * (kThreads / lanes);
  for (int64_t row = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) / lanes; row < p.rows;
       row += row_step) {
    const RowIndex r = row_index(row, p.M, p.G, p.H);
    // Every lane of the group reduces the (few, cached) LSE_i itself, in
    // the same order, so the group agrees on LSE without communicating.
    float max_lse = kNegInf;
    for (int64_t i = 0; i < p.num_partials; ++i) max_lse = propagating_max(max_lse, partial_lse(p, i, r));
    float sum_exp = 0.f;
    for (int64_t i = 0; i < p.num_partials; ++i) sum_exp += exp_relative(partial_lse(p, i, r), max_lse);
    const float lse = lse_of(max_lse, sum_exp);
    if (p.lse.data != nullptr && lane == 0) *p.lse.at(r) = lse;

    char *o_row = p.o.row(r);
    for (int64_t col = static_cast<int64_t>(lane) * kVec; col < p.D; col += static_cast<int64_t>(lanes) * kVec) {
      float acc[kVec] = {};
      for (int64_t i = 0; i < p.num_partials; ++i) {
        const float w = merge_weight(partial_lse(p, i, r), lse);
        // An empty partial (or every partial of an empty row) adds nothing,
        // whatever its O holds; its O is not even read.
        if (w == 0.f) continue;
        int32_t elem, elem_bytes;
        const char *part_row = partial_o(p, i, r, &elem, &elem_bytes);
        float x[kVec];
        load_floats<kVec>(part_row + col * elem_bytes, elem, x);
#pragma unroll
        for (int v = 0; v < kVec; ++v) acc[v] = fmaf(w, x[v], acc[v]);
      }
      store_floats<kVec>(o_row + col * p.o.elem_bytes, p.o.elem, acc);
    }
  }
}

// --------------------------------------------------------- merge backward --

struct BackwardPartial {
  RowTensor o;
  RowTensor grad_o;  // written
  LseTensor lse;
  LseTensor grad_lse;  // written
};

struct MergeBackwardParams {
  int64_t rows, M, G, H, D;
  int32_t num_partials;  // in this launch
  int32_t lanes;
  RowTensor o, grad_o;
  LseTensor lse;
  LseTensor grad_lse;  // data NULL: zero
  BackwardPartial parts[kBackwardPartialsPerLaunch];
};

static_assert(sizeof(MergeBackwardParams) <= kMaxKernelParamBytes, "merge backward kernel parameters too large");

// w_i = exp(LSE_i - LSE); dO_i = w_i dO; dLSE_i = w_i (dLSE + <O_i - O, dO>).
template <int kVec>
__global__ void __launch_bounds__(kThreads) merge_backward_kernel(const FMHA_GPU_GRID_CONSTANT MergeBackwardParams p) {
  const int lanes = p.lanes;
  const int lane = static_cast<int>(threadIdx.x) & (lanes - 1);
  const LaneGroup group(lanes);
  const int64_t row_step = static_cast<int64_t>(gridDim.x) * (kThreads / lanes);
  for (int64_t row = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) / lanes; row < p.rows;
       row += row_step) {
    const RowIndex r = row_index(row, p.M, p.G, p.H);
    const float lse = *p.lse.at(r);
    const float grad_lse = p.grad_lse.data != nullptr ? *p.grad_lse.at(r) : 0.f;
    const char *o_row = p.o.row(r);
    const char *grad_o_row = p.grad_o.row(r);
    for (int i = 0; i < p.num_partials; ++i) {
      const BackwardPartial &part = p.parts[i];
      const float w = merge_weight(*part.lse.at(r), lse);
      char *grad_part_row = part.grad_o.row(r);
      if (w == 0.f) {
        // Empty partial or empty row: zero gradients (DESIGN 5.9), written
        // as zeros rather than 0 * dO so that no inf in dO turns into NaN.
        const float zero[kVec] = {};
        for (int64_t col = static_cast<int64_t>(lane) * kVec; col < p.D; col += static_cast<int64_t>(lanes) * kVec)
          store_floats<kVec>(grad_part_row + col * part.grad_o.elem_bytes, part.grad_o.elem, zero);
        if (lane == 0) *part.grad_lse.at(r) = 0.f;
        continue;
      }
      const char *part_row = part.o.row(r);
      float dot = 0.f;
      for (int64_t col = static_cast<int64_t>(lane) * kVec; col < p.D; col += static_cast<int64_t>(lanes) * kVec) {
        float o_i[kVec], o[kVec], grad_o[kVec], grad_o_i[kVec];
        load_floats<kVec>(part_row + col * part.o.elem_bytes, part.o.elem, o_i);
        load_floats<kVec>(o_row + col * p.o.elem_bytes, p.o.elem, o);
        load_floats<kVec>(grad_o_row + col * p.grad_o.elem_bytes, p.grad_o.elem, grad_o);
#pragma unroll
        for (int v = 0; v < kVec; ++v) {
          dot = fmaf(o_i[v] - o[v], grad_o[v], dot);
          grad_o_i[v] = w * grad_o[v];
        }
        store_floats<kVec>(grad_part_row + col * part.grad_o.elem_bytes, part.grad_o.elem, grad_o_i);
      }
      // `w` is the same for the whole group, so the whole group is here.
      dot = group.sum(dot);
      if (lane == 0) *part.grad_lse.at(r) = w * (grad_lse + dot);
    }
  }
}

// ------------------------------------------------------------------- host --

int32_t elem_bytes(int32_t elem) {
  switch (elem) {
    case FMHA_ELEM_F16:
    case FMHA_ELEM_BF16:
      return 2;
    case FMHA_ELEM_F32:
      return 4;
    case FMHA_ELEM_F64:
      return 8;
    default:
      return 0;
  }
}

const char *elem_name(int32_t elem) {
  switch (elem) {
    case FMHA_ELEM_F16:
      return "f16";
    case FMHA_ELEM_BF16:
      return "bf16";
    case FMHA_ELEM_F32:
      return "f32";
    case FMHA_ELEM_FP8:
      return "fp8";
    case FMHA_ELEM_I32:
      return "i32";
    case FMHA_ELEM_F64:
      return "f64";
    default:
      return "none";
  }
}

// The core has checked shapes, devices and the contiguous D; what is left
// to refuse is a dtype the kernels have no conversion for.
fmha_status check_float_elem(const fmha_view &view, const char *what, int64_t index, fmha_msg msg) {
  if (elem_bytes(view.elem) != 0) return FMHA_STATUS_SUCCESS;
  write_msg(msg, "%s merge: %s %lld has element type %s; the GPU kernels take f16, bf16, f32 or f64", kVendorName, what,
            static_cast<long long>(index), elem_name(view.elem));
  return FMHA_STATUS_NOT_SUPPORTED;
}

fmha_status check_lse_elem(const fmha_view &view, const char *what, int64_t index, fmha_msg msg) {
  if (view.elem == FMHA_ELEM_F32) return FMHA_STATUS_SUCCESS;
  write_msg(msg, "%s merge: %s %lld has element type %s; LSE tensors are f32", kVendorName, what,
            static_cast<long long>(index), elem_name(view.elem));
  return FMHA_STATUS_NOT_SUPPORTED;
}

RowTensor row_tensor(const fmha_view &view) {
  RowTensor t;
  t.data = static_cast<char *>(view.data);
  std::copy(view.stride, view.stride + 4, t.stride);
  t.elem = view.elem;
  t.elem_bytes = elem_bytes(view.elem);
  return t;
}

LseTensor lse_tensor(const fmha_view &view) {
  LseTensor t;
  t.data = static_cast<float *>(view.data);
  std::copy(view.stride, view.stride + 4, t.stride);
  return t;
}

// The widest kVec (elements per access, at most 16 bytes) that the row
// starts of every O-like tensor fitted so far allow.
class VectorWidth {
 public:
  explicit VectorWidth(int64_t head_dim) : head_dim_(head_dim) {}

  // `shift` is a further stride (elements) the tensor is addressed with:
  // the stacked form's distance between partials.
  void fit(const fmha_view &view, int64_t shift = 0) {
    while (vec_ > 1 && !aligned(view, shift)) vec_ /= 2;
  }
  int vec() const { return vec_; }

  // Fewest lanes (4..kMaxRowLanes, a power of two) that cover D with one
  // access each.
  int lanes() const {
    int lanes = 4;
    while (lanes < kMaxRowLanes && static_cast<int64_t>(lanes) * vec_ < head_dim_) lanes *= 2;
    return lanes;
  }

 private:
  bool aligned(const fmha_view &view, int64_t shift) const {
    const int64_t bytes = elem_bytes(view.elem);
    const int64_t access = vec_ * bytes;
    if (access > 16 || head_dim_ % vec_ != 0) return false;
    if (reinterpret_cast<uintptr_t>(view.data) % static_cast<uintptr_t>(access) != 0) return false;
    for (int d = 0; d < 4; ++d)
      if (view.shape[d] > 1 && (view.stride[d] * bytes) % access != 0) return false;
    return (shift * bytes) % access == 0;
  }

  int64_t head_dim_;
  int vec_ = 8;
};

unsigned blocks_for(int64_t rows, int lanes) {
  const int64_t rows_per_block = kThreads / lanes;
  return static_cast<unsigned>(std::min((rows + rows_per_block - 1) / rows_per_block, kMaxBlocks));
}

int64_t row_count(const fmha_view &o) { return o.shape[0] * o.shape[1] * o.shape[2] * o.shape[3]; }

}  // namespace

fmha_status merge(const fmha_merge_views &views, Stream stream, fmha_msg msg) {
  const fmha_view &out = views.o;
  const int64_t rows = row_count(out);
  if (rows == 0) return FMHA_STATUS_SUCCESS;
  // The stacked form is described by partial 0 and a stride, whatever N.
  const int64_t described = views.stacked ? std::min<int64_t>(views.num_partials, 1) : views.num_partials;
  if (described > kMaxListPartials) {
    write_msg(msg,
              "%s merge: %lld partials given as a list; the %s backend takes at most %d per call in the "
              "list form: use the stacked form (any number)",
              kVendorName, static_cast<long long>(views.num_partials), kVendorName, kMaxListPartials);
    return FMHA_STATUS_NOT_SUPPORTED;
  }
  if (out.elem != FMHA_ELEM_F16 && out.elem != FMHA_ELEM_BF16 && out.elem != FMHA_ELEM_F32) {
    write_msg(msg, "%s merge: output O has element type %s; it must be f16, bf16 or f32", kVendorName,
              elem_name(out.elem));
    return FMHA_STATUS_NOT_SUPPORTED;
  }
  if (views.lse.data != nullptr) {
    const fmha_status st = check_lse_elem(views.lse, "merged LSE", 0, msg);
    if (st != FMHA_STATUS_SUCCESS) return st;
  }

  MergeParams p{};
  p.rows = rows;
  p.M = out.shape[1];
  p.G = out.shape[2];
  p.H = out.shape[3];
  p.D = out.shape[4];
  p.num_partials = views.num_partials;
  p.stacked = views.stacked;
  p.stacked_o_stride = views.stacked_o_stride;
  p.stacked_lse_stride = views.stacked_lse_stride;
  p.o = row_tensor(out);
  p.lse = lse_tensor(views.lse);
  VectorWidth width(p.D);
  width.fit(out);
  for (int64_t i = 0; i < described; ++i) {
    fmha_status st = check_float_elem(views.o_parts[i], "partial O", i, msg);
    if (st == FMHA_STATUS_SUCCESS) st = check_lse_elem(views.lse_parts[i], "partial LSE", i, msg);
    if (st != FMHA_STATUS_SUCCESS) return st;
    p.parts[i].o = row_tensor(views.o_parts[i]);
    p.parts[i].lse = lse_tensor(views.lse_parts[i]);
    width.fit(views.o_parts[i], views.stacked ? views.stacked_o_stride : 0);
  }
  p.lanes = width.lanes();

  const unsigned blocks = blocks_for(rows, p.lanes);
  switch (width.vec()) {
    case 8:
      merge_kernel<8><<<blocks, kThreads, 0, stream>>>(p);
      break;
    case 4:
      merge_kernel<4><<<blocks, kThreads, 0, stream>>>(p);
      break;
    case 2:
      merge_kernel<2><<<blocks, kThreads, 0, stream>>>(p);
      break;
    default:
      merge_kernel<1><<<blocks, kThreads, 0, stream>>>(p);
      break;
  }
  FMHA_GPU_CHECK_LAUNCH("merge_kernel", msg);
  return FMHA_STATUS_SUCCESS;
}

fmha_status merge_backward(const fmha_merge_backward_views &views, Stream stream, fmha_msg msg) {
  const int64_t rows = row_count(views.o);
  if (rows == 0) return FMHA_STATUS_SUCCESS;
  // Refuse before launching anything, so that a failure writes nothing.
  fmha_status st = check_float_elem(views.o, "merged O", 0, msg);
  if (st == FMHA_STATUS_SUCCESS) st = check_float_elem(views.grad_o, "grad O", 0, msg);
  if (st == FMHA_STATUS_SUCCESS) st = check_lse_elem(views.lse, "merged LSE", 0, msg);
  if (st == FMHA_STATUS_SUCCESS && views.grad_lse.data != nullptr)
    st = check_lse_elem(views.grad_lse, "grad LSE", 0, msg);
  for (int64_t i = 0; st == FMHA_STATUS_SUCCESS && i < views.num_partials; ++i) {
    st = check_float_elem(views.o_parts[i], "partial O", i, msg);
    if (st == FMHA_STATUS_SUCCESS) st = check_float_elem(views.grad_o_parts[i], "partial grad O", i, msg);
    if (st == FMHA_STATUS_SUCCESS) st = check_lse_elem(views.lse_parts[i], "partial LSE", i, msg);
    if (st == FMHA_STATUS_SUCCESS) st = check_lse_elem(views.grad_lse_parts[i], "partial grad LSE", i, msg);
  }
  if (st != FMHA_STATUS_SUCCESS) return st;

  MergeBackwardParams p{};
  p.rows = rows;
  p.M = views.o.shape[1];
  p.G = views.o.shape[2];
  p.H = views.o.shape[3];
  p.D = views.o.shape[4];
  p.o = row_tensor(views.o);
  p.grad_o = row_tensor(views.grad_o);
  p.lse = lse_tensor(views.lse);
  p.grad_lse = lse_tensor(views.grad_lse);
  VectorWidth merged_width(p.D);
  merged_width.fit(views.o);
  merged_width.fit(views.grad_o);

  // Each partial's gradients depend only on that partial and the merged
  // values, so the partials can be spread over several launches.
  for (int64_t first = 0; first < views.num_partials; first += kBackwardPartialsPerLaunch) {
    const int count = static_cast<int>(std::min<int64_t>(kBackwardPartialsPerLaunch, views.num_partials - first));
    p.num_partials = count;
    VectorWidth width = merged_width;
    for (int j = 0; j < count; ++j) {
      const int64_t i = first + j;
      p.parts[j].o = row_tensor(views.o_parts[i]);
      p.parts[j].grad_o = row_tensor(views.grad_o_parts[i]);
      p.parts[j].lse = lse_tensor(views.lse_parts[i]);
      p.parts[j].grad_lse = lse_tensor(views.grad_lse_parts[i]);
      width.fit(views.o_parts[i]);
      width.fit(views.grad_o_parts[i]);
    }
    p.lanes = width.lanes();
    const unsigned blocks = blocks_for(rows, p.lanes);
    switch (width.vec()) {
      case 8:
        merge_backward_kernel<8><<<blocks, kThreads, 0, stream>>>(p);
        break;
      case 4:
        merge_backward_kernel<4><<<blocks, kThreads, 0, stream>>>(p);
        break;
      case 2:
        merge_backward_kernel<2><<<blocks, kThreads, 0, stream>>>(p);
        break;
      default:
        merge_backward_kernel<1><<<blocks, kThreads, 0, stream>>>(p);
        break;
    }
    FMHA_GPU_CHECK_LAUNCH("merge_backward_kernel", msg);
  }
  return FMHA_STATUS_SUCCESS;
}

}  // namespace fmha::gpu
