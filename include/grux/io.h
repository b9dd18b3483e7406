// File formats: NumPy .npy (f32, f64, i64; C order) and safetensors (F32, F64, I64).
// Readers validate every size and offset against the file before allocating; writers are
// atomic (write to a temporary file in the same folder, fsync, rename).
#pragma once

#include <map>
#include <string>

#include "grux/export.h"
#include "grux/tensor.h"

namespace grux GRUX_API {

// Reads a .npy file (format versions 1.0, 2.0, 3.0). dtype must be little-endian
// float32 ('<f4'), float64 ('<f8') or int64 ('<i8'); fortran_order must be False.
// Throws grux::Error naming the path and what was wrong (truncated, bad magic,
// unsupported dtype, data size not matching the shape, ...).
Tensor read_npy(const std::string& path);
// Parses .npy bytes held in memory; `what` names the source in error messages.
Tensor parse_npy(const std::string& bytes, const std::string& what);
// The same array without reading it: the tensor views the file's pages as the program
// touches them (memory-mapped, copy on write: writing to the tensor never changes the file),
// with read_npy's checks. Falls back to read_npy's copy for what cannot be mapped. The file
// must not shrink while the tensor lives (reading a page cut off the file ends the process).
Tensor map_npy(const std::string& path);
// The .npy header (preamble and dict, padded so that the data starts on a 64-byte boundary)
// that write_npy writes before the data of an array of this shape and dtype.
std::string npy_header(const Shape& shape, DType dtype);
// Writes `t` (any strides; written in C order) as .npy version 1.0, atomically.
void write_npy(const std::string& path, const Tensor& t);
std::string serialize_npy(const Tensor& t);

// A safetensors file: named tensors plus optional string metadata ("__metadata__").
struct SafeTensors {
  std::map<std::string, Tensor> tensors;
  std::map<std::string, std::string> metadata;
};

// Reads a safetensors file. Accepted dtypes: F32, F64, I64 (others: error naming the key).
// Validates the header length, the JSON, every shape and data_offsets pair (in bounds,
// matching shape x dtype size, non-overlapping) before any tensor is allocated.
SafeTensors read_safetensors(const std::string& path);
SafeTensors parse_safetensors(const std::string& bytes, const std::string& what);
// Writes tensors (keys in sorted order, data contiguous as the format requires) atomically.
void write_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});
std::string serialize_safetensors(const std::map<std::string, Tensor>& tensors,
                                  const std::map<std::string, std::string>& metadata = {});

// Writes `bytes` to `path` atomically: a crash at any moment leaves either the old file or
// the complete new one, never a partial file.
void write_file_atomic(const std::string& path, const std::string& bytes);
// Reads a whole file; throws grux::Error naming the path if it cannot be opened or read,
// or if it is larger than `max_bytes`.
std::string read_file(const std::string& path, size_t max_bytes = size_t(1) << 36);

}  // namespace GRUX_API
