#include "runtime/cuda/cuda_executor.hpp"

#include <functional>
#include <future>
#include <memory>
#include <thread>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <random>
#include <set>

#include "runtime/cuda/nvrtc_compiler.hpp"
#include "base/error.hpp"
#include "base/half.hpp"
#include "format/cuda_code_layout.hpp"
#include "format/cuda_mixed_weights.hpp"
#include "tuner/tuning_problem.hpp"

namespace qjit::cuda {

using jit::cuda::ActivationType;
using jit::cuda::CudaKernelSpec;
using jit::cuda::CudaTiling;
using jit::cuda::KernelKind;

namespace {

// The kernel spec (format part) a layer with these parameters is compiled for.
jit::cuda::CudaKernelSpec cuda_format(const QuantParams& params, jit::cuda::ActivationType activations, int arch) {
    jit::cuda::CudaKernelSpec spec;
    spec.format = params.format();
    spec.format.low_rank = {};  // a pass after the product (runtime/cuda/cuda_low_rank.hpp)
    if (spec.format.group_size >= spec.format.k) spec.format.group_size = spec.format.k;  // one group per column
    if (!spec.format.second_order_scales() && !spec.format.super_block_scales())
        spec.format.scale_type = scales_and_offsets_exact_in_f16(params) ? ScaleType::F16 : ScaleType::F32;
    spec.activations = activations;
    spec.arch = arch;
    return spec;
}



void write_text(const std::string& path, const std::string& text) {
    std::ofstream out(path, std::ios::binary);
    out << text;
    if (!out) fail(QJIT_ERROR_IO, "could not write ", path);
}

uint16_t to_bits(float v, ActivationType type) {
    return type == ActivationType::F16 ? float_to_half(v) : float_to_bf16(v);
}

}  // namespace

CudaExecutor::CudaExecutor(const GpuProperties& device, MatrixSource matrix_source, std::string dump_dir,
                           std::string cubin_cache_dir)
    : device_(device), dump_dir_(std::move(dump_dir)), cubin_cache_dir_(std::move(cubin_cache_dir)),
      matrix_(std::move(matrix_source)) {
    cuda::Driver& driver = cuda::Driver::get();
    driver.make_current(device_.ordinal);
    const QuantizedMatrix matrix = matrix_();
    const QuantParams& p = matrix.params;
    format_ = cuda_format(p, ActivationType::F16, device_.arch());
    jit::cuda::check_spec(format_);  // bits and group size the CUDA kernels serve

    act_order_ = p.act_order;
    row_order_ = cuda::upload(p.row_order);
    if (jit::cuda::needs_mixed_kernel(format_.format)) {
        upload_mixed(matrix);
    } else {
        upload_metadata(matrix);
    }
    support_ = std::make_unique<cuda::SupportModule>(device_, cubin_cache_dir_);
    gather_ = support_->function("qjit_gather_rows");
    cast_f16_ = support_->function("qjit_cast_f32_to_f16");
    cast_bf16_ = support_->function("qjit_cast_f32_to_bf16");
}

void CudaExecutor::upload_metadata(const QuantizedMatrix& matrix) {
    const CudaWeights weights = pack_cuda_metadata(matrix);  // the codes follow in upload_codes_for
    k_ = weights.k, n_ = weights.n, kp_ = weights.kp, np_ = weights.np, num_groups_ = weights.num_groups;
    scales_ = cuda::DeviceBuffer(weights.scale_data(), size_t(weights.scale_bytes()));
    if (weights.zero_point_bytes() > 0)  // integer zero points or float offsets
        zeros_ = cuda::DeviceBuffer(weights.zero_point_data(), size_t(weights.zero_point_bytes()));
    weight_bytes_ = weights.code_bytes() + int64_t(scales_.size() + zeros_.size());
}

void CudaExecutor::upload_mixed(const QuantizedMatrix& matrix) {
    const CudaMixedWeights w = pack_cuda_mixed(matrix);
    k_ = w.k, n_ = w.n, kp_ = w.kp, np_ = w.np, num_groups_ = w.num_groups;
    block_codes_ = cuda::upload(w.codes);  // the mixed GEMV's one layout, uploaded now
    mixed_.group_words = cuda::upload(w.group_words);
    scales_ = w.f16_scales ? cuda::upload(w.scales_f16) : cuda::upload(w.scales_f32);
    mixed_.scale_codes = cuda::upload(w.scale_codes);
    mixed_.scale2 = cuda::upload(w.scale2);
    mixed_.zero2 = cuda::upload(w.zero2);
    zeros_ = cuda::upload(w.zeros);
    mixed_.outlier_start = cuda::upload(w.outlier_start);
    mixed_.outlier_rows = cuda::upload(w.outlier_rows);
    mixed_.outlier_values = cuda::upload(w.outlier_values);
    mixed_.present = true;
    weight_bytes_ = w.bytes();
}

CudaExecutor::~CudaExecutor() {
    cuda::Driver& driver = cuda::Driver::get();
    try {
        driver.make_current(device_.ordinal);
    } catch (const Error&) {
    }
    for (auto& [key, plan] : plans_) driver.unload_module(plan->module);
}

cuda::DeviceBuffer& CudaExecutor::code_layout(KernelKind kind) {
    return kind == KernelKind::Mma ? fragment_codes_ : block_codes_;
}

void CudaExecutor::upload_codes_for(KernelKind kind) {
    if (mixed_.present) return;  // uploaded with the layer
    cuda::DeviceBuffer& buffer = code_layout(kind);
    if (buffer.size() > 0) return;
    const QuantizedMatrix matrix = matrix_();
    const std::vector<uint32_t> codes =
        kind == KernelKind::Mma ? pack_fragment_codes(matrix) : pack_block_codes(matrix);
    buffer = cuda::DeviceBuffer(codes.data(), codes.size() * 4);
}

int64_t CudaExecutor::device_code_bytes() const {
    std::lock_guard lock(mutex_);
    return int64_t(block_codes_.size() + fragment_codes_.size());
}

void CudaExecutor::release_unused_codes() {
    cuda::Driver& driver = cuda::Driver::get();
    driver.make_current(device_.ordinal);
    std::lock_guard lock(mutex_);
    std::set<const cuda::DeviceBuffer*> read;
    for (const auto& [key, plan] : plans_) read.insert(&code_layout(plan->spec.tiling.kind));
    if (read.size() == 2) return;
    // A launch of a plan replaced since may still be reading the layout (cuMemFree need not wait).
    driver.synchronize_context();
    for (cuda::DeviceBuffer* layout : {&block_codes_, &fragment_codes_})
        if (!read.count(layout)) *layout = {};
}

CudaKernelSpec CudaExecutor::format(ActivationType activations, int64_t bucket) const {
    CudaKernelSpec spec = format_;
    spec.activations = activations;
    spec.rows = int(bucket);
    spec.tiling = {};
    spec.tiling.kind = bucket <= 8 ? KernelKind::Gemv : KernelKind::Gemm;  // the kind's default; mma serves both
    if (mixed_.present) {  // the mixed GEMV only: larger batches run in slices of 8 rows
        spec.rows = int(std::min<int64_t>(bucket, 8));
        spec.tiling.kind = KernelKind::Gemv;
    }
    return spec;
}

CudaPlan CudaExecutor::compile(const CudaKernelSpec& spec) const {
    require(jit::cuda::fits_device(spec, device_.shared_memory_per_block_optin), "CUDA tiling ",
            jit::cuda::tiling_text(spec.tiling), " needs ", jit::cuda::shared_memory_bytes(spec),
            " bytes of shared memory; ", device_.name, " offers ", device_.shared_memory_per_block_optin);
    CudaPlan plan;
    plan.spec = spec;
    plan.kernel = jit::cuda::generate_kernel(spec);
    cuda::CompiledKernel compiled;
    if (dump_dir_.empty()) {
        compiled = cuda::compile_cuda_cached(plan.kernel.source, plan.kernel.name, spec.arch, cubin_cache_dir_);
    } else {  // compile afresh: the PTX is only kept in memory
        compiled = cuda::compile_cuda(plan.kernel.source, plan.kernel.name, spec.arch);
        const std::string base = dump_dir_ + "/" + plan.kernel.name;
        write_text(base + ".cu", plan.kernel.source);
        write_text(base + ".ptx", compiled.ptx);
        std::fprintf(stderr, "qjit: wrote %s.cu and %s.ptx\n", base.c_str(), base.c_str());
    }
    plan.compile_ms = compiled.compile_ms;
    cuda::Driver& driver = cuda::Driver::get();
    plan.module = driver.load_module(compiled.cubin);
    plan.function = driver.function(plan.module, plan.kernel.entry);
    if (plan.kernel.shared_bytes > 48 * 1024) driver.set_dynamic_shared_memory(plan.function, plan.kernel.shared_bytes);
    return plan;
}

const CudaPlan& CudaExecutor::install(ActivationType activations, int64_t bucket, const CudaTiling& tiling) {
    CudaKernelSpec spec = format(activations, bucket);
    spec.tiling = tiling;
    cuda::Driver::get().make_current(device_.ordinal);
    auto plan = std::make_unique<CudaPlan>(compile(spec));
    std::lock_guard lock(mutex_);
    upload_codes_for(tiling.kind);
    std::unique_ptr<CudaPlan>& slot = plans_[{activations, bucket}];
    if (slot) cuda::Driver::get().unload_module(slot->module);
    slot = std::move(plan);
    return *slot;
}

const CudaPlan* CudaExecutor::plan(ActivationType activations, int64_t bucket) const {
    std::lock_guard lock(mutex_);
    const auto it = plans_.find({activations, bucket});
    return it == plans_.end() ? nullptr : it->second.get();
}

// The caller holds mutex_ (scratch buffers) and has made the device current.
void CudaExecutor::launch(const CudaPlan& plan, cuda::CUdeviceptr x, cuda::CUdeviceptr y, int64_t m,
                          cuda::CUstream stream) {
    cuda::Driver& driver = cuda::Driver::get();
    // Kernels read activations in 16-byte pieces from rows of a multiple of 8 elements; anything
    // else (and act-order) goes through a gathered, zero-padded copy.
    int k_valid = int(k_), ldx = int(k_);
    if (act_order_ || k_ % 8 != 0 || x % 16 != 0) {
        cuda::CUdeviceptr gathered = cuda::grown(gathered_, size_t(m * kp_ * 2));
        cuda::CUdeviceptr order = row_order_.get();
        int rows = int(m), k = int(k_), kp = int(kp_);
        void* args[] = {&x, &ldx, &order, &gathered, &rows, &k, &kp};
        driver.launch(gather_, cuda::blocks_for(m * kp_, cuda::kSupportThreads), 1, 1, cuda::kSupportThreads, 0, stream,
                      args);
        x = gathered, k_valid = int(kp_), ldx = int(kp_);
    }
    if (mixed_.present) return launch_mixed(plan, x, y, m, k_valid, ldx, stream);
    const CudaTiling& t = plan.spec.tiling;
    const cuda::DeviceBuffer& layout = code_layout(t.kind);
    if (layout.size() == 0) fail(QJIT_ERROR_INTERNAL, "CUDA codes for ", jit::cuda::tiling_text(t), " not uploaded");
    cuda::CUdeviceptr codes = layout.get(), scales = scales_.get(), zeros = zeros_.get();
    int rows = int(m), n = int(n_), np = int(np_), kp = int(kp_), groups = int(num_groups_);
    jit::cuda::LaunchShape shape = jit::cuda::launch_shape(plan.spec, m, n_, np_, kp_);
    if (t.kind == KernelKind::Gemv) {
        void* args[] = {&codes, &scales, &zeros, &x, &y, &rows, &n, &np, &k_valid, &ldx, &kp, &groups};
        driver.launch(plan.function, shape.grid_x, 1, 1, shape.threads, 0, stream, args);
        return;
    }
    cuda::CUdeviceptr partial = 0;
    if (shape.splits > 1) {
        partial = cuda::grown(partial_, size_t(m * n_ * 4));
        driver.memset_async(partial, 0, size_t(m * n_ * 4), stream);
    }
    void* args[] = {&codes,   &scales, &zeros, &x,      &y,       &rows,   &n,
                    &np,      &k_valid, &ldx,  &kp,     &groups,  &partial, &shape.units_per_split};
    driver.launch(plan.function, shape.grid_x, shape.grid_y, shape.grid_z, shape.threads, shape.shared_bytes, stream,
                  args);
    if (shape.splits > 1) {
        long long count = m * n_;
        void* cast_args[] = {&partial, &y, &count};
        const cuda::CUfunction cast = plan.spec.activations == ActivationType::F16 ? cast_f16_ : cast_bf16_;
        driver.launch(cast, cuda::blocks_for(count, cuda::kSupportThreads), 1, 1, cuda::kSupportThreads, 0, stream,
                      cast_args);
    }
}

// The mixed GEMV over slices of the rows its plan was compiled for (x already gathered or aligned).
void CudaExecutor::launch_mixed(const CudaPlan& plan, cuda::CUdeviceptr x, cuda::CUdeviceptr y, int64_t m, int k_valid,
                                int ldx, cuda::CUstream stream) {
    cuda::CUdeviceptr codes = block_codes_.get(), group_words = mixed_.group_words.get(), scales = scales_.get();
    cuda::CUdeviceptr scale_codes = mixed_.scale_codes.get(), scale2 = mixed_.scale2.get(), zero2 = mixed_.zero2.get();
    cuda::CUdeviceptr zeros = zeros_.get(), outlier_start = mixed_.outlier_start.get();
    cuda::CUdeviceptr outlier_rows = mixed_.outlier_rows.get(), outlier_values = mixed_.outlier_values.get();
    int n = int(n_), np = int(np_), groups = int(num_groups_);
    const jit::cuda::LaunchShape shape = jit::cuda::launch_shape(plan.spec, plan.spec.rows, n_, np_, kp_);
    for (int64_t first = 0; first < m; first += plan.spec.rows) {
        int rows = int(std::min<int64_t>(plan.spec.rows, m - first));
        cuda::CUdeviceptr x_slice = x + cuda::CUdeviceptr(first * ldx * 2), y_slice = y + cuda::CUdeviceptr(first * n_ * 2);
        void* args[] = {&codes,         &group_words,  &scales,         &scale_codes, &scale2, &zero2,
                        &zeros,         &outlier_start, &outlier_rows, &outlier_values, &x_slice, &y_slice,
                        &rows,          &n,            &np,             &k_valid,     &ldx,    &groups};
        cuda::Driver::get().launch(plan.function, shape.grid_x, 1, 1, shape.threads, 0, stream, args);
    }
}

void CudaExecutor::forward(cuda::CUdeviceptr x, cuda::CUdeviceptr y, int64_t m, ActivationType activations,
                           cuda::CUstream stream) {
    cuda::Driver::get().make_current(device_.ordinal);
    std::lock_guard lock(mutex_);
    const int64_t bucket = cuda_batch_bucket(m);
    const auto it = plans_.find({activations, bucket});
    if (it == plans_.end()) fail(QJIT_ERROR_INTERNAL, "no CUDA kernel installed for ", bucket, " rows");
    launch(*it->second, x, y, m, stream);
}

double CudaExecutor::time_us(const CudaPlan* plan, int64_t m, ActivationType activations, int repeats, bool warm_up,
                             const AfterProduct& after) {
    cuda::Driver& driver = cuda::Driver::get();
    driver.make_current(device_.ordinal);
    std::unique_lock lock(mutex_);
    if (timing_x_.size() < size_t(m * k_ * 2)) {
        std::mt19937 rng(42);
        std::uniform_real_distribution<float> uniform(-1.f, 1.f);
        std::vector<uint16_t> host(size_t(m * k_));
        for (uint16_t& v : host) v = to_bits(uniform(rng), activations);
        timing_x_ = cuda::DeviceBuffer(host.data(), host.size() * 2);
    }
    const cuda::CUdeviceptr y = cuda::grown(timing_y_, size_t(m * n_ * 2));
    const size_t flush_bytes = size_t(std::max<int64_t>(device_.l2_bytes, 1 << 20)) * 2;
    const cuda::CUdeviceptr flush = cuda::grown(flush_, flush_bytes);
    auto run = [&] {
        if (plan) return launch(*plan, timing_x_.get(), y, m, nullptr);
        lock.unlock();
        forward(timing_x_.get(), y, m, activations, nullptr);
        if (after) after(timing_x_.get(), y, nullptr);
        lock.lock();
    };
    cuda::CUevent start = driver.create_event(), stop = driver.create_event();
    std::vector<double> samples;
    try {
        if (warm_up) run();  // first launch of the module
        for (int i = 0; i < repeats; ++i) {
            driver.memset_async(flush, uint8_t(i), flush_bytes, nullptr);  // evict the weights from L2
            driver.record_event(start, nullptr);
            run();
            driver.record_event(stop, nullptr);
            samples.push_back(driver.elapsed_ms(start, stop) * 1e3);
        }
    } catch (...) {
        driver.destroy_event(start);
        driver.destroy_event(stop);
        throw;
    }
    driver.destroy_event(start);
    driver.destroy_event(stop);
    std::nth_element(samples.begin(), samples.begin() + samples.size() / 2, samples.end());
    return samples[samples.size() / 2];
}

std::function<double()> CudaExecutor::timed_tiling(int64_t m, ActivationType activations, const CudaTiling& tiling) {
    CudaKernelSpec spec = format(activations, cuda_batch_bucket(m));
    spec.tiling = tiling;
    cuda::Driver::get().make_current(device_.ordinal);
    {
        std::lock_guard lock(mutex_);
        upload_codes_for(tiling.kind);
    }
    std::shared_ptr<CudaPlan> candidate(new CudaPlan(compile(spec)), [](CudaPlan* plan) {
        try {
            cuda::Driver::get().unload_module(plan->module);
        } catch (...) {  // a failing unload leaks a module; nothing better to do in a deleter
        }
        delete plan;
    });
    return [this, candidate, m, activations] { return time_us(candidate.get(), m, activations, 1, false, {}) * 1e-6; };
}

void CudaExecutor::compile_ahead(ActivationType activations, int64_t bucket,
                                 const std::vector<CudaTiling>& tilings) const {
    if (!dump_dir_.empty()) return;  // dumping compiles afresh anyway
    std::vector<std::future<void>> jobs;
    for (const CudaTiling& tiling : tilings) {
        CudaKernelSpec spec = format(activations, bucket);
        spec.tiling = tiling;
        jobs.push_back(std::async(std::launch::async, [this, spec] {
            try {
                const jit::cuda::GeneratedKernel kernel = jit::cuda::generate_kernel(spec);
                cuda::compile_cuda_cached(kernel.source, kernel.name, spec.arch, cubin_cache_dir_);
            } catch (const std::exception&) {  // reported by the call that needs the kernel
            }
        }));
    }
    for (auto& job : jobs) job.get();
}

double CudaExecutor::time_forward_us(int64_t m, ActivationType activations, int repeats, const AfterProduct& after) {
    return time_us(nullptr, m, activations, repeats, true, after);
}

}  // namespace qjit::cuda
