// Planning direct reads from a device's measured read-throughput curve: which records to read
// together (adjacent ones, or ones with a gap cheaper to read through than to skip) and how many
// reads to keep in flight.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace qjit {

// Throughput of reads of `chunk_bytes` each with `queue_depth` in flight, measured on one device.
struct ReadCurvePoint {
    int64_t chunk_bytes = 0;
    int queue_depth = 0;
    double gbps = 0;  // 1e9 bytes per second
};

struct ReadCurve {
    std::vector<ReadCurvePoint> points;  // chunk sizes x queue depths

    bool empty() const { return points.empty(); }
    // Throughput at a chunk size and depth, interpolated (log-linear in the chunk size) between
    // the measured points and clamped at the ends. 0 when empty. The depth is not interpolated:
    // the largest measured depth not above `queue_depth` answers (the smallest when all are).
    double gbps(int64_t chunk_bytes, int queue_depth) const;
    // The depth with the highest throughput for chunks of about this size (the smaller on a tie;
    // 32 when empty).
    int best_queue_depth(int64_t chunk_bytes) const;
    // "4096x1=0.21;4096x8=0.95;..." and back (QJIT_ERROR_CORRUPT_DATA for bad text).
    std::string to_text() const;
    static ReadCurve parse(const std::string& text);
};

// A byte range the caller needs (one record), at a multiple of the block size.
struct Extent {
    int64_t offset = 0;
    int64_t length = 0;
};

struct PlannedRead {
    int64_t offset = 0;
    int64_t length = 0;
};

struct ReadPlan {
    std::vector<PlannedRead> reads;  // ascending, disjoint
    // For each extent (in the order given): the read that covers it and its offset in that read.
    std::vector<int32_t> read_of_extent;
    std::vector<int64_t> offset_in_read;
    int queue_depth = 1;
    int64_t bytes() const;  // bytes the reads move, gaps read through included
};

struct ReadPlanOptions {
    int64_t max_read_bytes = int64_t(1) << 20;  // a coalesced read never exceeds this
    bool coalesce = true;                       // false: one read per extent
};

// Extents in any order (duplicates allowed). Overlapping extents always share a read; touching
// ones do while the read stays within max_read_bytes; across a gap only when, by the curve, one
// read through the gap costs no more time than two: t(L) = L / gbps(L, d) with d the best depth
// for the median extent. The depth is the best one for the median read, at most the number of
// reads. With an empty curve, only touching extents merge and the depth is 32.
ReadPlan plan_reads(std::span<const Extent> extents, const ReadCurve& curve, const ReadPlanOptions& options = {});

}  // namespace qjit
