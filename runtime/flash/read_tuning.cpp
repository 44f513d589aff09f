#include "runtime/flash/read_tuning.hpp"

#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "base/error.hpp"
#include "tuner/tuning_db.hpp"

namespace qjit {
namespace {

namespace fs = std::filesystem;

constexpr const char* kReadCurveKey = "read_curve";
constexpr int64_t kMaxBufferBytes = int64_t(32) << 20;  // buffers of one measured batch

std::string first_line(const fs::path& path) {
    std::ifstream in(path);
    std::string line;
    std::getline(in, line);
    const auto blank = [](unsigned char c) { return std::isspace(c) != 0; };
    line.erase(std::find_if_not(line.rbegin(), line.rend(), blank).base(), line.end());
    line.erase(line.begin(), std::find_if_not(line.begin(), line.end(), blank));
    return line;
}

// Reads `m`'s batches of random `chunk`-byte reads at `depth` until its byte or time budget is
// spent; returns bytes and seconds.
std::pair<int64_t, double> measure_point(Storage& storage, const ReadCurveMeasurement& m, int64_t chunk, int depth,
                                         std::mt19937_64& rng) {
    const int64_t block = storage.block_size();
    const int64_t batch = std::max<int64_t>(1, std::min<int64_t>(int64_t(depth) * 8, kMaxBufferBytes / chunk));
    auto buffer = aligned_buffer(batch * chunk, block);
    std::uniform_int_distribution<int64_t> slot(0, (storage.size() - chunk) / block);
    std::vector<ReadRequest> requests(static_cast<size_t>(batch));
    int64_t bytes = 0;
    double seconds = 0;
    while (bytes < m.bytes_per_point && seconds < m.seconds_per_point) {
        for (int64_t i = 0; i < batch; ++i) requests[size_t(i)] = {slot(rng) * block, chunk, buffer.get() + i * chunk};
        const auto start = std::chrono::steady_clock::now();
        storage.read(requests, int(std::min<int64_t>(depth, batch)));
        seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        bytes += batch * chunk;
    }
    return {bytes, std::max(seconds, 1e-9)};
}

}  // namespace

std::string storage_device_key(const std::string& path) {
    struct stat st{};
    if (::stat(path.c_str(), &st) != 0)
        fail(QJIT_ERROR_IO, "device of ", path, ": stat failed: ", std::strerror(errno));
    const std::string number = concat(major(st.st_dev), ':', minor(st.st_dev));
    std::error_code ec;
    fs::path device = fs::canonical(fs::path("/sys/dev/block") / number, ec);
    if (ec) return concat("fs ", number);  // no block device behind it (tmpfs, overlay, NFS)
    if (fs::exists(device / "partition")) device = device.parent_path();
    std::string key = concat("block ", first_line(device / "dev"), ' ', device.filename().string());
    if (const std::string model = first_line(device / "device" / "model"); !model.empty()) key += ' ' + model;
    return key;
}

ReadCurve measure_read_curve(Storage& storage, const ReadCurveMeasurement& m) {
    require(m.bytes_per_point > 0 && m.seconds_per_point > 0, "read curve measurement: budgets must be positive");
    std::mt19937_64 rng(12345);
    ReadCurve curve;
    for (int depth : m.queue_depths) {
        require(depth >= 1, "read curve measurement: queue depth ", depth, " is not positive");
        for (int64_t chunk : m.chunk_bytes) {
            if (chunk <= 0 || chunk > storage.size() || chunk % storage.block_size() != 0) continue;
            const auto [bytes, seconds] = measure_point(storage, m, chunk, depth, rng);
            curve.points.push_back({chunk, depth, double(bytes) / seconds / 1e9});
        }
    }
    return curve;
}

ReadCurve read_curve_for(const std::string& path, Storage& storage, TuningDb& db, bool measure) {
    const std::string device = storage_device_key(path);
    if (const auto record = db.find(device, kReadCurveKey)) {
        try {
            ReadCurve curve = ReadCurve::parse(record->tiling);
            if (!curve.empty()) return curve;
        } catch (const Error&) {
            // a damaged record is measured again and replaced
        }
    }
    if (!measure) return {};
    const auto start = std::chrono::steady_clock::now();
    ReadCurve curve = measure_read_curve(storage);
    TuningRecord record;
    record.fingerprint = device;
    record.kernel_key = kReadCurveKey;
    record.tiling = curve.to_text();
    for (const ReadCurvePoint& p : curve.points) record.gbps = std::max(record.gbps, p.gbps);
    record.time_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
    record.date = utc_timestamp();
    if (!curve.empty()) db.store(record);
    return curve;
}

}  // namespace qjit
