// Test-only fault injection, OFF unless the environment variable MPITRON_FAULT is set. Lets the
// reliability tests (hang watchdog, kill in the middle of a save, signals at a given phase) hit
// an exact moment instead of hoping a timer lands there.
//
//   MPITRON_FAULT="ACTION@POINT[,rank=R][,step=S][,after=N][,ms=M]"   (several specs: separated by ';')
//     ACTION: hang   sleep forever (the thread keeps running: a rank that never arrives)
//             stop   raise(SIGSTOP): the whole process freezes, as under a dead link
//             kill   raise(SIGKILL)
//             exit   _exit(3) without MPI_Finalize
//             usr1 | term   send SIGUSR1 / SIGTERM to this process (a preemption at that moment)
//             slow   sleep ms=M milliseconds (default 100) EVERY time the point is reached: a
//                    straggler (the other actions fire once)
//             late   the non-blocking operations at POINT start only when they are waited for
//                    (fault_late): the worst case of an overlap, deterministic (param_gather)
//             poison the values made at POINT get a NaN / inf (fault_poison): params (after the
//                    optimizer step, this rank's parameters and AdamW moments become NaN) and
//                    model_config (the resolved model's rope_theta becomes inf, a value the key
//                    ranges would have refused), to prove the guards behind the ranges
//     POINT:  a name passed to fault_point() below (the list is in src/distributed/fault_inject.cpp)
//     rank=R  only world rank R (default: every rank); step=S only while activity_step() == S;
//     after=N fire on the N-th time the point is reached (1-based, default 1), once.
//
// A bad spec is a UsageError naming the allowed actions and points.
#pragma once

namespace mpitron {

// Called at a named point; does nothing (one relaxed load) unless MPITRON_FAULT names it.
void fault_point(const char* point);
// True when MPITRON_FAULT says late@point (for this rank, at this step): the caller defers the
// operations it would start there until they are needed.
bool fault_late(const char* point);

// True once when MPITRON_FAULT says poison@point (for this rank, at this step, the after=N-th
// time): the caller plants the non-finite value that point documents.
bool fault_poison(const char* point);

// Reads MPITRON_FAULT now (train calls it at start-up, so a malformed spec is a usage error at
// once, not at the first point reached). Later fault_point() calls use what it parsed.
void fault_inject_from_env();

// For tests: parses `spec` as MPITRON_FAULT would (UsageError when malformed).
void fault_inject_configure(const char* spec, int world_rank);

}  // namespace mpitron
