#include "runtime/flash/read_planner.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <numeric>
#include <set>
#include <utility>

#include "base/error.hpp"

namespace qjit {
namespace {

// The measured depth the curve answers for `queue_depth`: the largest one not above it, else the
// smallest one measured.
int measured_depth(const std::vector<ReadCurvePoint>& points, int queue_depth) {
    int below = 0, smallest = 0;
    for (const ReadCurvePoint& p : points) {
        if (p.queue_depth <= queue_depth) below = std::max(below, p.queue_depth);
        if (smallest == 0 || p.queue_depth < smallest) smallest = p.queue_depth;
    }
    return below > 0 ? below : smallest;
}

// Seconds one read of `bytes` costs at `queue_depth` in flight, as the curve's throughput says:
// with the device busy, reads share its time in proportion to bytes / throughput.
double read_seconds(const ReadCurve& curve, int64_t bytes, int queue_depth) {
    return double(bytes) / (curve.gbps(bytes, queue_depth) * 1e9);
}

template <typename Number>
Number parse_number(const std::string& text, std::string_view field) {
    Number value{};
    const char* end = field.data() + field.size();
    const auto [ptr, ec] = std::from_chars(field.data(), end, value);
    if (ec != std::errc() || ptr != end || field.empty())
        fail(QJIT_ERROR_CORRUPT_DATA, "read curve '", text, "': '", field, "' is not a number");
    return value;
}

}  // namespace

double ReadCurve::gbps(int64_t chunk_bytes, int queue_depth) const {
    if (points.empty()) return 0.0;
    const int depth = measured_depth(points, queue_depth);
    std::vector<std::pair<int64_t, double>> line;  // chunk size, throughput at that depth
    for (const ReadCurvePoint& p : points)
        if (p.queue_depth == depth) line.emplace_back(p.chunk_bytes, p.gbps);
    std::sort(line.begin(), line.end());
    if (chunk_bytes <= line.front().first) return line.front().second;
    if (chunk_bytes >= line.back().first) return line.back().second;
    const auto upper = std::upper_bound(line.begin(), line.end(), chunk_bytes,
                                        [](int64_t c, const auto& point) { return c < point.first; });
    const auto lower = upper - 1;
    const double t = (std::log2(double(chunk_bytes)) - std::log2(double(lower->first))) /
                     (std::log2(double(upper->first)) - std::log2(double(lower->first)));
    return lower->second + t * (upper->second - lower->second);
}

int ReadCurve::best_queue_depth(int64_t chunk_bytes) const {
    if (points.empty()) return 32;
    std::set<int> depths;
    for (const ReadCurvePoint& p : points) depths.insert(p.queue_depth);
    int best = *depths.begin();
    for (int d : depths)
        if (gbps(chunk_bytes, d) > gbps(chunk_bytes, best)) best = d;  // ties keep the smaller depth
    return best;
}

std::string ReadCurve::to_text() const {
    std::string text;
    for (const ReadCurvePoint& p : points) {
        char number[64];
        const auto [end, ec] = std::to_chars(number, number + sizeof number, p.gbps);  // shortest round trip
        if (!text.empty()) text += ';';
        text += concat(p.chunk_bytes, 'x', p.queue_depth, '=', std::string_view(number, size_t(end - number)));
    }
    return text;
}

ReadCurve ReadCurve::parse(const std::string& text) {
    ReadCurve curve;
    if (text.empty()) return curve;
    std::set<std::pair<int64_t, int>> seen;
    std::string_view rest = text;
    for (;;) {
        const size_t semicolon = rest.find(';');
        const std::string_view item = rest.substr(0, semicolon);
        const size_t x = item.find('x'), equals = item.find('=');
        if (x == std::string_view::npos || equals == std::string_view::npos || equals < x)
            fail(QJIT_ERROR_CORRUPT_DATA, "read curve '", text, "': '", item, "' is not CHUNKxDEPTH=GBPS");
        ReadCurvePoint p;
        p.chunk_bytes = parse_number<int64_t>(text, item.substr(0, x));
        p.queue_depth = parse_number<int>(text, item.substr(x + 1, equals - x - 1));
        p.gbps = parse_number<double>(text, item.substr(equals + 1));
        if (p.chunk_bytes <= 0 || p.queue_depth <= 0 || !std::isfinite(p.gbps) || p.gbps <= 0)
            fail(QJIT_ERROR_CORRUPT_DATA, "read curve '", text, "': '", item, "' has a value that is not positive");
        if (!seen.emplace(p.chunk_bytes, p.queue_depth).second)
            fail(QJIT_ERROR_CORRUPT_DATA, "read curve '", text, "': '", item, "' repeats a point");
        curve.points.push_back(p);
        if (semicolon == std::string_view::npos) break;
        rest.remove_prefix(semicolon + 1);
    }
    return curve;
}

int64_t ReadPlan::bytes() const {
    int64_t total = 0;
    for (const PlannedRead& r : reads) total += r.length;
    return total;
}

ReadPlan plan_reads(std::span<const Extent> extents, const ReadCurve& curve, const ReadPlanOptions& options) {
    require(options.max_read_bytes > 0, "read plan: max_read_bytes ", options.max_read_bytes, " is not positive");
    for (const Extent& e : extents)
        require(e.offset >= 0 && e.length > 0, "read plan: extent at offset ", e.offset, " with length ", e.length,
                " is empty or negative");
    ReadPlan plan;
    plan.read_of_extent.resize(extents.size());
    plan.offset_in_read.resize(extents.size());
    std::vector<size_t> order(extents.size());
    std::iota(order.begin(), order.end(), size_t(0));
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
        return std::pair(extents[a].offset, extents[a].length) < std::pair(extents[b].offset, extents[b].length);
    });

    // Gaps are priced at the depth best for the median extent (the reads are not known yet).
    int64_t median_extent = 0;
    if (!extents.empty()) median_extent = extents[order[order.size() / 2]].length;
    const int gap_depth = curve.best_queue_depth(median_extent);
    // Overlapping extents always share a read (reads are disjoint); touching ones when the read
    // stays within max_read_bytes; across a gap also only when reading the gap through costs less
    // time than a read of its own: t(read + gap + extent) <= t(read) + t(extent).
    auto joins = [&](const PlannedRead& read, const Extent& e) {
        const int64_t end = read.offset + read.length;
        if (e.offset < end) return true;
        if (!options.coalesce) return false;
        const int64_t merged = e.offset + e.length - read.offset;
        if (merged > options.max_read_bytes) return false;
        if (e.offset == end) return true;
        if (curve.empty()) return false;
        return read_seconds(curve, merged, gap_depth) <=
               read_seconds(curve, read.length, gap_depth) + read_seconds(curve, e.length, gap_depth);
    };
    for (size_t i : order) {
        const Extent& e = extents[i];
        if (plan.reads.empty() || !joins(plan.reads.back(), e)) {
            plan.reads.push_back({e.offset, e.length});
        } else {
            PlannedRead& read = plan.reads.back();
            read.length = std::max(read.length, e.offset + e.length - read.offset);
        }
        plan.read_of_extent[i] = int32_t(plan.reads.size() - 1);
        plan.offset_in_read[i] = e.offset - plan.reads.back().offset;
    }

    // The depth best for the median read, no deeper than the reads there are.
    if (plan.reads.empty()) return plan;
    std::vector<int64_t> lengths;
    for (const PlannedRead& r : plan.reads) lengths.push_back(r.length);
    std::nth_element(lengths.begin(), lengths.begin() + ptrdiff_t(lengths.size() / 2), lengths.end());
    plan.queue_depth = std::min<int64_t>(curve.best_queue_depth(lengths[lengths.size() / 2]), int64_t(plan.reads.size()));
    return plan;
}

}  // namespace qjit
