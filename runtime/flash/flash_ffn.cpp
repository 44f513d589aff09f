#include "runtime/flash/flash_ffn.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "base/activations.hpp"
#include "base/error.hpp"
#include "format/neuron_record.hpp"
#include "jit/x86/cpu_tiling.hpp"
#include "runtime/flash/dense_product.hpp"
#include "runtime/flash/ffn_sparsity.hpp"
#include "runtime/flash/neuron_cache_data.hpp"
#include "runtime/flash/sparse_ffn.hpp"
#include "runtime/flash/sparse_product_jit.hpp"
#include "runtime/linear_layer.hpp"

namespace qjit {

namespace {

// Bytes one batch of reads stages at most (unless one neuron's records take more).
constexpr int64_t kStagingBytes = int64_t(32) << 20;

// Records a pool task checks and visits.
constexpr size_t kExtentsPerTask = 32;

// Enough of the file's start to hold any header's fields (the header block may be larger).
constexpr int64_t kHeaderReadBytes = int64_t(1) << 16;

double seconds_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// `length` bytes from `offset` (both whole blocks of the storage) in one direct read.
std::unique_ptr<uint8_t[], AlignedFree> read_block(Storage& storage, int64_t offset, int64_t length) {
    auto buffer = aligned_buffer(length, storage.block_size());
    const ReadRequest request{offset, length, buffer.get()};
    storage.read(std::span(&request, 1), 1);
    return buffer;
}

NeuronFileHeader read_header(Storage& storage) {
    const int64_t block = storage.block_size();
    const int64_t length = std::min(storage.size(), kHeaderReadBytes) / block * block;
    if (length <= 0)
        fail(QJIT_ERROR_CORRUPT_DATA, "neuron file: ", storage.describe(), " holds ", storage.size(),
             " bytes, too few for a header");
    const auto buffer = read_block(storage, 0, length);
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

FlashFfn::FlashFfn(std::unique_ptr<Storage> storage, const FlashFfnOptions& options, ThreadPool& pool,
                   qjit_context* gate_context)
    : storage_(std::move(storage)), options_(options), pool_(pool) {
    require(options.dram_budget_bytes >= 0, "flash FFN: DRAM budget ", options.dram_budget_bytes, " is negative");
    require(options.window >= 0, "flash FFN: window ", options.window, " is negative");
    require(options.queue_depth >= 0, "flash FFN: queue depth ", options.queue_depth, " is negative");
    header_ = read_header(*storage_);
    file_parts_ = header_.part_list();
    all_neurons_.resize(size_t(header_.d_ff));
    std::iota(all_neurons_.begin(), all_neurons_.end(), 0);
    token_records_ = header_.record_first_parts();
    int64_t budget = options.dram_budget_bytes;
    if (header_.has_sparsity && options.use_sparsity) {
        load_sparsity(gate_context);
        require(resident_gate_bytes() <= budget, "flash FFN: the DRAM budget of ", budget,
                " bytes is below the resident gates' ", resident_gate_bytes());
        budget -= resident_gate_bytes();
    }
    const int64_t per_layer = (budget / header_.layers - NeuronCache::fixed_bytes(header_, token_parts_)) /
                              NeuronCache::slot_bytes(header_, token_parts_);
    const int64_t capacity = std::clamp<int64_t>(per_layer, 0, header_.d_ff);
    resident_.reserve(size_t(header_.layers));
    for (int64_t l = 0; l < header_.layers; ++l) resident_.push_back(token_cache(capacity, options.window));
    predictors_.resize(size_t(header_.layers));
    has_predictor_.assign(size_t(header_.layers), 0);
}

NeuronCache FlashFfn::token_cache(int64_t capacity, int window) const {
    return NeuronCache(header_, capacity, window, token_parts_, options_.isa, options_.kernel_tuning);
}

FlashFfn::~FlashFfn() = default;

std::string FlashFfn::generated_kernels() const {
    const SparseProductJit* kernels = resident_.empty() ? nullptr : resident_.front().data().generated;
    return kernels ? kernels->describe() : "";
}

SparseFfnPath FlashFfn::products_path() const {
    const bool int8_by_default = header_.vector.coding == VectorCoding::Quantized &&
                                 jit::default_activation_path(header_.vector.format.bits) == jit::ActivationPath::Int8;
    const bool int8 = options_.activations == QJIT_ACTIVATIONS_INT8 ||
                      (options_.activations == QJIT_ACTIVATIONS_AUTO && int8_by_default);
    return int8 ? SparseFfnPath::Fast : SparseFfnPath::FastF32;
}

// The section after the header, then every layer's gates, neuron i in slot i of its layer's cache
// (or, with a context, made into a layer of it and the cache emptied). A token then reads the
// records holding up and down only (gate apart: one a neuron).
void FlashFfn::load_sparsity(qjit_context* gate_context) {
    const int64_t block = storage_->block_size(), length = header_.sparsity_bytes();
    require(length % block == 0, "neuron file: its sparsity section cannot be read directly from ",
            storage_->describe());
    sparsity_ = parse_ffn_sparsity(header_, read_block(*storage_, header_.alignment, length).get(), size_t(length));

    sparse_gates_ = true;
    token_parts_ = {NeuronPart::Up, NeuronPart::Down};
    token_records_.clear();
    for (NeuronPart part : token_parts_) {
        const NeuronPart first = header_.record_first_part(part);
        if (std::find(token_records_.begin(), token_records_.end(), first) == token_records_.end())
            token_records_.push_back(first);
    }
    const NeuronPart gate_record[] = {header_.record_first_part(NeuronPart::Gate)};
    gates_.reserve(size_t(header_.layers));
    for (int64_t l = 0; l < header_.layers; ++l) {
        gates_.emplace_back(header_, header_.d_ff, 0, std::vector<NeuronPart>{NeuronPart::Gate}, options_.isa);
        NeuronCache& gates = gates_.back();
        const std::vector<int32_t> slots = gates.pin(all_neurons_);  // in order: slot i holds neuron i
        read_records(l, all_neurons_, gate_record, [&](size_t i, NeuronPart first, const uint8_t* record) {
            fill_from_record(gates, slots[i], first, record);
        });
        if (gate_context && header_.vector.coding == VectorCoding::Quantized) {
            const NeuronCache::Data& d = gates.data();
            VectorMatrix gate = vectors_as_matrix(header_.vector, d.vector(NeuronPart::Gate, 0), header_.d_ff,
                                                  d.vector_bytes);
            validate(gate.params);  // the codes fit their width by construction; scales read from the file may not
            gate_layers_.push_back(make_linear(gate_context, std::move(gate.params), std::move(gate.codes), {},
                                               QJIT_ACTIVATIONS_F32));
            gates = NeuronCache(header_, 0, 0, std::vector<NeuronPart>{NeuronPart::Gate}, options_.isa,
                                options_.kernel_tuning);  // the layer holds them
        }
    }
    counters_ = {};  // the gates' reads belong to creating the FFN, not to any token
}

int64_t FlashFfn::all_resident_bytes() const {
    const auto all = [&](std::span<const NeuronPart> parts) {
        return header_.layers * (NeuronCache::fixed_bytes(header_, parts) + header_.d_ff * NeuronCache::slot_bytes(header_, parts));
    };
    if (!header_.has_sparsity) return all({});
    const NeuronPart gates[] = {NeuronPart::Gate}, token[] = {NeuronPart::Up, NeuronPart::Down};
    return all(gates) + all(token);
}

int64_t FlashFfn::resident_gate_bytes() const {
    if (!gate_layers_.empty()) {
        int64_t bytes = 0;
        for (const auto& layer : gate_layers_) bytes += weight_bytes(*layer);
        return bytes;
    }
    int64_t bytes = 0;
    for (const NeuronCache& cache : gates_) bytes += cache.memory_bytes();
    return bytes;
}

int64_t FlashFfn::resident_capacity() const { return resident_.front().capacity(); }

int64_t FlashFfn::dram_bytes() const {
    int64_t bytes = demand_.staging_bytes + ahead_.staging_bytes + (transient_ ? transient_->memory_bytes() : 0) + resident_gate_bytes();
    for (const NeuronCache& cache : resident_) bytes += cache.memory_bytes();
    for (size_t l = 0; l < predictors_.size(); ++l)
        if (has_predictor_[l]) bytes += predictors_[l].memory_bytes();
    return bytes;
}

void FlashFfn::pin(int64_t layer, std::span<const int32_t> neurons) {
    require(layer >= 0 && layer < header_.layers, "flash FFN: layer ", layer, " out of range");
    drop_reads_ahead();
    NeuronCache& cache = resident_[size_t(layer)];
    const std::vector<int32_t> slots = cache.pin(neurons);  // checks the ids
    try {
        load(layer, neurons, slots, cache);
    } catch (...) {
        // Slots reserved for neurons never read must not serve later calls: the layer starts over.
        reader_.wait_ignoring_errors();
        cache = token_cache(cache.capacity(), options_.window);
        throw;
    }
}

void FlashFfn::set_predictor(int64_t layer, NeuronPredictor predictor) {
    require(layer >= 0 && layer < header_.layers, "flash FFN: layer ", layer, " out of range");
    predictor.use_isa(options_.isa);
    predictors_[size_t(layer)] = std::move(predictor);
    has_predictor_[size_t(layer)] = 1;
}

bool FlashFfn::has_predictor(int64_t layer) const {
    return layer >= 0 && layer < header_.layers && has_predictor_[size_t(layer)];
}

const NeuronPredictor* FlashFfn::predictor(int64_t layer) const {
    return has_predictor(layer) ? &predictors_[size_t(layer)] : nullptr;
}

PredictorQuality FlashFfn::fit_predictor(int64_t layer, const float* x, int64_t n, PredictorOptions options,
                                         float magnitude_threshold) {
    require(x != nullptr && n >= 1, "flash FFN: the calibration needs at least one row");
    const int64_t d_model = header_.d_model, d_ff = header_.d_ff;
    std::vector<float> bias;
    const std::vector<float> w = read_part(layer, deciding_part(header_), &bias);
    std::vector<float> product(size_t(n * d_ff));
    dense_product(x, n, w.data(), d_model, d_ff, product.data(), pool_);
    std::vector<uint8_t> active(size_t(n * d_ff));
    if (header_.activation == FfnActivation::Relu) {
        options.score = PredictorScore::Value;
        for (int64_t t = 0; t < n; ++t)
            for (int64_t i = 0; i < d_ff; ++i)
                active[size_t(t * d_ff + i)] = product[size_t(t * d_ff + i)] + (bias.empty() ? 0.0f : bias[size_t(i)]) > 0;
    } else {
        options.score = PredictorScore::SiluMagnitude;
        std::vector<float> up_product(size_t(n * d_ff));
        dense_product(x, n, read_part(layer, NeuronPart::Up).data(), d_model, d_ff, up_product.data(), pool_);
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

void FlashFfn::ensure_transient_capacity(int64_t neurons) {
    if (transient_ && transient_->capacity() >= neurons) return;
    transient_ = std::make_unique<NeuronCache>(token_cache(neurons, 0));
}

int64_t FlashFfn::slice_neurons(std::span<const NeuronPart> records) const {
    int64_t bytes = 0;
    for (NeuronPart first : records) bytes += header_.record_bytes(first);
    return std::max<int64_t>(1, kStagingBytes / std::max<int64_t>(bytes, 1));
}

void FlashFfn::start_reads(ReadBatch& batch, int64_t layer, std::span<const int32_t> neurons,
                           std::span<const NeuronPart> records) {
    batch.layer = layer;
    batch.neurons.assign(neurons.begin(), neurons.end());
    batch.records.assign(records.begin(), records.end());
    batch.extents.clear();
    for (int32_t neuron : neurons)
        for (NeuronPart first : records)
            batch.extents.push_back({header_.record_offset(layer, neuron, first), header_.record_bytes(first)});

    ReadPlanOptions plan_options;
    plan_options.coalesce = options_.coalesce_reads;
    batch.plan = plan_reads(batch.extents, options_.read_curve, plan_options);
    if (batch.plan.bytes() > batch.staging_bytes) {
        batch.staging = aligned_buffer(batch.plan.bytes(), header_.alignment);
        batch.staging_bytes = batch.plan.bytes();
    }
    batch.requests.clear();
    batch.read_start.clear();
    int64_t offset = 0;
    for (const PlannedRead& read : batch.plan.reads) {
        batch.read_start.push_back(offset);
        batch.requests.push_back({read.offset, read.length, batch.staging.get() + offset});
        offset += read.length;
    }
    const int depth = options_.queue_depth > 0 ? options_.queue_depth : batch.plan.queue_depth;
    batch.pending = true;
    reader_.start([this, &batch, depth] {
        const auto start = Clock::now();
        storage_->read(batch.requests, depth);
        batch.read_seconds = seconds_since(start);
    });
}

void FlashFfn::finish_reads(ReadBatch& batch, const RecordVisitor& visit) {
    const auto wait_start = Clock::now();
    batch.pending = false;
    reader_.wait();
    counters_.io_wait_seconds += seconds_since(wait_start);
    counters_.io_seconds += batch.read_seconds;
    counters_.bytes_read += batch.plan.bytes();
    counters_.reads += int64_t(batch.plan.reads.size());

    // The checksums and copies run on the pool: a read batch may hold tens of megabytes.
    const auto check_start = Clock::now();
    const size_t records = batch.records.size(), extents = batch.extents.size();
    auto check_and_visit = [&](int64_t task) {
        const size_t end = std::min(extents, size_t(task + 1) * kExtentsPerTask);
        for (size_t e = size_t(task) * kExtentsPerTask; e < end; ++e) {
            const uint8_t* record = batch.staging.get() + batch.read_start[size_t(batch.plan.read_of_extent[e])] +
                                    batch.plan.offset_in_read[e];
            const size_t neuron_index = e / records;
            const NeuronPart first_part = batch.records[e % records];
            check_record(header_, batch.layer, batch.neurons[neuron_index], first_part, record);
            visit(neuron_index, first_part, record);
        }
    };
    const int64_t tasks = int64_t((extents + kExtentsPerTask - 1) / kExtentsPerTask);
    pool_.parallel_for(tasks, check_and_visit, tasks > 1);
    counters_.cache_seconds += seconds_since(check_start);
}

void FlashFfn::read_records(int64_t layer, std::span<const int32_t> neurons, std::span<const NeuronPart> records,
                            const RecordVisitor& visit) {
    // In slices, so the read staging stays small however many neurons a call reads.
    const size_t slice = size_t(slice_neurons(records));
    for (size_t first = 0; first < neurons.size(); first += slice) {
        start_reads(demand_, layer, neurons.subspan(first, std::min(neurons.size() - first, slice)), records);
        finish_reads(demand_, [&](size_t i, NeuronPart part, const uint8_t* record) { visit(first + i, part, record); });
    }
}

void FlashFfn::read_ahead(int64_t layer, const float* x, int64_t m) {
    predict_active(layer, x, m, ahead_active_);
    const NeuronCache& resident = resident_[size_t(layer)];
    std::erase_if(ahead_active_, [&](int32_t id) { return resident.slot_of(id) >= 0; });
    ahead_active_.resize(std::min(ahead_active_.size(), size_t(slice_neurons(token_records_))));
    if (ahead_active_.empty()) return;
    start_reads(ahead_, layer, ahead_active_, token_records_);
    counters_.read_ahead_neurons += int64_t(ahead_active_.size());
}

void FlashFfn::take_reads_ahead(int64_t layer, const RecordVisitor& fill) {
    demand_neurons_.clear();
    demand_index_.clear();
    if (ahead_.layer != layer) {  // none, or another layer's: all of it is read now
        drop_reads_ahead();
        demand_neurons_ = load_neurons_;
        demand_index_.resize(load_neurons_.size());
        std::iota(demand_index_.begin(), demand_index_.end(), size_t(0));
        return;
    }
    ahead_target_.assign(ahead_.neurons.size(), SIZE_MAX);
    int64_t used = 0;
    for (size_t i = 0; i < load_neurons_.size(); ++i) {
        const auto found = std::lower_bound(ahead_.neurons.begin(), ahead_.neurons.end(), load_neurons_[i]);
        if (found != ahead_.neurons.end() && *found == load_neurons_[i]) {
            ahead_target_[size_t(found - ahead_.neurons.begin())] = i;
            ++used;
        } else {
            demand_neurons_.push_back(load_neurons_[i]);
            demand_index_.push_back(i);
        }
    }
    finish_reads(ahead_, [&](size_t a, NeuronPart part, const uint8_t* record) {
        if (ahead_target_[a] != SIZE_MAX) fill(ahead_target_[a], part, record);
    });
    ahead_.layer = -1;
    counters_.read_ahead_used += used;
}

void FlashFfn::drop_reads_ahead() {
    if (ahead_.pending) reader_.wait_ignoring_errors();
    ahead_.pending = false;
    ahead_.layer = -1;
}

// The parts of the record that the cache holds, and the bias (every record of a file with biases
// carries its neuron's).
void FlashFfn::fill_from_record(NeuronCache& cache, int32_t slot, NeuronPart first_part, const uint8_t* record) {
    const auto first = std::find(file_parts_.begin(), file_parts_.end(), first_part);
    for (auto part = first; part != first + header_.parts_in_record(first_part); ++part)
        if (cache.holds(*part)) cache.fill(slot, *part, record + header_.vector_offset_in_record(*part));
    if (header_.has_bias) {
        float bias;
        std::memcpy(&bias, record + header_.bias_offset_in_record(), sizeof bias);
        cache.fill_bias(slot, bias);
    }
}

void FlashFfn::load(int64_t layer, std::span<const int32_t> neurons, std::span<const int32_t> slots,
                    NeuronCache& cache) {
    read_records(layer, neurons, token_records_, [&](size_t i, NeuronPart first_part, const uint8_t* record) {
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
    caller_chose_ = active != nullptr;
    if (active != nullptr) {
        active_ = *active;
        std::sort(active_.begin(), active_.end());
        for (int32_t id : active_) require(id >= 0 && id < header_.d_ff, "flash FFN: active neuron ", id, " out of range");
        require(std::adjacent_find(active_.begin(), active_.end()) == active_.end(),
                "flash FFN: an active neuron is listed twice");
        if (sparse_gates_) gate_activations(layer, x, m, active_, false, gate_products_, &neuron_gates_, nullptr);
    } else if (sparse_gates_) {
        gate_activations(layer, x, m, all_neurons_, true, gate_products_, &neuron_gates_, &active_);
        counters_.predicted += int64_t(active_.size());
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

void FlashFfn::gate_activations(int64_t layer, const float* x, int64_t m, std::span<const int32_t> neurons,
                                bool masked, std::vector<float>& products, std::vector<float>* activations,
                                std::vector<int32_t>* active) {
    const auto start = Clock::now();
    products.resize(neurons.size() * size_t(m));
    if (!gate_layers_.empty()) {  // every neuron's product, then the ones asked for
        gate_rows_.resize(size_t(m * header_.d_ff));
        linear_forward(*gate_layers_[size_t(layer)], x, m, gate_rows_.data());
        for (size_t i = 0; i < neurons.size(); ++i)
            for (int64_t r = 0; r < m; ++r)
                products[i * size_t(m) + size_t(r)] = gate_rows_[size_t(r * header_.d_ff + neurons[i])];
    } else {  // slot i of the gates' cache holds neuron i, so the neuron ids are the slots
        sparse_ffn_products(gates_[size_t(layer)], NeuronPart::Gate, neurons, x, m, products.data(), pool_,
                            products_path());
    }
    if (activations) activations->resize(size_t(header_.d_ff * m));
    const float threshold = masked ? sparsity_.thresholds[size_t(layer)] : -1.0f;
    const float* scales = sparsity_.neuron_scales.data() + layer * header_.d_ff;
    if (active) active->clear();
    for (size_t i = 0; i < neurons.size(); ++i) {
        const int32_t neuron = neurons[i];
        bool any = false;
        for (int64_t r = 0; r < m; ++r) {
            const float g = products[i * size_t(m) + size_t(r)];
            const float a = masked ? sparse_gate_activation(g, scales[neuron], threshold) : silu(g);
            if (activations) (*activations)[size_t(neuron * m + r)] = a;
            any |= a != 0.0f;
        }
        if (active && any) active->push_back(neuron);
    }
    counters_.predict_seconds += seconds_since(start);
}

void FlashFfn::predict_active(int64_t layer, const float* x, int64_t m, std::vector<int32_t>& active) {
    if (sparse_gates_) {  // on scratch of its own: the layer being computed keeps its gates
        gate_activations(layer, x, m, all_neurons_, true, ahead_products_, nullptr, &active);
        return;
    }
    const auto start = Clock::now();
    active.clear();
    if (has_predictor_[size_t(layer)]) {
        predictors_[size_t(layer)].predict(x, m, active);
        std::sort(active.begin(), active.end());
    } else {
        active = all_neurons_;
    }
    counters_.predict_seconds += seconds_since(start);
}

// Where they go: the resident cache keeps the active neurons it holds and, with a window, takes
// as many of the others as fit beside the pinned ones (evicting the least recently active); the
// rest are transient, read for this call alone.
void FlashFfn::place_active(NeuronCache& resident) {
    const auto cache_start = Clock::now();
    resident_active_.clear();
    transient_active_.clear();
    int64_t unpinned_hits = 0;
    for (int32_t id : active_) {
        const int32_t slot = resident.slot_of(id);
        unpinned_hits += slot >= 0 && !resident.is_pinned(slot);
    }
    int64_t room = options_.window > 0 ? resident.capacity() - resident.pinned() - unpinned_hits : 0;
    for (int32_t id : active_) {
        if (resident.slot_of(id) >= 0) {
            resident_active_.push_back(id);
        } else if (room > 0) {
            resident_active_.push_back(id);
            --room;
        } else {
            transient_active_.push_back(id);
        }
    }
    resident.begin_token(resident_active_, resident_plan_);
    ensure_transient_capacity(int64_t(transient_active_.size()));
    transient_->clear_unpinned();
    transient_->begin_token(transient_active_, transient_plan_);
    counters_.cache_seconds += seconds_since(cache_start);
    counters_.cache_hits += resident_plan_.hits;
}

// The missing neurons are read while the resident ones are computed (when they fit one batch of
// reads), except those already read ahead; then they are checked, filled in and computed too, and
// the next layer's reads ahead start. The sum over slots is the same in any order of the parts.
void FlashFfn::compute_active(int64_t layer, const float* x, int64_t m, float* y) {
    NeuronCache& resident = resident_[size_t(layer)];
    try {
        load_neurons_ = resident_plan_.missing;
        load_neurons_.insert(load_neurons_.end(), transient_plan_.missing.begin(), transient_plan_.missing.end());
        const size_t resident_missing = resident_plan_.missing.size();
        const auto fill = [&](size_t i, NeuronPart part, const uint8_t* record) {  // i: in load_neurons_
            if (i < resident_missing)
                fill_from_record(resident, resident_plan_.missing_slots[i], part, record);
            else
                fill_from_record(*transient_, transient_plan_.missing_slots[i - resident_missing], part, record);
        };

        take_reads_ahead(layer, fill);
        const std::vector<int32_t>& demand = demand_neurons_;
        const bool overlap = !demand.empty() && int64_t(demand.size()) <= slice_neurons(token_records_);
        if (overlap) start_reads(demand_, layer, demand, token_records_);
        std::fill(y, y + m * header_.d_model, 0.0f);
        const int64_t first_new = resident.size() - int64_t(resident_plan_.missing_slots.size());
        hit_slots_.clear();
        for (int32_t slot : resident_plan_.slots)
            if (slot < first_new) hit_slots_.push_back(slot);
        compute(resident, hit_slots_, x, m, y);

        const auto fill_demand = [&](size_t i, NeuronPart part, const uint8_t* record) {
            fill(demand_index_[i], part, record);
        };
        if (overlap)
            finish_reads(demand_, fill_demand);
        else
            read_records(layer, demand, token_records_, fill_demand);
        counters_.neurons_loaded += int64_t(load_neurons_.size());
        if (options_.read_ahead && !caller_chose_ && layer + 1 < header_.layers) read_ahead(layer + 1, x, m);
    } catch (...) {
        // A failed read or a damaged record: the slots reserved for this call's missing neurons
        // hold nothing valid, so no later call may take them for resident. Dropping every unpinned
        // neuron costs only rereads.
        reader_.wait_ignoring_errors();
        demand_.pending = false;
        drop_reads_ahead();
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
    const float* gates = nullptr;
    if (sparse_gates_) {  // each slot's gate activations, from its neuron's
        slot_gates_.resize(slots.size() * size_t(m));
        for (size_t i = 0; i < slots.size(); ++i)
            std::copy_n(neuron_gates_.data() + int64_t(cache.neuron_at(slots[i])) * m, m, slot_gates_.data() + i * size_t(m));
        gates = slot_gates_.data();
    }
    sparse_ffn_accumulate(cache, slots, x, m, y, pool_, products_path(), gates);
    counters_.compute_seconds += seconds_since(start);
}

std::vector<float> FlashFfn::read_part(int64_t layer, NeuronPart part, std::vector<float>* bias) {
    require(layer >= 0 && layer < header_.layers, "flash FFN: layer ", layer, " out of range");
    drop_reads_ahead();
    require(std::find(file_parts_.begin(), file_parts_.end(), part) != file_parts_.end(),
            "flash FFN: the file has no such part");
    const int64_t d_model = header_.d_model, d_ff = header_.d_ff;
    std::vector<float> weights(size_t(d_model * d_ff));
    if (bias != nullptr) bias->assign(header_.has_bias ? size_t(d_ff) : 0, 0.0f);
    const NeuronPart record[] = {header_.record_first_part(part)};
    read_records(layer, all_neurons_, record, [&](size_t neuron, NeuronPart, const uint8_t* bytes) {
        std::vector<float> column(static_cast<size_t>(d_model));  // the visits run on the pool
        dequantize_vector(header_.vector, bytes + header_.vector_offset_in_record(part), column.data());
        for (int64_t k = 0; k < d_model; ++k) weights[size_t(k * d_ff) + neuron] = column[size_t(k)];
        // Every record of a file with biases carries its neuron's.
        if (bias != nullptr && header_.has_bias)
            std::memcpy(&(*bias)[neuron], bytes + header_.bias_offset_in_record(), sizeof(float));
    });
    return weights;
}

}  // namespace qjit
