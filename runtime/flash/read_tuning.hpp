// Measuring a device's read-throughput curve once and keeping it in the tuning database, keyed by
// the device, as kernels' tilings are kept.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/flash/read_planner.hpp"
#include "runtime/flash/storage.hpp"

namespace qjit {

class TuningDb;

// The device a file lives on, as the database keys it: "block 254:0 vda" (the whole disk's name
// from /sys/dev/block, its model when the kernel reports one).
std::string storage_device_key(const std::string& path);

struct ReadCurveMeasurement {
    std::vector<int64_t> chunk_bytes{4096, 8192, 16384, 32768, 65536, 131072, 262144, 1048576};
    std::vector<int> queue_depths{1, 4, 16, 64};
    int64_t bytes_per_point = int64_t(64) << 20;  // at most this many bytes read for each point
    double seconds_per_point = 0.25;              // and for at most this long
};

// Reads random, block-aligned ranges of `storage` (all of it in play, so little is cached anywhere)
// at every chunk size and depth of `m`.
ReadCurve measure_read_curve(Storage& storage, const ReadCurveMeasurement& m = {});

// The curve of the device holding `path`: from the database when it has one for this device,
// else measured on `storage` and stored (with measure = false: an empty curve instead).
ReadCurve read_curve_for(const std::string& path, Storage& storage, TuningDb& db, bool measure);

}  // namespace qjit
