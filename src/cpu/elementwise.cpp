// Element-wise kernels: one functor per op, instantiated into a contiguous loop and a strided
// odometer loop, so the op is chosen once per call and never inside the element loop.
#include "cpu/elementwise.h"

#include <cmath>
#include <type_traits>
#include <vector>

#include "grux/error.h"

namespace grux::cpu {

namespace {

// Signed overflow is undefined behaviour in C++; going through uint64_t gives the
// two's-complement wrap-around that NumPy and PyTorch produce for int64.
inline int64_t wrap_add(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
}
inline int64_t wrap_sub(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) - static_cast<uint64_t>(b));
}
inline int64_t wrap_mul(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
}

template <typename T>
struct Add {
  T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>)
      return wrap_add(a, b);
    else
      return a + b;
  }
};
template <typename T>
struct Sub {
  T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>)
      return wrap_sub(a, b);
    else
      return a - b;
  }
};
template <typename T>
struct Mul {
  T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>)
      return wrap_mul(a, b);
    else
      return a * b;
  }
};
template <typename T>
struct Div {
  T operator()(T a, T b) const { return a / b; }
};
// NaN wins in maximum / minimum (NumPy's maximum, torch.maximum); `a != a` is the NaN test
// that still vectorises.
template <typename T>
struct Maximum {
  T operator()(T a, T b) const { return (a > b || a != a) ? a : b; }
};
template <typename T>
struct Minimum {
  T operator()(T a, T b) const { return (a < b || a != a) ? a : b; }
};
template <typename T>
struct Pow {
  T operator()(T a, T b) const { return std::pow(a, b); }
};

template <typename T>
struct Neg {
  T operator()(T a) const {
    if constexpr (std::is_integral_v<T>)
      return wrap_sub(0, a);
    else
      return -a;
  }
};
template <typename T>
struct Abs {
  T operator()(T a) const {
    if constexpr (std::is_integral_v<T>)
      return a < 0 ? wrap_sub(0, a) : a;
    else
      return std::abs(a);
  }
};
// Written so that NaN passes through (a < 0 is false for NaN), as torch.relu does.
template <typename T>
struct Relu {
  T operator()(T a) const { return a < T(0) ? T(0) : a; }
};
template <typename T>
struct Exp {
  T operator()(T a) const { return std::exp(a); }
};
template <typename T>
struct Log {
  T operator()(T a) const { return std::log(a); }
};
// exp(-a) overflows to inf for very negative a, giving 1 / inf = 0: the correct limit.
template <typename T>
struct Sigmoid {
  T operator()(T a) const { return T(1) / (T(1) + std::exp(-a)); }
};
template <typename T>
struct Tanh {
  T operator()(T a) const { return std::tanh(a); }
};
template <typename T>
struct Sqrt {
  T operator()(T a) const { return std::sqrt(a); }
};

// Calls fn(functor) with the functor of `op` for element type T.
template <typename T, typename Fn>
void with_binary(BinaryOp op, Fn fn) {
  switch (op) {
    case BinaryOp::add:
      return fn(Add<T>{});
    case BinaryOp::sub:
      return fn(Sub<T>{});
    case BinaryOp::mul:
      return fn(Mul<T>{});
    case BinaryOp::div:
      if constexpr (!std::is_integral_v<T>) return fn(Div<T>{});
      break;
    case BinaryOp::maximum:
      return fn(Maximum<T>{});
    case BinaryOp::minimum:
      return fn(Minimum<T>{});
    case BinaryOp::pow:
      if constexpr (!std::is_integral_v<T>) return fn(Pow<T>{});
      break;
  }
  GRUX_ASSERT(false && "binary op not available for this dtype");
}

template <typename T, typename Fn>
void with_unary(UnaryOp op, Fn fn) {
  switch (op) {
    case UnaryOp::neg:
      return fn(Neg<T>{});
    case UnaryOp::abs:
      return fn(Abs<T>{});
    case UnaryOp::relu:
      return fn(Relu<T>{});
    default:
      break;
  }
  if constexpr (!std::is_integral_v<T>) {
    switch (op) {
      case UnaryOp::exp:
        return fn(Exp<T>{});
      case UnaryOp::log:
        return fn(Log<T>{});
      case UnaryOp::sigmoid:
        return fn(Sigmoid<T>{});
      case UnaryOp::tanh:
        return fn(Tanh<T>{});
      case UnaryOp::sqrt:
        return fn(Sqrt<T>{});
      default:
        break;
    }
  }
  GRUX_ASSERT(false && "unary op not available for this dtype");
}

// Visits the outer rank-1 dimensions of `shape` in row-major order, calling
// inner(a_offset, b_offset, dst_offset) once per innermost row. Offsets move by adding and
// subtracting strides (an odometer), never by dividing a flat index.
template <typename Inner>
void for_each_row(int64_t rank, const int64_t* shape, const int64_t* a_strides,
                  const int64_t* b_strides, Inner inner) {
  const int64_t outer_rank = rank - 1;
  const int64_t row = shape[rank - 1];
  std::vector<int64_t> index(outer_rank, 0);
  int64_t a_off = 0, b_off = 0, dst_off = 0;
  while (true) {
    inner(a_off, b_off, dst_off);
    dst_off += row;
    int64_t d = outer_rank - 1;
    for (; d >= 0; --d) {
      if (++index[d] < shape[d]) {
        a_off += a_strides[d];
        b_off += b_strides[d];
        break;
      }
      index[d] = 0;
      a_off -= a_strides[d] * (shape[d] - 1);
      b_off -= b_strides[d] * (shape[d] - 1);
    }
    if (d < 0) return;
  }
}

}  // namespace

bool binary_supports_i64(BinaryOp op) {
  return op != BinaryOp::div && op != BinaryOp::pow;
}
bool unary_supports_i64(UnaryOp op) {
  return op == UnaryOp::neg || op == UnaryOp::abs || op == UnaryOp::relu;
}

const char* binary_op_name(BinaryOp op) {
  switch (op) {
    case BinaryOp::add:
      return "add";
    case BinaryOp::sub:
      return "sub";
    case BinaryOp::mul:
      return "mul";
    case BinaryOp::div:
      return "div";
    case BinaryOp::maximum:
      return "maximum";
    case BinaryOp::minimum:
      return "minimum";
    case BinaryOp::pow:
      return "pow";
  }
  GRUX_ASSERT(false);
}

const char* unary_op_name(UnaryOp op) {
  switch (op) {
    case UnaryOp::neg:
      return "neg";
    case UnaryOp::exp:
      return "exp";
    case UnaryOp::log:
      return "log";
    case UnaryOp::sigmoid:
      return "sigmoid";
    case UnaryOp::tanh:
      return "tanh";
    case UnaryOp::relu:
      return "relu";
    case UnaryOp::abs:
      return "abs";
    case UnaryOp::sqrt:
      return "sqrt";
  }
  GRUX_ASSERT(false);
}

template <typename T>
void binary_contiguous(BinaryOp op, int64_t n, const T* a, const T* b, T* dst) {
  with_binary<T>(op, [&](auto f) {
    for (int64_t i = 0; i < n; ++i) dst[i] = f(a[i], b[i]);
  });
}

template <typename T>
void binary_strided(BinaryOp op, int64_t rank, const int64_t* shape, const T* a,
                    const int64_t* a_strides, const T* b, const int64_t* b_strides, T* dst) {
  GRUX_ASSERT(rank >= 1);
  const int64_t n = shape[rank - 1];
  const int64_t as = a_strides[rank - 1], bs = b_strides[rank - 1];
  with_binary<T>(op, [&](auto f) {
    // The common inner patterns get their own loops so that they vectorise: both rows
    // contiguous, or one side a broadcast scalar (bias add, scaling).
    for_each_row(rank, shape, a_strides, b_strides, [&](int64_t ao, int64_t bo, int64_t d0) {
      const T* ap = a + ao;
      const T* bp = b + bo;
      T* dp = dst + d0;
      if (as == 1 && bs == 1) {
        for (int64_t i = 0; i < n; ++i) dp[i] = f(ap[i], bp[i]);
      } else if (as == 1 && bs == 0) {
        const T bv = *bp;
        for (int64_t i = 0; i < n; ++i) dp[i] = f(ap[i], bv);
      } else if (as == 0 && bs == 1) {
        const T av = *ap;
        for (int64_t i = 0; i < n; ++i) dp[i] = f(av, bp[i]);
      } else {
        for (int64_t i = 0; i < n; ++i) dp[i] = f(ap[i * as], bp[i * bs]);
      }
    });
  });
}

template <typename T>
void unary_contiguous(UnaryOp op, int64_t n, const T* src, T* dst) {
  with_unary<T>(op, [&](auto f) {
    for (int64_t i = 0; i < n; ++i) dst[i] = f(src[i]);
  });
}

template <typename T>
void unary_strided(UnaryOp op, int64_t rank, const int64_t* shape, const T* src,
                   const int64_t* src_strides, T* dst) {
  GRUX_ASSERT(rank >= 1);
  const int64_t n = shape[rank - 1];
  const int64_t ss = src_strides[rank - 1];
  with_unary<T>(op, [&](auto f) {
    for_each_row(rank, shape, src_strides, src_strides, [&](int64_t so, int64_t, int64_t d0) {
      const T* sp = src + so;
      T* dp = dst + d0;
      if (ss == 1) {
        for (int64_t i = 0; i < n; ++i) dp[i] = f(sp[i]);
      } else {
        for (int64_t i = 0; i < n; ++i) dp[i] = f(sp[i * ss]);
      }
    });
  });
}

#define GRUX_INSTANTIATE(T)                                                                    \
  template void binary_contiguous<T>(BinaryOp, int64_t, const T*, const T*, T*);               \
  template void binary_strided<T>(BinaryOp, int64_t, const int64_t*, const T*, const int64_t*, \
                                  const T*, const int64_t*, T*);                               \
  template void unary_contiguous<T>(UnaryOp, int64_t, const T*, T*);                           \
  template void unary_strided<T>(UnaryOp, int64_t, const int64_t*, const T*, const int64_t*, T*);
GRUX_INSTANTIATE(float)
GRUX_INSTANTIATE(double)
GRUX_INSTANTIATE(int64_t)
#undef GRUX_INSTANTIATE

}  // namespace grux::cpu
