// Reference scan kernels written straight from the definitions: one sequential loop per
// recurrence, no threads, no chunks. The oracle for the optimized kernels in cpu/scan.h (same
// layouts and meanings; see there).
#pragma once

#include <cstdint>

#include "cpu/scan.h"

namespace grux::cpu::ref {

template <typename T>
void scan_elementwise(ScanKind kind, const T* x, T* y, int64_t O, int64_t Tn, int64_t C,
                      bool exclusive, bool reverse);

template <typename T>
void affine_scan_diag(const T* a, const T* b, const T* h0, T* h, int64_t O, int64_t Tn, int64_t C,
                      bool reverse);

// Log space as the two-pass formulation: with A_t = sum_{s<=t} la_s (a cumulative sum),
// lh_t = A_t + logsumexp_{s<=t}(lb_s - A_s) (a cumulative logsumexp), plus lh0 + A_t.
template <typename T>
void log_affine_scan_diag(const T* la, const T* lb, const T* lh0, T* lh, int64_t O, int64_t Tn,
                          int64_t C, bool reverse);

template <typename T>
void affine_scan_matrix(const T* A, const T* b, const T* h0, T* h, int64_t O, int64_t Tn, int64_t d,
                        bool reverse);

template <typename T>
void matmul_scan(const T* x, T* y, int64_t O, int64_t Tn, int64_t d, bool reverse);

}  // namespace grux::cpu::ref
