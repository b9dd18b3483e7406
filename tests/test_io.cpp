// Tests for src/io: .npy and safetensors round trips over every dtype and edge shape, header
// variants, hostile files (each must throw grux::Error naming the problem), atomic writes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <map>
#include <string>
#include <vector>

#include "grux/error.h"
#include "grux/io.h"
#include "grux/tensor.h"

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::StartsWith;

namespace grux::test_io {
namespace {

// ---- helpers ---------------------------------------------------------------------------

// Runs `fn`, expects grux::Error and returns its message (empty if nothing was thrown).
std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected grux::Error, got another exception: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected grux::Error, nothing was thrown";
  return "";
}

// Expects grux::Error whose message is one line and contains every one of `parts`.
void expect_error(const std::function<void()>& fn, std::initializer_list<std::string> parts) {
  const std::string msg = error_of(fn);
  EXPECT_EQ(msg.find('\n'), std::string::npos) << "message is not one line: " << msg;
  for (const auto& p : parts) EXPECT_THAT(msg, HasSubstr(p));
}

// A tensor of `shape` and `dtype` holding distinct values (negative ones included), so that
// a swapped or shifted element shows up in a comparison.
Tensor sample(const Shape& shape, DType dtype) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  switch (dtype) {
    case DType::f32: {
      std::vector<float> v(n);
      for (int64_t i = 0; i < n; ++i) v[i] = 0.25f * float(i) - 3.5f;
      return Tensor::from_vector(shape, v);
    }
    case DType::f64: {
      std::vector<double> v(n);
      for (int64_t i = 0; i < n; ++i) v[i] = 1e-3 * double(i * i) - 7.125 + 1e-12;
      return Tensor::from_vector(shape, v);
    }
    case DType::i64: {
      std::vector<int64_t> v(n);
      for (int64_t i = 0; i < n; ++i) v[i] = (i % 2 ? -1 : 1) * (int64_t(1) << 40) * i + i;
      return Tensor::from_vector(shape, v);
    }
  }
  return {};
}

// Exact comparison: file I/O must be bit-exact, so no tolerance.
void expect_same(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.dtype(), b.dtype()) << what;
  ASSERT_EQ(a.shape(), b.shape()) << what;
  for (int64_t i = 0; i < a.numel(); ++i) {
    ASSERT_EQ(a.at_flat(i), b.at_flat(i)) << what << " element " << i;
  }
}

// A .npy file built by hand: preamble for `version`, the header dict padded with spaces and
// ended with '\n' (unless `raw_header`), then `data`.
std::string npy_bytes(const std::string& dict, const std::string& data, int version = 1,
                      bool raw_header = false) {
  std::string header = dict;
  const size_t prefix = version == 1 ? 10 : 12;
  if (!raw_header) {
    while ((prefix + header.size() + 1) % 64 != 0) header += ' ';
    header += '\n';
  }
  std::string out = "\x93NUMPY";
  out += char(version);
  out += '\0';
  const size_t len = header.size();
  for (size_t i = 0; i < prefix - 8; ++i) out += char((len >> (8 * i)) & 0xff);
  return out + header + data;
}

std::string zeros(size_t n) {
  return std::string(n, '\0');
}

// A safetensors file built by hand: u64 header length, the JSON text, the data buffer.
std::string st_bytes(const std::string& header, const std::string& data, uint64_t len) {
  std::string out;
  for (int i = 0; i < 8; ++i) out += char((len >> (8 * i)) & 0xff);
  return out + header + data;
}
std::string st_bytes(const std::string& header, const std::string& data) {
  return st_bytes(header, data, header.size());
}

// A fresh folder per test, removed afterwards.
class IoDir : public ::testing::Test {
 protected:
  void SetUp() override {
    static std::atomic<int> counter{0};
    dir_ = fs::temp_directory_path() /
           ("grux_test_io_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::vector<std::string> listing() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename());
    std::sort(names.begin(), names.end());
    return names;
  }
  void write_raw(const std::string& name, const std::string& bytes) const {
    std::ofstream(path(name), std::ios::binary) << bytes;
  }
  fs::path dir_;
};

const DType kDTypes[] = {DType::f32, DType::f64, DType::i64};
const Shape kShapes[] = {{}, {1}, {5}, {0}, {3, 0, 2}, {2, 3, 4}, {1, 1, 7}, {17, 3}};

// ---- .npy: round trips -------------------------------------------------------------------

TEST_F(IoDir, NpyRoundTripEveryDtypeAndShape) {
  for (DType dt : kDTypes) {
    for (const Shape& shape : kShapes) {
      const std::string what = std::string(dtype_name(dt)) + " " + shape_str(shape);
      const Tensor t = sample(shape, dt);
      expect_same(t, parse_npy(serialize_npy(t), "mem"), what + " (in memory)");
      write_npy(path("t.npy"), t);
      expect_same(t, read_npy(path("t.npy")), what + " (file)");
    }
  }
  EXPECT_EQ(listing(), std::vector<std::string>{"t.npy"});
}

TEST(Npy, RoundTripNonContiguousViews) {
  for (DType dt : kDTypes) {
    const Tensor base = sample({4, 5, 3}, dt);
    for (const Tensor& view : {base.transpose(0, 2), base.slice(1, 1, 5, 2), base.select(2, 1),
                               base.transpose(0, 1).slice(0, 0, 5, 3)}) {
      ASSERT_FALSE(view.is_contiguous());
      const Tensor back = parse_npy(serialize_npy(view), "mem");
      EXPECT_TRUE(back.is_contiguous());
      expect_same(view, back, std::string(dtype_name(dt)) + " view " + shape_str(view.shape()));
    }
  }
}

// The exact bytes numpy's np.save writes for np.arange(6, dtype='<f4').reshape(2, 3).
TEST(Npy, WriterMatchesNumpyLayout) {
  const Tensor t = Tensor::from_vector<float>({2, 3}, {0, 1, 2, 3, 4, 5});
  const std::string bytes = serialize_npy(t);
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  header.append(128 - 10 - 1 - header.size(), ' ');
  header += '\n';
  const std::string expected = std::string("\x93NUMPY\x01\x00", 8) + char(118) + char(0) + header;
  ASSERT_EQ(bytes.size(), 128u + 24u);
  EXPECT_EQ(bytes.substr(0, 128), expected);
  const float* data = reinterpret_cast<const float*>(bytes.data() + 128);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(data[i], float(i));
}

TEST(Npy, WriterShapeFormatsAndAlignment) {
  const std::pair<Shape, std::string> cases[] = {
      {{}, "'shape': (), }"}, {{3}, "'shape': (3,), }"}, {{0, 2}, "'shape': (0, 2), }"}};
  for (const auto& [shape, text] : cases) {
    const std::string bytes = serialize_npy(sample(shape, DType::f64));
    EXPECT_THAT(bytes, HasSubstr("'descr': '<f8'"));
    EXPECT_THAT(bytes, HasSubstr(text));
    const size_t header_len = uint8_t(bytes[8]) | (size_t(uint8_t(bytes[9])) << 8);
    EXPECT_EQ((10 + header_len) % 64, 0u) << shape_str(shape);
    EXPECT_EQ(bytes[10 + header_len - 1], '\n');
  }
  EXPECT_THAT(serialize_npy(sample({2}, DType::i64)), HasSubstr("'descr': '<i8'"));
}

TEST(Npy, WriterRefusesUndefinedTensor) {
  expect_error([] { serialize_npy(Tensor()); }, {"undefined"});
}

// ---- .npy: header variants ---------------------------------------------------------------

TEST(Npy, HeaderVariantsAccepted) {
  const std::string data12 = serialize_npy(sample({3, 4}, DType::f32)).substr(128);
  ASSERT_EQ(data12.size(), 48u);
  const std::string dicts[] = {
      "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }",
      "{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (3, 4)}",
      "{'shape': (3, 4), 'descr': '<f4', 'fortran_order': False}",
      "{'fortran_order':False,'shape':(3,4),'descr':'<f4',}",
      "  {  'descr' : '=f4' ,\t'fortran_order' : False , 'shape' : ( 3 , 4 , ) , }  ",
      "{'descr': '<f4', 'fortran_order': False, 'shape': (3L, 4L), }",
  };
  for (const std::string& dict : dicts) {
    for (int version : {1, 2, 3}) {
      const Tensor t = parse_npy(npy_bytes(dict, data12, version), "mem");
      expect_same(sample({3, 4}, DType::f32), t, dict + " v" + std::to_string(version));
    }
  }
}

TEST(Npy, ScalarAndOneDimHeaders) {
  const Tensor s = parse_npy(
      npy_bytes("{'descr': '<i8', 'fortran_order': False, 'shape': (), }", zeros(8)), "mem");
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(s.numel(), 1);
  const Tensor v = parse_npy(
      npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (5,), }", zeros(40)), "mem");
  EXPECT_EQ(v.shape(), Shape{5});
  EXPECT_EQ(v.dtype(), DType::f64);
  const Tensor e = parse_npy(
      npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (0, 1000000000000), }", ""),
      "mem");
  EXPECT_EQ(e.numel(), 0);
}

// ---- .npy: hostile inputs ----------------------------------------------------------------

const std::string kGoodDict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";

TEST(NpyHostile, EmptyAndBadMagic) {
  expect_error([] { parse_npy("", "x.npy"); }, {"x.npy", "empty"});
  expect_error([] { parse_npy("PK\x03\x04 zip file not npy", "x.npy"); }, {"x.npy", "magic"});
  expect_error([] { parse_npy("\x93NUMPX\x01\x00\x10\x00", "x.npy"); }, {"magic"});
  expect_error([] { parse_npy(std::string("\x93NUMPY\x01", 7), "x.npy"); }, {"truncated"});
  expect_error([] { parse_npy(std::string("\x93NUMPY\x02\x00\x10\x00", 10), "x.npy"); },
               {"truncated"});
  std::string v4 = npy_bytes(kGoodDict, zeros(24));
  v4[6] = 4;
  expect_error([&] { parse_npy(v4, "x.npy"); }, {"version 4.0"});
}

TEST(NpyHostile, HeaderLengthAndTerminator) {
  // Header length claims more bytes than the file holds.
  std::string beyond = npy_bytes(kGoodDict, "");
  beyond[8] = char(0xff);
  beyond[9] = char(0xff);
  expect_error([&] { parse_npy(beyond, "x.npy"); }, {"x.npy", "truncated", "65535"});
  // Same for a v2.0 u32 length near 4 GiB.
  std::string beyond2 = npy_bytes(kGoodDict, "", 2);
  for (int i = 8; i < 12; ++i) beyond2[i] = char(0xff);
  expect_error([&] { parse_npy(beyond2, "x.npy"); }, {"truncated", "4294967295"});
  // File cut in the middle of the header.
  const std::string whole = npy_bytes(kGoodDict, zeros(24));
  expect_error([&] { parse_npy(whole.substr(0, 40), "x.npy"); }, {"truncated"});
  // Header not ended by '\n'.
  expect_error([] { parse_npy(npy_bytes(kGoodDict, zeros(24), 1, true), "x.npy"); }, {"'\\n'"});
  expect_error([] { parse_npy(npy_bytes("", "", 1, true), "x.npy"); }, {"'\\n'"});
}

TEST(NpyHostile, DataSizeMustMatch) {
  expect_error([] { parse_npy(npy_bytes(kGoodDict, zeros(23)), "x.npy"); },
               {"x.npy", "truncated: expected 24 data bytes, found 23"});
  expect_error([] { parse_npy(npy_bytes(kGoodDict, ""), "x.npy"); },
               {"truncated: expected 24 data bytes, found 0"});
  expect_error([] { parse_npy(npy_bytes(kGoodDict, zeros(25)), "x.npy"); },
               {"1 unexpected bytes", "expected exactly 24"});
}

TEST(NpyHostile, HugeAndNegativeShapes) {
  // Would need 4e24 bytes; must fail on arithmetic, never reach an allocation.
  expect_error(
      [] {
        parse_npy(npy_bytes("{'descr': '<f4', 'fortran_order': False, "
                            "'shape': (1000000000000, 1000000000000), }",
                            zeros(16)),
                  "x.npy");
      },
      {"x.npy", "too large"});
  // Fits in int64 elements but not in bytes.
  expect_error(
      [] {
        parse_npy(npy_bytes("{'descr': '<f8', 'fortran_order': False, "
                            "'shape': (4611686018427387904,), }",
                            zeros(16)),
                  "x.npy");
      },
      {"too large"});
  // Plausible size, no data: a size check, not an allocation.
  expect_error(
      [] {
        parse_npy(
            npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (1000000, 1000000), }",
                      zeros(16)),
            "x.npy");
      },
      {"truncated: expected 8000000000000 data bytes, found 16"});
  expect_error(
      [] {
        parse_npy(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': "
                            "(99999999999999999999999999,), }",
                            ""),
                  "x.npy");
      },
      {"too large"});
  expect_error(
      [] {
        parse_npy(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (-3, 4), }", ""),
                  "x.npy");
      },
      {"x.npy", "negative", "-3"});
  expect_error(
      [] {
        parse_npy(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2.5,), }", ""),
                  "x.npy");
      },
      {"x.npy"});
  expect_error(
      [] {
        parse_npy(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': ('a',), }", ""),
                  "x.npy");
      },
      {"non-integer", "'a'"});
  expect_error(
      [] {
        parse_npy(
            npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': [2, 3], }", zeros(24)),
            "x.npy");
      },
      {"'shape' must be a tuple"});
}

TEST(NpyHostile, UnsupportedDtypes) {
  for (const char* descr : {">f4", "<f2", "<i4", "|b1", "<c8", "O", "|u1", "<U3", ">i8", "f4"}) {
    const std::string dict =
        std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': (2,), }";
    expect_error(
        [&] { parse_npy(npy_bytes(dict, zeros(16)), "x.npy"); },
        {"x.npy: unsupported dtype '" + std::string(descr) + "'", "'<f4', '<f8' or '<i8'"});
  }
  // Structured dtype: descr is a list of (name, type) tuples.
  expect_error(
      [] {
        parse_npy(npy_bytes("{'descr': [('a', '<f4'), ('b', '<i8')], 'fortran_order': False, "
                            "'shape': (2,), }",
                            zeros(24)),
                  "x.npy");
      },
      {"unsupported dtype [('a', '<f4'), ('b', '<i8')]", "structured", "'<f4', '<f8' or '<i8'"});
}

TEST(NpyHostile, FortranOrderAndBadKeys) {
  expect_error(
      [] {
        parse_npy(
            npy_bytes("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", zeros(24)),
            "x.npy");
      },
      {"x.npy", "fortran_order", "C-order"});
  expect_error(
      [] {
        parse_npy(npy_bytes("{'descr': '<f4', 'fortran_order': 0, 'shape': (2, 3), }", zeros(24)),
                  "x.npy");
      },
      {"fortran_order", "True or False"});
  expect_error(
      [] { parse_npy(npy_bytes("{'descr': '<f4', 'shape': (2, 3), }", zeros(24)), "x.npy"); },
      {"no 'fortran_order' key"});
  expect_error(
      [] {
        parse_npy(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), "
                            "'extra': 1}",
                            zeros(24)),
                  "x.npy");
      },
      {"unexpected key 'extra'"});
  expect_error(
      [] {
        parse_npy(npy_bytes("{'descr': '<f4', 'descr': '<f8', 'fortran_order': False, "
                            "'shape': (2, 3)}",
                            zeros(24)),
                  "x.npy");
      },
      {"'descr' appears twice"});
}

TEST(NpyHostile, MalformedDictSyntax) {
  const char* bad[] = {
      "not a dict",
      "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)",   // no '}'
      "{'descr': '<f4 , 'fortran_order': False, 'shape': (2, 3)}",  // unterminated string
      "{'descr': '<f4' 'fortran_order': False, 'shape': (2, 3)}",   // missing ','
      "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)} trailing",
      "{'descr': '<f4', 'fortran_order': Falsey, 'shape': (2, 3)}",
      "{descr: '<f4', 'fortran_order': False, 'shape': (2, 3)}",
      "{'descr': '<f4', 'fortran_order': False, 'shape': (2 3)}",
      "{'descr': '<f4', 'fortran_order': False, 'shape': (-)}",
      "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)}\x01\x02",
  };
  for (const char* dict : bad) {
    expect_error([&] { parse_npy(npy_bytes(dict, zeros(24)), "x.npy"); },
                 {"x.npy: malformed .npy header"});
  }
  // Deep nesting must be refused, not overflow the stack.
  const std::string deep = "{'descr': " + std::string(100000, '(') + "}";
  expect_error([&] { parse_npy(npy_bytes(deep, "", 2), "x.npy"); }, {"nested too deeply"});
}

TEST_F(IoDir, NpyFileErrorsNameThePath) {
  const std::string p = path("bad.npy");
  write_raw("bad.npy", npy_bytes(kGoodDict, zeros(10)));
  expect_error([&] { read_npy(p); }, {p + ": truncated: expected 24 data bytes, found 10"});
  EXPECT_THAT(error_of([&] { read_npy(p); }), StartsWith(p));
  expect_error([&] { read_npy(path("missing.npy")); },
               {"cannot open '" + path("missing.npy") + "': No such file or directory"});
}

// map_npy: the same tensors and the same errors as read_npy, and the file never changes.
TEST_F(IoDir, NpyMappedEqualsReadAndLeavesTheFileAlone) {
  for (DType dt : kDTypes) {
    for (const Shape& shape : kShapes) {
      const std::string what = std::string(dtype_name(dt)) + " " + shape_str(shape) + " mapped";
      const Tensor t = sample(shape, dt);
      write_npy(path("t.npy"), t);
      expect_same(t, map_npy(path("t.npy")), what);
    }
  }
  const Tensor t = sample({4, 5}, DType::f64);
  write_npy(path("m.npy"), t);
  const std::string before = read_file(path("m.npy"));
  Tensor m = map_npy(path("m.npy"));
  m.fill(7.0);
  EXPECT_EQ(m.at_flat(3), 7.0);
  EXPECT_EQ(read_file(path("m.npy")), before) << "writing to a mapped tensor changed the file";
  write_raw("bad.npy", npy_bytes(kGoodDict, zeros(10)));
  EXPECT_EQ(error_of([&] { map_npy(path("bad.npy")); }),
            error_of([&] { read_npy(path("bad.npy")); }));
  EXPECT_EQ(error_of([&] { map_npy(path("missing.npy")); }),
            error_of([&] { read_npy(path("missing.npy")); }));
  write_raw("empty.npy", "");
  expect_error([&] { map_npy(path("empty.npy")); }, {"empty"});
}

// ---- safetensors: round trips ------------------------------------------------------------

TEST_F(IoDir, SafetensorsRoundTrip) {
  std::map<std::string, Tensor> tensors;
  int k = 0;
  for (DType dt : kDTypes) {
    for (const Shape& shape : kShapes) {
      std::string name = "t";
      name.append(std::to_string(k++)).append("_").append(dtype_name(dt));
      tensors[name] = sample(shape, dt);
    }
    tensors[std::string("view_") + dtype_name(dt)] = sample({3, 4, 2}, dt).transpose(0, 2);
  }
  const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"note", "é \" \n"}};
  write_safetensors(path("m.safetensors"), tensors, metadata);
  EXPECT_EQ(listing(), std::vector<std::string>{"m.safetensors"});
  const SafeTensors back = read_safetensors(path("m.safetensors"));
  EXPECT_EQ(back.metadata, metadata);
  ASSERT_EQ(back.tensors.size(), tensors.size());
  for (const auto& [key, t] : tensors) {
    ASSERT_TRUE(back.tensors.count(key)) << key;
    expect_same(t, back.tensors.at(key), key);
  }
}

TEST(Safetensors, WriterLayout) {
  const std::map<std::string, Tensor> tensors = {
      {"b", Tensor::from_vector<double>({2}, {1.5, -2.5})},
      {"a", Tensor::from_vector<float>({3}, {1, 2, 3})}};
  const std::string bytes = serialize_safetensors(tensors);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(uint8_t(bytes[i])) << (8 * i);
  EXPECT_EQ(n % 8, 0u);
  ASSERT_EQ(bytes.size(), 8 + n + 12 + 16);
  const std::string header = bytes.substr(8, n);
  EXPECT_EQ(header.find("__metadata__"), std::string::npos);  // omitted when empty
  // Keys sorted: "a" (12 bytes) first, then "b".
  EXPECT_THAT(header, HasSubstr("\"a\":{\"data_offsets\":[0,12],\"dtype\":\"F32\",\"shape\":[3]}"));
  EXPECT_THAT(header,
              HasSubstr("\"b\":{\"data_offsets\":[12,28],\"dtype\":\"F64\",\"shape\":[2]}"));
  EXPECT_EQ(header.substr(header.rfind('}') + 1).find_first_not_of(' '), std::string::npos);
  const float* a = reinterpret_cast<const float*>(bytes.data() + 8 + n);
  EXPECT_EQ(a[2], 3.0f);

  // No tensors at all is still a valid file.
  const SafeTensors empty = parse_safetensors(serialize_safetensors({}), "mem");
  EXPECT_TRUE(empty.tensors.empty());
  EXPECT_TRUE(empty.metadata.empty());
}

TEST(Safetensors, WriterRefusesBadInput) {
  expect_error(
      [] {
        serialize_safetensors({{"__metadata__", sample({1}, DType::f32)}});
      },
      {"__metadata__", "reserved"});
  expect_error([] { serialize_safetensors({{"w", Tensor()}}); }, {"\"w\"", "undefined"});
  expect_error([] { serialize_safetensors({{"bad\xff", sample({1}, DType::f32)}}); }, {"UTF-8"});
}

TEST(Safetensors, ReaderAcceptsForeignLayout) {
  // Keys unsorted, tensors stored out of key order, whitespace, metadata first.
  const std::string header =
      R"( { "__metadata__": {"a": "b"}, "z": {"shape": [2], "dtype": "I64", "data_offsets": [0, 16]},)"
      R"( "a": {"dtype": "F32", "data_offsets": [16, 20], "shape": []}, )"
      R"( "e": {"dtype": "F64", "shape": [0, 3], "data_offsets": [20, 20]} } )";
  std::string data(20, '\0');
  data[0] = 7;
  data[8] = char(0xff);
  for (int i = 9; i < 16; ++i) data[i] = char(0xff);
  const SafeTensors st = parse_safetensors(st_bytes(header, data), "mem");
  ASSERT_EQ(st.tensors.size(), 3u);
  EXPECT_EQ(st.tensors.at("z").at_flat(0), 7.0);
  EXPECT_EQ(st.tensors.at("z").at_flat(1), -1.0);
  EXPECT_EQ(st.tensors.at("a").dim(), 0);
  EXPECT_EQ(st.tensors.at("e").shape(), (Shape{0, 3}));
  EXPECT_EQ(st.metadata.at("a"), "b");
}

// ---- safetensors: hostile inputs ---------------------------------------------------------

// One F32 tensor "w" of shape (2,) with its 8 bytes; `entry` replaces the entry's JSON.
std::string one_tensor(const std::string& entry, const std::string& data = zeros(8)) {
  return st_bytes("{\"w\": " + entry + "}", data);
}
const std::string kGoodEntry = R"({"dtype": "F32", "shape": [2], "data_offsets": [0, 8]})";

TEST(SafetensorsHostile, HeaderLength) {
  ASSERT_NO_THROW(parse_safetensors(one_tensor(kGoodEntry), "m.st"));
  expect_error([] { parse_safetensors("", "m.st"); }, {"m.st", "too short", "8"});
  expect_error([] { parse_safetensors("\x01\x02\x03", "m.st"); }, {"too short"});
  expect_error([] { parse_safetensors(st_bytes("{}", "", uint64_t(1) << 63), "m.st"); },
               {"m.st", "header length 9223372036854775808", "larger than the 2 bytes"});
  expect_error([] { parse_safetensors(st_bytes("{}", "", ~uint64_t(0)), "m.st"); },
               {"header length 18446744073709551615"});
  expect_error([] { parse_safetensors(st_bytes("{}", "", 3), "m.st"); }, {"header length 3"});
}

TEST(SafetensorsHostile, NotJsonOrNotObject) {
  expect_error([] { parse_safetensors(st_bytes("{\"w\": ", ""), "m.st"); },
               {"m.st: safetensors header is not valid JSON"});
  expect_error([] { parse_safetensors(st_bytes("hello world", ""), "m.st"); }, {"not valid JSON"});
  expect_error([] { parse_safetensors(st_bytes("", ""), "m.st"); }, {"not valid JSON"});
  expect_error([] { parse_safetensors(st_bytes("{} {}", ""), "m.st"); }, {"not valid JSON"});
  expect_error([] { parse_safetensors(st_bytes("{\"a\n\x01\": 1}", ""), "m.st"); },
               {"not valid JSON"});
  expect_error([] { parse_safetensors(st_bytes("[1, 2]", ""), "m.st"); },
               {"must be a JSON object", "array"});
  expect_error([] { parse_safetensors(st_bytes("{\"w\": 3}", ""), "m.st"); },
               {"tensor \"w\"", "expected an object"});
  expect_error(
      [] {
        parse_safetensors(
            st_bytes("{\"w\": " + kGoodEntry + ", \"w\": " + kGoodEntry + "}", zeros(8)), "m.st");
      },
      {"\"w\" twice"});
  // Deep nesting in JSON: nlohmann's parser is iterative; must not crash.
  const std::string deep = std::string(200000, '[') + std::string(200000, ']');
  expect_error([&] { parse_safetensors(st_bytes(deep, ""), "m.st"); }, {"JSON object"});
}

TEST(SafetensorsHostile, MissingAndExtraFields) {
  expect_error(
      [] { parse_safetensors(one_tensor(R"({"shape": [2], "data_offsets": [0, 8]})"), "m.st"); },
      {"m.st", "tensor \"w\"", "missing field 'dtype'"});
  expect_error(
      [] { parse_safetensors(one_tensor(R"({"dtype": "F32", "data_offsets": [0, 8]})"), "m.st"); },
      {"missing field 'shape'"});
  expect_error([] { parse_safetensors(one_tensor(R"({"dtype": "F32", "shape": [2]})"), "m.st"); },
               {"missing field 'data_offsets'"});
  expect_error(
      [] {
        parse_safetensors(
            one_tensor(R"({"dtype": "F32", "shape": [2], "data_offsets": [0, 8], "x": 1})"),
            "m.st");
      },
      {"unexpected field \"x\""});
  expect_error(
      [] {
        parse_safetensors(one_tensor(R"({"dtype": 1, "shape": [2], "data_offsets": [0, 8]})"),
                          "m.st");
      },
      {"dtype must be a string"});
}

TEST(SafetensorsHostile, BadShapes) {
  expect_error(
      [] {
        parse_safetensors(one_tensor(R"({"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]})"),
                          "m.st");
      },
      {"tensor \"w\"", "negative"});
  expect_error(
      [] {
        parse_safetensors(one_tensor(R"({"dtype": "F32", "shape": [2.0], "data_offsets": [0, 8]})"),
                          "m.st");
      },
      {"non-integer"});
  expect_error(
      [] {
        parse_safetensors(one_tensor(R"({"dtype": "F32", "shape": 2, "data_offsets": [0, 8]})"),
                          "m.st");
      },
      {"shape must be an array"});
  // Deeply nested values inside an entry: the message must not recurse through them.
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  expect_error(
      [&] {
        parse_safetensors(
            one_tensor(R"({"dtype": "F32", "shape": )" + deep + R"(, "data_offsets": [0, 8]})"),
            "m.st");
      },
      {"shape [[...]]", "array"});
  expect_error(
      [&] {
        parse_safetensors(
            one_tensor(R"({"dtype": "F32", "shape": [2], "data_offsets": )" + deep + "}"), "m.st");
      },
      {"data_offsets must be [begin, end]", "[[...]]"});
  // Huge shapes: overflow is caught by arithmetic, nothing is allocated.
  expect_error(
      [] {
        parse_safetensors(one_tensor(R"({"dtype": "F32", "shape": [1000000000000, 1000000000000],)"
                                     R"( "data_offsets": [0, 8]})"),
                          "m.st");
      },
      {"tensor \"w\"", "too large"});
  expect_error(
      [] {
        parse_safetensors(one_tensor(R"({"dtype": "F64", "shape": [18446744073709551615],)"
                                     R"( "data_offsets": [0, 8]})"),
                          "m.st");
      },
      {"too large"});
  expect_error(
      [] {
        parse_safetensors(one_tensor(R"({"dtype": "F64", "shape": [1000000, 1000000],)"
                                     R"( "data_offsets": [0, 8000000000000]})"),
                          "m.st");
      },
      {"out of range", "8000000000000", "8 bytes"});
}

TEST(SafetensorsHostile, UnsupportedDtypes) {
  for (const char* dt : {"F16", "BF16", "I32", "U8", "BOOL", "I8", "F8_E4M3", "f32", ""}) {
    const std::string entry =
        std::string(R"({"dtype": ")") + dt + R"(", "shape": [2], "data_offsets": [0, 8]})";
    expect_error(
        [&] { parse_safetensors(one_tensor(entry), "m.st"); },
        {"m.st: tensor \"w\": unsupported dtype \"" + std::string(dt) + "\"", "F32, F64 or I64"});
  }
}

TEST(SafetensorsHostile, BadOffsets) {
  expect_error(
      [] {
        parse_safetensors(
            one_tensor(R"({"dtype": "F32", "shape": [2], "data_offsets": [0, 8]})", zeros(4)),
            "m.st");
      },
      {"tensor \"w\"", "out of range", "4 bytes"});
  expect_error(
      [] {
        parse_safetensors(one_tensor(R"({"dtype": "F32", "shape": [2], "data_offsets": [8, 0]})"),
                          "m.st");
      },
      {"begin > end"});
  expect_error(
      [] {
        parse_safetensors(one_tensor(R"({"dtype": "F32", "shape": [2], "data_offsets": [0]})"),
                          "m.st");
      },
      {"data_offsets must be [begin, end]"});
  expect_error(
      [] {
        parse_safetensors(one_tensor(R"({"dtype": "F32", "shape": [2], "data_offsets": [-1, 7]})"),
                          "m.st");
      },
      {"data_offsets must be [begin, end]"});
  expect_error(
      [] {
        parse_safetensors(
            one_tensor(R"({"dtype": "F32", "shape": [2], "data_offsets": [0, 12]})", zeros(12)),
            "m.st");
      },
      {"tensor \"w\"", "span 12 bytes, expected 8"});
  expect_error(
      [] {
        parse_safetensors(
            one_tensor(R"({"dtype": "F32", "shape": [2],)"
                       R"( "data_offsets": [18446744073709551615, 18446744073709551615]})"),
            "m.st");
      },
      {"span 0 bytes, expected 8"});
  // Overlap: both tensors read bytes [4, 8).
  expect_error(
      [] {
        parse_safetensors(
            st_bytes(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},)"
                     R"( "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
                     zeros(12)),
            "m.st");
      },
      {"m.st", "\"a\"", "\"b\"", "overlap"});
  // Two names for the same bytes.
  expect_error(
      [] {
        parse_safetensors(
            st_bytes(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},)"
                     R"( "b": {"dtype": "I64", "shape": [1], "data_offsets": [0, 8]}})",
                     zeros(8)),
            "m.st");
      },
      {"overlap"});
  // A hole between tensors, and bytes after the last one.
  expect_error(
      [] {
        parse_safetensors(
            st_bytes(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},)"
                     R"( "b": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}})",
                     zeros(12)),
            "m.st");
      },
      {"[4, 8)", "\"b\"", "holes"});
  expect_error([] { parse_safetensors(one_tensor(kGoodEntry, zeros(9)), "m.st"); },
               {"9 bytes", "cover only 8"});
}

TEST(SafetensorsHostile, Metadata) {
  expect_error([] { parse_safetensors(st_bytes(R"({"__metadata__": {"k": 5}})", ""), "m.st"); },
               {"m.st", "__metadata__", "\"k\"", "expected a string"});
  expect_error(
      [] { parse_safetensors(st_bytes(R"({"__metadata__": {"k": {"x": "y"}}})", ""), "m.st"); },
      {"__metadata__", "\"k\"", "object"});
  expect_error([] { parse_safetensors(st_bytes(R"({"__metadata__": ["a"]})", ""), "m.st"); },
               {"__metadata__ must be an object"});
}

TEST_F(IoDir, SafetensorsFileErrorsNameThePath) {
  const std::string p = path("bad.safetensors");
  write_raw("bad.safetensors", st_bytes("{}", "", uint64_t(1) << 63));
  EXPECT_THAT(error_of([&] { read_safetensors(p); }), StartsWith(p + ": "));
  expect_error([&] { read_safetensors(path("none.safetensors")); },
               {"cannot open '" + path("none.safetensors") + "'", "No such file"});
}

// ---- whole-file I/O ------------------------------------------------------------------------

TEST_F(IoDir, AtomicWriteReplacesAndLeavesNoTemp) {
  const std::string p = path("out.bin");
  write_file_atomic(p, std::string(100000, 'a'));
  const std::string content = std::string(12345, 'b') + std::string("\0\x01\xff", 3);
  write_file_atomic(p, content);
  EXPECT_EQ(read_file(p), content);
  EXPECT_EQ(listing(), std::vector<std::string>{"out.bin"});
  write_file_atomic(p, "");
  EXPECT_EQ(read_file(p), "");
  EXPECT_EQ(listing(), std::vector<std::string>{"out.bin"});
}

TEST_F(IoDir, AtomicWriteIntoMissingFolderCreatesNothing) {
  const std::string p = path("no/such/dir/out.npy");
  expect_error([&] { write_file_atomic(p, "data"); }, {p, "No such file or directory"});
  expect_error([&] { write_npy(p, sample({2}, DType::f32)); }, {p});
  EXPECT_FALSE(fs::exists(path("no")));
  EXPECT_TRUE(listing().empty());
}

TEST_F(IoDir, AtomicWriteOverFolderFailsCleanly) {
  fs::create_directories(path("sub"));
  fs::create_directories(path("sub/inner"));  // non-empty, so rename cannot replace it
  expect_error([&] { write_file_atomic(path("sub"), "data"); }, {path("sub")});
  EXPECT_EQ(listing(), std::vector<std::string>{"sub"});
}

// A write that the file system refuses part way (a file-size limit, as a full disk refuses):
// a clear error naming the file and the reason, the previous file intact, no temporary file
// left. For each writer that files go through: .npy, safetensors, raw bytes. In a child
// process, which takes the limit (and ignores SIGXFSZ, so that write fails with EFBIG).
TEST_F(IoDir, AWriteTheFileSystemRefusesLeavesThePreviousFile) {
  const std::string npy = path("x.npy"), st = path("w.safetensors"), raw = path("r.bin");
  const Tensor small = Tensor::full({4}, 2.0, DType::f32);
  write_npy(npy, small);
  write_safetensors(st, {{"w", small}});
  write_file_atomic(raw, "old");
  const std::string npy_before = read_file(npy), st_before = read_file(st);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::signal(SIGXFSZ, SIG_IGN);
    const struct rlimit lim = {1 << 16, 1 << 16};  // 64 KiB a file
    if (::setrlimit(RLIMIT_FSIZE, &lim) != 0) ::_exit(3);
    const Tensor big = Tensor::zeros({1 << 16}, DType::f32);  // 256 KiB
    int refused = 0;
    const auto attempt = [&](const std::function<void()>& f) {
      try {
        f();
      } catch (const Error& e) {
        const std::string m = e.what();
        if (m.find("File too large") != std::string::npos && m.find(" '") != std::string::npos)
          ++refused;
      }
    };
    attempt([&] { write_npy(npy, big); });
    attempt([&] { write_safetensors(st, {{"w", big}}); });
    attempt([&] { write_file_atomic(raw, std::string(1 << 17, 'x')); });
    ::_exit(refused == 3 ? 0 : 10 + refused);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "3: setrlimit failed; 10 + n: only n writes refused";
  EXPECT_EQ(read_file(npy), npy_before);
  EXPECT_EQ(read_file(st), st_before);
  EXPECT_EQ(read_file(raw), "old");
  EXPECT_EQ(listing(), (std::vector<std::string>{"r.bin", "w.safetensors", "x.npy"}));
}

TEST_F(IoDir, ReadFileChecks) {
  write_raw("f.bin", "0123456789");
  EXPECT_EQ(read_file(path("f.bin")), "0123456789");
  EXPECT_EQ(read_file(path("f.bin"), 10), "0123456789");
  expect_error([&] { read_file(path("f.bin"), 9); }, {path("f.bin"), "10 bytes", "limit of 9"});
  expect_error([&] { read_file(path("nope")); },
               {"cannot open '" + path("nope") + "': No such file or directory"});
  expect_error([&] { read_file(dir_.string()); }, {dir_.string(), "not a regular file"});
}

}  // namespace
}  // namespace grux::test_io
