// The random inputs of `fmha-splitk bench` (bf16 values, and the words of
// packed K/V and scales): value i of a fill is a pure
// function of (seed, i), so a GPU makes multi-GB inputs where they live
// (gpu_kernels.cu includes this file) and the host makes the same bits.
// Plain C++ that nvcc also compiles for the device.
#ifndef FMHA_SPLITK_BENCH_RANDOM_BF16_H_
#define FMHA_SPLITK_BENCH_RANDOM_BF16_H_

#if defined(__CUDACC__)
#define FMHA_BENCH_HOST_DEVICE __host__ __device__
#else
#include <cstring>
#define FMHA_BENCH_HOST_DEVICE
#endif

namespace fmha_cli {

// SplitMix64's finaliser over a Weyl sequence: 64 well-mixed bits per index,
// with no state to carry between threads.
FMHA_BENCH_HOST_DEVICE inline unsigned long long random_bits(unsigned long long seed, unsigned long long index) {
  unsigned long long z = seed + (index + 1) * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// bf16 bits of a value ~N(0, 1): the sum of the four 16-bit fields of
// random_bits (Irwin-Hall with n = 4: mean 131070, standard deviation
// 65536 / sqrt(3) in field units), centred, scaled to unit variance. The
// centring is exact integer arithmetic and the scaling one float multiply,
// so host and device round identically.
FMHA_BENCH_HOST_DEVICE inline unsigned short random_bf16(unsigned long long seed, unsigned long long index) {
  const unsigned long long bits = random_bits(seed, index);
  const int sum = static_cast<int>(bits & 0xffffu) + static_cast<int>((bits >> 16) & 0xffffu) +
                  static_cast<int>((bits >> 32) & 0xffffu) + static_cast<int>(bits >> 48);
  const float value = static_cast<float>(sum - 131070) * (1.7320508075688772f / 65536.0f);
#if defined(__CUDA_ARCH__)
  const unsigned int word = __float_as_uint(value);
#else
  unsigned int word;
  std::memcpy(&word, &value, sizeof word);
#endif
  // Round to nearest even, as half.h's float_to_bf16 (the value is finite).
  return static_cast<unsigned short>((word + 0x7fffu + ((word >> 16) & 1u)) >> 16);
}

// Random 32-bit words with some bits fixed, for packed K/V and their scales:
// word i is random_bits masked with body_and and then body_or set, except
// the first header_words of every period (int4 rows start with their scale
// words), which take header_and and header_or. Masks that make only valid
// encodings keep NaN and infinity out of the inputs.
struct WordPattern {
  unsigned long long period;
  unsigned long long header_words;
  unsigned int header_and;
  unsigned int header_or;
  unsigned int body_and;
  unsigned int body_or;
};

FMHA_BENCH_HOST_DEVICE inline unsigned int random_word(unsigned long long seed, unsigned long long index,
                                                       const WordPattern &pattern) {
  const unsigned long long bits = random_bits(seed, index);
  const auto word = static_cast<unsigned int>(bits ^ (bits >> 32));
  if (index % pattern.period < pattern.header_words) return (word & pattern.header_and) | pattern.header_or;
  return (word & pattern.body_and) | pattern.body_or;
}

}  // namespace fmha_cli

#endif  // FMHA_SPLITK_BENCH_RANDOM_BF16_H_
