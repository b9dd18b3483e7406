// The data side of a recurrent problem, shared by GruProblem and MinGruProblem: T steps of N
// sequences, their dtype, and optional per-sequence lengths.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "grux/export.h"
#include "grux/tensor.h"

namespace grux GRUX_API {

struct SequenceShape {
  int64_t T = 0, N = 0;
  DType dtype = DType::f32;
  std::vector<int64_t> lengths;  // (N) valid lengths; empty means every sequence has T steps

  // Time steps actually computed per layer (and direction): sum of lengths, or N * T.
  int64_t rows() const;
  // Sets `lengths` from a specification: "uniform:LO:HI:SEED" (std::mt19937_64(SEED), N
  // integers uniform in [LO, HI], 1 <= LO <= HI <= T) or the path of an int64 .npy file of
  // shape (N,). Throws grux::Error naming the specification. Returns the suffix that problem
  // names carry ("_len10-100s1", "_lenfile"); "" for an empty specification.
  std::string set_lengths(const std::string& spec);
};

}  // namespace GRUX_API
