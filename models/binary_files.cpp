#include "models/binary_files.hpp"

#include <fstream>

namespace qjit_models {

std::vector<char> read_file_bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary | std::ios::ate);
    if (!in) throw std::runtime_error("cannot open '" + path + "'");
    const std::streamoff size = in.tellg();
    if (size < 0) throw std::runtime_error("cannot determine the size of '" + path + "'");
    std::vector<char> bytes(static_cast<size_t>(size));
    in.seekg(0);
    if (!in.read(bytes.data(), size)) throw std::runtime_error("cannot read '" + path + "'");
    return bytes;
}

}  // namespace qjit_models
