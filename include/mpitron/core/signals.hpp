// Job-control signals (SIGUSR1, SIGTERM, SIGINT) are never delivered asynchronously to any
// thread of mpitron. main() blocks them before anything can start a thread (MPI_Init's progress
// threads, the OpenMP pool, the DDP progress and data prefetch threads all inherit the mask),
// and one watcher thread reads them synchronously from a signalfd.
//
// Why: libdnnl 2.6's AVX-512 sgemm kernel
// (jit_avx512_common_gemm_f32), for K above ~84 (our weight-gradient GEMMs, K = batch x seq),
// points rsp into a 4 KiB-aligned *malloc'ed* workspace while it runs. A signal delivered to a
// thread at that moment has its frame (3-4 KiB with AVX-512 state) written below that address,
// over the heap's chunk headers; the later free() of the workspace aborts ("corrupted size vs.
// prev_size") or malloc crashes elsewhere. A handler that only sets a flag is still a frame on
// that stack, so no asynchronous handler may ever run on a thread that executes oneDNN kernels;
// blocking the signals in every thread and collecting them in a thread of our own is the only
// safe rule. tests/e2e/test_signal_mask.sh checks every thread's SigBlk; make test-stress
// preempts hundreds of steps at random moments.
//
// What the watcher does with a signal depends on the mode:
//   terminate (default: every command but a training run): the signal's default action, as if
//     it had never been blocked (the process dies by that signal);
//   record (a training run, after arm_job_signal_recording()): the first SIGUSR1/SIGTERM is
//     recorded for the step boundary (checkpoint, exit 75); the first SIGINT too (checkpoint,
//     exit 130), and a second SIGINT terminates at once (Ctrl-C twice: quit now);
//   late (training ended, finish_job_signal_recording()): a signal that came after the last step
//     boundary is reported on stderr ("... after the last step ...") and the process exits
//     normally: the run is complete and checkpointed, there is nothing to requeue.
#pragma once
#include <csignal>

namespace mpitron {

// Blocks SIGUSR1, SIGTERM and SIGINT in the calling thread (every thread it creates later
// inherits the mask) and starts the watcher thread. Call first thing in main(), before MPI or
// OpenMP start. Idempotent.
void block_job_signals_and_watch();

// Switches the watcher to `record` mode (see above). Idempotent.
void arm_job_signal_recording();

// Training has ended (no signal was agreed at its last boundary): switches `record` to `late`,
// reporting a signal recorded since that boundary and any later one. No-op in other modes.
void finish_job_signal_recording();

// The first job-control signal recorded in `record` mode, 0 when none.
int recorded_job_signal();

// For tests: forget a recorded signal.
void clear_recorded_job_signal();

// The signals the watcher owns (SIGUSR1, SIGTERM, SIGINT).
bool is_job_signal(int sig);

}  // namespace mpitron
