// Checkpoint metadata (config, layout, step, sampler, tokenizer, version) as HDF5 attributes and
// small datasets, and as the JSON blob rank 0 broadcasts so every rank writes identical values.
// Private to src/train (checkpoint_io.cpp is the tensor I/O).
#pragma once
#include <hdf5.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "mpitron/data/h5.hpp"
#include "mpitron/checkpoint/checkpoint.hpp"

namespace mpitron::ckpt_meta {

nlohmann::json meta_to_json(const CheckpointMeta& m);
CheckpointMeta meta_from_json(const nlohmann::json& j);
// Metadata from an open file (any access mode; every read is independent).
CheckpointMeta read_meta(hid_t f, const std::string& path);
// The file's format_version: UsageError unless this mpitron reads it (1 .. kCheckpointFormatVersion).
int read_format_version(hid_t f, const std::string& path);
// UsageError unless dataset `ds` of file `f` can be a checkpoint tensor: 1-D or 2-D, a float type,
// and no more values than the file has bytes / 4 (its shape is read from the file: a corrupted
// one would be a huge allocation, or a product that overflows into a too small buffer).
void check_tensor_shape(hid_t f, hid_t ds, const std::string& path, const std::string& dataset);
// Collective: every rank creates the same objects; `writer` (rank 0) writes the values.
void write_meta(hid_t f, const CheckpointMeta& m, bool writer, hid_t dxpl);
void write_attr_u64(hid_t obj, const char* name, uint64_t v);
uint64_t read_attr_u64(hid_t obj, const char* name, const std::string& file);
// A group (or, on a file creation list, the root group) that keeps its links and attributes in
// its checksummed object header: see set_compact_storage.
constexpr unsigned kMaxCompact = 65535;
void set_compact_storage(hid_t gcpl);
h5::Id make_group(hid_t f, const char* name);

}  // namespace mpitron::ckpt_meta
