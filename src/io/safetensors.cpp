// safetensors reader and writer (dtypes F32, F64, I64). The JSON header is validated in full
// (fields, shapes, offsets in bounds, sizes, no overlaps or holes) before any tensor is allocated.
#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "grux/error.h"
#include "grux/io.h"

namespace grux {
namespace {

using json = nlohmann::json;

// Tensor bytes are copied as they are between the file (little-endian) and memory.
static_assert(std::endian::native == std::endian::little,
              "grux safetensors I/O assumes a little-endian host");

constexpr uint64_t kMaxHeaderBytes = uint64_t(100) << 20;
constexpr const char* kMetadataKey = "__metadata__";
constexpr const char* kSafetensorsDtypes = "F32, F64 or I64";

// Cuts a message fragment taken from the file so that a hostile file cannot flood the terminal.
std::string cut(std::string s, size_t max_len) {
  if (s.size() > max_len) {
    s.resize(max_len);
    s.append("...");
  }
  return s;
}

// A name or value from the file as it may appear in a one-line message: JSON-escaped (so
// control characters cannot break the line) and cut short.
std::string quote_name(std::string_view s, size_t max_len = 100) {
  std::string out =
      json(std::string(s.substr(0, max_len))).dump(-1, ' ', true, json::error_handler_t::replace);
  if (s.size() > max_len) out.append("...");
  return out;
}

// A JSON value from the file, compact and cut short, for quoting in messages. Nested
// containers are elided rather than dumped: nlohmann's dump() recurses, and a hostile header
// can nest arrays deeply enough to overflow the stack.
std::string short_dump(const json& j, size_t max_len = 60) {
  auto scalar = [](const json& v) {
    if (v.is_array()) return std::string("[...]");
    if (v.is_object()) return std::string("{...}");
    return v.dump(-1, ' ', true, json::error_handler_t::replace);
  };
  if (!j.is_array()) return cut(scalar(j), max_len);
  std::string out(1, '[');
  for (const json& v : j) {
    if (out.size() > 1) out += ',';
    out += scalar(v);
    if (out.size() > max_len) break;
  }
  out += ']';
  return cut(std::move(out), max_len);
}

// A JSON value's kind for "expected X, found Y" messages.
const char* kind_of(const json& j) {
  if (j.is_number_float()) return "a non-integer number";
  if (j.is_number_integer() && j.get<int64_t>() < 0) return "a negative integer";
  return j.type_name();
}

bool dtype_from_name(const std::string& name, DType* out) {
  if (name == "F32") {
    *out = DType::f32;
  } else if (name == "F64") {
    *out = DType::f64;
  } else if (name == "I64") {
    *out = DType::i64;
  } else {
    return false;
  }
  return true;
}

const char* name_of(DType t) {
  switch (t) {
    case DType::f32:
      return "F32";
    case DType::f64:
      return "F64";
    case DType::i64:
      return "I64";
  }
  GRUX_ASSERT(false);
}

// One validated header entry; [begin, end) is relative to the start of the data buffer.
struct Entry {
  std::string key;
  DType dtype;
  Shape shape;
  uint64_t begin, end;
};

// Parses the header JSON; refuses duplicate keys in any object, which nlohmann would
// otherwise resolve silently (the last one wins) and which could hide a tensor.
json parse_header(std::string_view text, const std::string& what) {
  std::vector<std::unordered_set<std::string>> open_objects;
  bool has_duplicate = false;
  std::string duplicate;
  auto cb = [&](int /*depth*/, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
        open_objects.emplace_back();
        break;
      case json::parse_event_t::object_end:
        open_objects.pop_back();
        break;
      case json::parse_event_t::key: {
        const auto& k = parsed.get_ref<const std::string&>();
        if (!open_objects.back().insert(k).second && !has_duplicate) {
          has_duplicate = true;
          duplicate = k;
        }
        break;
      }
      default:
        break;
    }
    return true;
  };
  json header;
  try {
    header = json::parse(text.begin(), text.end(), cb);
  } catch (const json::exception& e) {
    // nlohmann quotes the offending token, which in a hostile file can be huge.
    std::string msg = e.what();
    if (msg.size() > 300) msg = msg.substr(0, 300) + "...";
    std::replace_if(
        msg.begin(), msg.end(), [](char c) { return c == '\n' || c == '\r'; }, ' ');
    throw Error(fmt::format("{}: safetensors header is not valid JSON: {}", what, msg));
  }
  if (has_duplicate) {
    throw Error(
        fmt::format("{}: safetensors header has the key {} twice in one object (expected "
                    "unique keys)",
                    what, quote_name(duplicate)));
  }
  return header;
}

Entry parse_entry(const std::string& key, const json& v, const std::string& what) {
  const std::string name = quote_name(key);
  if (!v.is_object()) {
    throw Error(
        fmt::format("{}: tensor {}: expected an object with dtype, shape and data_offsets, "
                    "found {}",
                    what, name, kind_of(v)));
  }
  for (const char* field : {"dtype", "shape", "data_offsets"}) {
    if (!v.contains(field)) {
      throw Error(
          fmt::format("{}: tensor {}: missing field '{}' (expected dtype, shape and "
                      "data_offsets)",
                      what, name, field));
    }
  }
  if (v.size() != 3) {
    for (const auto& [field, unused] : v.items()) {
      if (field != "dtype" && field != "shape" && field != "data_offsets") {
        throw Error(
            fmt::format("{}: tensor {}: unexpected field {} (expected only dtype, shape "
                        "and data_offsets)",
                        what, name, quote_name(field)));
      }
    }
  }

  Entry e;
  e.key = key;
  const json& dt = v["dtype"];
  if (!dt.is_string()) {
    throw Error(
        fmt::format("{}: tensor {}: dtype must be a string, found {}", what, name, kind_of(dt)));
  }
  if (!dtype_from_name(dt.get_ref<const std::string&>(), &e.dtype)) {
    throw Error(fmt::format("{}: tensor {}: unsupported dtype {} (expected {})", what, name,
                            quote_name(dt.get_ref<const std::string&>()), kSafetensorsDtypes));
  }

  const json& sh = v["shape"];
  if (!sh.is_array()) {
    throw Error(
        fmt::format("{}: tensor {}: shape must be an array of non-negative integers, "
                    "found {}",
                    what, name, kind_of(sh)));
  }
  int64_t numel = 1;
  bool overflow = false;
  for (const json& d : sh) {
    if (!d.is_number_unsigned()) {
      throw Error(
          fmt::format("{}: tensor {}: shape {} has an entry that is {} (expected "
                      "non-negative integers)",
                      what, name, short_dump(sh), kind_of(d)));
    }
    const uint64_t u = d.get<uint64_t>();
    if (u > uint64_t(INT64_MAX)) {
      overflow = true;
      e.shape.push_back(0);
      continue;
    }
    e.shape.push_back(static_cast<int64_t>(u));
    if (__builtin_mul_overflow(numel, static_cast<int64_t>(u), &numel)) overflow = true;
  }
  int64_t nbytes = 0;
  if (overflow ||
      __builtin_mul_overflow(numel, static_cast<int64_t>(dtype_size(e.dtype)), &nbytes)) {
    throw Error(
        fmt::format("{}: tensor {}: shape {} with dtype {} is too large (the byte size "
                    "overflows 64 bits)",
                    what, name, short_dump(sh), name_of(e.dtype)));
  }

  const json& off = v["data_offsets"];
  if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() ||
      !off[1].is_number_unsigned()) {
    throw Error(
        fmt::format("{}: tensor {}: data_offsets must be [begin, end] with non-negative "
                    "integers, found {}",
                    what, name, short_dump(off)));
  }
  e.begin = off[0].get<uint64_t>();
  e.end = off[1].get<uint64_t>();
  if (e.begin > e.end) {
    throw Error(fmt::format("{}: tensor {}: data_offsets [{}, {}] has begin > end", what, name,
                            e.begin, e.end));
  }
  if (e.end - e.begin != static_cast<uint64_t>(nbytes)) {
    throw Error(fmt::format(
        "{}: tensor {}: data_offsets [{}, {}] span {} bytes, expected {} for "
        "shape {} and dtype {}",
        what, name, e.begin, e.end, e.end - e.begin, nbytes, shape_str(e.shape), name_of(e.dtype)));
  }
  return e;
}

}  // namespace

SafeTensors parse_safetensors(const std::string& bytes, const std::string& what) {
  // 1. Header length: bounded by the file and by a fixed cap before the JSON is touched.
  if (bytes.size() < 8) {
    throw Error(
        fmt::format("{}: file is {} bytes, too short for a safetensors file (expected at "
                    "least 8 bytes of header length)",
                    what, bytes.size()));
  }
  uint64_t header_len = 0;
  for (int i = 0; i < 8; ++i) {
    header_len |= uint64_t(static_cast<unsigned char>(bytes[i])) << (8 * i);
  }
  const uint64_t after = bytes.size() - 8;
  if (header_len > after) {
    throw Error(
        fmt::format("{}: safetensors header length {} is larger than the {} bytes that "
                    "follow it",
                    what, header_len, after));
  }
  if (header_len > kMaxHeaderBytes) {
    throw Error(fmt::format("{}: safetensors header length {} exceeds the limit of {} bytes", what,
                            header_len, kMaxHeaderBytes));
  }
  const std::string_view text = std::string_view(bytes).substr(8, header_len);
  const uint64_t buffer_size = after - header_len;
  const char* buffer = bytes.data() + 8 + header_len;

  // 2. The JSON: an object of tensor entries plus optional string metadata.
  const json header = parse_header(text, what);
  if (!header.is_object()) {
    throw Error(fmt::format("{}: safetensors header must be a JSON object, found {}", what,
                            kind_of(header)));
  }
  SafeTensors out;
  std::vector<Entry> entries;
  for (const auto& [key, value] : header.items()) {
    if (key == kMetadataKey) {
      if (!value.is_object()) {
        throw Error(fmt::format("{}: __metadata__ must be an object of strings, found {}", what,
                                kind_of(value)));
      }
      for (const auto& [mk, mv] : value.items()) {
        if (!mv.is_string()) {
          throw Error(fmt::format("{}: __metadata__ value for key {} is {} (expected a string)",
                                  what, quote_name(mk), kind_of(mv)));
        }
        out.metadata.emplace(mk, mv.get<std::string>());
      }
      continue;
    }
    entries.push_back(parse_entry(key, value, what));
  }

  // 3. Offsets: in bounds, and the non-empty ranges tile the buffer exactly. The format
  // forbids holes and overlaps so that a file cannot hide extra data or alias two tensors.
  for (const Entry& e : entries) {
    if (e.end > buffer_size) {
      throw Error(
          fmt::format("{}: tensor {}: data_offsets [{}, {}] out of range: the data buffer "
                      "has {} bytes",
                      what, quote_name(e.key), e.begin, e.end, buffer_size));
    }
  }
  std::vector<const Entry*> by_offset;
  for (const Entry& e : entries) {
    if (e.end > e.begin) by_offset.push_back(&e);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const Entry* a, const Entry* b) { return a->begin < b->begin; });
  uint64_t cursor = 0;
  const Entry* prev = nullptr;
  for (const Entry* e : by_offset) {
    if (e->begin < cursor) {
      throw Error(fmt::format("{}: tensors {} [{}, {}] and {} [{}, {}] overlap in the data buffer",
                              what, quote_name(prev->key), prev->begin, prev->end,
                              quote_name(e->key), e->begin, e->end));
    }
    if (e->begin > cursor) {
      throw Error(
          fmt::format("{}: data buffer bytes [{}, {}) before tensor {} belong to no tensor "
                      "(expected tensors to cover the buffer without holes)",
                      what, cursor, e->begin, quote_name(e->key)));
    }
    cursor = e->end;
    prev = e;
  }
  if (cursor != buffer_size) {
    throw Error(
        fmt::format("{}: data buffer has {} bytes but the tensors cover only {} (expected "
                    "no trailing bytes)",
                    what, buffer_size, cursor));
  }

  // 4. Everything checked: allocate and copy.
  for (const Entry& e : entries) {
    Tensor t = Tensor::empty(e.shape, e.dtype);
    if (e.end > e.begin) std::memcpy(t.raw_data(), buffer + e.begin, e.end - e.begin);
    out.tensors.emplace(e.key, std::move(t));
  }
  return out;
}

SafeTensors read_safetensors(const std::string& path) {
  return parse_safetensors(read_file(path), path);
}

std::string serialize_safetensors(const std::map<std::string, Tensor>& tensors,
                                  const std::map<std::string, std::string>& metadata) {
  std::vector<Tensor> contiguous;
  json header = json::object();
  uint64_t offset = 0;
  // std::map iterates in sorted key order, which fixes both the data layout and the output.
  for (const auto& [key, t] : tensors) {
    GRUX_CHECK(key != kMetadataKey,
               "serialize_safetensors: '__metadata__' is reserved and cannot name a tensor");
    GRUX_CHECK(t.defined(),
               fmt::format("serialize_safetensors: tensor {} is undefined (expected a defined "
                           "tensor)",
                           quote_name(key)));
    GRUX_CHECK(t.device() == Device::cpu(),
               fmt::format("serialize_safetensors: tensor {} is on {} (expected cpu)",
                           quote_name(key), t.device().str()));
    contiguous.push_back(t.contiguous());
    const uint64_t nbytes = static_cast<uint64_t>(t.numel()) * dtype_size(t.dtype());
    header[key] = {{"dtype", name_of(t.dtype())},
                   {"shape", t.shape()},
                   {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
  }
  if (!metadata.empty()) header[kMetadataKey] = metadata;

  std::string text;
  try {
    text = header.dump(-1, ' ', false, json::error_handler_t::strict);
  } catch (const json::exception&) {
    throw Error(
        "serialize_safetensors: a tensor name or metadata string is not valid UTF-8 "
        "(expected UTF-8 text)");
  }
  // Padding keeps the data buffer 8-byte aligned in the file (8-byte length + header).
  text.append((8 - text.size() % 8) % 8, ' ');

  std::string out;
  out.reserve(8 + text.size() + offset);
  for (int i = 0; i < 8; ++i) out += static_cast<char>((uint64_t(text.size()) >> (8 * i)) & 0xff);
  out += text;
  for (const Tensor& c : contiguous) {
    const size_t nbytes = static_cast<size_t>(c.numel()) * dtype_size(c.dtype());
    if (nbytes > 0) out.append(static_cast<const char*>(c.raw_data()), nbytes);
  }
  return out;
}

void write_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  write_file_atomic(path, serialize_safetensors(tensors, metadata));
}

}  // namespace grux
