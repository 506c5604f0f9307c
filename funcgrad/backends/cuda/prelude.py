"""The C++ helpers every generated CUDA module starts with.

They give the kernel IR's operations the reference backend's semantics where C's differ:
integer arithmetic wraps (signed overflow is undefined in C), division by zero gives 0,
shifts by out-of-range amounts are defined, float-to-int conversions saturate, max and min
propagate NaN, and float16/bfloat16 values are carried in float registers and rounded after
every operation. The module needs no CUDA header (NVRTC compiles it as it is), and the host
emulator compiles the same text with a few definitions of CUDA's built-ins in front of it.
"""

PRELUDE = r"""
// ---- funcgrad prelude -------------------------------------------------------------------
// A 16-byte vector of elements, loaded and stored with one instruction (elementwise loops).
template <class T, int N> struct alignas(16) fg_vector { T lane[N]; };
// Unsigned types in which signed arithmetic wraps (narrow types compute in 32 bits).
template <class T> struct fg_wide;
template <> struct fg_wide<signed char> { typedef unsigned int type; };
template <> struct fg_wide<short> { typedef unsigned int type; };
template <> struct fg_wide<int> { typedef unsigned int type; };
template <> struct fg_wide<long long> { typedef unsigned long long type; };
template <> struct fg_wide<unsigned char> { typedef unsigned int type; };
template <> struct fg_wide<unsigned short> { typedef unsigned int type; };
template <> struct fg_wide<unsigned int> { typedef unsigned int type; };
template <> struct fg_wide<unsigned long long> { typedef unsigned long long type; };

// The unsigned and signed types of the same width.
template <class T> struct fg_bits;
template <> struct fg_bits<signed char> { typedef unsigned char u; typedef signed char s; };
template <> struct fg_bits<unsigned char> { typedef unsigned char u; typedef signed char s; };
template <> struct fg_bits<short> { typedef unsigned short u; typedef short s; };
template <> struct fg_bits<unsigned short> { typedef unsigned short u; typedef short s; };
template <> struct fg_bits<int> { typedef unsigned int u; typedef int s; };
template <> struct fg_bits<unsigned int> { typedef unsigned int u; typedef int s; };
template <> struct fg_bits<long long> { typedef unsigned long long u; typedef long long s; };
template <> struct fg_bits<unsigned long long> {
  typedef unsigned long long u; typedef long long s;
};

template <class T> __device__ __forceinline__ T fg_add(T a, T b) {
  typedef typename fg_wide<T>::type U; return (T)((U)a + (U)b);
}
template <class T> __device__ __forceinline__ T fg_sub(T a, T b) {
  typedef typename fg_wide<T>::type U; return (T)((U)a - (U)b);
}
template <class T> __device__ __forceinline__ T fg_mul(T a, T b) {
  typedef typename fg_wide<T>::type U; return (T)((U)a * (U)b);
}
template <class T> __device__ __forceinline__ T fg_neg(T a) {
  typedef typename fg_wide<T>::type U; return (T)((U)0 - (U)a);
}
template <class T> __device__ __forceinline__ bool fg_is_minus_one(T b) {
  return (T)-1 < (T)0 && b == (T)-1;
}
// x / 0 = x % 0 = 0; MIN / -1 = MIN (wrapping), x % -1 = 0.
template <class T> __device__ __forceinline__ T fg_div(T a, T b) {
  if (b == (T)0) return (T)0;
  if (fg_is_minus_one(b)) return fg_neg(a);
  return (T)(a / b);
}
template <class T> __device__ __forceinline__ T fg_rem(T a, T b) {
  if (b == (T)0 || fg_is_minus_one(b)) return (T)0;
  return (T)(a % b);
}
// Shift amounts are compared as unsigned: outside [0, bits) a left or logical shift gives 0
// and an arithmetic shift fills with the sign bit.
template <class T> __device__ __forceinline__ bool fg_shift_in_range(T b) {
  return (typename fg_bits<T>::u)b < (typename fg_bits<T>::u)(8 * sizeof(T));
}
template <class T> __device__ __forceinline__ T fg_shl(T a, T b) {
  typedef typename fg_wide<T>::type U;
  return fg_shift_in_range(b) ? (T)((U)a << (int)b) : (T)0;
}
template <class T> __device__ __forceinline__ T fg_shr_logical(T a, T b) {
  typedef typename fg_bits<T>::u B;
  typedef typename fg_wide<T>::type U;
  return fg_shift_in_range(b) ? (T)((U)(B)a >> (int)b) : (T)0;
}
template <class T> __device__ __forceinline__ T fg_shr_arith(T a, T b) {
  typedef typename fg_bits<T>::s S;
  const int amount = fg_shift_in_range(b) ? (int)b : (int)(8 * sizeof(T) - 1);
  return (T)((S)a >> amount);
}
template <class T> __device__ __forceinline__ T fg_max(T a, T b) { return a >= b ? a : b; }
template <class T> __device__ __forceinline__ T fg_min(T a, T b) { return a <= b ? a : b; }
template <class T> __device__ __forceinline__ T fg_iabs(T a) {
  return a < (T)0 ? fg_neg(a) : a;
}
template <class T> __device__ __forceinline__ T fg_isign(T a) {
  return (T)((a > (T)0) - (a < (T)0));
}
template <class T> __device__ __forceinline__ int fg_popcount(T a) {
  typedef typename fg_bits<T>::u B;
  return sizeof(T) == 8 ? __popcll((unsigned long long)(B)a) : __popc((unsigned int)(B)a);
}

// Floats: IEEE maximum and minimum (NaN wins, -0 < +0), sign keeping zeros' signs and NaN.
__device__ __forceinline__ bool fg_signbit(float x) { return __float_as_int(x) < 0; }
__device__ __forceinline__ bool fg_signbit(double x) { return __double_as_longlong(x) < 0; }
template <class F> __device__ __forceinline__ F fg_fmax(F a, F b) {
  if (a != a) return a;
  if (b != b) return b;
  if (a > b) return a;
  if (b > a) return b;
  return fg_signbit(a) ? b : a;
}
template <class F> __device__ __forceinline__ F fg_fmin(F a, F b) {
  if (a != a) return a;
  if (b != b) return b;
  if (a < b) return a;
  if (b < a) return b;
  return fg_signbit(a) ? a : b;
}
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
// From Ampere on, one instruction of the same rule each for float (its NaN is the canonical
// one): a max fold (softmax's) is as short a chain as a sum.
__device__ __forceinline__ float fg_fmax(float a, float b) {
  float m;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(m) : "f"(a), "f"(b));
  return m;
}
__device__ __forceinline__ float fg_fmin(float a, float b) {
  float m;
  asm("min.NaN.f32 %0, %1, %2;" : "=f"(m) : "f"(a), "f"(b));
  return m;
}
#endif
// Negation flips the sign bit, a NaN's too, as IEEE 754's negate, LLVM's fneg and the host
// do: PTX's neg gives "an unspecified NaN" for a NaN, and on an H200 a zero signed from a
// negated NaN (arctan(inf + nan j)'s imaginary part) came out of the other sign.
__device__ __forceinline__ float fg_fneg(float x) {
  return __uint_as_float(__float_as_uint(x) ^ 0x80000000u);
}
__device__ __forceinline__ double fg_fneg(double x) {
  return __longlong_as_double(__double_as_longlong(x) ^ (long long)0x8000000000000000ull);
}
template <class F> __device__ __forceinline__ F fg_fsign(F x) {
  return x > (F)0 ? (F)1 : (x < (F)0 ? (F)-1 : x);
}
template <class F> __device__ __forceinline__ bool fg_isfinite(F x) { return x - x == (F)0; }
// log |Gamma(x)|, -inf at -inf as the reference (SciPy's gammaln) gives; C's lgamma gives +inf.
// A float's in double, rounded once, as the other backends take it: CUDA's lgammaf was 3 ulp
// off at 73.8.
__device__ __forceinline__ float fg_lgamma(float x) {
  return x == -1.0f / 0.0f ? x : (float)lgamma((double)x);
}
__device__ __forceinline__ double fg_lgamma(double x) { return x == -1.0 / 0.0 ? x : lgamma(x); }
// x^0 and 1^y are 1 whatever the other operand, a signaling NaN too (the C library's pow
// gives NaN for one; IEEE 754 leaves it to the implementation).
__device__ __forceinline__ float fg_pow(float x, float y) {
  return y == 0.0f || x == 1.0f ? 1.0f : powf(x, y);
}
__device__ __forceinline__ double fg_pow(double x, double y) {
  return y == 0.0 || x == 1.0 ? 1.0 : pow(x, y);
}
// Round half away from zero, and float -> int conversions that saturate (NaN -> 0).
__device__ __forceinline__ float fg_round_away(float x) { return roundf(x); }
__device__ __forceinline__ double fg_round_away(double x) { return round(x); }
template <class T, class F> __device__ __forceinline__ T fg_to_int(F x, T lowest, T highest) {
  if (x != x) return (T)0;
  if (x <= (F)lowest) return lowest;
  if (x >= (F)highest) return highest;
  return (T)x;
}
template <class T, class S> __device__ __forceinline__ T fg_bitcast(S s) {
  union { S from; T to; } u;
  u.from = s;
  return u.to;
}

// float16 and bfloat16: bits in memory, float in registers. A NaN keeps its bits through a
// load and a store (a copy, a bitcast): quieting it there changed a signaling NaN's pattern.
__device__ __forceinline__ float fg_from_f16(unsigned short h) {
  const unsigned int sign = (unsigned int)(h & 0x8000u) << 16;
  const unsigned int exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
  if (exponent == 0x1fu) return __uint_as_float(sign | 0x7f800000u | (mantissa << 13));
  if (exponent != 0) return __uint_as_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
  const float tiny = (float)mantissa * 5.9604644775390625e-8f;  // mantissa * 2^-24
  return sign ? -tiny : tiny;
}
__device__ __forceinline__ unsigned short fg_to_f16(float f) {  // round to nearest even
  const unsigned int x = __float_as_uint(f);
  const unsigned int sign = (x >> 16) & 0x8000u, magnitude = x & 0x7fffffffu;
  if (magnitude > 0x7f800000u) {  // NaN: its top payload bits, kept a NaN where they are 0
    const unsigned int payload = (magnitude >> 13) & 0x3ffu;
    return (unsigned short)(sign | 0x7c00u | (payload != 0 ? payload : 1u));
  }
  if (magnitude >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u);  // >= 65520: inf
  if (magnitude < 0x38800000u) {  // below 2^-14: a multiple of 2^-24, scaled exactly
    return (unsigned short)(sign | (unsigned int)rintf(__uint_as_float(magnitude) * 16777216.0f));
  }
  const unsigned int rounded = magnitude + 0xfffu + ((magnitude >> 13) & 1u);
  return (unsigned short)(sign | ((rounded >> 13) - (112u << 10)));
}
__device__ __forceinline__ float fg_from_bf16(unsigned short h) {
  return __uint_as_float((unsigned int)h << 16);
}
__device__ __forceinline__ unsigned short fg_to_bf16(float f) {  // round to nearest even
  const unsigned int x = __float_as_uint(f);
  if (f != f) {  // NaN: its top payload bits, kept a NaN where they are 0
    const unsigned short h = (unsigned short)(x >> 16);
    return (h & 0x7fu) != 0 ? h : (unsigned short)(h | 64u);
  }
  return (unsigned short)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}
__device__ __forceinline__ float fg_round_f16(float x) { return fg_from_f16(fg_to_f16(x)); }
__device__ __forceinline__ float fg_round_bf16(float x) { return fg_from_bf16(fg_to_bf16(x)); }
// float64 -> float32 rounding to odd, so that a second rounding (to float16) is correct.
__device__ __forceinline__ float fg_f64_to_f32_odd(double x) {
  const float nearest = (float)x;
  const double back = (double)nearest;
  unsigned int bits = __float_as_uint(nearest);
  if (fabs(back) > fabs(x)) bits -= 1u;
  if (back < x || back > x) bits |= 1u;
  return __uint_as_float(bits);
}
// The value `delta` lanes down the warp (a lane past the warp's end gets its own back), for
// every register type: narrow ones travel as int.
template <class T> __device__ __forceinline__ T fg_shfl_down(T v, unsigned int delta) {
  if constexpr (sizeof(T) < 4) {
    return (T)__shfl_down_sync(0xffffffffu, (int)v, delta);
  } else {
    return __shfl_down_sync(0xffffffffu, v, delta);
  }
}
// A region's kernel (one block running a cond, while or scan: see regions.py) copies buffers
// and multiplies small matrices with all of its threads, each taking elements t, t + blockDim,
// ...; the caller's __syncthreads() orders the results before the next step.
template <class T> __device__ void fg_block_copy(T* to, const T* from, long long count) {
  for (long long e = threadIdx.x; e < count; e += blockDim.x) to[e] = from[e];
}
// out[b] = op(lhs[b]) @ op(rhs[b]), row-major; op transposes an operand stored (k, m) or (n, k).
// Elements of type T are read as A (`in`), summed in A and stored rounded (`out`): halves sum in
// float. Neighbouring threads take neighbouring columns: they read one element of lhs together
// and neighbouring elements of rhs.
template <class T> __device__ __forceinline__ T fg_same(T x) { return x; }
// result = product, or alpha * product + beta * addend where there is an addend (which may
// be the result's own memory: each element is read by the thread that writes it).
template <class T, class A, A (*in)(T), T (*out)(A)> __device__ void fg_block_gemm(
    const T* lhs, const T* rhs, T* result, long long batch, long long m, long long n,
    long long k, bool lhs_transposed, bool rhs_transposed, const T* addend, A alpha, A beta) {
  for (long long e = threadIdx.x; e < batch * m * n; e += blockDim.x) {
    const long long b = e / (m * n), i = e / n % m, j = e % n;
    const T* a = lhs + b * m * k;
    const T* w = rhs + b * k * n;
    const long long a_row = lhs_transposed ? 1 : k, a_col = lhs_transposed ? m : 1;
    const long long w_row = rhs_transposed ? 1 : n, w_col = rhs_transposed ? k : 1;
    A sum = 0;
    for (long long p = 0; p < k; ++p) {
      sum += in(a[i * a_row + p * a_col]) * in(w[p * w_row + j * w_col]);
    }
    result[e] = out(addend ? alpha * sum + beta * in(addend[e]) : sum);
  }
}
// ---- end of prelude ---------------------------------------------------------------------
"""
