// The C API (grux/grux.h): outputs against PyTorch (golden/capi, tests/reference/
// gen_capi_golden.py), bit-identity with the C++ GruStream / LstmStream + head, independence from
// how frames are split and from threads, and every error path (one-line message, no crash).
// tests/test_capi_c.c checks that the header is C99 and runs the basics from C.
#include <cstring>
#include <fstream>
#include <thread>

#include "core/sanitizer.h"
#include "grux/gru.h"
#include "grux/grux.h"
#include "grux/lstm.h"
#include "grux/model.h"
#include "grux/nn.h"
#include "grux/version.h"
#include "test_util.h"

namespace grux::test_capi {
namespace {

using test::TempDir;

const std::string kGolden = std::string(GRUX_GOLDEN_DIR) + "/capi/";

struct ModelDeleter {
  void operator()(grux_model* m) const { grux_model_free(m); }
};
struct StreamDeleter {
  void operator()(grux_stream* s) const { grux_stream_free(s); }
};
using ModelPtr = std::unique_ptr<grux_model, ModelDeleter>;
using StreamPtr = std::unique_ptr<grux_stream, StreamDeleter>;

ModelPtr load(const std::string& path, const char* gru, const char* head, unsigned flags) {
  char err[512];
  ModelPtr m(grux_model_load(path.c_str(), gru, head, flags, err, sizeof err));
  EXPECT_TRUE(m) << err;
  return m;
}

// The error message of a load that must fail (and does not crash).
std::string load_error(const std::string& path, const char* gru, const char* head,
                       unsigned flags = 0) {
  char err[512];
  std::memset(err, 'x', sizeof err);
  grux_model* m = grux_model_load(path.c_str(), gru, head, flags, err, sizeof err);
  EXPECT_EQ(m, nullptr) << "loaded " << path;
  grux_model_free(m);
  EXPECT_NE(std::memchr(err, '\0', sizeof err), nullptr);
  EXPECT_EQ(std::strchr(err, '\n'), nullptr) << err;
  return err;
}

// Runs `frames` (T, N, I) f32 through a fresh stream, `chunk` frames per call.
Tensor run(const grux_model* m, const Tensor& frames, int64_t chunk, int threads = 1) {
  const int64_t T = frames.size(0), N = frames.size(1);
  char err[256];
  StreamPtr s(grux_stream_create(m, N, threads, err, sizeof err));
  EXPECT_TRUE(s) << err;
  if (!s) return {};
  Tensor out = Tensor::zeros({T, N, grux_model_output_size(m)}, DType::f32);
  const Tensor in = frames.contiguous();
  const int64_t I = grux_model_input_size(m), O = grux_model_output_size(m);
  for (int64_t t = 0; t < T; t += chunk) {
    const int64_t n = std::min(chunk, T - t);
    EXPECT_EQ(grux_stream_process(s.get(), in.data<float>() + t * N * I,
                                  out.data<float>() + t * N * O, n),
              GRUX_OK)
        << grux_stream_error(s.get());
  }
  return out;
}

bool bit_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         std::memcmp(a.contiguous().raw_data(), b.contiguous().raw_data(),
                     a.numel() * dtype_size(a.dtype())) == 0;
}

// The keys of `file` under `prefix`, prefix removed.
std::map<std::string, Tensor> under(const SafeTensors& file, const std::string& prefix) {
  std::map<std::string, Tensor> out;
  for (const auto& [k, v] : file.tensors)
    if (k.rfind(prefix, 0) == 0) out[k.substr(prefix.size())] = v;
  return out;
}

TEST(CApi, ResidualModelMatchesPyTorch) {
  const std::string path = kGolden + "model_residual.safetensors";
  const SafeTensors g = read_safetensors(path);
  ModelPtr m = load(path, "rnn.", "fc.", GRUX_RESIDUAL);
  ASSERT_TRUE(m);
  EXPECT_EQ(grux_model_input_size(m.get()), 3);
  EXPECT_EQ(grux_model_output_size(m.get()), 3);
  const Tensor out = run(m.get(), g.tensors.at("input"), 1000);
  EXPECT_TRUE(test::all_close("residual", "output", out, g.tensors.at("expected"),
                              test::tol_for(DType::f32)));
}

TEST(CApi, PlainModelMatchesPyTorch) {
  // No head (NULL and "" alike); the file's other keys ("other.w", "input") are not the GRU's.
  const std::string path = kGolden + "model_plain.safetensors";
  const SafeTensors g = read_safetensors(path);
  for (const char* head : {static_cast<const char*>(nullptr), ""}) {
    ModelPtr m = load(path, "rnn.", head, 0);
    ASSERT_TRUE(m);
    EXPECT_EQ(grux_model_output_size(m.get()), 5);
    EXPECT_TRUE(test::all_close("plain", "output", run(m.get(), g.tensors.at("input"), 7),
                                g.tensors.at("expected"), test::tol_for(DType::f32)));
  }
}

TEST(CApi, BitIdenticalToGruStreamAndLinear) {
  const std::string path = kGolden + "model_residual.safetensors";
  const SafeTensors g = read_safetensors(path);
  const Tensor x = g.tensors.at("input");
  const int64_t T = x.size(0), N = x.size(1);
  // The C++ API: GruStream, then linear_forward, then the skip connection.
  const Gru gru = Gru::from_state_dict(under(g, "rnn."));
  GruStream stream(gru, N);
  const Tensor h = stream.step(x);
  Tensor expected =
      linear_forward(h.view({T * N, 6}), g.tensors.at("fc.weight"), g.tensors.at("fc.bias"))
          .view({T, N, 3});
  for (int64_t i = 0; i < expected.numel(); ++i)
    expected.data<float>()[i] = x.contiguous().data<float>()[i] + expected.data<float>()[i];

  ModelPtr m = load(path, "rnn.", "fc.", GRUX_RESIDUAL);
  ASSERT_TRUE(m);
  for (int64_t chunk : {int64_t(1), int64_t(5), T})
    EXPECT_TRUE(bit_equal(run(m.get(), x, chunk), expected)) << "chunk " << chunk;
}

// GRUX_BF16 / GRUX_INT8: the C++ GruStream of that precision + linear_forward + the input
// (bit for bit for a batch), near PyTorch's f32 output (within the precision's scale), for one
// sequence (where f32 would run the real-time kernel) and a batch, frame by frame or in one call.
TEST(CApi, PrecisionFlagsRunTheStreamInThatPrecision) {
  const std::string path = kGolden + "model_residual.safetensors";
  const SafeTensors g = read_safetensors(path);
  const Tensor x = g.tensors.at("input");
  const int64_t T = x.size(0), N = x.size(1);
  const Gru gru = Gru::from_state_dict(under(g, "rnn."));
  for (auto [flag, prec] : {std::pair{GRUX_BF16, Precision::bf16}, {GRUX_INT8, Precision::int8}})
    for (int64_t n : {int64_t(1), N}) {
      const Tensor xs = x.slice(1, 0, n).contiguous();
      GruStream stream(gru, n, {}, prec);
      const Tensor h = stream.step(xs);
      Tensor expected =
          linear_forward(h.view({T * n, 6}), g.tensors.at("fc.weight"), g.tensors.at("fc.bias"))
              .view({T, n, 3});
      for (int64_t i = 0; i < expected.numel(); ++i)
        expected.data<float>()[i] = xs.data<float>()[i] + expected.data<float>()[i];
      ModelPtr m = load(path, "rnn.", "fc.", GRUX_RESIDUAL | flag);
      ASSERT_TRUE(m);
      for (int64_t chunk : {int64_t(1), T}) {
        const Tensor out = run(m.get(), xs, chunk);
        // One sequence: the head runs as dot products of its rows (equal within rounding).
        if (n > 1)
          EXPECT_TRUE(bit_equal(out, expected)) << precision_name(prec) << " chunk " << chunk;
        else
          EXPECT_LE(max_abs_diff(out, expected), 1e-5)
              << precision_name(prec) << " chunk " << chunk;
        const double err = max_abs_diff(out, g.tensors.at("expected").slice(1, 0, n).contiguous());
        EXPECT_LT(err, 0.05) << precision_name(prec);
        EXPECT_GT(err, 1e-7) << precision_name(prec);
      }
    }
  EXPECT_THAT(load_error(path, "rnn.", "fc.", GRUX_BF16 | GRUX_INT8),
              ::testing::HasSubstr("GRUX_BF16 and GRUX_INT8 both given"));
}

// One sequence on one thread: the real-time kernel, with the head and residual computed in
// its steps. Each golden sequence alone matches PyTorch; results do not depend on the split
// into calls; they equal GruStream + linear_forward + the input within f32 rounding.
TEST(CApi, OneSequenceMatchesPyTorch) {
  const std::string path = kGolden + "model_residual.safetensors";
  const SafeTensors g = read_safetensors(path);
  const Gru gru = Gru::from_state_dict(under(g, "rnn."));
  ModelPtr m = load(path, "rnn.", "fc.", GRUX_RESIDUAL);
  ASSERT_TRUE(m);
  for (int64_t n : {0, 1}) {
    const Tensor x = g.tensors.at("input").slice(1, n, n + 1).contiguous();
    const Tensor want = g.tensors.at("expected").slice(1, n, n + 1).contiguous();
    const int64_t T = x.size(0);
    const Tensor out = run(m.get(), x, 1);
    EXPECT_TRUE(test::all_close("sequence " + std::to_string(n), "output", out, want,
                                test::tol_for(DType::f32)));
    for (int64_t chunk : {int64_t(5), int64_t(16), T})
      EXPECT_TRUE(bit_equal(run(m.get(), x, chunk), out)) << "chunk " << chunk;
    GruStream stream(gru, 1);
    Tensor cpp = linear_forward(stream.step(x).view({T, 6}), g.tensors.at("fc.weight"),
                                g.tensors.at("fc.bias"))
                     .view({T, 1, 3});
    for (int64_t i = 0; i < cpp.numel(); ++i) cpp.data<float>()[i] += x.data<float>()[i];
    EXPECT_TRUE(
        test::all_close("sequence " + std::to_string(n), "against C++", out, cpp, {1e-6, 1e-6}));
  }
}

// GRUX_RESIDUAL without a head (input size = hidden size): y = x + gru(x), on the real-time
// kernel (batch 1) and the engine (batch 2) alike.
TEST(CApi, ResidualWithoutAHead) {
  TempDir dir;
  GruConfig c;
  c.input_size = c.hidden_size = 6;
  c.num_layers = 2;
  const Gru gru(c, DType::f32, 3);
  const std::string path = dir.path + "/model.safetensors";
  write_safetensors(path, gru.state_dict());
  ModelPtr m = load(path, "", nullptr, GRUX_RESIDUAL);
  ASSERT_TRUE(m);
  EXPECT_EQ(grux_model_output_size(m.get()), 6);
  std::mt19937_64 rng(4);
  for (int64_t N : {1, 2}) {
    const Tensor x = test::random_tensor({11, N, 6}, DType::f32, rng);
    GruStream stream(gru, N);
    Tensor want = stream.step(x).contiguous();
    for (int64_t i = 0; i < want.numel(); ++i) want.data<float>()[i] += x.data<float>()[i];
    EXPECT_TRUE(bit_equal(run(m.get(), x, 3), want)) << "batch " << N;
  }
}

// A model written from C++: a reset-before GRU large enough for a thread team, with a head.
std::string write_model(const std::string& dir, GruForm form, int64_t H, bool head_bias) {
  GruConfig c;
  c.input_size = 4, c.hidden_size = H, c.num_layers = 2, c.form = form;
  const Gru gru(c, DType::f32, 11);
  std::map<std::string, Tensor> t;
  for (const auto& [k, v] : gru.state_dict()) t["net.gru." + k] = v;
  std::mt19937_64 rng(5);
  t["net.out.weight"] = test::random_tensor({2, H}, DType::f32, rng, 0.3);
  if (head_bias) t["net.out.bias"] = test::random_tensor({2}, DType::f32, rng);
  const std::string path = dir + "/model.safetensors";
  write_safetensors(path, t);
  return path;
}

TEST(CApi, ResetBeforeAndThreads) {
  TempDir dir;
  for (bool head_bias : {true, false}) {
    const std::string path = write_model(dir.path, GruForm::reset_before, 96, head_bias);
    const SafeTensors f = read_safetensors(path);
    GruConfig options;
    options.form = GruForm::reset_before;
    const Gru gru = Gru::from_state_dict(under(f, "net.gru."), options);
    std::mt19937_64 rng(1);
    const Tensor x = test::random_tensor({9, 3, 4}, DType::f32, rng);
    GruStream stream(gru, 3, {}, Precision::f32, 1);
    const Tensor h = stream.step(x);
    const Tensor expected = linear_forward(h.view({27, 96}), f.tensors.at("net.out.weight"),
                                           head_bias ? f.tensors.at("net.out.bias") : Tensor())
                                .view({9, 3, 2});

    ModelPtr m = load(path, "net.gru.", "net.out.", GRUX_RESET_BEFORE);
    ASSERT_TRUE(m);
    EXPECT_TRUE(bit_equal(run(m.get(), x, 2, 1), expected));
    EXPECT_TRUE(bit_equal(run(m.get(), x, 4, 0), expected)) << "threads 0";
    EXPECT_TRUE(bit_equal(run(m.get(), x, 9, 2), expected)) << "threads 2";
    // Without the flag the same weights give PyTorch's form: different numbers.
    ModelPtr other = load(path, "net.gru.", "net.out.", 0);
    EXPECT_FALSE(bit_equal(run(other.get(), x, 9), expected));
  }
}

TEST(CApi, StreamOutlivesItsModelAndResets) {
  const std::string path = kGolden + "model_residual.safetensors";
  const SafeTensors g = read_safetensors(path);
  const Tensor x = g.tensors.at("input").contiguous();
  ModelPtr m = load(path, "rnn.", "fc.", GRUX_RESIDUAL);
  ASSERT_TRUE(m);
  const Tensor expected = run(m.get(), x, 3);
  char err[256];
  StreamPtr s(grux_stream_create(m.get(), 2, 1, err, sizeof err));
  ASSERT_TRUE(s) << err;
  m.reset();  // the stream keeps its own copies (AddressSanitizer would catch a dangling read)
  Tensor out = Tensor::zeros(expected.shape(), DType::f32);
  for (int rep = 0; rep < 2; ++rep) {
    ASSERT_EQ(grux_stream_process(s.get(), x.data<float>(), out.data<float>(), x.size(0)), GRUX_OK);
    EXPECT_TRUE(bit_equal(out, expected)) << "after reset: " << rep;
    grux_stream_reset(s.get());
  }
}

TEST(CApi, OneModelManyThreads) {
  const std::string path = kGolden + "model_residual.safetensors";
  const Tensor x = read_safetensors(path).tensors.at("input");
  ModelPtr m = load(path, "rnn.", "fc.", GRUX_RESIDUAL);
  ASSERT_TRUE(m);
  const Tensor expected = run(m.get(), x, 1);
  std::vector<Tensor> outs(4);
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k) threads.emplace_back([&, k] { outs[k] = run(m.get(), x, 1 + k); });
  for (auto& t : threads) t.join();
  for (const Tensor& o : outs) EXPECT_TRUE(bit_equal(o, expected));
}

// LSTM models (the cell told by the shapes): a batch (the engine's path) and each sequence
// alone (the real-time kernel, the head inside its steps, except with a projection) match
// PyTorch, on any split of the frames; the batch is bit-identical to LstmStream.
TEST(CApi, LstmModelsMatchPyTorch) {
  struct Case {
    const char* file;
    unsigned flags;
    int64_t I, O;
  };
  for (const Case& k : {Case{"model_lstm_proteus", GRUX_RESIDUAL, 1, 1},
                        Case{"model_lstm_nam", 0, 1, 1}, Case{"model_lstm_proj", 0, 2, 2}}) {
    const std::string path = kGolden + k.file + ".safetensors";
    const SafeTensors g = read_safetensors(path);
    ModelPtr m = load(path, "rnn.", "fc.", k.flags);
    ASSERT_TRUE(m);
    EXPECT_EQ(grux_model_input_size(m.get()), k.I);
    EXPECT_EQ(grux_model_output_size(m.get()), k.O);
    const Tensor x = g.tensors.at("input"), want = g.tensors.at("expected");
    const test::Tol tol = test::tol_for(DType::f32);
    const Tensor batch = run(m.get(), x, 5);
    EXPECT_TRUE(test::all_close(k.file, "batch", batch, want, tol));
    EXPECT_TRUE(bit_equal(batch, run(m.get(), x, 37)));
    // The same through the C++ API.
    Lstm lstm = Lstm::from_state_dict(under(g, "rnn."));
    LstmStream cpp(lstm, x.size(1));
    GruStreamHead head;
    head.weight = g.tensors.at("fc.weight");
    head.bias = g.tensors.at("fc.bias");
    head.residual = k.flags & GRUX_RESIDUAL;
    cpp.set_head(head);
    EXPECT_TRUE(bit_equal(batch, cpp.step(x))) << k.file;
    for (int64_t n = 0; n < x.size(1); ++n) {
      const Tensor xn = x.slice(1, n, n + 1).contiguous();
      const Tensor one = run(m.get(), xn, 1);
      EXPECT_TRUE(test::all_close(k.file, "one sequence", one, want.slice(1, n, n + 1), tol));
      EXPECT_TRUE(bit_equal(one, run(m.get(), xn, 16))) << k.file;
    }
  }
  const std::string nam = kGolden + "model_lstm_nam.safetensors";
  EXPECT_THAT(load_error(nam, "rnn.", "fc.", GRUX_RESET_BEFORE),
              ::testing::HasSubstr("GRUX_RESET_BEFORE is a GRU's"));
  // bf16 and int8: LstmStream's bits of that precision (on any split and thread count), near
  // PyTorch's f32 within the precision's bound.
  for (unsigned flag : {GRUX_BF16, GRUX_INT8}) {
    const Precision prec = flag == GRUX_BF16 ? Precision::bf16 : Precision::int8;
    const SafeTensors g = read_safetensors(nam);
    ModelPtr m = load(nam, "rnn.", "fc.", flag);
    ASSERT_TRUE(m);
    const Tensor x = g.tensors.at("input"), want = g.tensors.at("expected");
    const Tensor got = run(m.get(), x, 5);
    Lstm lstm = Lstm::from_state_dict(under(g, "rnn."));
    LstmStream cpp(lstm, x.size(1), {}, {}, prec);
    GruStreamHead head;
    head.weight = g.tensors.at("fc.weight");
    head.bias = g.tensors.at("fc.bias");
    cpp.set_head(head);
    EXPECT_TRUE(bit_equal(got, cpp.step(x))) << precision_name(prec);
    EXPECT_TRUE(bit_equal(got, run(m.get(), x, 13, 2))) << precision_name(prec);
    EXPECT_LE(max_abs_diff(got, want), prec == Precision::bf16 ? 2e-2 : 5e-2);
    EXPECT_GT(max_abs_diff(got, want), 1e-6);
  }
  TempDir dir;
  std::map<std::string, Tensor> t = read_safetensors(nam).tensors;
  t["fc.weight"] = Tensor::zeros({1, 17}, DType::f32);
  write_safetensors(dir.path + "/bad_head.safetensors", t);
  EXPECT_THAT(load_error(dir.path + "/bad_head.safetensors", "rnn.", "fc."),
              ::testing::HasSubstr("expected (out_features, 18)"));
}

TEST(CApi, LoadErrorsNameTheProblem) {
  TempDir dir;
  const std::string good = kGolden + "model_residual.safetensors";
  const SafeTensors g = read_safetensors(good);
  auto write = [&](const std::string& name, std::map<std::string, Tensor> t) {
    const std::string p = dir.path + "/" + name;
    write_safetensors(p, t);
    return p;
  };
  auto with = [&](const std::function<void(std::map<std::string, Tensor>&)>& edit) {
    std::map<std::string, Tensor> t = g.tensors;
    edit(t);
    return t;
  };
  EXPECT_THAT(load_error(dir.path + "/missing.safetensors", "rnn.", nullptr),
              ::testing::HasSubstr("missing.safetensors"));
  {
    char err[128];
    EXPECT_EQ(grux_model_load(nullptr, "rnn.", nullptr, 0, err, sizeof err), nullptr);
    EXPECT_THAT(err, ::testing::HasSubstr("safetensors_path is NULL"));
  }
  {
    // A byte that is not UTF-8 in a key (a JSON parse error quoting it): escaped in the
    // message, which stays one line of valid UTF-8.
    const std::string header =
        "{\"rnn.weight\xdb\": {\"dtype\": \"F32\", \"shape\": [1], "
        "\"data_offsets\": [0, 4]}}";
    std::string bytes(8, '\0');
    const uint64_t n = header.size();
    std::memcpy(bytes.data(), &n, 8);
    std::ofstream(dir.path + "/badkey.safetensors", std::ios::binary)
        << bytes << header << std::string(4, '\0');
    const std::string m = load_error(dir.path + "/badkey.safetensors", "rnn.", nullptr);
    EXPECT_THAT(m, ::testing::HasSubstr("badkey.safetensors"));
    EXPECT_EQ(m.find('\xdb'), std::string::npos) << m;
  }
  {
    std::ofstream(dir.path + "/garbage.safetensors") << "\xff\xff\xff\xff\xff\xff\xff\x7fjunk";
    EXPECT_THAT(load_error(dir.path + "/garbage.safetensors", "rnn.", nullptr),
                ::testing::HasSubstr("garbage.safetensors"));
  }
  EXPECT_THAT(load_error(good, "nope.", nullptr), ::testing::HasSubstr("no key starts with"));
  EXPECT_THAT(
      load_error(write("nohh.safetensors", with([](auto& t) { t.erase("rnn.weight_hh_l1"); })),
                 "rnn.", "fc."),
      ::testing::HasSubstr("weight_hh_l1"));
  EXPECT_THAT(load_error(write("shape.safetensors", with([](auto& t) {
                                 t["rnn.bias_ih_l0"] = Tensor::zeros({17}, DType::f32);
                               })),
                         "rnn.", "fc."),
              ::testing::HasSubstr("bias_ih_l0"));
  EXPECT_THAT(load_error(write("f64.safetensors", with([](auto& t) {
                                 t["rnn.weight_ih_l0"] = t["rnn.weight_ih_l0"].to(DType::f64);
                               })),
                         "rnn.", "fc."),
              ::testing::AllOf(::testing::HasSubstr("rnn.weight_ih_l0"),
                               ::testing::HasSubstr("expected F32")));
  EXPECT_THAT(load_error(write("bidir.safetensors", with([](auto& t) {
                                 t["rnn.weight_ih_l0_reverse"] = t["rnn.weight_ih_l0"];
                               })),
                         "rnn.", "fc."),
              ::testing::HasSubstr("bidirectional"));
  EXPECT_THAT(load_error(write("headshape.safetensors", with([](auto& t) {
                                 t["fc.weight"] = Tensor::zeros({3, 5}, DType::f32);
                               })),
                         "rnn.", "fc."),
              ::testing::HasSubstr("fc.weight has shape (3, 5)"));
  EXPECT_THAT(load_error(write("headbias.safetensors", with([](auto& t) {
                                 t["fc.bias"] = Tensor::zeros({4}, DType::f32);
                               })),
                         "rnn.", "fc."),
              ::testing::HasSubstr("fc.bias"));
  EXPECT_THAT(load_error(good, "rnn.", "head."), ::testing::HasSubstr("head.weight"));
  // A residual needs output size == input size: the plain model maps 4 features to 5.
  EXPECT_THAT(load_error(kGolden + "model_plain.safetensors", "rnn.", nullptr, GRUX_RESIDUAL),
              ::testing::HasSubstr("GRUX_RESIDUAL"));
  EXPECT_THAT(load_error(good, "rnn.", "fc.", 16u), ::testing::HasSubstr("unknown flags"));
  // Without its prefix, the whole file is not a GRU state_dict (extra keys).
  EXPECT_THAT(load_error(good, "", nullptr), ::testing::HasSubstr("unexpected key"));

  // The message is truncated to err_len, NUL-terminated; err may be NULL with err_len 0.
  char small[8];
  std::memset(small, 'x', sizeof small);
  EXPECT_EQ(grux_model_load(nullptr, nullptr, nullptr, 0, small, sizeof small), nullptr);
  EXPECT_EQ(std::string(small), "grux_mo");
  EXPECT_EQ(grux_model_load(nullptr, nullptr, nullptr, 0, nullptr, 0), nullptr);
}

TEST(CApi, StreamErrorsNameTheProblem) {
  ModelPtr m = load(kGolden + "model_residual.safetensors", "rnn.", "fc.", GRUX_RESIDUAL);
  ASSERT_TRUE(m);
  char err[256];
  EXPECT_EQ(grux_stream_create(nullptr, 1, 1, err, sizeof err), nullptr);
  EXPECT_THAT(err, ::testing::HasSubstr("model is NULL"));
  EXPECT_EQ(grux_stream_create(m.get(), 0, 1, err, sizeof err), nullptr);
  EXPECT_THAT(err, ::testing::HasSubstr("batch is 0"));
  EXPECT_EQ(grux_stream_create(m.get(), -3, 1, err, sizeof err), nullptr);
  EXPECT_THAT(err, ::testing::HasSubstr("batch is -3"));
  EXPECT_EQ(grux_stream_create(m.get(), 1, -1, err, sizeof err), nullptr);
  EXPECT_THAT(err, ::testing::HasSubstr("threads is -1"));

  StreamPtr s(grux_stream_create(m.get(), 2, 1, err, sizeof err));
  ASSERT_TRUE(s) << err;
  EXPECT_STREQ(grux_stream_error(s.get()), "");
  float in[6] = {0}, out[6] = {0};
  EXPECT_EQ(grux_stream_process(s.get(), in, out, -1), GRUX_EINVAL);
  EXPECT_THAT(grux_stream_error(s.get()), ::testing::HasSubstr("frames is -1"));
  EXPECT_EQ(grux_stream_process(s.get(), nullptr, out, 1), GRUX_EINVAL);
  EXPECT_THAT(grux_stream_error(s.get()), ::testing::HasSubstr("in is NULL"));
  EXPECT_EQ(grux_stream_process(s.get(), in, nullptr, 1), GRUX_EINVAL);
  EXPECT_THAT(grux_stream_error(s.get()), ::testing::HasSubstr("out is NULL"));
  EXPECT_EQ(grux_stream_process(s.get(), nullptr, nullptr, 0), GRUX_OK);  // nothing to do
  EXPECT_STREQ(grux_stream_error(s.get()), "");
  EXPECT_EQ(grux_stream_process(s.get(), in, out, 1), GRUX_OK);
  EXPECT_EQ(grux_stream_process(nullptr, in, out, 1), GRUX_EINVAL);
  EXPECT_THAT(grux_stream_error(nullptr), ::testing::HasSubstr("NULL"));
  grux_stream_reset(nullptr);
  grux_stream_free(nullptr);
  grux_model_free(nullptr);
  EXPECT_EQ(grux_model_input_size(nullptr), -1);
  EXPECT_EQ(grux_model_output_size(nullptr), -1);
}

// A model file (grux_model_load_file): NAM Core's example LSTM, its stored initial state and
// sample rate, against NAM Core's own output; the stream's reset returns to that state.
TEST(CApi, ModelFileMatchesItsEngine) {
  const std::string dir = std::string(GRUX_MODELS_DIR);
  char err[256];
  grux_model* m =
      grux_model_load_file((dir + "/files/nam_core_lstm.nam").c_str(), 0, err, sizeof err);
  ASSERT_NE(m, nullptr) << err;
  EXPECT_EQ(grux_model_sample_rate(m), 48000);
  EXPECT_EQ(grux_model_input_size(m), 1);
  EXPECT_EQ(grux_model_output_size(m), 1);
  const Tensor x = read_npy(dir + "/golden/signal_i1.npy");
  const Tensor want = read_npy(dir + "/golden/nam_core_lstm.npy");
  grux_stream* s = grux_stream_create(m, 1, 0, err, sizeof err);
  ASSERT_NE(s, nullptr) << err;
  grux_model_free(m);  // the stream keeps what it needs
  const int64_t T = x.size(0);
  std::vector<float> y(static_cast<size_t>(T)), again(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t)
    ASSERT_EQ(grux_stream_process(s, x.data<float>() + t, &y[t], 1), GRUX_OK);
  for (int64_t t = 0; t < T; ++t)
    ASSERT_NEAR(y[t], want.data<float>()[t], 1e-5 + 1e-4 * std::fabs(want.data<float>()[t])) << t;
  grux_stream_reset(s);
  ASSERT_EQ(grux_stream_process(s, x.data<float>(), again.data(), T), GRUX_OK);
  EXPECT_EQ(std::memcmp(y.data(), again.data(), y.size() * 4), 0);
  grux_stream_free(s);
}

// An ONNX file through the C API: a stream of its forward layers gives run_graph's bits; a
// bidirectional one loads, and a stream of it is refused with the reason.
TEST(CApi, OnnxFileStreamsOrSaysWhyNot) {
  const std::string dir = std::string(GRUX_ONNX_DIR);
  char err[256];
  const std::string file = dir + "/files/torch_lstm_tanh_skip.onnx";
  grux_model* m = grux_model_load_file(file.c_str(), 0, err, sizeof err);
  ASSERT_NE(m, nullptr) << err;
  const Tensor x = read_npy(dir + "/golden/torch_lstm_tanh_skip.x.npy");  // (T, 1, I)
  const Tensor want = run_graph(load_model(file), x)[0].second;           // (T, 1, O)
  grux_stream* s = grux_stream_create(m, 1, 0, err, sizeof err);
  ASSERT_NE(s, nullptr) << err;
  const int64_t T = x.size(0), I = x.size(2), O = want.size(2);
  std::vector<float> y(static_cast<size_t>(T * O));
  for (int64_t t = 0; t < T; t += 3)  // three frames a call
    ASSERT_EQ(grux_stream_process(s, x.data<float>() + t * I, y.data() + t * O,
                                  std::min<int64_t>(3, T - t)),
              GRUX_OK);
  EXPECT_EQ(std::memcmp(y.data(), want.data<float>(), y.size() * 4), 0);
  grux_stream_free(s);
  grux_model_free(m);
  const std::string bi = dir + "/files/torch_gru_bidirectional_2layers.onnx";
  m = grux_model_load_file(bi.c_str(), 0, err, sizeof err);
  ASSERT_NE(m, nullptr) << err;
  EXPECT_EQ(grux_stream_create(m, 1, 0, err, sizeof err), nullptr);
  EXPECT_THAT(err, ::testing::HasSubstr("layer 0 (gru) is bidirectional"));
  grux_model_free(m);
}

TEST(CApi, StreamAtAnotherRateCorrectsTheModel) {
  const std::string dir = std::string(GRUX_MODELS_DIR);
  char err[256];
  grux_model* m =
      grux_model_load_file((dir + "/files/rtneural_gru.json").c_str(), 0, err, sizeof err);
  ASSERT_NE(m, nullptr) << err;
  grux_stream* s = grux_stream_create_at_rate(m, 1, 0, 96000, err, sizeof err);
  ASSERT_NE(s, nullptr) << err;
  const Tensor x = read_npy(dir + "/golden/signal_i1.npy");
  const Tensor want = read_npy(dir + "/golden/rate/gru_nointerp2.npy");  // RTNeural's, at 2x
  std::vector<float> y(static_cast<size_t>(x.size(0)));
  ASSERT_EQ(grux_stream_process(s, x.data<float>(), y.data(), x.size(0)), GRUX_OK);
  for (int64_t t = 0; t < x.size(0); ++t)
    ASSERT_NEAR(y[t], want.data<float>()[t], 1e-5 + 1e-4 * std::fabs(want.data<float>()[t])) << t;
  grux_stream_free(s);
  EXPECT_EQ(grux_stream_create_at_rate(m, 1, 0, 22050, err, sizeof err), nullptr);
  EXPECT_THAT(err, ::testing::HasSubstr("below the model's 48000 Hz"));
  grux_model_free(m);
  EXPECT_EQ(grux_stream_create_at_rate(nullptr, 1, 0, 96000, err, sizeof err), nullptr);
  EXPECT_THAT(err, ::testing::HasSubstr("model is NULL"));
}

TEST(CApi, ModelFileErrorsNameTheProblem) {
  char err[256] = "x";
  EXPECT_EQ(grux_model_load_file(nullptr, 0, err, sizeof err), nullptr);
  EXPECT_THAT(err, ::testing::HasSubstr("path is NULL"));
  const std::string nam = std::string(GRUX_MODELS_DIR) + "/files/nam_core_lstm.nam";
  EXPECT_EQ(grux_model_load_file(nam.c_str(), GRUX_RESIDUAL, err, sizeof err), nullptr);
  EXPECT_THAT(err, ::testing::HasSubstr("expected GRUX_BF16 or GRUX_INT8 or 0"));
  EXPECT_EQ(grux_model_load_file(nam.c_str(), GRUX_BF16 | GRUX_INT8, err, sizeof err), nullptr);
  EXPECT_THAT(err, ::testing::HasSubstr("choose one precision"));
  const std::string bad = std::string(GRUX_MODELS_DIR) + "/files/rtneural_bad_lstm.json";
  EXPECT_EQ(grux_model_load_file(bad.c_str(), 0, err, sizeof err), nullptr);
  EXPECT_THAT(err, ::testing::HasSubstr("layer 0 (lstm)"));
  EXPECT_EQ(grux_model_load_file("/nonexistent.json", 0, err, sizeof err), nullptr);
  EXPECT_THAT(err, ::testing::HasSubstr("/nonexistent.json"));
  EXPECT_EQ(grux_model_sample_rate(nullptr), -1);
  grux_model* m = grux_model_load_file(nam.c_str(), GRUX_INT8, err, sizeof err);
  ASSERT_NE(m, nullptr) << err;
  grux_model_free(m);
}

// Memory the system refuses (the child's address space capped just above what it uses): a model
// too big to copy and pack, and a stream whose batch needs more state than is left, each give NULL
// and a one-line "out of memory", not a crash; the process then still makes and runs a small
// model.
TEST(CApi, MemoryTheSystemRefusesIsAnError) {
#if GRUX_ASAN || GRUX_TSAN
  GTEST_SKIP() << "the sanitizers need more address space than the cap leaves";
#else
  const int code = test::exit_code_in_child(
      [] {
        // A GRU of 2048 inputs and 2048 units: 96 MiB of weights the call must copy.
        const int64_t I = 2048, H = 2048;
        const std::vector<float> w_ih(3 * H * I, 0.01f), w_hh(3 * H * H, 0.01f);
        grux_layer_desc big{};
        big.kind = GRUX_LAYER_GRU;
        big.in_size = I;
        big.out_size = H;
        big.w_ih = w_ih.data();
        big.w_hh = w_hh.data();
        grux_layer_desc small = big;
        small.in_size = 1;
        small.out_size = 8;
        grux_model_desc desc{GRUX_MODEL_DESC_VERSION, I, 1, &big, 0, 0};
        if (!test::cap_address_space(32 << 20)) return 3;
        const auto refused = [](const char* err) {
          const std::string m = err;
          return m.find("out of memory") != std::string::npos && m.find('\n') == std::string::npos;
        };
        char err[256] = "";
        if (grux_model* m = grux_model_from_desc(&desc, 0, err, sizeof err)) {
          grux_model_free(m);
          return 5;  // 96 MiB fitted in 32: the cap did not hold
        }
        if (!refused(err)) return 6;
        desc.input_size = 1;
        desc.layers = &small;
        ModelPtr m(grux_model_from_desc(&desc, 0, err, sizeof err));
        if (!m) return 7;
        // 2^22 sequences of 8 units: 128 MiB of state.
        if (grux_stream* s = grux_stream_create(m.get(), int64_t(1) << 22, 1, err, sizeof err)) {
          grux_stream_free(s);
          return 8;
        }
        if (!refused(err)) return 9;
        grux_stream* s = grux_stream_create(m.get(), 4, 1, err, sizeof err);
        if (!s) return 10;
        const std::vector<float> in(16, 0.5f);
        std::vector<float> out(4 * 4 * 8);
        const int rc = grux_stream_process(s, in.data(), out.data(), 4);
        grux_stream_free(s);
        return rc == GRUX_OK ? 0 : 11;
      },
      60);
  EXPECT_EQ(code, 0) << "128 + N: the child was killed by signal N";
#endif
}

TEST(CApi, Version) {
  EXPECT_STREQ(grux_version(), GRUX_VERSION_STRING);
  EXPECT_EQ(std::string(grux_version()), std::to_string(GRUX_VERSION_MAJOR) + "." +
                                             std::to_string(GRUX_VERSION_MINOR) + "." +
                                             std::to_string(GRUX_VERSION_PATCH));
}

}  // namespace
}  // namespace grux::test_capi
