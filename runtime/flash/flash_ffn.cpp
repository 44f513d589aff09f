#include "runtime/flash/flash_ffn.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "base/activations.hpp"
#include "base/error.hpp"
#include "runtime/flash/sparse_ffn.hpp"

namespace qjit {

namespace {

// Neurons read per batch of reads: bounds the staging buffer.
constexpr int64_t kLoadSlice = 2048;

// Enough of the file's start to hold any header's fields (the header block may be larger).
constexpr int64_t kHeaderReadBytes = int64_t(1) << 16;

double seconds_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

NeuronFileHeader read_header(Storage& storage) {
    const int64_t block = storage.block_size();
    const int64_t length = std::min(storage.size(), kHeaderReadBytes) / block * block;
    if (length <= 0)
        fail(QJIT_ERROR_CORRUPT_DATA, "neuron file: ", storage.describe(), " holds ", storage.size(),
             " bytes, too few for a header");
    auto buffer = aligned_buffer(length, block);
    const ReadRequest request{0, length, buffer.get()};
    storage.read(std::span(&request, 1), 1);
    NeuronFileHeader header = parse_neuron_file_header(buffer.get(), size_t(length));
    if (storage.size() != header.file_bytes())
        fail(QJIT_ERROR_CORRUPT_DATA, "neuron file: ", storage.describe(), " holds ", storage.size(),
             " bytes; its header describes ", header.file_bytes(), " (truncated or padded)");
    if (header.alignment % block != 0)
        fail(QJIT_ERROR_INVALID_ARGUMENT, "neuron file: records aligned to ", header.alignment,
             " bytes cannot be read directly from ", storage.describe(), ", which needs ", block);
    return header;
}

// The part whose product decides whether a neuron is active.
NeuronPart deciding_part(const NeuronFileHeader& header) {
    return header.activation == FfnActivation::SwiGlu ? NeuronPart::Gate : NeuronPart::Up;
}

}  // namespace

FlashFfn::FlashFfn(std::unique_ptr<Storage> storage, const FlashFfnOptions& options, ThreadPool& pool)
    : storage_(std::move(storage)), options_(options), pool_(pool) {
    require(options.dram_budget_bytes >= 0, "flash FFN: DRAM budget ", options.dram_budget_bytes, " is negative");
    require(options.window >= 0, "flash FFN: window ", options.window, " is negative");
    require(options.queue_depth >= 0, "flash FFN: queue depth ", options.queue_depth, " is negative");
    header_ = read_header(*storage_);
    const int64_t per_layer = options.dram_budget_bytes / header_.layers / NeuronCache::slot_bytes(header_);
    const int64_t capacity = std::min(per_layer, header_.d_ff);
    resident_.reserve(size_t(header_.layers));
    for (int64_t l = 0; l < header_.layers; ++l) resident_.emplace_back(header_, capacity, options.window);
    predictors_.resize(size_t(header_.layers));
    has_predictor_.assign(size_t(header_.layers), 0);
    all_neurons_.resize(size_t(header_.d_ff));
    std::iota(all_neurons_.begin(), all_neurons_.end(), 0);
}

int64_t FlashFfn::resident_capacity() const { return resident_.front().capacity(); }

int64_t FlashFfn::dram_bytes() const {
    int64_t bytes = staging_bytes_ + (transient_ ? transient_->memory_bytes() : 0);
    for (const NeuronCache& cache : resident_) bytes += cache.memory_bytes();
    for (size_t l = 0; l < predictors_.size(); ++l)
        if (has_predictor_[l]) bytes += predictors_[l].memory_bytes();
    return bytes;
}

void FlashFfn::pin(int64_t layer, std::span<const int32_t> neurons) {
    require(layer >= 0 && layer < header_.layers, "flash FFN: layer ", layer, " out of range");
    NeuronCache& cache = resident_[size_t(layer)];
    const std::vector<int32_t> slots = cache.pin(neurons);  // checks the ids
    try {
        load(layer, neurons, slots, cache);
    } catch (...) {
        // Slots reserved for neurons never read must not serve later calls: the layer starts over.
        reader_.wait_ignoring_errors();
        cache = NeuronCache(header_, cache.capacity(), options_.window);
        throw;
    }
}

void FlashFfn::set_predictor(int64_t layer, NeuronPredictor predictor) {
    require(layer >= 0 && layer < header_.layers, "flash FFN: layer ", layer, " out of range");
    predictors_[size_t(layer)] = std::move(predictor);
    has_predictor_[size_t(layer)] = 1;
}

bool FlashFfn::has_predictor(int64_t layer) const {
    return layer >= 0 && layer < header_.layers && has_predictor_[size_t(layer)];
}

const NeuronPredictor* FlashFfn::predictor(int64_t layer) const {
    return has_predictor(layer) ? &predictors_[size_t(layer)] : nullptr;
}

// out [n][d_ff] = x [n][d_model] . w [d_model][d_ff], a few rows at a time so each slice of w is
// read once per block of rows.
static void dense_product(const float* x, int64_t n, const std::vector<float>& w, int64_t d_model, int64_t d_ff,
                          float* out) {
    constexpr int64_t kRows = 8, kColumns = 512;
    std::fill(out, out + n * d_ff, 0.0f);
    for (int64_t r0 = 0; r0 < n; r0 += kRows)
        for (int64_t c0 = 0; c0 < d_ff; c0 += kColumns) {
            const int64_t rows = std::min(kRows, n - r0), columns = std::min(kColumns, d_ff - c0);
            for (int64_t k = 0; k < d_model; ++k) {
                const float* w_row = w.data() + k * d_ff + c0;
                for (int64_t r = 0; r < rows; ++r) {
                    const float xv = x[(r0 + r) * d_model + k];
                    float* o = out + (r0 + r) * d_ff + c0;
                    for (int64_t c = 0; c < columns; ++c) o[c] += xv * w_row[c];
                }
            }
        }
}

PredictorQuality FlashFfn::fit_predictor(int64_t layer, const float* x, int64_t n, PredictorOptions options,
                                         float magnitude_threshold) {
    require(x != nullptr && n >= 1, "flash FFN: the calibration needs at least one row");
    const int64_t d_model = header_.d_model, d_ff = header_.d_ff;
    std::vector<float> bias;
    const std::vector<float> w = read_part(layer, deciding_part(header_), &bias);
    std::vector<float> product(size_t(n * d_ff));
    dense_product(x, n, w, d_model, d_ff, product.data());
    std::vector<uint8_t> active(size_t(n * d_ff));
    if (header_.activation == FfnActivation::Relu) {
        options.score = PredictorScore::Value;
        for (int64_t t = 0; t < n; ++t)
            for (int64_t i = 0; i < d_ff; ++i)
                active[size_t(t * d_ff + i)] = product[size_t(t * d_ff + i)] + (bias.empty() ? 0.0f : bias[size_t(i)]) > 0;
    } else {
        options.score = PredictorScore::SiluMagnitude;
        std::vector<float> up_product(size_t(n * d_ff));
        dense_product(x, n, read_part(layer, NeuronPart::Up), d_model, d_ff, up_product.data());
        for (size_t j = 0; j < active.size(); ++j) {
            const float g = product[j];
            active[j] = std::fabs(silu(g) * up_product[j]) > magnitude_threshold;
        }
    }
    NeuronPredictor predictor = NeuronPredictor::fit(w.data(), bias.empty() ? nullptr : bias.data(), d_model, d_ff,
                                                     x, active.data(), n, options);
    const PredictorQuality quality = predictor.calibration_quality();
    set_predictor(layer, std::move(predictor));
    return quality;
}

uint8_t* FlashFfn::staging(int64_t bytes) {
    if (bytes > staging_bytes_) {
        staging_ = aligned_buffer(bytes, header_.alignment);
        staging_bytes_ = bytes;
    }
    return staging_.get();
}

void FlashFfn::ensure_transient_capacity(int64_t neurons) {
    if (transient_ && transient_->capacity() >= neurons) return;
    transient_ = std::make_unique<NeuronCache>(header_, neurons, 0);
}

void FlashFfn::start_reads(int64_t layer, std::span<const int32_t> neurons) {
    const std::vector<NeuronPart> parts = header_.part_list();
    const int records_per_neuron = header_.bundled ? 1 : header_.parts();
    extents_.clear();
    for (int32_t neuron : neurons)
        for (int r = 0; r < records_per_neuron; ++r)
            extents_.push_back({header_.record_offset(layer, neuron, parts[size_t(r)]), header_.record_bytes()});

    ReadPlanOptions plan_options;
    plan_options.coalesce = options_.coalesce_reads;
    plan_ = plan_reads(extents_, options_.read_curve, plan_options);
    uint8_t* buffer = staging(plan_.bytes());
    requests_.clear();
    read_start_.clear();
    int64_t offset = 0;
    for (const PlannedRead& read : plan_.reads) {
        read_start_.push_back(offset);
        requests_.push_back({read.offset, read.length, buffer + offset});
        offset += read.length;
    }
    const int depth = options_.queue_depth > 0 ? options_.queue_depth : plan_.queue_depth;
    reader_.start([this, depth] {
        const auto start = Clock::now();
        storage_->read(requests_, depth);
        read_seconds_ = seconds_since(start);
    });
}

void FlashFfn::finish_reads(int64_t layer, std::span<const int32_t> neurons, const RecordVisitor& visit) {
    const auto wait_start = Clock::now();
    reader_.wait();
    counters_.io_wait_seconds += seconds_since(wait_start);
    counters_.io_seconds += read_seconds_;
    counters_.bytes_read += plan_.bytes();
    counters_.reads += int64_t(plan_.reads.size());

    const auto check_start = Clock::now();
    const std::vector<NeuronPart> parts = header_.part_list();
    const size_t records_per_neuron = extents_.size() / std::max<size_t>(1, neurons.size());
    for (size_t e = 0; e < extents_.size(); ++e) {
        const uint8_t* record = staging_.get() + read_start_[size_t(plan_.read_of_extent[e])] + plan_.offset_in_read[e];
        const size_t neuron_index = e / records_per_neuron;
        const NeuronPart first_part = parts[e % records_per_neuron];
        check_record(header_, layer, neurons[neuron_index], first_part, record);
        visit(neuron_index, first_part, record);
    }
    counters_.cache_seconds += seconds_since(check_start);
}

void FlashFfn::read_records(int64_t layer, std::span<const int32_t> neurons, const RecordVisitor& visit) {
    // In slices, so the read staging stays small however many neurons a call reads.
    for (size_t first = 0; first < neurons.size(); first += size_t(kLoadSlice)) {
        const auto slice = neurons.subspan(first, std::min(neurons.size() - first, size_t(kLoadSlice)));
        start_reads(layer, slice);
        finish_reads(layer, slice, [&](size_t i, NeuronPart part, const uint8_t* record) { visit(first + i, part, record); });
    }
}

void FlashFfn::fill_from_record(NeuronCache& cache, int32_t slot, NeuronPart first_part, const uint8_t* record) {
    if (header_.bundled) {
        for (NeuronPart part : header_.part_list()) cache.fill(slot, part, record + header_.vector_offset_in_record(part));
    } else {
        cache.fill(slot, first_part, record + header_.vector_offset_in_record(first_part));
    }
    if (header_.has_bias && (header_.bundled || first_part == deciding_part(header_))) {
        float bias;
        std::memcpy(&bias, record + header_.bias_offset_in_record(), sizeof bias);
        cache.fill_bias(slot, bias);
    }
}

void FlashFfn::load(int64_t layer, std::span<const int32_t> neurons, std::span<const int32_t> slots,
                    NeuronCache& cache) {
    read_records(layer, neurons, [&](size_t i, NeuronPart first_part, const uint8_t* record) {
        fill_from_record(cache, slots[i], first_part, record);
    });
    counters_.neurons_loaded += int64_t(neurons.size());
}

void FlashFfn::forward(int64_t layer, const float* x, int64_t m, float* y, const std::vector<int32_t>* active) {
    require(layer >= 0 && layer < header_.layers, "flash FFN: layer ", layer, " out of range");
    require(m >= 1, "flash FFN: m ", m, " must be at least 1");
    require(x != nullptr && y != nullptr, "flash FFN: x and y must not be null");
    choose_active(layer, x, m, active);
    place_active(resident_[size_t(layer)]);
    compute_active(layer, x, m, y);
    ++counters_.tokens;
}

// Which neurons take part: the caller's list, else the layer's predictor's, else all of them.
void FlashFfn::choose_active(int64_t layer, const float* x, int64_t m, const std::vector<int32_t>* active) {
    if (active != nullptr) {
        active_ = *active;
        std::sort(active_.begin(), active_.end());
        for (int32_t id : active_) require(id >= 0 && id < header_.d_ff, "flash FFN: active neuron ", id, " out of range");
        require(std::adjacent_find(active_.begin(), active_.end()) == active_.end(),
                "flash FFN: an active neuron is listed twice");
    } else if (has_predictor_[size_t(layer)]) {
        const auto start = Clock::now();
        predictors_[size_t(layer)].predict(x, m, active_);
        counters_.predict_seconds += seconds_since(start);
        counters_.predicted += int64_t(active_.size());
    } else {
        active_ = all_neurons_;
    }
    counters_.active_neurons += int64_t(active_.size());
}

// Where they go: the resident cache takes every active neuron it can hold (with a window, all of
// them while they fit beside the pinned ones; without, the pinned only); the rest are transient,
// read for this call alone.
void FlashFfn::place_active(NeuronCache& resident) {
    const auto cache_start = Clock::now();
    resident_active_.clear();
    transient_active_.clear();
    const bool window_holds_all =
        options_.window > 0 && resident.pinned() + int64_t(active_.size()) <= resident.capacity();
    for (int32_t id : active_) {
        if (window_holds_all || resident.slot_of(id) >= 0)
            resident_active_.push_back(id);
        else
            transient_active_.push_back(id);
    }
    resident.begin_token(resident_active_, resident_plan_);
    ensure_transient_capacity(int64_t(transient_active_.size()));
    transient_->clear_unpinned();
    transient_->begin_token(transient_active_, transient_plan_);
    counters_.cache_seconds += seconds_since(cache_start);
    counters_.cache_hits += resident_plan_.hits;
}

// The missing neurons are read while the resident ones are computed (when they fit one batch of
// reads); then they are checked, filled in and computed too. The sum over slots is the same in
// any order of the two halves.
void FlashFfn::compute_active(int64_t layer, const float* x, int64_t m, float* y) {
    NeuronCache& resident = resident_[size_t(layer)];
    try {
        load_neurons_ = resident_plan_.missing;
        load_neurons_.insert(load_neurons_.end(), transient_plan_.missing.begin(), transient_plan_.missing.end());
        const bool overlap = !load_neurons_.empty() && int64_t(load_neurons_.size()) <= kLoadSlice;
        if (overlap) start_reads(layer, load_neurons_);
        std::fill(y, y + m * header_.d_model, 0.0f);
        const int64_t first_new = resident.size() - int64_t(resident_plan_.missing_slots.size());
        hit_slots_.clear();
        for (int32_t slot : resident_plan_.slots)
            if (slot < first_new) hit_slots_.push_back(slot);
        compute(resident, hit_slots_, x, m, y);

        const size_t resident_missing = resident_plan_.missing.size();
        const auto fill = [&](size_t i, NeuronPart part, const uint8_t* record) {
            if (i < resident_missing)
                fill_from_record(resident, resident_plan_.missing_slots[i], part, record);
            else
                fill_from_record(*transient_, transient_plan_.missing_slots[i - resident_missing], part, record);
        };
        if (overlap)
            finish_reads(layer, load_neurons_, fill);
        else
            read_records(layer, load_neurons_, fill);
        counters_.neurons_loaded += int64_t(load_neurons_.size());
    } catch (...) {
        // A failed read or a damaged record: the slots reserved for this call's missing neurons
        // hold nothing valid, so no later call may take them for resident. Dropping every unpinned
        // neuron costs only rereads.
        reader_.wait_ignoring_errors();
        resident.clear_unpinned();
        transient_->clear_unpinned();
        throw;
    }
    compute(resident, resident_plan_.missing_slots, x, m, y);
    compute(*transient_, transient_plan_.slots, x, m, y);
}

void FlashFfn::compute(const NeuronCache& cache, std::span<const int32_t> slots, const float* x, int64_t m, float* y) {
    if (slots.empty()) return;
    const auto start = Clock::now();
    sparse_ffn_accumulate(cache, slots, x, m, y, pool_);
    counters_.compute_seconds += seconds_since(start);
}

std::vector<float> FlashFfn::read_part(int64_t layer, NeuronPart part, std::vector<float>* bias) {
    require(layer >= 0 && layer < header_.layers, "flash FFN: layer ", layer, " out of range");
    const std::vector<NeuronPart> parts = header_.part_list();
    require(std::find(parts.begin(), parts.end(), part) != parts.end(), "flash FFN: the file has no such part");
    const int64_t d_model = header_.d_model, d_ff = header_.d_ff;
    std::vector<float> weights(size_t(d_model * d_ff));
    std::vector<float> column(static_cast<size_t>(d_model));
    if (bias != nullptr) bias->assign(header_.has_bias ? size_t(d_ff) : 0, 0.0f);
    read_records(layer, all_neurons_, [&](size_t neuron, NeuronPart first_part, const uint8_t* record) {
        if (!header_.bundled && first_part != part) return;
        dequantize_vector(header_.vector, record + header_.vector_offset_in_record(part), column.data());
        for (int64_t k = 0; k < d_model; ++k) weights[size_t(k * d_ff) + neuron] = column[size_t(k)];
        if (bias != nullptr && header_.has_bias && (header_.bundled || first_part == deciding_part(header_)))
            std::memcpy(&(*bias)[neuron], record + header_.bias_offset_in_record(), sizeof(float));
    });
    return weights;
}

}  // namespace qjit
