// Pipeline schedules as data. A schedule is, for every pipeline rank, the ordered list of what
// that rank does in one optimizer step: forward / backward of (micro-batch, model chunk), and
// the sends / receives of activations (forward direction) and their gradients (backward).
// The executor (pipeline.hpp) runs the list with the PP Comm; `mpitron plan` prints it; the
// unit tests check its properties. Nothing here knows about models or MPI.
//
// Virtual stages: with v model chunks per rank (interleaved), rank r's chunk c is virtual
// stage c*pp + r (Megatron's assignment), so pp=2, v=2 over 8 layers gives
//   rank 0: chunk 0 = layers 0-1 (virtual stage 0), chunk 1 = layers 4-5 (virtual stage 2)
//   rank 1: chunk 0 = layers 2-3 (virtual stage 1), chunk 1 = layers 6-7 (virtual stage 3)
// and activations flow 0 -> 1 -> 0 -> 1 (rank pp-1's chunk c feeds rank 0's chunk c+1).
//
// Worked example, 1F1B with pp=2, m=4 (F = forward, B = backward, digits = micro-batch):
//   rank 0: F0 send_act0 | F1 {send_act1 recv_grad0} B0 {send_grad0} | F2 ... B3 send_grad3
//   rank 1: recv_act0 F0 B0 {send_grad0 recv_act1} F1 B1 ...
// Consecutive communication actions form one group: the executor posts all of a group's
// receives and sends together (Megatron's send_forward_recv_backward pairing) and waits for the
// receives; sends never block. simulate() replays that rule and reports a deadlock if any.
#pragma once
#include <functional>
#include <string>
#include <vector>

namespace mpitron {

enum class PipeOp : unsigned char { forward, backward, recv_act, send_act, recv_grad, send_grad };
const char* pipe_op_name(PipeOp op);
inline bool is_comm(PipeOp op) { return op != PipeOp::forward && op != PipeOp::backward; }

struct PipeAction {
  PipeOp op;
  int mb;     // micro-batch
  int chunk;  // local model chunk (0 .. v-1)
  bool operator==(const PipeAction&) const = default;
};

struct PipelineSchedule {
  std::string kind;  // gpipe | 1f1b | interleaved
  int pp = 1, microbatches = 1, virtual_stages = 1;
  std::vector<std::vector<PipeAction>> ranks;  // [pp][actions]

  int virtual_stage(int rank, int chunk) const { return chunk * pp + rank; }
  int num_virtual_stages() const { return pp * virtual_stages; }
  // Peer rank of a communication action of `rank` (previous stage for recv_act / send_grad,
  // next stage for send_act / recv_grad), and the peer's chunk.
  int peer(int rank, PipeAction a) const;
  int peer_chunk(int rank, PipeAction a) const;
  // Most micro-batches whose forward has run and backward has not, per (rank, chunk): the number
  // of activation slots the model chunk needs.
  int max_in_flight(int rank, int chunk) const;
};

// Throws UsageError for a bad combination (microbatches < pp for 1f1b/interleaved, interleaved
// with v < 2 or microbatches not a multiple of pp, unknown kind).
PipelineSchedule make_schedule(const std::string& kind, int pp, int microbatches, int virtual_stages = 1);
// The combinations make_schedule refuses (UsageError): its rules, which the layout rules
// (layout_rules.hpp) ask too.
void check_schedule(const std::string& kind, int pp, int microbatches, int virtual_stages);

// Timeline of one step with forward = `t_fwd` and backward = `t_bwd` time units per chunk and free
// communication. Throws Error naming the stuck ranks if the schedule deadlocks.
struct PipelineTimeline {
  struct Slot {
    int rank;
    double start, end;
    PipeAction action;  // forward or backward
  };
  std::vector<Slot> compute;
  double makespan = 0;
  std::vector<double> busy;  // per rank
  double bubble() const;     // idle fraction averaged over ranks
};
PipelineTimeline simulate(const PipelineSchedule& s, double t_fwd = 1.0, double t_bwd = 2.0);
// The same with each compute action's own duration (rank, action: forward / backward of a
// micro-batch and chunk) and p2p_s from a send's post to its message being there to receive.
PipelineTimeline simulate(const PipelineSchedule& s, const std::function<double(int, const PipeAction&)>& duration,
                          double p2p_s = 0.0);

// (p-1)/(v*m + p-1): the bubble of GPipe and 1F1B (v = 1) and of interleaved 1F1B.
double theoretical_bubble(int pp, int microbatches, int virtual_stages = 1);

// Text forms for `mpitron plan`: the per-rank action lists and a time-grid table.
std::string format_actions(const PipelineSchedule& s);
std::string format_timeline(const PipelineSchedule& s, const PipelineTimeline& t);

// Layers of each of the n_stages (virtual) stages: explicit `pp_layers` (must sum to n_layer)
// or balanced ([s*L/n, (s+1)*L/n), as model_shard_for). UsageError if a stage would
// be empty or the list is wrong.
std::vector<int> pipeline_stage_layers(int n_layer, int n_stages, const std::vector<int>& pp_layers);

}  // namespace mpitron
