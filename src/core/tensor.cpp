// Tensor core: storage, views, copies, and the API-boundary checks on dtype, device and
// shape. Element loops here are generic (for setup and tests); kernels use raw pointers.
#include "grux/tensor.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <utility>

namespace grux {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32:
      return 4;
    case DType::f64:
      return 8;
    case DType::i64:
      return 8;
  }
  GRUX_ASSERT(false);
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32:
      return "f32";
    case DType::f64:
      return "f64";
    case DType::i64:
      return "i64";
  }
  GRUX_ASSERT(false);
}

std::string Device::str() const {
  return kind == Kind::cpu ? std::string("cpu") : fmt::format("cuda:{}", index);
}

std::string shape_str(const Shape& s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  if (s.size() == 1) out += ",";
  return out + ")";
}

Shape contiguous_strides(const Shape& shape) {
  Shape st(shape.size());
  int64_t acc = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    st[i] = acc;
    acc *= std::max<int64_t>(shape[i], 1);
  }
  return st;
}

namespace {
// Large blocks are kept after use and handed out again for the same (rounded) size: fresh
// large allocations come from mmap as untouched pages, and faulting them in on every call
// costs about a tenth of a GRU forward. Bounded; thread-safe.
class BlockCache {
 public:
  static constexpr size_t kMinBytes = size_t(1) << 20;  // smaller blocks: plain malloc
  static constexpr size_t kMaxCached = size_t(1) << 30;

  static size_t rounded(size_t nbytes) {
    const size_t r = nbytes < kMinBytes ? 64 : size_t(1) << 16;
    return (std::max<size_t>(nbytes, 1) + r - 1) / r * r;
  }
  void* take(size_t bytes) {
    if (bytes >= kMinBytes) {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = free_.find(bytes);
      if (it != free_.end()) {
        void* p = it->second;
        free_.erase(it);
        cached_ -= bytes;
        return p;
      }
    }
    return std::aligned_alloc(64, bytes);
  }
  // The block just freed is the likeliest to be asked for again (a loop allocating the same
  // shapes): when the cache is full, larger blocks cached earlier make room for it.
  void give(void* p, size_t bytes) {
    if (bytes >= kMinBytes && bytes <= kMaxCached) {
      std::vector<void*> evicted;
      {
        std::lock_guard<std::mutex> lock(mu_);
        while (cached_ + bytes > kMaxCached && !free_.empty()) {
          auto largest = std::prev(free_.end());
          if (largest->first < bytes) break;  // only larger ones give way
          evicted.push_back(largest->second);
          cached_ -= largest->first;
          free_.erase(largest);
        }
        if (cached_ + bytes <= kMaxCached) {
          free_.emplace(bytes, p);
          cached_ += bytes;
          p = nullptr;
        }
      }
      for (void* q : evicted) std::free(q);
      if (!p) return;
    }
    std::free(p);
  }

 private:
  std::mutex mu_;
  std::multimap<size_t, void*> free_;
  size_t cached_ = 0;
};
BlockCache& block_cache() {
  static BlockCache* cache = new BlockCache;  // never destroyed: storages may outlive statics
  return *cache;
}
}  // namespace

Storage::Storage(size_t nbytes, Device device) : nbytes_(nbytes), device_(device), owned_(true) {
  if (device.kind != Device::Kind::cpu)
    throw Error(fmt::format("device {} is not available in this build", device.str()));
  data_ = block_cache().take(BlockCache::rounded(nbytes));
  if (!data_) throw Error(fmt::format("out of memory allocating {} bytes", nbytes));
}

Storage::Storage(void* data, size_t nbytes, std::shared_ptr<void> owner)
    : data_(data), nbytes_(nbytes), owner_(std::move(owner)) {}

Storage::~Storage() {
  if (owned_) block_cache().give(data_, BlockCache::rounded(nbytes_));
}

namespace {

int64_t checked_numel(const Shape& shape, DType dtype) {
  int64_t n = 1;
  for (int64_t s : shape) {
    if (s < 0) throw Error(fmt::format("invalid shape {}: sizes must be >= 0", shape_str(shape)));
    if (__builtin_mul_overflow(n, s, &n))
      throw Error(fmt::format("shape {} is too large", shape_str(shape)));
  }
  int64_t bytes;
  if (__builtin_mul_overflow(n, static_cast<int64_t>(dtype_size(dtype)), &bytes))
    throw Error(fmt::format("shape {} is too large", shape_str(shape)));
  return n;
}

int64_t wrap_dim(int64_t d, int64_t ndim, const char* what) {
  int64_t w = d < 0 ? d + ndim : d;
  if (w < 0 || w >= ndim)
    throw Error(
        fmt::format("{}: dimension {} out of range for a tensor of rank {}", what, d, ndim));
  return w;
}

// Reads / writes element `off` (in elements from the storage start) as double.
double load(const void* base, DType t, int64_t off) {
  switch (t) {
    case DType::f32:
      return static_cast<const float*>(base)[off];
    case DType::f64:
      return static_cast<const double*>(base)[off];
    case DType::i64:
      return static_cast<double>(static_cast<const int64_t*>(base)[off]);
  }
  GRUX_ASSERT(false);
}
void store(void* base, DType t, int64_t off, double v) {
  switch (t) {
    case DType::f32:
      static_cast<float*>(base)[off] = static_cast<float>(v);
      return;
    case DType::f64:
      static_cast<double*>(base)[off] = v;
      return;
    case DType::i64:
      static_cast<int64_t*>(base)[off] = static_cast<int64_t>(v);
      return;
  }
}

// Calls fn(src_offset, dst_index) for every element of `t` in row-major order.
template <typename Fn>
void for_each_offset(const Tensor& t, Fn fn) {
  const int64_t n = t.numel();
  if (n == 0) return;
  const int64_t nd = t.dim();
  std::vector<int64_t> idx(nd, 0);
  int64_t off = t.offset();
  for (int64_t i = 0; i < n; ++i) {
    fn(off, i);
    for (int64_t d = nd - 1; d >= 0; --d) {
      if (++idx[d] < t.shape()[d]) {
        off += t.strides()[d];
        break;
      }
      off -= t.strides()[d] * (t.shape()[d] - 1);
      idx[d] = 0;
    }
  }
}

}  // namespace

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  const int64_t n = checked_numel(shape, dtype);
  Tensor t;
  t.storage_ = std::make_shared<Storage>(static_cast<size_t>(n) * dtype_size(dtype), device);
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  t.dtype_ = dtype;
  t.device_ = device;
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  std::memset(t.storage_->data(), 0, t.storage_->nbytes());
  return t;
}

Tensor Tensor::full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.fill(value);
  return t;
}

template <typename T>
Tensor Tensor::from_vector(const Shape& shape, const std::vector<T>& values) {
  Tensor t = empty(shape, dtype_of<T>());
  if (static_cast<int64_t>(values.size()) != t.numel())
    throw Error(fmt::format("from_vector: {} values given for shape {} ({} elements)",
                            values.size(), shape_str(shape), t.numel()));
  if (!values.empty()) std::memcpy(t.raw_data(), values.data(), values.size() * sizeof(T));
  return t;
}
template Tensor Tensor::from_vector<float>(const Shape&, const std::vector<float>&);
template Tensor Tensor::from_vector<double>(const Shape&, const std::vector<double>&);
template Tensor Tensor::from_vector<int64_t>(const Shape&, const std::vector<int64_t>&);

Tensor Tensor::from_blob(void* data, const Shape& shape, const Shape& strides, DType dtype,
                         std::shared_ptr<void> owner) {
  const int64_t n = checked_numel(shape, dtype);
  if (strides.size() != shape.size())
    throw Error(
        fmt::format("from_blob: {} strides given for shape {}", strides.size(), shape_str(shape)));
  const size_t esize = dtype_size(dtype);
  if (!data && n > 0) throw Error("from_blob: null data pointer");
  if (reinterpret_cast<uintptr_t>(data) % esize != 0)
    throw Error(fmt::format("from_blob: data not aligned to its element size ({} bytes)", esize));
  // Elements spanned: 1 + sum (size - 1) * stride, checked for overflow.
  int64_t extent = n > 0 ? 1 : 0;
  for (size_t d = 0; d < shape.size() && n > 0; ++d) {
    if (strides[d] < 0)
      throw Error(fmt::format("from_blob: negative stride {} in dimension {}", strides[d], d));
    int64_t span;
    if (__builtin_mul_overflow(shape[d] - 1, strides[d], &span) ||
        __builtin_add_overflow(extent, span, &extent))
      throw Error(fmt::format("from_blob: strides too large for shape {}", shape_str(shape)));
  }
  Tensor t;
  t.storage_ =
      std::make_shared<Storage>(data, static_cast<size_t>(extent) * esize, std::move(owner));
  t.shape_ = shape;
  t.strides_ = strides;
  t.dtype_ = dtype;
  return t;
}

int64_t Tensor::size(int64_t d) const {
  return shape_[wrap_dim(d, dim(), "size")];
}
int64_t Tensor::stride(int64_t d) const {
  return strides_[wrap_dim(d, dim(), "stride")];
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t s : shape_) n *= s;
  return n;
}

bool Tensor::is_contiguous() const {
  int64_t acc = 1;
  for (size_t i = shape_.size(); i-- > 0;) {
    if (shape_[i] == 1) continue;
    if (shape_[i] == 0) return true;
    if (strides_[i] != acc) return false;
    acc *= shape_[i];
  }
  return true;
}

const void* Tensor::raw_data() const {
  GRUX_CHECK(defined(), "data access on an undefined tensor");
  return static_cast<char*>(storage_->data()) + offset_ * static_cast<int64_t>(dtype_size(dtype_));
}
void* Tensor::raw_data() {
  return const_cast<void*>(std::as_const(*this).raw_data());
}

template <typename T>
const T* Tensor::data() const {
  if (dtype_of<T>() != dtype_)
    throw Error(fmt::format("tensor has dtype {}, accessed as {}", dtype_name(dtype_),
                            dtype_name(dtype_of<T>())));
  return static_cast<const T*>(raw_data());
}
template <typename T>
T* Tensor::data() {
  return const_cast<T*>(std::as_const(*this).data<T>());
}
template const float* Tensor::data<float>() const;
template const double* Tensor::data<double>() const;
template const int64_t* Tensor::data<int64_t>() const;
template float* Tensor::data<float>();
template double* Tensor::data<double>();
template int64_t* Tensor::data<int64_t>();

Tensor Tensor::slice(int64_t d, int64_t start, int64_t stop, int64_t step) const {
  d = wrap_dim(d, dim(), "slice");
  const int64_t n = shape_[d];
  if (step < 1) throw Error(fmt::format("slice: step must be >= 1, got {}", step));
  if (start < 0) start += n;
  if (stop < 0) stop += n;
  start = std::clamp<int64_t>(start, 0, n);
  stop = std::clamp<int64_t>(stop, start, n);
  Tensor v = *this;
  v.offset_ += start * strides_[d];
  v.shape_[d] = (stop - start + step - 1) / step;
  v.strides_[d] *= step;
  return v;
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  d = wrap_dim(d, dim(), "select");
  const int64_t n = shape_[d];
  if (index < -n || index >= n)
    throw Error(
        fmt::format("select: index {} out of range for dimension {} of size {}", index, d, n));
  if (index < 0) index += n;
  Tensor v = *this;
  v.offset_ += index * strides_[d];
  v.shape_.erase(v.shape_.begin() + d);
  v.strides_.erase(v.strides_.begin() + d);
  return v;
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  d0 = wrap_dim(d0, dim(), "transpose");
  d1 = wrap_dim(d1, dim(), "transpose");
  Tensor v = *this;
  std::swap(v.shape_[d0], v.shape_[d1]);
  std::swap(v.strides_[d0], v.strides_[d1]);
  return v;
}

Tensor Tensor::permute(const std::vector<int64_t>& dims) const {
  if (static_cast<int64_t>(dims.size()) != dim())
    throw Error(
        fmt::format("permute: {} dimensions given for a tensor of rank {}", dims.size(), dim()));
  Tensor v = *this;
  std::vector<bool> seen(dim(), false);
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t d = wrap_dim(dims[i], dim(), "permute");
    if (seen[d]) throw Error(fmt::format("permute: dimension {} appears twice", d));
    seen[d] = true;
    v.shape_[i] = shape_[d];
    v.strides_[i] = strides_[d];
  }
  return v;
}

Tensor Tensor::unsqueeze(int64_t d) const {
  d = wrap_dim(d, dim() + 1, "unsqueeze");
  Tensor v = *this;
  const int64_t st = d < dim() ? strides_[d] * shape_[d] : 1;
  v.shape_.insert(v.shape_.begin() + d, 1);
  v.strides_.insert(v.strides_.begin() + d, st);
  return v;
}

Tensor Tensor::squeeze(int64_t d) const {
  d = wrap_dim(d, dim(), "squeeze");
  if (shape_[d] != 1)
    throw Error(fmt::format("squeeze: dimension {} has size {}, expected 1", d, shape_[d]));
  Tensor v = *this;
  v.shape_.erase(v.shape_.begin() + d);
  v.strides_.erase(v.strides_.begin() + d);
  return v;
}

namespace {
Shape infer_shape(const Shape& requested, int64_t numel, const Shape& from) {
  Shape s = requested;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      if (infer >= 0) throw Error("reshape: only one dimension may be -1");
      infer = static_cast<int64_t>(i);
    } else if (s[i] < 0) {
      throw Error(fmt::format("reshape: invalid size {} in {}", s[i], shape_str(requested)));
    } else {
      known *= s[i];
    }
  }
  if (infer >= 0) {
    if (known == 0 || numel % known != 0)
      throw Error(
          fmt::format("reshape: cannot reshape {} into {}", shape_str(from), shape_str(requested)));
    s[infer] = numel / known;
    known *= s[infer];
  }
  if (known != numel)
    throw Error(fmt::format("reshape: cannot reshape {} ({} elements) into {}", shape_str(from),
                            numel, shape_str(requested)));
  return s;
}

// Strides for viewing (shape, strides) as new_shape without copying, if possible
// (the algorithm of numpy's _attempt_nocopy_reshape: match runs of merged dimensions).
bool view_strides(const Shape& shape, const Shape& strides, const Shape& new_shape, Shape& out) {
  out.assign(new_shape.size(), 0);
  Shape os, ost;
  for (size_t i = 0; i < shape.size(); ++i)
    if (shape[i] != 1) os.push_back(shape[i]), ost.push_back(strides[i]);
  size_t oi = 0, oj = 1, ni = 0, nj = 1;
  const size_t on = os.size(), nn = new_shape.size();
  std::vector<size_t> nidx;
  for (size_t i = 0; i < nn; ++i)
    if (new_shape[i] != 1) nidx.push_back(i);
  const size_t nnz = nidx.size();
  while (ni < nnz && oi < on) {
    int64_t np = new_shape[nidx[ni]], op = os[oi];
    while (np != op) {
      if (np < op)
        np *= new_shape[nidx[nj++]];
      else
        op *= os[oj++];
    }
    for (size_t k = oi; k + 1 < oj; ++k)
      if (ost[k] != os[k + 1] * ost[k + 1]) return false;
    out[nidx[nj - 1]] = ost[oj - 1];
    for (size_t k = nj - 1; k > ni; --k) out[nidx[k - 1]] = out[nidx[k]] * new_shape[nidx[k]];
    ni = nj++;
    oi = oj++;
  }
  // Unit dimensions get the stride a contiguous layout would give them.
  for (size_t i = nn; i-- > 0;)
    if (new_shape[i] == 1)
      out[i] = (i + 1 < nn) ? out[i + 1] * std::max<int64_t>(new_shape[i + 1], 1) : 1;
  return true;
}
}  // namespace

Tensor Tensor::view(const Shape& shape) const {
  check_defined("view", "self", *this);
  Shape s = infer_shape(shape, numel(), shape_);
  Tensor v = *this;
  if (numel() == 0 || is_contiguous()) {
    v.shape_ = s;
    v.strides_ = contiguous_strides(s);
    return v;
  }
  Shape st;
  if (!view_strides(shape_, strides_, s, st))
    throw Error(fmt::format("view: a tensor of shape {} with strides {} cannot be viewed as {}",
                            shape_str(shape_), shape_str(strides_), shape_str(s)));
  v.shape_ = s;
  v.strides_ = st;
  return v;
}

Tensor Tensor::reshape(const Shape& shape) const {
  Shape s = infer_shape(shape, numel(), shape_);
  Shape st;
  if (numel() == 0 || is_contiguous() || view_strides(shape_, strides_, s, st)) return view(s);
  return contiguous().view(s);
}

void Tensor::copy_from(const Tensor& src) {
  check_defined("copy_from", "src", src);
  check_same_device("copy_from", "self", *this, "src", src);
  if (src.shape_ != shape_)
    throw Error(fmt::format("copy_from: source shape {} does not match destination shape {}",
                            shape_str(src.shape_), shape_str(shape_)));
  if (src.dtype_ == dtype_ && src.is_contiguous() && is_contiguous()) {
    std::memmove(raw_data(), src.raw_data(), numel() * dtype_size(dtype_));
    return;
  }
  // Gather the source into row-major order, then scatter into this (handles aliasing).
  std::vector<double> tmp(numel());
  const void* sb = src.storage_->data();
  for_each_offset(src, [&](int64_t off, int64_t i) { tmp[i] = load(sb, src.dtype_, off); });
  void* db = storage_->data();
  for_each_offset(*this, [&](int64_t off, int64_t i) { store(db, dtype_, off, tmp[i]); });
}

Tensor Tensor::clone() const {
  check_defined("clone", "self", *this);
  Tensor t = empty(shape_, dtype_, device_);
  t.copy_from(*this);
  return t;
}

Tensor Tensor::contiguous() const {
  return is_contiguous() ? *this : clone();
}

Tensor Tensor::to(DType dtype) const {
  check_defined("to", "self", *this);
  if (dtype == dtype_) return *this;
  Tensor t = empty(shape_, dtype, device_);
  void* db = t.storage_->data();
  const void* sb = storage_->data();
  for_each_offset(*this,
                  [&](int64_t off, int64_t i) { store(db, dtype, i, load(sb, dtype_, off)); });
  return t;
}

Tensor Tensor::to(Device device) const {
  check_defined("to", "self", *this);
  if (device == device_) return *this;
  throw Error(
      fmt::format("to: device {} is not available in this build (grux was built without "
                  "CUDA; only cpu exists)",
                  device.str()));
}

void Tensor::fill(double value) {
  void* db = storage_->data();
  for_each_offset(*this, [&](int64_t off, int64_t) { store(db, dtype_, off, value); });
}

int64_t Tensor::element_offset(const int64_t* index) const {
  int64_t off = offset_;
  for (int64_t d = 0; d < dim(); ++d) {
    if (index[d] < 0 || index[d] >= shape_[d])
      throw Error(
          fmt::format("index {} out of range for dimension {} of size {}", index[d], d, shape_[d]));
    off += index[d] * strides_[d];
  }
  return off;
}

double Tensor::item(std::initializer_list<int64_t> index) const {
  if (static_cast<int64_t>(index.size()) != dim())
    throw Error(fmt::format("item: {} indices for a tensor of rank {}", index.size(), dim()));
  return load(storage_->data(), dtype_, element_offset(index.begin()));
}

double Tensor::item() const {
  if (numel() != 1)
    throw Error(fmt::format("item: tensor of shape {} has {} elements, expected 1",
                            shape_str(shape_), numel()));
  std::vector<int64_t> zero(dim(), 0);
  return load(storage_->data(), dtype_, element_offset(zero.data()));
}

void Tensor::set(std::initializer_list<int64_t> index, double value) {
  if (static_cast<int64_t>(index.size()) != dim())
    throw Error(fmt::format("set: {} indices for a tensor of rank {}", index.size(), dim()));
  store(storage_->data(), dtype_, element_offset(index.begin()), value);
}

double Tensor::at_flat(int64_t i) const {
  int64_t off = offset_, rem = i;
  for (int64_t d = dim() - 1; d >= 0; --d) {
    off += (rem % shape_[d]) * strides_[d];
    rem /= shape_[d];
  }
  return load(storage_->data(), dtype_, off);
}

void check_defined(const char* op, const char* name, const Tensor& t) {
  if (!t.defined()) throw Error(fmt::format("{}: {} is undefined (expected a tensor)", op, name));
}

void check_same_device(const char* op, const char* a_name, const Tensor& a, const char* b_name,
                       const Tensor& b) {
  if (a.device() != b.device())
    throw Error(fmt::format("{}: {} is on {} but {} is on {} (expected the same device)", op,
                            b_name, b.device().str(), a_name, a.device().str()));
}

void check_same_dtype(const char* op, const char* a_name, const Tensor& a, const char* b_name,
                      const Tensor& b) {
  if (a.dtype() != b.dtype())
    throw Error(fmt::format("{}: {} has dtype {} but {} has dtype {} (expected the same dtype)", op,
                            b_name, dtype_name(b.dtype()), a_name, dtype_name(a.dtype())));
}

void check_shape(const char* op, const char* name, const Tensor& t, const Shape& expected) {
  if (t.shape() != expected)
    throw Error(fmt::format("{}: {} has shape {}, expected {}", op, name, shape_str(t.shape()),
                            shape_str(expected)));
}

void check_dtype(const char* op, const char* name, const Tensor& t, DType expected) {
  if (t.dtype() != expected)
    throw Error(fmt::format("{}: {} has dtype {}, expected {}", op, name, dtype_name(t.dtype()),
                            dtype_name(expected)));
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  GRUX_CHECK(a.shape() == b.shape(), fmt::format("max_abs_diff: shapes {} and {} differ",
                                                 shape_str(a.shape()), shape_str(b.shape())));
  double m = 0;
  for (int64_t i = 0; i < a.numel(); ++i) m = std::max(m, std::abs(a.at_flat(i) - b.at_flat(i)));
  return m;
}

}  // namespace grux
