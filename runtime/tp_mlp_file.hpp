// Save and load a rank's tensor-parallel MLP shards (qjit_tp_mlp_save / qjit_tp_mlp_load).
//
// File layout (little-endian), in io/framed_file.hpp's frame:
//   magic "QJITTPML", version 1
//   JSON header         kind, algorithm, rank, world_size, k1, n1, n2, qjit_version, and the sizes of
//                       the sections: "down_rows" (count) and "up", "gate", "down" (bytes; gate 0 for
//                       GELU)
//   body                W_down's row order (i32 [n1]), then each shard as a whole layer file image
//                       (runtime/layer_file.hpp, with its own checksum): up, gate, down
// A file is trusted only after its size, checksum and header agree, and the shards it holds are
// checked against the header as a freshly made MLP's are.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "runtime/tp_mlp.hpp"

namespace qjit {

std::string serialize_tp_mlp(const qjit_tp_mlp& mlp);
std::unique_ptr<qjit_tp_mlp> deserialize_tp_mlp(qjit_context* context, std::string_view image);

void save_tp_mlp(const qjit_tp_mlp& mlp, const std::string& path);
std::unique_ptr<qjit_tp_mlp> load_tp_mlp(qjit_context* context, const std::string& path);

}  // namespace qjit
