// A storage that fails on demand, over another one, for fault tests of what reads storage.
//
// Knobs (each off by default; set them any time between reads):
//   fail_on_call = N        the Nth read() call (1-based, counting every call) throws QJIT_ERROR_IO
//   fail_begin, fail_end    a read() with a request overlapping bytes [fail_begin, fail_end) throws
//                           QJIT_ERROR_IO
//   truncate_at = S         behaves as the file cut to S bytes: a request reaching past S throws the
//                           error a short read gives (QJIT_ERROR_IO, "read past end of file at
//                           offset ..."); size() still reports the inner size, as a file truncated
//                           after it was opened does
//   corrupt_begin,          every byte of [corrupt_begin, corrupt_end) a request returns comes back
//   corrupt_end             flipped (xor 0xff), silently: a damaged record only a checksum catches
// calls() counts read() calls; counters() are the inner storage's.
#pragma once

#include <algorithm>
#include <memory>
#include <utility>

#include "base/error.hpp"
#include "runtime/flash/storage.hpp"

namespace qjit::test {

class FaultyStorage final : public Storage {
public:
    explicit FaultyStorage(std::unique_ptr<Storage> inner) : inner_(std::move(inner)) {}

    int fail_on_call = 0;
    int64_t fail_begin = 0, fail_end = 0;
    int64_t truncate_at = -1;
    int64_t corrupt_begin = 0, corrupt_end = 0;

    int calls() const { return calls_; }
    Storage& inner() { return *inner_; }

    int64_t size() const override { return inner_->size(); }
    int64_t block_size() const override { return inner_->block_size(); }
    std::string describe() const override { return "faulty " + inner_->describe(); }

    void read(std::span<const ReadRequest> requests, int queue_depth) override {
        ++calls_;
        check_read_requests(*this, requests, queue_depth);
        if (calls_ == fail_on_call) fail(QJIT_ERROR_IO, describe(), ": injected failure of read call ", calls_);
        for (const ReadRequest& r : requests) {
            if (r.offset < fail_end && fail_begin < r.offset + r.length)
                fail(QJIT_ERROR_IO, describe(), ": injected failure of the read at offset ", r.offset);
            if (truncate_at >= 0 && r.offset + r.length > truncate_at)
                fail(QJIT_ERROR_IO, describe(), ": read past end of file at offset ", r.offset, " (got ",
                     std::clamp<int64_t>(truncate_at - r.offset, 0, r.length), " of ", r.length, " bytes)");
        }
        inner_->read(requests, queue_depth);
        counters_ = inner_->counters();
        for (const ReadRequest& r : requests) {
            const int64_t begin = std::max(r.offset, corrupt_begin);
            const int64_t end = std::min(r.offset + r.length, corrupt_end);
            for (int64_t at = begin; at < end; ++at) static_cast<unsigned char*>(r.buffer)[at - r.offset] ^= 0xff;
        }
    }

private:
    std::unique_ptr<Storage> inner_;
    int calls_ = 0;
};

}  // namespace qjit::test
