// The tensor core: dtype, device, shape, strides and shared storage. Views (slice, select,
// transpose, reshape where strides allow) share storage with their base; clone() copies.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "grux/error.h"
#include "grux/export.h"

namespace grux GRUX_API {

enum class DType { f32, f64, i64 };

// Size in bytes of one element; name as printed in messages ("f32", "f64", "i64").
size_t dtype_size(DType t);
const char* dtype_name(DType t);

template <typename T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::f32;
}
template <>
constexpr DType dtype_of<double>() {
  return DType::f64;
}
template <>
constexpr DType dtype_of<int64_t>() {
  return DType::i64;
}

// Where a tensor's storage lives. Only CPU exists in this build; the tag is carried so that
// mixing devices is caught at the API boundary with a message naming both.
struct Device {
  enum class Kind { cpu, cuda };
  Kind kind = Kind::cpu;
  int index = 0;
  bool operator==(const Device&) const = default;
  std::string str() const;  // "cpu", "cuda:0"
  static Device cpu() { return {}; }
};

using Shape = std::vector<int64_t>;
std::string shape_str(const Shape& s);  // "(2, 3, 4)"
// Row-major strides (in elements) of a contiguous tensor of this shape.
Shape contiguous_strides(const Shape& shape);

// A block of bytes shared by a tensor and all of its views: grux's own (64-byte aligned), or
// memory someone else owns (Tensor::from_blob).
class Storage {
 public:
  Storage(size_t nbytes, Device device);
  // Memory owned elsewhere, on the CPU: `owner` is held (and released) with the storage; the
  // bytes are never freed by it. A null owner: the caller keeps the memory valid meanwhile.
  Storage(void* data, size_t nbytes, std::shared_ptr<void> owner);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  std::shared_ptr<void> owner_;  // what keeps memory owned elsewhere alive, if anything
  bool owned_ = false;           // grux's own block (freed with the storage)
};

class Tensor {
 public:
  Tensor() = default;  // undefined tensor: defined() == false

  // New contiguous tensors. Sizes must be >= 0; the total size is checked for overflow.
  static Tensor empty(const Shape& shape, DType dtype, Device device = Device::cpu());
  static Tensor zeros(const Shape& shape, DType dtype, Device device = Device::cpu());
  static Tensor full(const Shape& shape, double value, DType dtype, Device device = Device::cpu());
  // Copies `values` (row-major) into a new tensor of `shape`; values.size() must match.
  template <typename T>
  static Tensor from_vector(const Shape& shape, const std::vector<T>& values);
  // A tensor over memory the caller owns, without a copy (a NumPy array, a torch tensor):
  // data points to element (0, ..., 0), strides in elements (>= 0), data aligned to the
  // element size. `owner` is kept alive while any tensor views the memory; the caller keeps
  // the memory valid until then (with a null owner, by its own means). The memory is never
  // freed through the tensor. Writes through the tensor write the caller's memory.
  static Tensor from_blob(void* data, const Shape& shape, const Shape& strides, DType dtype,
                          std::shared_ptr<void> owner);

  bool defined() const { return storage_ != nullptr; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }  // in elements
  int64_t dim() const { return static_cast<int64_t>(shape_.size()); }
  int64_t size(int64_t d) const;  // negative d counts from the end
  int64_t stride(int64_t d) const;
  int64_t numel() const;
  int64_t offset() const { return offset_; }  // in elements, into storage
  bool is_contiguous() const;
  // True when both tensors view the same storage block.
  bool shares_storage(const Tensor& other) const { return storage_ && storage_ == other.storage_; }

  // Typed pointer to the first element; throws if T does not match dtype(). Const means
  // const: a const tensor gives read-only pointers. (A Tensor is a handle to shared storage:
  // a non-const copy of the handle writes to the same elements, as with std::shared_ptr.)
  template <typename T>
  const T* data() const;
  template <typename T>
  T* data();
  const void* raw_data() const;
  void* raw_data();

  // Views (share storage).
  Tensor slice(int64_t d, int64_t start, int64_t stop, int64_t step = 1) const;  // [start, stop)
  Tensor select(int64_t d, int64_t index) const;  // removes dimension d
  Tensor transpose(int64_t d0, int64_t d1) const;
  // Dimension i of the result is dimension dims[i] of this; dims is a permutation of
  // [0, dim()) (negative entries count from the end).
  Tensor permute(const std::vector<int64_t>& dims) const;
  Tensor unsqueeze(int64_t d) const;
  Tensor squeeze(int64_t d) const;  // d must have size 1
  // View with a new shape (one entry may be -1); throws if the strides do not allow a view.
  Tensor view(const Shape& shape) const;
  // A view when strides allow, otherwise a contiguous copy (like torch.reshape).
  Tensor reshape(const Shape& shape) const;

  // Copies.
  Tensor clone() const;       // deep copy, contiguous
  Tensor contiguous() const;  // *this if already contiguous, else a copy
  Tensor to(DType dtype) const;
  Tensor to(Device device) const;
  void copy_from(const Tensor& src);  // same shape and dtype; src may be strided
  void fill(double value);

  // Element access by index list (slow; for tests and small code).
  double item(std::initializer_list<int64_t> index) const;
  double item() const;  // numel() must be 1
  void set(std::initializer_list<int64_t> index, double value);
  // Flat element i in row-major logical order, converted to double.
  double at_flat(int64_t i) const;

 private:
  std::shared_ptr<Storage> storage_;
  int64_t offset_ = 0;
  Shape shape_, strides_;
  DType dtype_ = DType::f32;
  Device device_;
  int64_t element_offset(const int64_t* index) const;
  // Test-only access (src/core/tensor_test_access.h): lets tests tag a CPU tensor with another
  // device to exercise the device checks in a build that has no other device.
  friend struct TensorTestAccess;
};

// API-boundary checks: throw grux::Error naming the op and the argument.
// check_defined: `name` must be a defined tensor.
void check_defined(const char* op, const char* name, const Tensor& t);
// check_same_device / check_same_dtype: `b` must match `a` (both named).
void check_same_device(const char* op, const char* a_name, const Tensor& a, const char* b_name,
                       const Tensor& b);
void check_same_dtype(const char* op, const char* a_name, const Tensor& a, const char* b_name,
                      const Tensor& b);
// check_shape: t.shape() must equal `expected`.
void check_shape(const char* op, const char* name, const Tensor& t, const Shape& expected);
// check_dtype: t.dtype() must be `expected`.
void check_dtype(const char* op, const char* name, const Tensor& t, DType expected);

// Max absolute difference over all elements (same shape; any dtypes). For tests and tools.
double max_abs_diff(const Tensor& a, const Tensor& b);

}  // namespace GRUX_API
