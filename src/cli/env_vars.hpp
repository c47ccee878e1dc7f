// The job file's [env] table: environment variables (NCCL_*, CUDA_*, OMP_*, ...) applied on every
// rank before NCCL or OpenMP start (docs/jobs.md, docs/nccl.md).
//
// Precedence: a variable already set in the environment (exported by the user, `mpirun -x`, the
// sbatch script) wins over [env], unless the job says `env_override = true`. Names that look like
// NCCL's but are not ones NCCL reads (a typo such as NCCL_SOCKET_IFACE) get a warning naming the
// closest known variable; NCCL would silently ignore them.
#pragma once
#include <map>
#include <string>
#include <vector>

namespace mpitron {

// Set the [env] variables in this process (setenv). Returns warning lines, for rank 0 to print:
// unknown NCCL_* names (with the closest known name), variables PyTorch reads but NCCL does not,
// invalid names, bad NCCL_DEBUG values, and each variable whose environment value won over a
// different [env] value (with the hint env_override = true).
std::vector<std::string> apply_job_env(const std::map<std::string, std::string>& env, bool override);

// The effective values of the [env] names plus every NCCL_* / CUDA_VISIBLE_DEVICES / OMP_NUM_THREADS
// variable now in the environment, one "NAME=value" line each, sorted; a name from [env] is
// marked "(job)" when the job's value is the one in effect, "(environment)" otherwise. For the
// trainer's start-up log on rank 0; call it after apply_job_env.
std::vector<std::string> effective_env_lines(const std::map<std::string, std::string>& env);

// NCCL's environment variables, NCCL 2.28 plus older names still seen in scripts (sorted).
const std::vector<std::string>& known_nccl_vars();

// The known NCCL variable nearest to `name` by edit distance ("" when nothing is close).
std::string closest_nccl_var(const std::string& name);

}  // namespace mpitron
