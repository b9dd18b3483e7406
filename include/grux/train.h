// Training the character-level language model: options, the step loop's state (model,
// optimizer, data cursor, carried hidden state, history), evaluation, and checkpoints that
// resume bit-exactly (same thread count) and are written atomically.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "grux/dist.h"
#include "grux/export.h"
#include "grux/lm.h"
#include "grux/optim.h"

namespace grux GRUX_API {

struct TrainOptions {
  CharLmConfig model;              // vocab is filled in from the data
  int64_t batch = 16;              // N parallel streams
  int64_t window = 64;             // T steps per window (truncated BPTT length)
  int64_t steps = 2000;            // total optimizer steps of the run (the schedule spans them)
  std::string optimizer = "adam";  // adam, adamw, sgd
  double lr = 3e-3, min_lr = 3e-4;
  int64_t warmup = 50;
  double weight_decay = 0.0, momentum = 0.9;  // momentum: SGD only
  double clip = 1.0;                          // global gradient norm; 0 disables
  double val_fraction = 0.1;                  // last part of the text held out for validation
  int64_t eval_every = 500;                   // validation every K steps (and at the end)
  uint64_t seed = 1;                          // weights and dropout masks
  // The GRU's products in training: f32, or bf16 (an f32 model: bf16 operands, f32 sums,
  // master weights and optimizer state; Gru::forward_train). Validation runs in f32.
  Precision precision = Precision::f32;
  void validate() const;
  std::string to_json() const;  // everything above except model (stored separately)
  static TrainOptions from_json(const std::string& json, const CharLmConfig& model);
};

struct StepStats {
  int64_t step = 0;  // 1-based index of the step just taken
  double loss = 0, grad_norm = 0, lr = 0;
  int64_t tokens = 0;  // tokens in this step's batch
};

// One training run. Deterministic given the options and the text (and the number of
// processes: any thread count gives the same bits).
//
// Data parallelism: given a Communicator of K processes (grux/dist.h), each process (rank)
// takes an equal share of the batch's streams (K must divide options.batch), computes its
// share's loss and gradients, and the gradients are summed across the ranks in rank order
// before clipping and the optimizer step, so every rank holds the same model, bit for bit,
// and a K-process run repeats exactly. The losses equal the one-process run's to rounding
// (the sums are split differently). Every rank makes the same calls in the same order (the
// constructor, step, plan_steps, evaluate, save_checkpoint are collective); an error in one
// rank's input (a file it cannot read, settings or data that differ from rank 0's) is thrown
// on every rank as the same CollectiveError.
class Trainer {
 public:
  // A new run on `text` (UTF-8; the vocabulary is built from it). The initial weights are
  // drawn from options.seed, or taken from `initial` (parameter names as CharLm's) if given.
  // `comm`: the processes of a data-parallel run (null: this process alone); it must
  // outlive the Trainer.
  Trainer(const TrainOptions& options, const std::string& text,
          const std::map<std::string, Tensor>* initial = nullptr, Communicator* comm = nullptr);
  // Continues the run saved in a checkpoint; `text` must be the same text it was trained on
  // (checked by a hash). Throws grux::Error on a corrupt or mismatching checkpoint. A
  // checkpoint holds the whole run's state: any number of processes may continue it.
  static Trainer resume(const std::string& checkpoint_path, const std::string& text,
                        Communicator* comm = nullptr);

  // One optimizer step on the next window. Precondition: !done().
  StepStats step();
  bool done() const { return step_ >= options_.steps; }
  // Sets the run's total steps (where the cosine decay ends). Allowed only while every step
  // taken so far had a learning rate that does not depend on the total (the warm-up), so that
  // a run planned from a time budget equals a run given that many steps from the start.
  void plan_steps(int64_t total);
  // Mean cross-entropy (nats per character) over the whole validation part, cut into up to
  // 64 streams (as many as fit), from a zero state carried across its windows.
  double evaluate();
  // The same loss with the GRU's products in `precision` (f32 is evaluate()'s value), not
  // recorded in the history. bf16 and int8 take an f32 model.
  double validation_loss(Precision precision);
  // Writes model, optimizer state, vocabulary, options, step, carried state and history to
  // `path` atomically (rank 0 writes; the other ranks send it their streams' state).
  void save_checkpoint(const std::string& path) const;
  // The processes of this run (a one-process group when none was given).
  Communicator& communicator() const;

  int64_t steps_done() const { return step_; }
  const TrainOptions& options() const { return options_; }
  CharLm& model() { return *model_; }
  const Vocab& vocab() const { return vocab_; }
  int64_t train_tokens() const { return train_->tokens(); }
  int64_t val_tokens() const { return val_ ? val_->tokens() : 0; }

  // Loss history (for the CSV and the plot): every step's training loss, and validation
  // losses at the steps where evaluate() ran.
  struct History {
    std::vector<double> train_loss;  // index = step - 1
    std::vector<int64_t> val_step;
    std::vector<double> val_loss;
  };
  const History& history() const { return history_; }

 private:
  Trainer() = default;
  void setup(const std::string& text);  // vocab-independent parts: data split, batches
  void check_same_run() const;          // every rank has rank 0's settings, text and step
  void load_checkpoint(const std::string& path, const std::string& text);
  void write_checkpoint(const std::string& path, const Tensor& h) const;  // rank 0
  void sum_gradients(double& loss);  // across the ranks: the whole batch's mean
  Communicator* comm_ = nullptr;
  int64_t first_ = 0, local_ = 0;  // this rank's streams of the batch: [first_, first_ + local_)
  TrainOptions options_;
  Vocab vocab_;
  uint64_t text_hash_ = 0;
  std::unique_ptr<CharLm> model_;
  std::unique_ptr<Optimizer> optimizer_;
  LrSchedule schedule_;
  std::unique_ptr<TextBatches> train_, val_;
  Tensor h_;  // state carried across windows (L, local_, H): this rank's streams
  int64_t step_ = 0;
  History history_;
  Tensor ids_, targets_;         // reused window buffers
  std::vector<float> flat_f32_;  // the gradients in one buffer, to sum across ranks
  std::vector<double> flat_f64_;
};

// A trained model read from a checkpoint, for generation and inspection.
struct TrainedModel {
  std::unique_ptr<CharLm> model;
  Vocab vocab;
  TrainOptions options;
  int64_t step = 0;
  std::vector<double> val_loss;  // history of validation losses (may be empty)
};
// Throws grux::Error naming the path and the problem on a corrupt or foreign file.
TrainedModel load_trained_model(const std::string& checkpoint_path);

// Loss curve as a self-contained SVG (training loss per step, smoothed, and validation
// points) and as CSV (step, train_loss, val_loss with empty cells where not evaluated).
std::string loss_curve_svg(const Trainer::History& history, const std::string& title);
std::string loss_curve_csv(const Trainer::History& history);

// FNV-1a 64-bit hash of a text (identifies the training data in checkpoints).
uint64_t text_hash(const std::string& text);

}  // namespace GRUX_API
