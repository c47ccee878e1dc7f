#include "mpitron/train/param_dump.hpp"

#include <hdf5.h>

#include <algorithm>
#include <map>
#include <mutex>

#include "mpitron/core/error.hpp"
#include "mpitron/data/hdf5_lock.hpp"
#include "mpitron/model/param_tables.hpp"
#include "mpitron/parallel/partition.hpp"

namespace mpitron {
namespace {

size_t table_floats(const std::vector<ParamInfo>& table) {
  size_t n = 0;
  for (const auto& p : table) n = std::max(n, p.offset + p.numel);
  return n;
}

// Full logical tensors by name; wte keeps only the real vocabulary rows (its padding depends on
// tp, so padded rows would not compare across layouts).
struct FullTensors {
  std::map<std::string, std::vector<float>> data;
  std::map<std::string, std::vector<hsize_t>> shape;

  void add_shard(const ModelConfig& cfg, const std::vector<ParamInfo>& table, const float* values, int tp_rank,
                 ParamSet set) {
    for (const auto& p : table) {
      if (!in_param_set(p, set)) continue;
      int64_t full = 1;
      for (auto d : p.full_shape) full *= d;
      auto& dst = data[p.name];
      if (dst.empty()) {
        dst.assign(full, 0.f);
        std::vector<hsize_t> dims(p.full_shape.begin(), p.full_shape.end());
        if (is_vocab_rows(p.name)) dims[0] = static_cast<hsize_t>(cfg.vocab_size);
        shape[p.name] = dims;
      }
      for (size_t i = 0; i < p.numel; ++i) dst[param_full_index(p, static_cast<int64_t>(i), tp_rank)] = values[p.offset + i];
    }
  }
};

void write_h5(const std::string& path, const FullTensors& t) {
  std::lock_guard<std::mutex> lock(hdf5_mutex());
  std::string tmp = path + ".tmp";
  hid_t f = H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  check(f >= 0, "cannot create '{}'", tmp);
  for (const auto& [name, values] : t.data) {
    const auto& dims = t.shape.at(name);
    hid_t space = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
    hid_t ds = H5Dcreate2(f, name.c_str(), H5T_IEEE_F32LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    check(ds >= 0, "{}: cannot create dataset '{}'", tmp, name);
    // Row-major, so trimming wte's trailing rows is writing its first vocab_size*C values.
    herr_t rc = H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data());
    H5Dclose(ds);
    H5Sclose(space);
    check(rc >= 0, "{}: cannot write dataset '{}'", tmp, name);
  }
  check(H5Fclose(f) >= 0, "cannot close '{}'", tmp);
  check(std::rename(tmp.c_str(), path.c_str()) == 0, "cannot rename '{}' to '{}'", tmp, path);
}

}  // namespace

void dump_full_params(const std::string& path, const ModelConfig& cfg, const std::vector<int>& pp_layers,
                      int virtual_stages, ProcessGrid& grid, const std::vector<ChunkParams>& chunk_params) {
  const GridShape& gs = grid.shape();
  Comm& world = grid.world();
  const int kTag = 7301;
  auto tables = [&](const GridCoord& c) {
    std::vector<std::vector<ParamInfo>> t;
    for (const ModelShard& s : model_chunks_for(cfg, gs, c, pp_layers, virtual_stages)) t.push_back(model_param_table(cfg, s));
    return t;
  };
  // Contributors: data x context rank f = dp * cp + cp_rank 0 (everything), and under expert
  // parallel f = 1 .. ep - 1 (their routed experts; grid.hpp's ep group of f = 0).
  auto data_rank = [&](const GridCoord& c) { return data_context_rank(c, gs.cp); };
  if (grid.rank() != 0) {
    if (data_rank(grid.coord()) < gs.ep) {
      auto t = tables(grid.coord());
      check(t.size() == chunk_params.size(), "parameter dump: {} chunk buffers for {} model chunks", chunk_params.size(),
            t.size());
      for (size_t c = 0; c < t.size(); ++c) {
        size_t n = table_floats(t[c]);
        check(n <= chunk_params[c].n, "parameter dump: local buffer ({}) smaller than the table ({})",
              chunk_params[c].n, n);
        world.send(chunk_params[c].data, n, DType::f32, 0, kTag);
      }
    }
    world.barrier();
    return;
  }
  FullTensors full;
  std::vector<float> buf;
  for (int r = 0; r < grid.world_size(); ++r) {
    GridCoord c = grid_coord(gs, r);
    if (data_rank(c) >= gs.ep) continue;
    auto t = tables(c);
    for (size_t k = 0; k < t.size(); ++k) {
      const float* values = r == 0 ? chunk_params.at(k).data : nullptr;
      if (r != 0) {
        buf.assign(table_floats(t[k]), 0.f);
        world.recv(buf.data(), buf.size(), DType::f32, r, kTag);
        values = buf.data();
      }
      full.add_shard(cfg, t[k], values, c.tp, data_rank(c) == 0 ? ParamSet::all : ParamSet::experts);
    }
  }
  write_h5(path, full);
  world.barrier();
}

}  // namespace mpitron
