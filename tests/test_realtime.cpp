// The real-time promise of GruStream (gru.h), LstmStream (lstm.h) and the C API's streams: after
// creation, processing frames allocates nothing, takes no lock, starts no thread, sleeps or yields
// nowhere and makes no system call through libc. This executable replaces malloc (and so
// operator new) with counting wrappers around glibc's allocator, and interposes counting
// wrappers on the libc entry points of locks, condition variables, thread creation, yielding,
// sleeping and the generic system calls (forwarded to libc's own); the tests arm the counters
// around the calls a real-time thread makes (counting on every thread, the stream's workers
// included) and fail on any count. System calls made without libc's wrappers cannot be seen
// this way. (Sanitizer builds replace the allocator and these functions themselves: there the
// tests say so and skip.)
#include <dlfcn.h>
#include <execinfo.h>
#include <omp.h>
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdarg>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <thread>

#include "core/sanitizer.h"
#include "cpu/gemm.h"
#include "cpu/gemm_packed.h"  // l2_cache_bytes
#include "cpu/gru_stream.h"
#include "grux/gru.h"
#include "grux/grux.h"
#include "grux/lstm.h"
#include "grux/model.h"
#include "test_util.h"

// The sanitizers own malloc and the calls counted here.
#if GRUX_ASAN || GRUX_TSAN
#define GRUX_COUNT_ALLOCATIONS 0
#else
#define GRUX_COUNT_ALLOCATIONS 1
#endif

namespace {
std::atomic<bool> g_armed{false};
std::atomic<long> g_allocations{0};
std::atomic<long> g_blocking{0};  // locks, waits, thread starts, yields, sleeps, system calls
inline void count_blocking() {
  if (!g_armed.load(std::memory_order_relaxed)) return;
  g_blocking.fetch_add(1);
  if (std::getenv("GRUX_TRACE_ALLOCATIONS")) {  // where they come from, when debugging
    void* frames[24];
    backtrace_symbols_fd(frames, backtrace(frames, 24), 2);
    write(2, "----\n", 5);
  }
}
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

// libc's own function `name`, found past this executable's definition.
template <typename F>
F next_symbol(F& cache, const char* name) {
  if (!cache) cache = reinterpret_cast<F>(dlsym(RTLD_NEXT, name));
  return cache;
}
#define GRUX_FORWARD(ret, name, params, args) \
  extern "C" ret name params {                \
    count_blocking();                         \
    static ret(*real) params = nullptr;       \
    return next_symbol(real, #name) args;     \
  }
GRUX_FORWARD(int, pthread_mutex_lock, (pthread_mutex_t * m), (m))
GRUX_FORWARD(int, pthread_mutex_trylock, (pthread_mutex_t * m), (m))
GRUX_FORWARD(int, pthread_cond_wait, (pthread_cond_t * c, pthread_mutex_t* m), (c, m))
GRUX_FORWARD(int, pthread_cond_signal, (pthread_cond_t * c), (c))
GRUX_FORWARD(int, pthread_cond_broadcast, (pthread_cond_t * c), (c))
GRUX_FORWARD(int, pthread_create,
             (pthread_t * t, const pthread_attr_t* a, void* (*f)(void*), void* arg), (t, a, f, arg))
GRUX_FORWARD(int, sched_yield, (), ())
GRUX_FORWARD(int, nanosleep, (const struct timespec* r, struct timespec* rem), (r, rem))
GRUX_FORWARD(int, clock_nanosleep,
             (clockid_t c, int f, const struct timespec* r, struct timespec* rem), (c, f, r, rem))
GRUX_FORWARD(int, usleep, (useconds_t u), (u))
GRUX_FORWARD(void*, mmap, (void* a, size_t n, int p, int f, int fd, off_t o), (a, n, p, f, fd, o))
GRUX_FORWARD(int, munmap, (void* a, size_t n), (a, n))
GRUX_FORWARD(ssize_t, read, (int fd, void* b, size_t n), (fd, b, n))
#undef GRUX_FORWARD
// syscall() is variadic: its six possible arguments are forwarded as longs.
extern "C" long syscall(long number, ...) {
  count_blocking();
  va_list ap;
  va_start(ap, number);
  long a[6];
  for (long& v : a) v = va_arg(ap, long);
  va_end(ap);
  static long (*real)(long, ...) = nullptr;
  return next_symbol(real, "syscall")(number, a[0], a[1], a[2], a[3], a[4], a[5]);
}
#endif

namespace grux {
namespace {

using test::random_tensor;

// What `counter` counts while `f` runs (on any thread).
template <typename F>
long counted_in(std::atomic<long>& counter, F&& f) {
  counter = 0;
  g_armed = true;
  f();
  g_armed = false;
  return counter.load();
}
// Allocations; calls to locks, waits, thread starts, yields, sleeps and system calls.
template <typename F>
long allocations_in(F&& f) {
  return counted_in(g_allocations, f);
}
template <typename F>
long blocking_calls_in(F&& f) {
  return counted_in(g_blocking, f);
}

// The counter itself works (else a passing test below would mean nothing).
TEST(Realtime, TheCounterSeesAllocations) {
  if (!GRUX_COUNT_ALLOCATIONS) GTEST_SKIP() << "the sanitizer owns the allocator here";
  EXPECT_GT(allocations_in([] { ::operator delete(::operator new(16)); }), 0);
  EXPECT_GT(allocations_in([] { free(malloc(64)); }), 0);
  EXPECT_GT(allocations_in([] { Tensor::zeros({3}, DType::f32); }), 0);
}

// cpu::gemm packs op(B) into a buffer its thread keeps (cpu/gemm.h): after one call, calls
// with an op(B) of up to 32 MiB (here 1.5 MiB and 12 KiB) allocate nothing; a larger one (33
// MiB) gets a buffer for the call.
TEST(Realtime, GemmKeepsItsPackingBuffer) {
  if (!GRUX_COUNT_ALLOCATIONS) GTEST_SKIP() << "the sanitizer owns the allocator here";
  const int before = omp_get_max_threads();
  omp_set_num_threads(1);  // the product's own thread only: no OpenMP team to start
  std::vector<float> a(4096 * 2), b(4096 * 2112), c(2 * 2112);
  const auto product = [&](int64_t N, int64_t K) {
    cpu::gemm<float>(false, false, 2, N, K, a.data(), K, b.data(), N, nullptr, false, c.data(), N);
  };
  product(768, 512);
  EXPECT_EQ(allocations_in([&] { product(768, 512); }), 0);
  EXPECT_EQ(allocations_in([&] { product(48, 64); }), 0);
  EXPECT_GT(allocations_in([&] { product(2112, 4096); }), 0);
  EXPECT_EQ(allocations_in([&] { product(768, 512); }), 0);
  omp_set_num_threads(before);
}

TEST(Realtime, TheCounterSeesLocksThreadsAndSleeps) {
  if (!GRUX_COUNT_ALLOCATIONS) GTEST_SKIP() << "the sanitizer owns these functions here";
  std::mutex m;
  EXPECT_GT(blocking_calls_in([&] { std::lock_guard<std::mutex> lock(m); }), 0);
  EXPECT_GT(blocking_calls_in([] { std::this_thread::yield(); }), 0);
  EXPECT_GT(blocking_calls_in([] { std::this_thread::sleep_for(std::chrono::microseconds(1)); }),
            0);
  EXPECT_GT(blocking_calls_in([] { std::thread([] {}).join(); }), 0);
}

// Streams on each kernel: the real-time one (one f32 sequence, one thread), the engine's
// (a batch; f64; a hidden size past the real-time kernel's), and a stream with a team of
// workers. After construction (and a first call), nothing allocates, locks, waits, starts
// a thread, sleeps or calls the system.
TEST(Realtime, StreamsNeitherAllocateNorBlock) {
  if (!GRUX_COUNT_ALLOCATIONS) GTEST_SKIP() << "the sanitizer owns these functions here";
  struct Case {
    int64_t batch, H;
    DType dtype;
    int threads;
    Precision precision = Precision::f32;
  };
  for (const Case& k :
       {Case{1, 24, DType::f32, 1}, Case{1, 24, DType::f32, 0}, Case{2, 24, DType::f32, 1},
        Case{1, 24, DType::f64, 1}, Case{1, 300, DType::f32, 1}, Case{3, 80, DType::f32, 2},
        Case{1, 40, DType::f32, 1, Precision::bf16}, Case{1, 600, DType::f32, 1, Precision::int8},
        Case{2, 80, DType::f32, 2, Precision::bf16}, Case{1, 80, DType::f32, 2, Precision::int8}}) {
    GruConfig c;
    c.input_size = 5;
    c.hidden_size = k.H;
    c.num_layers = 2;
    const Gru gru(c, k.dtype, 1);
    GruStream stream(gru, k.batch, {}, k.precision, k.threads);
    std::mt19937_64 rng(2);
    const int64_t T = 96;
    const Tensor x = random_tensor({T, k.batch, 5}, k.dtype, rng);
    Tensor y = Tensor::empty({T, k.batch, k.H}, k.dtype);
    auto run = [&] {
      auto go = [&]<typename F>(F*) {
        for (int64_t t = 0; t < 8; ++t)
          stream.process<F>(x.data<F>() + t * k.batch * 5, y.data<F>() + t * k.batch * k.H, 1);
        stream.process<F>(x.data<F>(), y.data<F>(), T);
        stream.reset();
      };
      if (k.dtype == DType::f32)
        go(static_cast<float*>(nullptr));
      else
        go(static_cast<double*>(nullptr));
    };
    run();  // a first call (nothing should be left for it to do, but the promise starts here)
    const std::string what = "batch " + std::to_string(k.batch) + " H " + std::to_string(k.H) +
                             " " + dtype_name(k.dtype) + " threads " + std::to_string(k.threads) +
                             " precision " + precision_name(k.precision);
    // Idle a while first, as between audio callbacks: workers that slept would need waking.
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    EXPECT_EQ(allocations_in(run), 0) << what;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    EXPECT_EQ(blocking_calls_in(run), 0) << what;
  }
}

TEST(Realtime, StreamProcessAndStepIntoAllocateNothing) {
  if (!GRUX_COUNT_ALLOCATIONS) GTEST_SKIP() << "the sanitizer owns the allocator here";
  for (int64_t H : {8, 24, 64, 128}) {
    GruConfig c;
    c.input_size = 4;
    c.hidden_size = H;
    c.num_layers = 2;
    const Gru gru(c, DType::f32, 1);
    GruStream stream(gru, 1, {}, Precision::f32, 1);
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

// A stream with a head (GruStream::set_head: a Linear layer and the skip): after set_head,
// process and step_into, into contiguous or strided outputs, allocate nothing, on the
// real-time kernel (one sequence) and on the engine's path (a batch).
TEST(Realtime, StreamWithAHeadAllocatesNothing) {
  if (!GRUX_COUNT_ALLOCATIONS) GTEST_SKIP() << "the sanitizer owns the allocator here";
  GruConfig c;
  c.input_size = 4;
  c.hidden_size = 32;
  const Gru gru(c, DType::f32, 1);
  std::mt19937_64 rng(5);
  GruStreamHead head;
  head.weight = random_tensor({4, 32}, DType::f32, rng);
  head.bias = random_tensor({4}, DType::f32, rng);
  head.residual = true;
  for (const int64_t N : {1, 3}) {
    GruStream stream(gru, N, {}, Precision::f32, 1);
    stream.set_head(head);
    const Tensor x = random_tensor({600, N, 4}, DType::f32, rng);
    Tensor y = Tensor::empty({600, N, 4}, DType::f32);
    Tensor strided = Tensor::empty({N, 600, 4}, DType::f32);
    Tensor view = strided.transpose(0, 1);
    const Tensor frame = x.select(0, 0);
    Tensor out = Tensor::empty({N, 4}, DType::f32);
    EXPECT_EQ(allocations_in([&] { stream.process(x.data<float>(), y.data<float>(), 600); }), 0)
        << "process, N " << N;
    EXPECT_EQ(allocations_in([&] {
                for (int i = 0; i < 16; ++i) stream.step_into(frame, out);
              }),
              0)
        << "step_into a frame, N " << N;
    EXPECT_EQ(allocations_in([&] { stream.step_into(x, view); }), 0)
        << "step_into a strided block, N " << N;
  }
}

// LstmStream (lstm.h) on each of its paths: the real-time kernel (one f32 sequence without a
// projection, small and tiled hidden sizes), and the engine's (a batch, f64, a projection,
// bf16 and int8, a team of two threads); with a head on both. After construction nothing
// allocates, locks, waits, starts a thread, sleeps or calls the system, in process, step_into
// or reset.
TEST(Realtime, LstmStreamsNeitherAllocateNorBlock) {
  if (!GRUX_COUNT_ALLOCATIONS) GTEST_SKIP() << "the sanitizer owns these functions here";
  struct Case {
    int64_t batch, H, proj;
    DType dtype;
    bool head;
    Precision prec = Precision::f32;
    int threads = 0;
  };
  for (const Case& k :
       {Case{1, 18, 0, DType::f32, false}, Case{1, 40, 0, DType::f32, true},
        Case{1, 96, 0, DType::f32, false}, Case{3, 24, 0, DType::f32, true},
        Case{1, 24, 0, DType::f64, false}, Case{1, 24, 8, DType::f32, true},
        Case{1, 300, 0, DType::f32, false}, Case{1, 40, 0, DType::f32, true, Precision::bf16},
        Case{2, 40, 0, DType::f32, false, Precision::int8},
        Case{1, 64, 0, DType::f32, true, Precision::f32, 2}}) {
    LstmConfig c;
    c.input_size = 2;
    c.hidden_size = k.H;
    c.num_layers = 2;
    c.proj_size = k.proj;
    const Lstm lstm(c, k.dtype, 1);
    LstmStream stream(lstm, k.batch, {}, {}, k.prec, k.threads);
    std::mt19937_64 rng(2);
    if (k.head) {
      GruStreamHead head;
      head.weight = random_tensor({2, c.output_size()}, DType::f32, rng);
      head.bias = random_tensor({2}, DType::f32, rng);
      head.residual = true;
      stream.set_head(head);
    }
    const int64_t T = 96, O = stream.output_size();
    const Tensor x = random_tensor({T, k.batch, 2}, k.dtype, rng);
    Tensor y = Tensor::empty({T, k.batch, O}, k.dtype);
    const Tensor frame = x.select(0, 0);
    Tensor out = Tensor::empty({k.batch, O}, k.dtype);
    auto run = [&] {
      auto go = [&]<typename F>(F*) {
        for (int64_t t = 0; t < 8; ++t)
          stream.process<F>(x.data<F>() + t * k.batch * 2, y.data<F>() + t * k.batch * O, 1);
        stream.process<F>(x.data<F>(), y.data<F>(), T);
        for (int i = 0; i < 4; ++i) stream.step_into(frame, out);
        stream.reset();
      };
      if (k.dtype == DType::f32)
        go(static_cast<float*>(nullptr));
      else
        go(static_cast<double*>(nullptr));
    };
    run();
    const std::string what = "batch " + std::to_string(k.batch) + " H " + std::to_string(k.H) +
                             " proj " + std::to_string(k.proj) + " " + dtype_name(k.dtype) +
                             (k.head ? " with a head" : "") + " " + precision_name(k.prec) +
                             " threads " + std::to_string(k.threads);
    EXPECT_EQ(allocations_in(run), 0) << what;
    EXPECT_EQ(blocking_calls_in(run), 0) << what;
  }
}

// GruCell's step from raw memory on the real-time kernel (one thread, or any number where
// the weights take less than a quarter of the L2): nothing allocated or blocked on, into
// other memory or in place, from h or zeros.
// A model file's stream (grux/model.h): its dense, activation and skip stages between the
// streams, a stored initial state restored by reset(), batches and threads.
TEST(Realtime, ModelStreamsNeitherAllocateNorBlock) {
  if (!GRUX_COUNT_ALLOCATIONS) GTEST_SKIP() << "the sanitizer owns these functions here";
  const std::string dir = std::string(GRUX_MODELS_DIR) + "/files/";
  struct Case {
    const char* file;
    int64_t batch;
    int threads;
    Precision precision = Precision::f32;
    double sample_rate = 0;  // sample-rate correction where not the model's 48 kHz
  };
  for (const Case& k :
       {Case{"rtneural_gru.json", 1, 0}, Case{"rtneural_dense.json", 1, 0},
        Case{"nam_core_lstm.nam", 1, 0}, Case{"neuralseed_gru7_ts9.json", 1, 0},
        Case{"rtneural_lstm_torch.json", 3, 2}, Case{"nam_core_lstm.nam", 2, 1, Precision::int8},
        Case{"rtneural_gru.json", 2, 0}, Case{"nam_core_lstm.nam", 20, 1},
        Case{"rtneural_gru.json", 1, 0, Precision::f32, 88200},
        Case{"rtneural_lstm_torch.json", 2, 0, Precision::f32, 96000},
        // ONNX files of forward layers: the same real-time kernels, the same promise.
        Case{"torch_lstm_tanh_skip.onnx", 1, 0}, Case{"torch_gru_2layers_batch_first.onnx", 3, 0},
        Case{"tf2onnx_lstm_sequences_dense_tanh.onnx", 1, 0}}) {
    const std::string file = k.file;
    const bool onnx = file.size() > 5 && file.compare(file.size() - 5, 5, ".onnx") == 0;
    const Model model =
        load_model(onnx ? std::string(GRUX_ONNX_DIR) + "/files/" + file : dir + file);
    ModelStreamOptions o;
    o.precision = k.precision;
    o.threads = k.threads;
    o.sample_rate = k.sample_rate;
    o.warmup_frames = 100;
    ModelStream stream(model, k.batch, o);
    const int64_t T = 200, I = model.input_size(), O = model.output_size();
    std::vector<float> x(size_t(T * k.batch * I), 0.25f), y(size_t(T * k.batch * O));
    auto run = [&] {
      for (int64_t t = 0; t < 8; ++t)
        stream.process(x.data() + t * k.batch * I, y.data() + t * k.batch * O, 1);
      stream.process(x.data(), y.data(), T);
      stream.reset();
    };
    run();
    const std::string what = std::string(k.file) + " batch " + std::to_string(k.batch) +
                             " threads " + std::to_string(k.threads) + " rate " +
                             std::to_string(k.sample_rate);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    EXPECT_EQ(allocations_in(run), 0) << what;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    EXPECT_EQ(blocking_calls_in(run), 0) << what;
  }
}

// A stream's reset to a given state of its own layout copies it in place.
TEST(Realtime, ResetToAGivenStateAllocatesNothing) {
  if (!GRUX_COUNT_ALLOCATIONS) GTEST_SKIP() << "the sanitizer owns the allocator here";
  LstmConfig c;
  c.input_size = 2;
  c.hidden_size = 16;
  c.num_layers = 2;
  const Lstm lstm(c, DType::f32, 3);
  const Tensor h0 = Tensor::full({2, 1, 16}, 0.1, DType::f32);
  const Tensor c0 = Tensor::full({2, 1, 16}, -0.2, DType::f32);
  LstmStream stream(lstm, 1, h0, c0);
  const Tensor x = Tensor::full({5, 1, 2}, 0.3, DType::f32);
  const Tensor first = stream.step(x);
  EXPECT_EQ(allocations_in([&] { stream.reset(h0, c0); }), 0);
  const Tensor again = stream.step(x);
  EXPECT_EQ(std::memcmp(first.data<float>(), again.data<float>(), first.numel() * 4), 0);
}

TEST(Realtime, GruCellRawStepAllocatesNothing) {
  if (!GRUX_COUNT_ALLOCATIONS) GTEST_SKIP() << "the sanitizer owns the allocator here";
  for (int64_t H : {8, 24, 64, 128, 256}) {
    const GruCell cell(16, H, true, GruForm::linear_before_reset, DType::f32, 3);
    std::mt19937_64 rng(4);
    const Tensor x = random_tensor({16}, DType::f32, rng);
    std::vector<float> h(H, 0.25f), out(H);
    for (const int threads : {1, 0}) {
      // threads 0 shares the step among threads (an OpenMP region, which may wake sleeping
      // workers: no promise) where the weights take more than a quarter of the L2.
      if (threads == 0 && 3 * H * (16 + H) * 4 > cpu::l2_cache_bytes() / 4) continue;
      const auto steps = [&] {
        for (int i = 0; i < 8; ++i) {
          cell.forward(x.data<float>(), h.data(), out.data(), threads);
          cell.forward(x.data<float>(), out.data(), out.data(), threads);
          cell.forward(x.data<float>(), nullptr, h.data(), threads);
        }
      };
      EXPECT_EQ(allocations_in(steps), 0) << "H " << H << ", threads " << threads;
      EXPECT_EQ(blocking_calls_in(steps), 0) << "H " << H << ", threads " << threads;
    }
  }
}

// LstmCell's raw step (the real-time kernel, H <= 256): nothing allocated or blocked on.
TEST(Realtime, LstmCellRawStepAllocatesNothing) {
  if (!GRUX_COUNT_ALLOCATIONS) GTEST_SKIP() << "the sanitizer owns the allocator here";
  for (int64_t H : {8, 24, 64, 256}) {
    const LstmCell cell(16, H, true, DType::f32, 3);
    std::mt19937_64 rng(4);
    const Tensor x = random_tensor({16}, DType::f32, rng);
    std::vector<float> h(H, 0.25f), c(H, -0.5f), h1(H), c1(H);
    const auto steps = [&] {
      for (int i = 0; i < 8; ++i) {
        cell.forward(x.data<float>(), h.data(), c.data(), h1.data(), c1.data());
        cell.forward(x.data<float>(), h1.data(), c1.data(), h1.data(), c1.data());
        cell.forward(x.data<float>(), nullptr, nullptr, h.data(), c.data());
      }
    };
    EXPECT_EQ(allocations_in(steps), 0) << "H " << H;
    EXPECT_EQ(blocking_calls_in(steps), 0) << "H " << H;
  }
}

// A part's step (GruCell's shared step, one part a thread): nothing allocated or blocked on.
TEST(Realtime, StreamPartStepAllocatesNothing) {
  if (!GRUX_COUNT_ALLOCATIONS) GTEST_SKIP() << "the sanitizer owns the allocator here";
  const int64_t I = 8, H = 8 * cpu::gru_stream_lanes() + 3, u0 = 4 * cpu::gru_stream_lanes();
  std::vector<float> wih(3 * H * I, 0.01f), whh(3 * H * H, -0.02f), b(3 * H, 0.1f), x(I, 0.5f);
  const cpu::StreamLayer part =
      cpu::gru_stream_pack_part(I, H, u0, H - u0, wih.data(), whh.data(), b.data(), b.data());
  auto h = hwy::AllocateAligned<float>(2 * H), out = hwy::AllocateAligned<float>(part.Hp);
  auto scratch = hwy::AllocateAligned<float>(cpu::gru_stream_scratch(part, 1));
  std::fill(h.get(), h.get() + 2 * H, 0.25f);
  const auto steps = [&] {
    for (int i = 0; i < 8; ++i)
      cpu::gru_stream_part_step(part, x.data(), h.get(), out.get(), scratch.get());
  };
  EXPECT_EQ(allocations_in(steps), 0);
  EXPECT_EQ(blocking_calls_in(steps), 0);
}

// The C API's stream: a GRU stack, a Linear head and the residual (golden/capi's model).
TEST(Realtime, CApiStreamProcessAllocatesNothing) {
  if (!GRUX_COUNT_ALLOCATIONS) GTEST_SKIP() << "the sanitizer owns the allocator here";
  const std::string path = std::string(GRUX_GOLDEN_DIR) + "/capi/model_residual.safetensors";
  char err[256];
  grux_model* m = grux_model_load(path.c_str(), "rnn.", "fc.", GRUX_RESIDUAL, err, sizeof err);
  ASSERT_NE(m, nullptr) << err;
  const int64_t I = grux_model_input_size(m), O = grux_model_output_size(m);
  // Batch 1 runs the real-time kernel with the head in its steps; batch 2 the engine + a GEMM.
  for (int64_t N : {1, 2}) {
    grux_stream* s = grux_stream_create(m, N, 1, err, sizeof err);
    ASSERT_NE(s, nullptr) << err;
    std::vector<float> in(512 * N * I, 0.25f), out(512 * N * O);
    EXPECT_EQ(allocations_in([&] {
                for (int64_t t = 0; t < 64; ++t)
                  ASSERT_EQ(
                      grux_stream_process(s, in.data() + t * N * I, out.data() + t * N * O, 1), 0);
                ASSERT_EQ(grux_stream_process(s, in.data(), out.data(), 512), 0);
                grux_stream_reset(s);
              }),
              0)
        << "batch " << N;
    EXPECT_EQ(blocking_calls_in([&] {
                for (int64_t t = 0; t < 64; ++t)
                  ASSERT_EQ(
                      grux_stream_process(s, in.data() + t * N * I, out.data() + t * N * O, 1), 0);
                grux_stream_reset(s);
              }),
              0)
        << "batch " << N;
    grux_stream_free(s);
  }
  grux_model_free(m);
}

}  // namespace
}  // namespace grux
