// The real-time promise of GruStream (gru.h) and the C API's streams: after creation,
// processing frames allocates nothing. This executable replaces malloc and operator new with
// counting wrappers around glibc's allocator; the tests arm the counter around the calls a
// real-time thread makes and fail on any allocation. (Sanitizer builds replace the allocator
// themselves: there the counting is not possible and the tests say so and skip.)
#include <execinfo.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <new>

#include "grux/grux.h"
#include "grux/gru.h"
#include "test_util.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define GRUX_COUNT_ALLOCATIONS 0
#else
#define GRUX_COUNT_ALLOCATIONS 1
#endif

namespace {
std::atomic<bool> g_armed{false};
std::atomic<long> g_allocations{0};
inline void count() {
  if (!g_armed.load(std::memory_order_relaxed)) return;
  g_allocations.fetch_add(1);
  if (std::getenv("GRUX_TRACE_ALLOCATIONS")) {  // where they come from, when debugging
    g_armed = false;
    void* frames[24];
    backtrace_symbols_fd(frames, backtrace(frames, 24), 2);
    write(2, "----\n", 5);
    g_armed = true;
  }
}
}  // namespace

#if GRUX_COUNT_ALLOCATIONS
extern "C" {
void* __libc_malloc(size_t);
void* __libc_calloc(size_t, size_t);
void* __libc_realloc(void*, size_t);
void* __libc_memalign(size_t, size_t);
void __libc_free(void*);

void* malloc(size_t n) {
  count();
  return __libc_malloc(n);
}
void* calloc(size_t k, size_t n) {
  count();
  return __libc_calloc(k, n);
}
void* realloc(void* p, size_t n) {
  count();
  return __libc_realloc(p, n);
}
void* aligned_alloc(size_t a, size_t n) {
  count();
  return __libc_memalign(a, n);
}
void* memalign(size_t a, size_t n) {
  count();
  return __libc_memalign(a, n);
}
int posix_memalign(void** p, size_t a, size_t n) {
  count();
  *p = __libc_memalign(a, n);
  return *p ? 0 : ENOMEM;
}
void free(void* p) {
  __libc_free(p);
}
}
#endif

namespace grux {
namespace {

using test::random_tensor;

// Counts the allocations `f` makes.
template <typename F>
long allocations_in(F&& f) {
  g_allocations = 0;
  g_armed = true;
  f();
  g_armed = false;
  return g_allocations.load();
}

// The counter itself works (else a passing test below would mean nothing).
TEST(Realtime, TheCounterSeesAllocations) {
  if (!GRUX_COUNT_ALLOCATIONS) GTEST_SKIP() << "the sanitizer owns the allocator here";
  EXPECT_GT(allocations_in([] { ::operator delete(::operator new(16)); }), 0);
  EXPECT_GT(allocations_in([] { free(malloc(64)); }), 0);
  EXPECT_GT(allocations_in([] { Tensor::zeros({3}, DType::f32); }), 0);
}

TEST(Realtime, StreamProcessAndStepIntoAllocateNothing) {
  if (!GRUX_COUNT_ALLOCATIONS) GTEST_SKIP() << "the sanitizer owns the allocator here";
  for (int64_t H : {8, 24, 64, 128}) {
    GruConfig c;
    c.input_size = 4;
    c.hidden_size = H;
    c.num_layers = 2;
    const Gru gru(c, DType::f32, 1);
    GruStream stream(gru, 1, {}, 1);
    std::mt19937_64 rng(2);
    const Tensor x = random_tensor({512, 1, 4}, DType::f32, rng);
    Tensor y = Tensor::empty({512, 1, H}, DType::f32);
    const Tensor frame = x.select(0, 0);
    Tensor out = Tensor::empty({1, H}, DType::f32);
    EXPECT_EQ(allocations_in([&] {
                for (int64_t t = 0; t < 64; ++t)
                  stream.process(x.data<float>() + t * 4, y.data<float>() + t * H, 1);
              }),
              0)
        << "process, single frames, H " << H;
    EXPECT_EQ(allocations_in([&] { stream.process(x.data<float>(), y.data<float>(), 64); }), 0)
        << "process, a block of 64, H " << H;
    EXPECT_EQ(allocations_in([&] { stream.process(x.data<float>(), y.data<float>(), 512); }), 0)
        << "process, a block of 512 (longer than any before), H " << H;
    EXPECT_EQ(allocations_in([&] {
                for (int i = 0; i < 16; ++i) stream.step_into(frame, out);
              }),
              0)
        << "step_into, H " << H;
    EXPECT_EQ(allocations_in([&] { stream.reset(); }), 0) << "reset, H " << H;
  }
}

// The C API's stream: a GRU stack, a Linear head and the residual (golden/capi's model).
TEST(Realtime, CApiStreamProcessAllocatesNothing) {
  if (!GRUX_COUNT_ALLOCATIONS) GTEST_SKIP() << "the sanitizer owns the allocator here";
  const std::string path = std::string(GRUX_GOLDEN_DIR) + "/capi/model_residual.safetensors";
  char err[256];
  grux_model* m = grux_model_load(path.c_str(), "rnn.", "fc.", GRUX_RESIDUAL, err, sizeof err);
  ASSERT_NE(m, nullptr) << err;
  grux_stream* s = grux_stream_create(m, 1, 1, err, sizeof err);
  ASSERT_NE(s, nullptr) << err;
  const int64_t I = grux_model_input_size(m), O = grux_model_output_size(m);
  std::vector<float> in(512 * I, 0.25f), out(512 * O);
  EXPECT_EQ(allocations_in([&] {
              for (int64_t t = 0; t < 64; ++t)
                ASSERT_EQ(grux_stream_process(s, in.data() + t * I, out.data() + t * O, 1), 0);
              ASSERT_EQ(grux_stream_process(s, in.data(), out.data(), 512), 0);
              grux_stream_reset(s);
            }),
            0);
  grux_stream_free(s);
  grux_model_free(m);
}

}  // namespace
}  // namespace grux
