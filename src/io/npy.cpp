// NumPy .npy reader and writer: versions 1.0 / 2.0 / 3.0 in, 1.0 out; dtypes <f4, <f8, <i8;
// C order only. The Python-literal header dict is parsed by hand and every size is checked.
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "grux/error.h"
#include "grux/io.h"

namespace grux {
namespace {

// Data is copied byte for byte between the file (little-endian) and memory.
static_assert(std::endian::native == std::endian::little,
              "grux .npy I/O assumes a little-endian host");

constexpr std::string_view kMagic = "\x93NUMPY";
constexpr const char* kNpyDtypes = "'<f4', '<f8' or '<i8'";
// Bounds the parser's recursion on hostile headers; real descr lists nest two deep.
constexpr int kMaxNesting = 32;

// Header text as it may be quoted in a one-line message: control and non-ASCII bytes escaped,
// long headers cut, so that a hostile file cannot break the line or flood the terminal.
std::string quote_snippet(std::string_view s, size_t max_len = 120) {
  std::string out;
  for (size_t i = 0; i < s.size() && i < max_len; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      out += fmt::format("\\x{:02x}", c);
    }
  }
  if (s.size() > max_len) out += "...";
  return out;
}

// The header without numpy's space padding and final '\n', for quoting in messages.
std::string_view unpadded(std::string_view header) {
  const size_t end = header.find_last_not_of(" \n");
  return end == std::string_view::npos ? std::string_view() : header.substr(0, end + 1);
}

// One value of the Python literal subset numpy writes: str, True/False/None, int,
// tuple and list (lists of tuples appear in structured dtypes, which are then refused).
struct PyValue {
  enum class Kind { str, boolean, none, integer, tuple, list };
  Kind kind = Kind::none;
  std::string str;             // str
  bool boolean = false;        // boolean
  bool negative = false;       // integer: sign
  bool too_big = false;        // integer: magnitude does not fit int64
  int64_t integer = 0;         // integer: magnitude when !too_big
  std::vector<PyValue> items;  // tuple, list
  std::string_view text;       // the source text, for messages
};

class HeaderParser {
 public:
  HeaderParser(std::string_view src, const std::string& what) : src_(src), what_(what) {}

  // Parses "{key: value, ...}" followed only by whitespace (the padding and the final '\n').
  std::vector<std::pair<std::string, PyValue>> parse_dict() {
    std::vector<std::pair<std::string, PyValue>> entries;
    skip_space();
    expect('{');
    for (;;) {
      skip_space();
      if (peek() == '}') break;
      if (peek() != '\'' && peek() != '"') fail("expected a quoted key or '}'");
      std::string key = parse_string();
      skip_space();
      expect(':');
      PyValue value = parse_value(0);
      for (const auto& e : entries) {
        if (e.first == key) fail(fmt::format("key '{}' appears twice", quote_snippet(key)));
      }
      entries.emplace_back(std::move(key), std::move(value));
      skip_space();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() != '}') fail("expected ',' or '}'");
    }
    ++pos_;
    skip_space();
    if (pos_ != src_.size()) fail("unexpected text after the closing '}'");
    return entries;
  }

 private:
  std::string_view src_;
  const std::string& what_;
  size_t pos_ = 0;

  [[noreturn]] void fail(const std::string& why) const {
    throw Error(fmt::format("{}: malformed .npy header at byte {}: {} (header: \"{}\")", what_,
                            pos_, why, quote_snippet(unpadded(src_))));
  }

  char peek() const { return pos_ < src_.size() ? src_[pos_] : '\0'; }

  void skip_space() {
    while (pos_ < src_.size() &&
           (src_[pos_] == ' ' || src_[pos_] == '\t' || src_[pos_] == '\n' || src_[pos_] == '\r')) {
      ++pos_;
    }
  }

  void expect(char c) {
    if (peek() != c) fail(fmt::format("expected '{}'", c));
    ++pos_;
  }

  std::string parse_string() {
    const char quote = src_[pos_++];
    std::string out;
    for (;;) {
      if (pos_ >= src_.size()) fail("unterminated string");
      const char c = src_[pos_++];
      if (c == quote) return out;
      // Escapes never occur in the fields we accept; keep the escaped byte so that a
      // quote inside a string does not end it early.
      if (c == '\\') {
        if (pos_ >= src_.size()) fail("unterminated string");
        out += src_[pos_++];
        continue;
      }
      out += c;
    }
  }

  bool starts_with_word(std::string_view word) const {
    if (src_.substr(pos_, word.size()) != word) return false;
    const size_t end = pos_ + word.size();
    if (end >= src_.size()) return true;
    const char c = src_[end];
    return !(std::isalnum(static_cast<unsigned char>(c)) || c == '_');
  }

  PyValue parse_value(int depth) {
    if (depth > kMaxNesting) fail("values nested too deeply");
    skip_space();
    const size_t start = pos_;
    PyValue v;
    const char c = peek();
    if (c == '\'' || c == '"') {
      v.kind = PyValue::Kind::str;
      v.str = parse_string();
    } else if (starts_with_word("True") || starts_with_word("False")) {
      v.kind = PyValue::Kind::boolean;
      v.boolean = src_[pos_] == 'T';
      pos_ += v.boolean ? 4 : 5;
    } else if (starts_with_word("None")) {
      v.kind = PyValue::Kind::none;
      pos_ += 4;
    } else if (c == '-' || c == '+' || (c >= '0' && c <= '9')) {
      parse_integer(v);
    } else if (c == '(' || c == '[') {
      v.kind = c == '(' ? PyValue::Kind::tuple : PyValue::Kind::list;
      const char close = c == '(' ? ')' : ']';
      ++pos_;
      for (;;) {
        skip_space();
        if (peek() == close) break;
        v.items.push_back(parse_value(depth + 1));
        skip_space();
        if (peek() == ',') {
          ++pos_;
          continue;
        }
        if (peek() != close) fail(fmt::format("expected ',' or '{}'", close));
      }
      ++pos_;
    } else {
      fail("expected a value (string, True, False, integer or tuple)");
    }
    v.text = src_.substr(start, pos_ - start);
    return v;
  }

  void parse_integer(PyValue& v) {
    v.kind = PyValue::Kind::integer;
    if (peek() == '-' || peek() == '+') v.negative = src_[pos_++] == '-';
    if (!(peek() >= '0' && peek() <= '9')) fail("expected digits");
    while (peek() >= '0' && peek() <= '9') {
      const int digit = src_[pos_++] - '0';
      if (v.too_big) continue;
      if (__builtin_mul_overflow(v.integer, int64_t{10}, &v.integer) ||
          __builtin_add_overflow(v.integer, int64_t{digit}, &v.integer)) {
        v.too_big = true;
        v.integer = 0;
      }
    }
    // Python 2's numpy wrote long integers as "3L".
    if (peek() == 'L') ++pos_;
    if (v.negative && v.integer == 0 && !v.too_big) v.negative = false;  // "-0" is 0
  }
};

// '|' is numpy's "byte order not applicable" and never appears for these types; '=' means
// native, which is little-endian here (see the static_assert above).
bool dtype_from_descr(const std::string& descr, DType* out) {
  if (descr.size() != 3 || (descr[0] != '<' && descr[0] != '=')) return false;
  const std::string_view code = std::string_view(descr).substr(1);
  if (code == "f4") {
    *out = DType::f32;
  } else if (code == "f8") {
    *out = DType::f64;
  } else if (code == "i8") {
    *out = DType::i64;
  } else {
    return false;
  }
  return true;
}

const char* descr_of(DType t) {
  switch (t) {
    case DType::f32:
      return "<f4";
    case DType::f64:
      return "<f8";
    case DType::i64:
      return "<i8";
  }
  GRUX_ASSERT(false);
}

uint32_t read_le(std::string_view b, size_t pos, size_t n) {
  uint32_t v = 0;
  for (size_t i = 0; i < n; ++i) v |= uint32_t(static_cast<unsigned char>(b[pos + i])) << (8 * i);
  return v;
}

}  // namespace

namespace {

// A checked .npy: dtype, shape and where the data starts in `b` (whose size is checked too).
struct NpyLayout {
  DType dtype;
  Shape shape;
  size_t data_start = 0, nbytes = 0;
};

NpyLayout parse_layout(std::string_view b, const std::string& what) {
  // 1. Preamble: magic, version, header length.
  if (b.empty()) {
    throw Error(
        fmt::format("{}: empty file (expected a .npy file starting with \"\\x93NUMPY\")", what));
  }
  const std::string_view magic = b.substr(0, kMagic.size());
  if (magic != kMagic.substr(0, magic.size())) {
    throw Error(
        fmt::format("{}: not a .npy file (bad magic: expected \"\\x93NUMPY\", found \"{}\")", what,
                    quote_snippet(magic)));
  }
  if (b.size() < 10) {
    throw Error(
        fmt::format("{}: truncated .npy preamble: {} bytes, expected at least 10", what, b.size()));
  }
  const int major = static_cast<unsigned char>(b[6]);
  const int minor = static_cast<unsigned char>(b[7]);
  if (major < 1 || major > 3 || minor != 0) {
    throw Error(fmt::format("{}: unsupported .npy format version {}.{} (expected 1.0, 2.0 or 3.0)",
                            what, major, minor));
  }
  const size_t len_size = major == 1 ? 2 : 4;
  const size_t header_start = 8 + len_size;
  if (b.size() < header_start) {
    throw Error(fmt::format("{}: truncated .npy preamble: {} bytes, expected at least {}", what,
                            b.size(), header_start));
  }
  const size_t header_len = read_le(b, 8, len_size);
  if (header_len > b.size() - header_start) {
    throw Error(
        fmt::format("{}: truncated .npy header: header length is {} bytes but only {} "
                    "bytes follow the preamble",
                    what, header_len, b.size() - header_start));
  }
  const std::string_view header = b.substr(header_start, header_len);
  if (header.empty() || header.back() != '\n') {
    throw Error(
        fmt::format("{}: malformed .npy header: expected it to end with '\\n' (header: "
                    "\"{}\")",
                    what, quote_snippet(header)));
  }

  // 2. The dict: exactly descr, fortran_order and shape, as numpy itself requires.
  const PyValue* descr = nullptr;
  const PyValue* fortran = nullptr;
  const PyValue* shape_v = nullptr;
  const auto entries = HeaderParser(header, what).parse_dict();
  for (const auto& [key, value] : entries) {
    if (key == "descr") {
      descr = &value;
    } else if (key == "fortran_order") {
      fortran = &value;
    } else if (key == "shape") {
      shape_v = &value;
    } else {
      throw Error(
          fmt::format("{}: unexpected key '{}' in .npy header (expected 'descr', "
                      "'fortran_order' and 'shape')",
                      what, quote_snippet(key)));
    }
  }
  for (const auto& [name, v] : {std::pair{"descr", descr}, std::pair{"fortran_order", fortran},
                                std::pair{"shape", shape_v}}) {
    if (!v) {
      throw Error(
          fmt::format("{}: .npy header has no '{}' key (expected 'descr', "
                      "'fortran_order' and 'shape'; header: \"{}\")",
                      what, name, quote_snippet(unpadded(header))));
    }
  }

  DType dtype;
  if (descr->kind != PyValue::Kind::str) {
    throw Error(
        fmt::format("{}: unsupported dtype {} (structured dtypes are not supported; "
                    "expected {})",
                    what, quote_snippet(descr->text, 60), kNpyDtypes));
  }
  if (!dtype_from_descr(descr->str, &dtype)) {
    throw Error(fmt::format("{}: unsupported dtype '{}' (expected {})", what,
                            quote_snippet(descr->str, 60), kNpyDtypes));
  }
  if (fortran->kind != PyValue::Kind::boolean) {
    throw Error(fmt::format("{}: 'fortran_order' must be True or False, found {}", what,
                            quote_snippet(fortran->text, 60)));
  }
  if (fortran->boolean) {
    throw Error(
        fmt::format("{}: fortran_order is True; only C-order arrays are supported "
                    "(save with np.ascontiguousarray)",
                    what));
  }
  if (shape_v->kind != PyValue::Kind::tuple) {
    throw Error(fmt::format("{}: 'shape' must be a tuple of integers, found {}", what,
                            quote_snippet(shape_v->text, 60)));
  }

  // 3. Shape and sizes, all overflow-checked, before anything is allocated.
  Shape shape;
  int64_t numel = 1;
  bool overflow = false;
  for (const PyValue& d : shape_v->items) {
    if (d.kind != PyValue::Kind::integer) {
      throw Error(
          fmt::format("{}: shape {} has a non-integer entry {} (expected non-negative "
                      "integers)",
                      what, quote_snippet(shape_v->text, 60), quote_snippet(d.text, 30)));
    }
    if (d.negative) {
      throw Error(
          fmt::format("{}: shape {} has a negative dimension {} (expected non-negative "
                      "integers)",
                      what, quote_snippet(shape_v->text, 60), quote_snippet(d.text, 30)));
    }
    if (d.too_big) overflow = true;
    shape.push_back(d.integer);
    if (__builtin_mul_overflow(numel, d.integer, &numel)) overflow = true;
  }
  const auto itemsize = static_cast<int64_t>(dtype_size(dtype));
  int64_t nbytes = 0;
  // A zero dimension makes the array empty however large the others are, but a product that
  // overflowed on the way is still refused: it cannot be represented as a Tensor shape.
  if (overflow || __builtin_mul_overflow(numel, itemsize, &nbytes)) {
    throw Error(
        fmt::format("{}: shape {} with dtype '{}' is too large (the byte size overflows "
                    "64 bits)",
                    what, quote_snippet(shape_v->text, 60), descr->str));
  }

  const size_t data_start = header_start + header_len;
  const size_t found = b.size() - data_start;
  if (found < static_cast<uint64_t>(nbytes)) {
    throw Error(
        fmt::format("{}: truncated: expected {} data bytes, found {} (shape {}, dtype '{}')", what,
                    nbytes, found, shape_str(shape), descr->str));
  }
  if (found > static_cast<uint64_t>(nbytes)) {
    throw Error(fmt::format(
        "{}: {} unexpected bytes after the data: expected exactly {} data bytes "
        "for shape {} and dtype '{}', found {}",
        what, found - static_cast<uint64_t>(nbytes), nbytes, shape_str(shape), descr->str, found));
  }

  return {dtype, shape, data_start, static_cast<size_t>(nbytes)};
}

}  // namespace

Tensor parse_npy(const std::string& bytes, const std::string& what) {
  const NpyLayout l = parse_layout(bytes, what);
  Tensor t = Tensor::empty(l.shape, l.dtype);
  if (l.nbytes > 0) std::memcpy(t.raw_data(), bytes.data() + l.data_start, l.nbytes);
  return t;
}

Tensor map_npy(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return read_npy(path);  // which names the path and the reason
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return read_npy(path);  // not a regular file: read it (read_npy names the problem)
  }
  const size_t size = static_cast<size_t>(st.st_size);
  void* p =
      size > 0 ? ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0) : MAP_FAILED;
  ::close(fd);
  if (p == MAP_FAILED) return read_npy(path);
  std::shared_ptr<void> owner(p, [size](void* q) { ::munmap(q, size); });
  const NpyLayout l = parse_layout(std::string_view(static_cast<const char*>(p), size), path);
  // Data that does not start on an element boundary (numpy aligns it to 64 bytes) is copied.
  if (l.data_start % dtype_size(l.dtype) != 0) return read_npy(path);
  Shape strides(l.shape.size());
  int64_t stride = 1;
  for (size_t i = l.shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= std::max<int64_t>(l.shape[i], 1);
  }
  return Tensor::from_blob(static_cast<char*>(p) + l.data_start, l.shape, strides, l.dtype,
                           std::move(owner));
}

std::string npy_header(const Shape& shape, DType dtype) {
  std::string dict = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}",
                                 descr_of(dtype), shape_str(shape));
  // numpy pads with spaces so that the data starts on a 64-byte boundary (for mmap and SIMD)
  // and falls back to version 2.0 only when the header outgrows the u16 length.
  size_t prefix = 10;
  size_t total = (prefix + dict.size() + 1 + 63) / 64 * 64;
  int major = 1;
  if (total - prefix > 0xffff) {
    major = 2;
    prefix = 12;
    total = (prefix + dict.size() + 1 + 63) / 64 * 64;
  }
  const size_t header_len = total - prefix;
  dict.append(header_len - dict.size() - 1, ' ');
  dict += '\n';
  std::string out;
  out += kMagic;
  out += static_cast<char>(major);
  out += '\0';
  for (size_t i = 0; i < prefix - 8; ++i) out += static_cast<char>((header_len >> (8 * i)) & 0xff);
  out += dict;
  return out;
}

Tensor read_npy(const std::string& path) {
  return parse_npy(read_file(path), path);
}

std::string serialize_npy(const Tensor& t) {
  GRUX_CHECK(t.defined(), "serialize_npy: tensor is undefined (expected a defined tensor)");
  GRUX_CHECK(t.device() == Device::cpu(),
             fmt::format("serialize_npy: tensor is on {} (expected cpu)", t.device().str()));
  const Tensor c = t.contiguous();
  const size_t nbytes = static_cast<size_t>(c.numel()) * dtype_size(c.dtype());
  std::string out = npy_header(c.shape(), c.dtype());
  out.reserve(out.size() + nbytes);
  if (nbytes > 0) out.append(static_cast<const char*>(c.raw_data()), nbytes);
  return out;
}

void write_npy(const std::string& path, const Tensor& t) {
  write_file_atomic(path, serialize_npy(t));
}

}  // namespace grux
