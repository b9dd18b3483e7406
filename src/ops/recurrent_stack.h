// The layer-stack level of the recurrent drivers: moving rows between the caller's time-major
// (T, N, C) arrays and a layer's packed rows (ops/recurrent_layer.h), the state rows of h0 /
// h_n in sorted order, dropout between layers, and the stack driver itself, generic over the
// cell (stack_forward, stack_backward), which gru.cpp and lstm.cpp run with their cells.
#pragma once

#include <fmt/format.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "grux/gru.h"
#include "ops/recurrent.h"
#include "ops/recurrent_layer.h"

namespace grux::ops {

// Both copies below walk the (time, sequence) pairs time step by time step, the steps dealt
// to the threads in turn (schedule(static, 1)): with lengths, early steps hold more valid rows
// than late ones, and contiguous blocks of steps would leave one thread most of the work.
// pos[n]: sorted position of sequence n; packed row of (t, n) = off[s] + pos[n], s the step.
inline std::vector<int64_t> sorted_positions(const SeqLayout& lay) {
  std::vector<int64_t> pos(lay.N);
  for (int64_t j = 0; j < lay.N; ++j) pos[lay.perm[j]] = j;
  return pos;
}

// dst (rows x C) <- src (T, N, >= c0 + C) columns [c0, c0 + C), in packed order of `dir`.
template <typename T>
void gather_packed(const SeqLayout& lay, int dir, const Tensor& src, int64_t c0, int64_t C,
                   T* dst) {
  const T* base = src.data<T>();
  const int64_t st0 = src.stride(0), st1 = src.stride(1), st2 = src.stride(2);
  const std::vector<int64_t> pos = sorted_positions(lay);
#pragma omp parallel for schedule(static, 1) if (lay.rows() * C > (1 << 17))
  for (int64_t t = 0; t < lay.S; ++t) {
    for (int64_t n = 0; n < lay.N; ++n) {
      if (t >= lay.len[n]) continue;
      const T* p = base + t * st0 + n * st1 + c0 * st2;
      T* q = dst + (lay.off[lay.step(t, n, dir)] + pos[n]) * C;
      if (st2 == 1)
        std::memcpy(q, p, C * sizeof(T));
      else
        for (int64_t c = 0; c < C; ++c) q[c] = p[c * st2];
    }
  }
}

// dst (T, N, CC) contiguous, columns [c0, c0 + C) <- (or +=) src (rows x C) packed. Without
// `accumulate`, the padding rows' columns (t >= len[n]) are set to zero.
template <typename T>
void scatter_packed(const SeqLayout& lay, int dir, const T* src, int64_t C, T* dst, int64_t CC,
                    int64_t c0, bool accumulate) {
  const std::vector<int64_t> pos = sorted_positions(lay);
#pragma omp parallel for schedule(static, 1) if (lay.T * lay.N * C > (1 << 17))
  for (int64_t t = 0; t < lay.T; ++t) {
    for (int64_t n = 0; n < lay.N; ++n) {
      T* q = dst + (t * lay.N + n) * CC + c0;
      if (t >= lay.len[n]) {
        if (!accumulate) std::memset(q, 0, C * sizeof(T));
        continue;
      }
      const T* p = src + (lay.off[lay.step(t, n, dir)] + pos[n]) * C;
      if (accumulate)
        for (int64_t c = 0; c < C; ++c) q[c] += p[c];
      else
        std::memcpy(q, p, C * sizeof(T));
    }
  }
}

// Packed row of sequence perm[j]'s last valid step (the same in both directions).
inline int64_t last_row(const SeqLayout& lay, int64_t j) {
  return lay.off[lay.len[lay.perm[j]] - 1] + j;
}

// For each sorted position j: dst row += src (N, H) row perm[j]. dst rows are consecutive
// (N rows, ld apart; 0: H), or, with at_last_step, each sequence's last packed row of a
// (rows x H) buffer.
template <typename T>
void add_sorted_rows(const SeqLayout& lay, const Tensor& src, T* dst, bool at_last_step = false,
                     int64_t ld = 0) {
  const T* base = src.data<T>();
  const int64_t H = src.size(1), s0 = src.stride(0), s1 = src.stride(1);
  if (ld == 0) ld = H;
  for (int64_t j = 0; j < lay.N; ++j) {
    const T* p = base + lay.perm[j] * s0;
    T* q = dst + (at_last_step ? last_row(lay, j) * H : j * ld);
    for (int64_t h = 0; h < H; ++h) q[h] += p[h * s1];
  }
}

// Inverted dropout on a layer's output (T, N, C) in place: keeps each element with
// probability 1 - p and scales kept ones by 1 / (1 - p). The draws run over the whole batch
// (T, share.of, C) in order and this batch keeps its share's (BatchShare), so K processes
// drop what one would. Returns the mask (scale or 0 per element) for backward.
template <typename T>
Tensor apply_dropout(Tensor& out, double p, std::mt19937_64& rng, BatchShare share) {
  const int64_t T_ = out.size(0), N = out.size(1), row = out.size(2);
  Tensor mask = Tensor::empty(out.shape(), out.dtype());
  std::bernoulli_distribution keep(1.0 - p);
  const T scale = static_cast<T>(1.0 / (1.0 - p));
  const int64_t all = share.of > 0 ? share.of : N;
  T* m = mask.data<T>();
  T* o = out.data<T>();
  for (int64_t t = 0; t < T_; ++t)
    for (int64_t n = 0; n < all; ++n) {
      const int64_t j = n - share.first;
      if (j < 0 || j >= N) {
        for (int64_t e = 0; e < row; ++e) keep(rng);
        continue;
      }
      const int64_t i0 = (t * N + j) * row;
      for (int64_t e = 0; e < row; ++e) {
        m[i0 + e] = keep(rng) ? scale : T(0);
        o[i0 + e] *= m[i0 + e];
      }
    }
  return mask;
}

// ---- The stack driver, generic over the cell ------------------------------------------
//
// stack_forward and stack_backward walk layers x directions for any cell: the GRU
// (ops/gru_layer.h's GruLayerCell) and the LSTM (ops/lstm_layer.h's LstmLayerCell). They move
// rows between the caller's arrays and the packed layout, set the initial states and read
// the final ones, lay out and keep the cell's buffers, apply dropout, split a batch among
// threads, and walk backward in mirror order. A cell supplies (Cell below):
//   Weights, Packed              its layer weights (PyTorch's layout) and their packed form
//   width()                      columns of h (H, or an LSTM's projection size)
//   cell_width()                 columns of a cell state c (the LSTM's H; 0: none)
//   buffers()                    the BufferSpec of each buffer its layer pass uses
//   pack(w, backward, p)         the weights packed (with backward's operands)
//   split_batch(P)               whether inference's threads split the batch, not the units
//   forward(P, lay, xp, h0s, cs, buf, hs, training, max_threads, io)
//   gradients(layer, dtype)      a layer's weight gradients, allocated
//   backward(P, lay, xp, states, cs, buf, dy, dc, dx, dw, dh0s)
// The pointers are those of ops/gru_layer.h's and ops/lstm_layer.h's layer passes.

// How many rows one of a cell's buffers has: none, one per packed row (every step's), or one
// per sequence (one step's, reused).
enum class BufRows { none, per_row, per_seq };
struct BufferSpec {
  int64_t cols;
  BufRows train, infer;  // in forward_train (the tape keeps it) and in inference
};

// The stack as the driver walks it.
struct StackShape {
  int64_t L, D, I, P;  // layers, directions, input size, state width (h's columns)
  double dropout;
  int64_t in(int64_t l) const { return l == 0 ? I : D * P; }
};

// The caller's tensors as time-major views, plus the sequence layout.
struct StackInput {
  Tensor x;       // (T, N, I)
  Tensor h0, c0;  // (L*D, N, P), (L*D, N, cell_width), or undefined
  SeqLayout lay;
  bool unbatched = false;
};

// input, h0 and lengths checked as normalize_input does; c0 (a cell state's, c_width columns;
// undefined for a cell without one) likewise.
inline StackInput normalize_stack(const SeqSpec& s, int64_t c_width, const Tensor& input,
                                  const Tensor& h0, const Tensor& c0, const Tensor& lengths) {
  SeqInput in = normalize_input(s, input, h0, lengths);
  StackInput p;
  p.x = in.x;
  p.h0 = in.h0;
  p.unbatched = in.unbatched;
  if (c0.defined()) {
    check_same_dtype(s.op, "input", input, "c0", c0);
    check_same_device(s.op, "input", input, "c0", c0);
    const int64_t N = p.x.size(1);
    check_shape(s.op, "c0", c0,
                p.unbatched ? Shape{s.state_rows, c_width} : Shape{s.state_rows, N, c_width});
    p.c0 = p.unbatched ? c0.unsqueeze(1) : c0;
  }
  p.lay = make_seq_layout(p.x.size(0), p.x.size(1), in.len.empty() ? nullptr : in.len.data());
  return p;
}

// What one layer-direction's forward_train leaves for backward.
template <typename Packed>
struct LayerRecord {
  Tensor states;             // h0s (N rows, sorted order), then every step's h (rows)
  Tensor cs;                 // the cell state likewise (c0s, then every step's c); or undefined
  std::vector<Tensor> bufs;  // the cell's buffers (BufferSpec::train)
  Packed packed;             // the weights, with backward's operands
};

// What forward_train leaves for backward, for weights of one dtype.
template <typename Packed>
struct StackRecord {
  std::vector<Tensor> layer_inputs;         // per layer, (T, N, in) time-major (views allowed)
  std::vector<Tensor> masks;                // per layer below the top: dropout scale or undefined
  std::vector<LayerRecord<Packed>> layers;  // per layer * D + direction
};

// A stack's tape (GruTape's and LstmTape's data), for the cell template Cell<T>.
template <template <typename> class Cell>
struct StackTape {
  SeqLayout lay;
  Shape h_n_shape, c_n_shape;  // as forward_train returned them (c_n: a cell state's)
  bool unbatched = false;
  DType dtype = DType::f32;
  StackRecord<typename Cell<float>::Packed> f32;
  StackRecord<typename Cell<double>::Packed> f64;
  template <typename T>
  StackRecord<typename Cell<T>::Packed>& record() {
    if constexpr (std::is_same_v<T, float>)
      return f32;
    else
      return f64;
  }
};

// Time-major results (T, N, D * P), (L*D, N, P), (L*D, N, cell_width) or undefined.
struct StackResult {
  Tensor output, h_n, c_n;
  // Into the caller's layout: batch_first, and without N when the input was unbatched.
  void to_caller(bool batch_first, bool unbatched) {
    output = to_caller_layout(output, batch_first, unbatched);
    if (unbatched) {
      h_n = h_n.squeeze(1);
      if (c_n.defined()) c_n = c_n.squeeze(1);
    }
  }
};

template <typename Weights>
struct StackGrads {
  std::vector<Weights> dweights;  // per layer * D + direction
  Tensor dinput, dh0, dc0;        // the caller's layouts (dc0: undefined without a cell state)
};

// Packed bytes of one operand.
template <typename T>
int64_t packed_bytes(const cpu::PackedB<T>& b) {
  return b.K * b.N * (b.i8 ? 1 : b.bf16 ? 2 : int64_t(sizeof(T)));
}

// Forward through the stack. Weights: `weights` (packed here, in `precision`) or `prepacked`
// (GruInference, LstmInference). With `record` (forward_train), the layers' buffers, packed
// weights, inputs and dropout masks are kept for stack_backward; `training` applies dropout.
template <typename T, typename Cell>
StackResult stack_forward(const Cell& cell, const StackShape& s, const StackInput& p,
                          const std::vector<typename Cell::Weights>* weights,
                          const std::vector<typename Cell::Packed>* prepacked, Precision precision,
                          bool training, uint64_t seed, BatchShare share,
                          StackRecord<typename Cell::Packed>* record) {
  using Packed = typename Cell::Packed;
  const SeqLayout& lay = p.lay;
  const int64_t L = s.L, D = s.D, P = s.P, C = cell.cell_width();
  const int64_t N = lay.N, T_ = lay.T, rows = lay.rows();
  const DType dt = dtype_of<T>();
  StackResult r;
  r.h_n = Tensor::zeros({L * D, N, P}, dt);
  if (C > 0) r.c_n = Tensor::zeros({L * D, N, C}, dt);
  if (record) {
    record->layer_inputs.resize(L);
    record->masks.resize(L);
    record->layers.resize(L * D);
  }
  const std::vector<BufferSpec> specs = cell.buffers();
  std::mt19937_64 rng(seed);
  Tensor layer_in = p.x;
  // Inference on sequences of one length: nothing is sorted, so each direction reads its
  // input rows where they are (when they are evenly spaced) and writes its states straight
  // into its columns of the layer's output (ops::DenseIo): no copy in or out (GRU W5: 7% of
  // the time). Training keeps the packed buffers, which the record holds for backward.
  const bool one_length = lay.time_major();
  const bool dense = record == nullptr && one_length;
  for (int64_t l = 0; l < L; ++l) {
    const int64_t in = s.in(l);
    // Every row is written below (valid ones copied, padding ones zeroed), by direction.
    Tensor out = Tensor::empty({T_, N, D * P}, dt);
    const bool even = layer_in.stride(2) == 1 && layer_in.stride(0) == N * layer_in.stride(1);
    const bool in_place = dense && even;
    // Training over one direction and one length: the packed rows are the time-major rows,
    // so the input is read in place too (the states still go to the packed buffer the record
    // keeps).
    const bool train_in_place = record != nullptr && one_length && D == 1 && even;
    Tensor xp = in_place || train_in_place ? Tensor() : Tensor::empty({rows, in}, dt);
    // Dense: copied once, in time order, for both directions.
    if (dense && !in_place) gather_packed<T>(lay, 0, layer_in, 0, in, xp.data<T>());
    for (int d = 0; d < D; ++d) {
      const int64_t ld = l * D + d;
      if (!dense && !train_in_place) gather_packed<T>(lay, d, layer_in, 0, in, xp.data<T>());
      // The initial state (N rows, sorted order) and then every step's state (rows); dense:
      // the initial state alone, its rows D P apart as the output's.
      const int64_t ldh0 = dense ? D * P : P;
      Tensor states = dense ? Tensor::empty({N, ldh0}, dt) : Tensor::empty({N + rows, P}, dt);
      T* h0s = states.data<T>();
      T* hs = dense ? nullptr : h0s + N * P;
      // Where the time loop reads its input and writes its states in place, if anywhere:
      // dense, the (gathered or caller's) input and the output's columns; training in place,
      // the caller's input and the packed states the record keeps.
      const DenseIo<T> io =
          dense
              ? DenseIo<T>{in_place ? layer_in.data<T>() : xp.data<T>(),
                           in_place ? layer_in.stride(1) : in, out.data<T>() + d * P, D * P, d == 1}
              : DenseIo<T>{layer_in.data<T>(), layer_in.stride(1), hs, P, false};
      const DenseIo<T>* io_used = dense || train_in_place ? &io : nullptr;
      std::memset(h0s, 0, N * ldh0 * sizeof(T));
      if (p.h0.defined()) add_sorted_rows<T>(lay, p.h0.select(0, ld), h0s, false, ldh0);
      // The cell state: training keeps c0 and every step's; inference one row a sequence,
      // updated in place.
      Tensor cs = C > 0 ? Tensor::empty({record ? N + rows : N, C}, dt) : Tensor();
      if (C > 0) {
        std::memset(cs.data<T>(), 0, N * C * sizeof(T));
        if (p.c0.defined()) add_sorted_rows<T>(lay, p.c0.select(0, ld), cs.data<T>());
      }
      std::vector<Tensor> bufs(specs.size());
      std::vector<T*> buf(specs.size(), nullptr);
      for (size_t i = 0; i < specs.size(); ++i) {
        const BufRows kind = record ? specs[i].train : specs[i].infer;
        if (kind == BufRows::none) continue;
        bufs[i] = Tensor::empty({kind == BufRows::per_row ? rows : N, specs[i].cols}, dt);
        buf[i] = bufs[i].data<T>();
      }
      Packed packed_here;
      if (!prepacked) packed_here = cell.pack((*weights)[ld], record != nullptr, precision);
      const Packed& W = prepacked ? (*prepacked)[ld] : packed_here;
      // Threads split the batch rather than the units (at least 8 rows each) where the cell
      // says so (Cell::split_batch): each thread's state rows stay its own (no barrier a
      // step, no read of what the other core just wrote), though each thread reads all the
      // weights every step. Rows are independent: the same bits.
      const int nt = std::min<int64_t>(omp_get_max_threads(), N / 8);
      if (dense && nt > 1 && !omp_in_parallel() && cell.split_batch(W)) {
        // Part t: rows [n0, n1) of every step; its per-row buffers are the rows of the whole
        // batch's from T n0 on, its per-sequence ones (and c) from n0 on. Nothing allocated
        // in the region.
        std::vector<SeqLayout> parts(nt);
        for (int t = 0; t < nt; ++t)
          parts[t] = make_seq_layout(T_, (t + 1) * N / nt - t * N / nt, nullptr);
        std::vector<T*> part_buf(nt * specs.size());
        for (int t = 0; t < nt; ++t)
          for (size_t i = 0; i < specs.size(); ++i) {
            const int64_t n0 = t * N / nt;
            const int64_t first = specs[i].infer == BufRows::per_row ? T_ * n0 : n0;
            part_buf[t * specs.size() + i] = buf[i] ? buf[i] + first * specs[i].cols : nullptr;
          }
#pragma omp parallel num_threads(nt)
        for (int t = omp_get_thread_num(); t < nt; t += omp_get_num_threads()) {
          const int64_t n0 = t * N / nt;
          DenseIo<T> io_t = io;
          io_t.x = io.x + n0 * io.ldx;
          io_t.h = io.h + n0 * io.ldh;
          io_t.x_step = N * io.ldx;
          io_t.h_step = N * io.ldh;
          cell.forward(W, parts[t], nullptr, h0s + n0 * ldh0,
                       C > 0 ? cs.data<T>() + n0 * C : nullptr, part_buf.data() + t * specs.size(),
                       nullptr, false, 1, &io_t);
        }
      } else {
        cell.forward(W, lay, xp.defined() ? xp.data<T>() : nullptr, h0s,
                     C > 0 ? cs.data<T>() : nullptr, buf.data(), hs, record != nullptr, 0, io_used);
      }
      if (!dense) scatter_packed<T>(lay, d, hs, P, out.data<T>(), D * P, d * P, false);
      for (int64_t j = 0; j < N; ++j) {
        // Dense: sequence j's last state is at time T - 1 (forward) or 0 (reverse).
        const T* last_h =
            dense ? io.h + ((d == 0 ? T_ - 1 : 0) * N + j) * io.ldh : hs + last_row(lay, j) * P;
        std::memcpy(r.h_n.data<T>() + (ld * N + lay.perm[j]) * P, last_h, P * sizeof(T));
        if (C > 0) {
          const T* last_c = cs.data<T>() + (record ? N + last_row(lay, j) : j) * C;
          std::memcpy(r.c_n.data<T>() + (ld * N + lay.perm[j]) * C, last_c, C * sizeof(T));
        }
      }
      if (record) {
        LayerRecord<Packed>& rec = record->layers[ld];
        rec.states = states;
        rec.cs = cs;
        rec.bufs = std::move(bufs);
        rec.packed = std::move(packed_here);
      }
    }
    if (record) record->layer_inputs[l] = layer_in;
    if (training && s.dropout > 0 && l + 1 < L) {
      Tensor mask = apply_dropout<T>(out, s.dropout, rng, share);
      if (record) record->masks[l] = mask;
    }
    layer_in = out;
  }
  r.output = layer_in;
  return r;
}

// Backward through the stack from what stack_forward recorded: dout (T, N, D * P) time-major,
// dhn (L*D, N, P), dcn (L*D, N, cell_width), each undefined for zero. The gradients are
// time-major (T, N, I), (L*D, N, P) and (L*D, N, cell_width).
template <typename T, typename Cell>
StackGrads<typename Cell::Weights> stack_backward(const Cell& cell, const StackShape& s,
                                                  const SeqLayout& lay,
                                                  const StackRecord<typename Cell::Packed>& record,
                                                  const Tensor& dout, const Tensor& dhn,
                                                  const Tensor& dcn) {
  const int64_t L = s.L, D = s.D, P = s.P, C = cell.cell_width();
  const int64_t N = lay.N, T_ = lay.T, rows = lay.rows();
  const DType dt = dtype_of<T>();
  StackGrads<typename Cell::Weights> grads;
  grads.dweights.resize(L * D);
  Tensor dh0 = Tensor::zeros({L * D, N, P}, dt);
  Tensor dc0 = C > 0 ? Tensor::zeros({L * D, N, C}, dt) : Tensor();
  Tensor dyp = Tensor::empty({rows, P}, dt), dh0s = Tensor::empty({N, P}, dt);
  Tensor dc = Tensor::empty({N, C}, dt);
  Tensor d_above = dout;  // dL/d(output of layer l), (T, N, D*P) time-major, or undefined
  // One direction over sequences of one length: the packed rows are the time-major rows, so
  // dL/dx is written straight into dL/d(layer input) and a contiguous layer input is read in
  // place (no copy of either; the same values).
  const bool direct = D == 1 && lay.time_major();
  for (int64_t l = L - 1; l >= 0; --l) {
    const int64_t in = s.in(l);
    const Tensor& layer_in = record.layer_inputs[l];
    const bool x_in_place = direct && layer_in.stride(2) == 1 && layer_in.stride(1) == in &&
                            layer_in.stride(0) == N * in;
    Tensor dlayer_in = direct ? Tensor::empty({T_, N, in}, dt) : Tensor::zeros({T_, N, in}, dt);
    Tensor xp = x_in_place ? Tensor() : Tensor::empty({rows, in}, dt);
    Tensor dxp = direct ? Tensor() : Tensor::empty({rows, in}, dt);
    const T* x_rows = x_in_place ? layer_in.data<T>() : xp.data<T>();
    T* dx_rows = direct ? dlayer_in.data<T>() : dxp.data<T>();
    for (int d = 0; d < D; ++d) {
      const int64_t ld = l * D + d;
      const LayerRecord<typename Cell::Packed>& rec = record.layers[ld];
      T* dy = dyp.data<T>();
      if (d_above.defined())
        gather_packed<T>(lay, d, d_above, d * P, P, dy);
      else
        std::memset(dy, 0, rows * P * sizeof(T));
      if (dhn.defined()) add_sorted_rows<T>(lay, dhn.select(0, ld), dy, true);
      if (C > 0) {
        std::memset(dc.data<T>(), 0, N * C * sizeof(T));
        if (dcn.defined()) add_sorted_rows<T>(lay, dcn.select(0, ld), dc.data<T>());
      }
      if (!x_in_place) gather_packed<T>(lay, d, layer_in, 0, in, xp.data<T>());
      std::vector<const T*> buf(rec.bufs.size());
      for (size_t i = 0; i < buf.size(); ++i)
        buf[i] = rec.bufs[i].defined() ? rec.bufs[i].template data<T>() : nullptr;
      grads.dweights[ld] = cell.gradients(l, dt);
      cell.backward(rec.packed, lay, x_rows, rec.states.template data<T>(),
                    C > 0 ? rec.cs.template data<T>() : nullptr, buf.data(), dy,
                    C > 0 ? dc.data<T>() : nullptr, dx_rows, grads.dweights[ld], dh0s.data<T>());
      if (!direct) scatter_packed<T>(lay, d, dxp.data<T>(), in, dlayer_in.data<T>(), in, 0, true);
      for (int64_t j = 0; j < N; ++j) {
        const int64_t n = lay.perm[j];
        std::memcpy(dh0.data<T>() + (ld * N + n) * P, dh0s.data<T>() + j * P, P * sizeof(T));
        if (C > 0)
          std::memcpy(dc0.data<T>() + (ld * N + n) * C, dc.data<T>() + j * C, C * sizeof(T));
      }
    }
    if (l > 0 && record.masks[l - 1].defined()) {
      T* g = dlayer_in.data<T>();
      const T* m = record.masks[l - 1].template data<T>();
      for (int64_t i = 0; i < dlayer_in.numel(); ++i) g[i] *= m[i];
    }
    d_above = dlayer_in;
  }
  grads.dinput = d_above;
  grads.dh0 = dh0;
  grads.dc0 = dc0;
  return grads;
}

// ---- A stack's weights by state-dict name, generic over the cell -----------------------
//
// A cell lists its layer's tensors (StackWeights<its Config>::fields(config, layer), in
// ops/gru_layer.h and ops/lstm_layer.h): the checks, the random initial values, the state dict
// and reading one, below, walk that list.

// One tensor of a layer's weights: its state-dict name ("weight_ih", ...; the key adds the
// layer and direction), the member holding it, and its shape; an empty shape: the stack has
// none, for the reason `absent` gives ("bias is false").
template <typename W>
struct WeightField {
  const char* name;
  Tensor W::*member;
  Shape shape;
  const char* absent = "";
};

// Specialized by each cell for its Config: `Weights` (a layer's weights) and
// `static std::vector<WeightField<Weights>> fields(const Config& c, int64_t layer)`.
template <typename Config>
struct StackWeights;

// Each weight set checked (its shapes, dtype `dtype`, on the CPU; no tensor the stack has
// none of) and made contiguous. `op` ("gru") starts the messages.
template <typename Config, typename W>
void check_stack_weights(const char* op, const Config& c, DType dtype, std::vector<W>& weights) {
  const int64_t D = c.directions();
  for (int64_t l = 0; l < c.num_layers; ++l)
    for (int64_t d = 0; d < D; ++d) {
      W& w = weights[l * D + d];
      for (const WeightField<W>& f : StackWeights<Config>::fields(c, l)) {
        Tensor& t = w.*f.member;
        if (!f.shape.empty())
          check_weight(op, gru_key(f.name, l, d), t, f.shape, dtype);
        else if (t.defined())
          throw Error(fmt::format("{}: layer {} has {} but {}", op, l, f.name, f.absent));
        make_contiguous(t);
      }
    }
}

// A layer's tensors (or their gradients), allocated uninitialized: every field the stack has.
template <typename Config>
typename StackWeights<Config>::Weights empty_layer_weights(const Config& c, int64_t layer,
                                                           DType dtype) {
  typename StackWeights<Config>::Weights w;
  for (const auto& f : StackWeights<Config>::fields(c, layer))
    if (!f.shape.empty()) w.*f.member = Tensor::empty(f.shape, dtype);
  return w;
}

// Weights uniform in +-1/sqrt(H) as PyTorch's initial ones, drawn in the order of the state
// dict's keys (layer, direction, then the fields) from one generator seeded with `seed`.
template <typename W, typename Config>
std::vector<W> random_stack_weights(const Config& c, DType dtype, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const double bound = 1.0 / std::sqrt(static_cast<double>(c.hidden_size));
  std::uniform_real_distribution<double> uni(-bound, bound);
  std::vector<W> weights;
  for (int64_t l = 0; l < c.num_layers; ++l)
    for (int64_t d = 0; d < c.directions(); ++d) {
      W w;
      for (const WeightField<W>& f : StackWeights<Config>::fields(c, l)) {
        if (f.shape.empty()) continue;
        Tensor t = Tensor::empty(f.shape, DType::f64);
        for (int64_t i = 0; i < t.numel(); ++i) t.data<double>()[i] = uni(rng);
        w.*f.member = t.to(dtype);
      }
      weights.push_back(std::move(w));
    }
  return weights;
}

// Copies of every defined tensor (a stack's copy owns its weights).
template <typename W, typename Config>
std::vector<W> clone_stack_weights(const Config& c, const std::vector<W>& weights) {
  std::vector<W> out = weights;
  const int64_t D = c.directions();
  for (int64_t ld = 0; ld < static_cast<int64_t>(out.size()); ++ld)
    for (const WeightField<W>& f : StackWeights<Config>::fields(c, ld / D))
      if ((out[ld].*f.member).defined()) out[ld].*f.member = (out[ld].*f.member).clone();
  return out;
}

// The state dict of per-layer tensors (weights or their gradients): every defined field.
template <typename W, typename Config>
std::map<std::string, Tensor> stack_state_dict(const Config& c, const std::vector<W>& weights) {
  std::map<std::string, Tensor> out;
  const int64_t D = c.directions();
  for (int64_t l = 0; l < c.num_layers; ++l)
    for (int64_t d = 0; d < D; ++d) {
      const W& w = weights.at(l * D + d);
      for (const WeightField<W>& f : StackWeights<Config>::fields(c, l))
        if ((w.*f.member).defined()) out[gru_key(f.name, l, d)] = w.*f.member;
    }
  return out;
}

// The weights of a stack of configuration `c` out of a state dict: each field the stack has
// (a missing key is an error), and no other key (`what` names the stack in that message).
template <typename W, typename Config>
std::vector<W> read_stack_weights(const char* op, const Config& c,
                                  const std::map<std::string, Tensor>& state,
                                  const std::string& what) {
  StateDictReader reader(op, state);
  std::vector<W> weights;
  for (int64_t l = 0; l < c.num_layers; ++l)
    for (int64_t d = 0; d < c.directions(); ++d) {
      W w;
      for (const WeightField<W>& f : StackWeights<Config>::fields(c, l))
        if (!f.shape.empty()) w.*f.member = reader.get(gru_key(f.name, l, d));
      weights.push_back(std::move(w));
    }
  reader.check_no_other(what);
  return weights;
}

}  // namespace grux::ops
