// The safetensors file format, read in place from a mapped file.
//
//   bytes 0..7        header length H, little-endian uint64
//   bytes 8..8+H-1    a JSON object: tensor name -> {"dtype": "F16", "shape": [..],
//                     "data_offsets": [begin, end]}, plus an optional "__metadata__" object
//   bytes 8+H..       the data; a tensor's bytes are [begin, end) counted from byte 8+H
//
// Every header is checked against the file before a byte of data is trusted: the header fits
// in the file, every tensor's byte count matches its dtype and shape, its range lies inside the
// data (else the file is truncated) and no two tensors' ranges overlap.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace qjit {

struct SafetensorsTensor {
    std::string dtype;            // as written: "I32", "F16", "BF16", "F32", ...
    std::vector<int64_t> shape;
    const uint8_t* data = nullptr;  // inside the file's mapping
    size_t bytes = 0;
};

// The tensors of one file, by name. Throws QJIT_ERROR_CORRUPT_DATA naming `file_name` and what is
// wrong. The tensors point into `file`, which must outlive them.
std::map<std::string, SafetensorsTensor> parse_safetensors(const uint8_t* file, size_t size,
                                                           const std::string& file_name);

// Bytes of one element of `dtype`, or 0 for a name this reader does not know (such tensors are
// still checked for range and overlap, just not for their byte count).
size_t safetensors_dtype_bytes(const std::string& dtype);

}  // namespace qjit
