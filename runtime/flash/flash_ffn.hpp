// A model's FFN layers served from a neuron file (io/neuron_file.hpp) under a DRAM budget, as
// "LLM in a flash" (Alizadeh et al.) runs models larger than memory: per token and layer, only the
// neurons it activates take part; those not resident are read from storage in planned direct
// reads, checked, and put in the layer's neuron cache; the FFN then runs over the active slots.
//
// Where the neurons of a token live:
//   resident   each layer's NeuronCache, sized from the budget: pinned neurons (kept for good) and,
//              with a window, the neurons active within the last `window` tokens
//   transient  one cache shared by all layers for the active neurons the resident cache does not
//              hold, emptied layer by layer (without a window: every active neuron not pinned)
// Which neurons are active: all of them, the caller's list, the layer's predictor, or, for a file
// with a sparsity section (runtime/flash/ffn_sparsity.hpp), the neurons whose gate activation
// passes the layer's threshold: then every gate is read once, when the FFN is created, and kept
// resident beside the caches (which hold up and down only), and a token reads up and down alone.
//
// Reads ahead (options.read_ahead): once a layer's own reads are in, the next layer's active
// neurons are predicted from this layer's input (the residual stream changes little from one
// layer to the next) and those not resident are read while this layer computes and the caller
// runs what lies between the two FFNs. The next forward takes what it needs from them and reads
// the rest on demand.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "io/neuron_file.hpp"
#include "qjit/qjit.h"
#include "runtime/cpu/thread_pool.hpp"
#include "runtime/flash/background_task.hpp"
#include "runtime/flash/neuron_cache.hpp"
#include "runtime/flash/neuron_predictor.hpp"
#include "runtime/flash/read_planner.hpp"
#include "runtime/flash/sparse_ffn.hpp"
#include "runtime/flash/storage.hpp"

namespace qjit {

struct FlashFfnOptions {
    // Bytes for the resident caches of all layers (split evenly; at most d_ff neurons a layer).
    int64_t dram_budget_bytes = 0;
    // Tokens a neuron stays resident after it was last active; 0: only pinned neurons stay.
    int window = 4;
    // Coalesce neighbouring records into larger reads (read_planner.hpp); the curve plans them.
    bool coalesce_reads = true;
    ReadCurve read_curve;  // empty: the planner's defaults
    int queue_depth = 0;   // reads in flight; 0: the curve's best for the plan's read size
    // A file with a sparsity section: keep the gates resident and run only the neurons above the
    // thresholds (false: the file is served as one without).
    bool use_sparsity = true;
    // Read the next layer's predicted neurons while this one computes (see above).
    bool read_ahead = false;
    // How the gate and up products of quantized vectors read x: INT8 through the generated kernels
    // (SparseFfnPath::Fast), F32 exactly (FastF32); AUTO as the dense layers choose, int8 for
    // vectors of 6 bits or fewer.
    qjit_activations activations = QJIT_ACTIVATIONS_AUTO;
    // The cap of every kernel the FFN runs (sparse products, predictors): the context's ISA
    // (qjit_flash_ffn_create sets it); AUTO, for tests: the CPU's best.
    qjit_isa isa = QJIT_ISA_AUTO;
    // How the generated sparse kernels get their tilings: the context's tuning memory and policy
    // (qjit_flash_ffn_create sets them); none, for tests: the model's picks, untimed.
    SparseKernelTuning kernel_tuning;
};

// What a run did, summed over every token and layer since creation (or reset_counters).
struct FlashFfnCounters {
    int64_t tokens = 0;          // forward calls (a batch counts once)
    int64_t active_neurons = 0;  // per layer and token, summed
    int64_t cache_hits = 0;      // active neurons found resident
    int64_t neurons_loaded = 0;  // active neurons read from storage
    int64_t bytes_read = 0;      // bytes the reads moved (gaps read through included)
    int64_t reads = 0;           // read requests issued
    int64_t predicted = 0;       // neurons the predictors named
    double io_seconds = 0;       // the reads themselves, start to end
    double io_wait_seconds = 0;  // waiting for reads: what computing the resident neurons did not hide
    double cache_seconds = 0;    // cache bookkeeping, record checks, filling slots
    double compute_seconds = 0;  // the sparse FFN
    double predict_seconds = 0;  // the predictors
    int64_t read_ahead_neurons = 0;  // neurons read ahead of their layer (their bytes are in bytes_read)
    int64_t read_ahead_used = 0;     // ... of which their layer then needed (active and not resident)
};

class FlashFfn {
public:
    // Reads and checks the file's header; allocates the resident caches from the budget. With
    // `gate_context`, a quantized file's resident gates (sparsity in use) become a layer of that
    // context per FFN layer, their products its generated dense kernel on the exact fp32 path;
    // without it, or for fp16 vectors, the sparse kernels read them as the file stores them.
    FlashFfn(std::unique_ptr<Storage> storage, const FlashFfnOptions& options, ThreadPool& pool,
             qjit_context* gate_context = nullptr);
    ~FlashFfn();

    const NeuronFileHeader& header() const { return header_; }
    int64_t resident_capacity() const;  // neurons a layer's resident cache holds
    // Bytes held: resident gates, resident and transient caches, read staging and predictors.
    int64_t dram_bytes() const;
    int64_t resident_gate_bytes() const;  // 0 unless the gates are resident
    bool gates_as_layers() const { return !gate_layers_.empty(); }  // see the constructor
    // The DRAM budget at which every neuron of every layer is resident (with the file's sparsity in
    // use, when it has one, whatever the options say).
    int64_t all_resident_bytes() const;
    // The file's calibrated sparsity when it is in use (resident gates), else null.
    const FfnSparsity* sparsity() const { return sparse_gates_ ? &sparsity_ : nullptr; }

    // Loads neurons into a layer's resident cache for good (the hot ones: most often active).
    // At most resident_capacity() per layer in all.
    void pin(int64_t layer, std::span<const int32_t> neurons);
    void set_predictor(int64_t layer, NeuronPredictor predictor);
    // Fits and sets the layer's predictor on n calibration rows x [n][d_model]: the truly active
    // neurons are those with x . up + b > 0 (ReLU) or |silu(x . gate) * (x . up)| >
    // magnitude_threshold (SwiGLU; options.score is set to match). Reads the layer once.
    PredictorQuality fit_predictor(int64_t layer, const float* x, int64_t n, PredictorOptions options,
                                   float magnitude_threshold = 0);
    bool has_predictor(int64_t layer) const;
    const NeuronPredictor* predictor(int64_t layer) const;  // null when the layer has none

    // y (m x d_model) = the layer's FFN on x (m x d_model), over the active neurons: `active`
    // (distinct ids, any order), or, when null, those above the thresholds in any row (resident
    // gates; a neuron below its threshold in a row adds nothing to that row), else the predictor's
    // for any row, else every neuron.
    void forward(int64_t layer, const float* x, int64_t m, float* y, const std::vector<int32_t>* active = nullptr);

    // One part of a layer as fp32 [d_model][d_ff] (down: transposed) and, when asked, the biases
    // (empty without), read from storage: what a predictor is fitted on.
    std::vector<float> read_part(int64_t layer, NeuronPart part, std::vector<float>* bias = nullptr);

    const FlashFfnCounters& counters() const { return counters_; }
    void reset_counters() { counters_ = {}; }
    const Storage& storage() const { return *storage_; }
    const ReadCurve& read_curve() const { return options_.read_curve; }  // empty: the planner's defaults
    // The generated sparse kernels the caches use (SparseProductJit::describe), or "" for none.
    std::string generated_kernels() const;

private:
    using Clock = std::chrono::steady_clock;
    // The reads of one batch of records: planned, started on the read thread, then waited for,
    // checked and visited. A token's own reads and its reads ahead are two batches.
    struct ReadBatch {
        int64_t layer = -1;
        std::vector<int32_t> neurons;  // whose records, in the order visited
        std::vector<NeuronPart> records;
        std::vector<Extent> extents;
        ReadPlan plan;
        std::vector<ReadRequest> requests;
        std::vector<int64_t> read_start;  // each planned read's offset in the staging buffer
        std::unique_ptr<uint8_t[], AlignedFree> staging;
        int64_t staging_bytes = 0;
        double read_seconds = 0;  // measured on the read thread
        bool pending = false;     // started, not finished yet
    };
    // Reads and checks the records of `neurons` of `layer` and shows each to `visit` with the index
    // of its neuron in `neurons` and its first part. Visits run concurrently on the pool.
    // `records`: the first parts of the records to read for each neuron (NeuronFileHeader's
    // record_first_parts(), or some of them).
    using RecordVisitor = std::function<void(size_t, NeuronPart, const uint8_t*)>;
    void read_records(int64_t layer, std::span<const int32_t> neurons, std::span<const NeuronPart> records,
                      const RecordVisitor& visit);
    // The same in two halves, for at most slice_neurons() neurons: the reads are planned and
    // started on the read thread; finish_reads waits for them, checks every record and visits it
    // with the index of its neuron in batch.neurons and its first part.
    void start_reads(ReadBatch& batch, int64_t layer, std::span<const int32_t> neurons,
                     std::span<const NeuronPart> records);
    void finish_reads(ReadBatch& batch, const RecordVisitor& visit);
    int64_t slice_neurons(std::span<const NeuronPart> records) const;  // neurons one batch reads at most
    // Reads ahead: starts reading the neurons of `layer` that its criterion names for x and that are
    // not resident; drop_reads_ahead waits for and forgets reads ahead nobody will take.
    void read_ahead(int64_t layer, const float* x, int64_t m);
    // Splits this call's missing neurons (load_neurons_) into those the reads ahead of `layer` hold,
    // shown to `fill` with their place in load_neurons_, and the rest: demand_neurons_, their
    // places in demand_index_.
    void take_reads_ahead(int64_t layer, const RecordVisitor& fill);
    void drop_reads_ahead();
    // With a sparsity section: reads it, and every layer's gates into gates_ (or, with a context
    // and quantized vectors, into gate_layers_).
    void load_sparsity(qjit_context* gate_context);
    NeuronCache token_cache(int64_t capacity, int window) const;  // a cache of the parts tokens read
    // The gate products of `neurons` for the m rows into `products`, their activations (masked by
    // the thresholds when `masked`) into `activations` [d_ff][m], and the neurons with one not 0
    // into `active`, each when given.
    void gate_activations(int64_t layer, const float* x, int64_t m, std::span<const int32_t> neurons, bool masked,
                          std::vector<float>& products, std::vector<float>* activations, std::vector<int32_t>* active);
    // The neurons of `layer` that its criterion (thresholds, predictor, else all) names for x, into
    // `active`, leaving the per-call scratch of the layer being computed alone.
    void predict_active(int64_t layer, const float* x, int64_t m, std::vector<int32_t>& active);
    void fill_from_record(NeuronCache& cache, int32_t slot, NeuronPart first_part, const uint8_t* record);
    // Reads the records of `neurons` of `layer` and fills `slots` of `cache` with them.
    void load(int64_t layer, std::span<const int32_t> neurons, std::span<const int32_t> slots, NeuronCache& cache);
    // The steps of a forward: the active neurons into active_, their places in the resident and
    // transient caches (the plans), then their reads and products.
    void choose_active(int64_t layer, const float* x, int64_t m, const std::vector<int32_t>* active);
    void place_active(NeuronCache& resident);
    void compute_active(int64_t layer, const float* x, int64_t m, float* y);
    void compute(const NeuronCache& cache, std::span<const int32_t> slots, const float* x, int64_t m, float* y);
    void ensure_transient_capacity(int64_t neurons);

    std::unique_ptr<Storage> storage_;
    SparseFfnPath products_path() const;
    FlashFfnOptions options_;
    ThreadPool& pool_;
    NeuronFileHeader header_;
    std::vector<NeuronPart> file_parts_;  // header_.part_list(), kept: records are filled from it per neuron
    std::vector<NeuronCache> resident_;  // one per layer
    std::unique_ptr<NeuronCache> transient_;
    std::vector<NeuronPredictor> predictors_;  // one per layer; rank 0: none
    std::vector<uint8_t> has_predictor_;
    // Resident gates: one cache per layer holding every neuron's gate, neuron i in slot i.
    bool sparse_gates_ = false;
    FfnSparsity sparsity_;
    std::vector<NeuronCache> gates_;
    std::vector<std::unique_ptr<qjit_linear>> gate_layers_;  // in gates_' place when made
    std::vector<NeuronPart> token_parts_;    // the parts the caches hold (empty: all)
    std::vector<NeuronPart> token_records_;  // the records a token reads per neuron

    // Per-call scratch, kept so steady-state calls do not allocate.
    ReadBatch demand_, ahead_;  // this call's reads; the next layer's reads ahead
    std::vector<int32_t> active_, resident_active_, transient_active_, all_neurons_, ahead_active_;
    NeuronCache::TokenPlan resident_plan_, transient_plan_;
    std::vector<int32_t> load_neurons_, hit_slots_;
    std::vector<int32_t> demand_neurons_;  // the missing neurons not read ahead ...
    std::vector<size_t> demand_index_;     // ... and their places in load_neurons_
    std::vector<size_t> ahead_target_;     // per neuron read ahead: its place in load_neurons_ (SIZE_MAX: unused)
    std::vector<float> gate_products_, neuron_gates_, slot_gates_;  // resident gates: per call
    std::vector<float> gate_rows_;                                  // a gate layer's output [m][d_ff]
    std::vector<float> ahead_products_;                             // the next layer's gate products
    bool caller_chose_ = false;  // this call's active neurons came from the caller: no reads ahead
    BackgroundTask reader_;      // last: its thread stops before the members it reads go away

    FlashFfnCounters counters_;
};

}  // namespace qjit
