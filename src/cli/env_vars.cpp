#include "env_vars.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <set>

extern char** environ;

namespace mpitron {
namespace {

// Suffixes after "NCCL_": the names libnccl 2.28.9 reads (`strings libnccl.so | grep ^NCCL_`, minus
// debug subsystem and log level names) plus documented older ones (NCCL_LL_THRESHOLD, NCCL_RINGS, ...).
const char* const kNcclSuffixes[] = {
    "ALGO", "ALLOC_P2P_NET_LL_BUFFERS", "BUFFSIZE", "CGA_CLUSTER_SIZE", "CHECKS_DISABLE", "CHECK_POINTERS",
    "CHUNK_SIZE", "COLLNET_ENABLE", "COLLNET_NODE_THRESHOLD", "COMM_BLOCKING", "COMM_ID",
    "COMM_SHRINK_SHARE_RESOURCES", "COMM_SPLIT_SHARE_RESOURCES", "CONF_FILE", "CONNECT_ROUND_MAX_PEERS",
    "CREATE_THREAD_CONTEXT", "CROSS_NIC", "CTA_POLICY", "CUMEM_ENABLE", "CUMEM_HOST_ENABLE", "DEBUG",
    "DEBUG_FILE", "DEBUG_SUBSYS", "DEBUG_TIMESTAMP_FORMAT", "DEBUG_TIMESTAMP_LEVELS", "DMABUF_ENABLE",
    "ENV_PLUGIN", "GDRCOPY_ENABLE", "GDRCOPY_FIFO_ENABLE", "GDRCOPY_FLUSH_ENABLE", "GDRCOPY_SYNC_ENABLE",
    "GDR_FLUSH_DISABLE", "GIN_COUNTER_POOL_SIZE", "GIN_ENABLE", "GIN_ERROR_QUERY_SEC",
    "GIN_GDAKI_NIC_HANDLER", "GIN_GDAKI_QP_DEPTH", "GIN_IB_ALLGATHER_TAG", "GIN_IB_ALLTOALL_TAG",
    "GIN_NCONTEXTS", "GIN_PROXY_QUEUE_SIZE", "GIN_SIGNAL_POOL_SIZE", "GIN_TYPE", "GRAPH_DUMP_FILE",
    "GRAPH_DUMP_FILE_RANK", "GRAPH_FILE", "GRAPH_HELPER_DISABLE", "GRAPH_MIXING_SUPPORT", "GRAPH_REGISTER",
    "GROUP_CUDA_STREAM", "HOSTID", "IBEXT_DISABLE", "IB_ADAPTIVE_ROUTING", "IB_ADDR_FAMILY", "IB_ADDR_RANGE",
    "IB_AR_THRESHOLD", "IB_CUDA_SUPPORT", "IB_DATA_DIRECT", "IB_DISABLE", "IB_ECE_ENABLE", "IB_FIFO_TC",
    "IB_GDR_LEVEL", "IB_GID_INDEX", "IB_HCA", "IB_MERGE_NICS", "IB_MERGE_VFS", "IB_MQP_RETRY_ALL",
    "IB_MQP_RETRY_CNT", "IB_MQP_RETRY_SLEEP_MSEC", "IB_PCI_RELAXED_ORDERING", "IB_PKEY",
    "IB_QPS_PER_CONNECTION", "IB_RETRY_CNT", "IB_RETURN_ASYNC_EVENTS", "IB_ROCE_VERSION_NUM",
    "IB_ROUTABLE_FLID_GID_INDEX", "IB_SL", "IB_SL_DEFAULT", "IB_SPLIT_DATA_ON_QPS", "IB_TC", "IB_TC_DEFAULT",
    "IB_TIMEOUT", "IB_USE_INLINE", "IB_WARN_RAIL_LOCAL", "IGNORE_CPU_AFFINITY", "IGNORE_DISABLED_P2P",
    "IPC_COLLECTIVE", "IPC_SENDRECV", "L1_SHARED_MEMORY_CARVEOUT", "LAUNCH_MODE", "LAUNCH_ORDER_IMPLICIT",
    "LAUNCH_RACE_FATAL", "LEGACY_CUDA_REGISTER", "LL128_BUFFSIZE", "LL128_C2C", "LL128_NTHREADS",
    "LL_BUFFSIZE", "LL_THRESHOLD", "LOCAL_REGISTER", "MAX_CTAS", "MAX_NCHANNELS", "MAX_NRINGS",
    "MAX_P2P_NCHANNELS", "MEM_SYNC_DOMAIN", "MIN_CTAS", "MIN_NCHANNELS", "MIN_NRINGS", "MIN_P2P_NCHANNELS",
    "MNNVL_CLIQUE_ID", "MNNVL_ENABLE", "MNNVL_RAIL_PER_HOST", "MNNVL_SCATTER_NETS_ENABLE", "MNNVL_UUID",
    "NCHANNELS_PER_NET_PEER", "NCHANNELS_PER_PEER", "NET", "NETDEVS_POLICY", "NET_DEVICE_GIN_GDAKI",
    "NET_DEVICE_GIN_PROXY", "NET_DEVICE_HOST", "NET_DEVICE_UNPACK", "NET_DISABLE_INTRA", "NET_FORCE_FLUSH",
    "NET_FORCE_MERGE", "NET_GDR_C2C", "NET_GDR_LEVEL", "NET_GDR_READ", "NET_MERGE_LEVEL",
    "NET_OPTIONAL_RECV_COMPLETION", "NET_OVERHEAD", "NET_PLUGIN", "NET_PLUGIN_REF_COUNT",
    "NET_SHARED_BUFFERS", "NET_SHARED_COMMS", "NSOCKS_PERTHREAD", "NTHREADS", "NVB_DISABLE", "NVB_PRECONNECT",
    "NVLINK_UTIL_CENTRIC_SCHED_ENABLE", "NVLSTREE_MAX_CHUNKSIZE", "NVLS_CHUNKSIZE", "NVLS_ENABLE",
    "NVLS_NCHANNELS", "NVTX_DISABLE", "OOB_NET_ENABLE", "OOB_NET_IFNAME", "P2P_DIRECT_DISABLE", "P2P_DISABLE",
    "P2P_LEVEL", "P2P_LL_THRESHOLD", "P2P_NET_CHUNKSIZE", "P2P_NVL_CHUNKSIZE", "P2P_PCI_CHUNKSIZE",
    "P2P_PXN_LEVEL", "P2P_READ_ENABLE", "P2P_SCHEDULE_GROUP_SIZE", "P2P_USE_CUDA_MEMCPY", "PAT_ENABLE",
    "PROFILER_PLUGIN", "PROGRESS_APPENDOP_FREQ", "PROTO", "PROXY_APPEND_BATCH_SIZE", "PROXY_CPUSET",
    "PROXY_DUMP_SIGNAL", "PXN_C2C", "PXN_DISABLE", "RAS_ADDR", "RAS_ENABLE", "RAS_TIMEOUT_FACTOR",
    "REPORT_CONNECT_PROGRESS", "RINGS", "RUNTIME_CONNECT", "SET_CPU_STACK_SIZE", "SET_STACK_SIZE",
    "SET_THREAD_NAME", "SHM_DISABLE", "SHM_LOCALITY", "SHM_MEMCPY_MODE", "SHM_USE_CUDA_MEMCPY",
    "SINGLE_PROC_MEM_REG_ENABLE", "SINGLE_RING_THRESHOLD", "SOCKET_FAMILY", "SOCKET_IFNAME", "SOCKET_INLINE",
    "SOCKET_MIN_TASKSIZE", "SOCKET_NTHREADS", "SOCKET_RCVBUF", "SOCKET_RETRY_CNT", "SOCKET_RETRY_SLEEP_MSEC",
    "SOCKET_SNDBUF", "SYM_CTAS", "SYM_KERNEL", "THREAD_THRESHOLDS", "TOPO_DUMP_FILE", "TOPO_DUMP_FILE_RANK",
    "TOPO_FILE", "TREE_THRESHOLD", "TUNER_PLUGIN", "UID_STAGGER_RATE", "UID_STAGGER_THRESHOLD",
    "UNPACK_DOUBLE_NCHANNELS", "WARN_ENABLE_DEBUG_INFO", "WIN_ENABLE", "WIN_STRIDE", "WORK_ARGS_BYTES",
    "WORK_FIFO_BYTES",
};

// NCCL_* names that PyTorch reads, not NCCL: setting them for mpitron does nothing.
const char* const kTorchOnly[] = {"NCCL_ASYNC_ERROR_HANDLING", "NCCL_BLOCKING_WAIT", "NCCL_DESYNC_DEBUG",
                                  "NCCL_ENABLE_TIMING", "NCCL_ENABLE_MONITORING", "NCCL_HEARTBEAT_TIMEOUT_SEC",
                                  "NCCL_TRACE_BUFFER_SIZE", "NCCL_DUMP_ON_TIMEOUT"};

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

bool valid_name(const std::string& n) {
  if (n.empty() || (n[0] >= '0' && n[0] <= '9')) return false;
  return std::all_of(n.begin(), n.end(), [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
  });
}

bool shown_in_log(const std::string& name) {
  return name.rfind("NCCL_", 0) == 0 || name == "CUDA_VISIBLE_DEVICES" || name == "OMP_NUM_THREADS";
}

}  // namespace

const std::vector<std::string>& known_nccl_vars() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const char* s : kNcclSuffixes) v.push_back(std::string("NCCL_") + s);
    std::sort(v.begin(), v.end());
    return v;
  }();
  return names;
}

std::string closest_nccl_var(const std::string& name) {
  std::string best;
  size_t best_d = std::string::npos;
  for (const auto& k : known_nccl_vars()) {
    size_t d = edit_distance(name, k);
    if (d < best_d) best_d = d, best = k;
  }
  // Close enough to be a typo: a few edits, relative to the name's length.
  size_t limit = std::max<size_t>(2, name.size() / 4);
  return best_d <= limit ? best : std::string();
}

std::vector<std::string> apply_job_env(const std::map<std::string, std::string>& env, bool override) {
  std::vector<std::string> warnings;
  const auto& known = known_nccl_vars();
  for (const auto& [name, value] : env) {
    if (!valid_name(name)) {
      warnings.push_back(fmt::format("[env] '{}' is not a valid environment variable name; ignored", name));
      continue;
    }
    if (name.rfind("NCCL_", 0) == 0 && !std::binary_search(known.begin(), known.end(), name)) {
      if (std::find(std::begin(kTorchOnly), std::end(kTorchOnly), name) != std::end(kTorchOnly)) {
        warnings.push_back(fmt::format("[env] {} is read by PyTorch, not by NCCL: it has no effect in mpitron", name));
      } else {
        std::string near = closest_nccl_var(name);
        warnings.push_back(near.empty()
                               ? fmt::format("[env] {} is not an NCCL variable NCCL knows (typo?); NCCL ignores it",
                                             name)
                               : fmt::format("[env] {} is not an NCCL variable; did you mean {}?", name, near));
      }
    }
    if (name == "NCCL_DEBUG") {
      static const std::set<std::string> levels = {"VERSION", "WARN", "INFO", "TRACE", "ABORT", "NONE"};
      std::string up = value;
      std::transform(up.begin(), up.end(), up.begin(), [](unsigned char c) { return std::toupper(c); });
      if (!levels.count(up))
        warnings.push_back(fmt::format("[env] NCCL_DEBUG={}: NCCL knows VERSION, WARN, INFO, TRACE, ABORT, NONE", value));
    }
    const char* cur = std::getenv(name.c_str());
    if (cur && !override) {
      if (value != cur)
        warnings.push_back(fmt::format("[env] {}={} from the environment wins over the job's {}={} "
                                       "(set env_override = true to let the job win)",
                                       name, cur, name, value));
      continue;
    }
    setenv(name.c_str(), value.c_str(), 1);
  }
  return warnings;
}

std::vector<std::string> effective_env_lines(const std::map<std::string, std::string>& env) {
  std::map<std::string, std::string> now;
  for (char** e = environ; e && *e; ++e) {
    std::string kv = *e;
    auto eq = kv.find('=');
    if (eq == std::string::npos) continue;
    std::string name = kv.substr(0, eq);
    if (shown_in_log(name) || env.count(name)) now[name] = kv.substr(eq + 1);
  }
  std::vector<std::string> lines;
  for (const auto& [name, value] : now) {
    auto it = env.find(name);
    std::string src = it == env.end() ? "" : (it->second == value ? " (job)" : " (environment)");
    lines.push_back(fmt::format("{}={}{}", name, value, src));
  }
  return lines;
}

}  // namespace mpitron
