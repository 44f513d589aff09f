// The names in a directory, read with opendir/readdir. std::filesystem::directory_iterator is
// avoided on purpose: libstdc++ allocates inside noexcept code there, so an allocation failure
// would terminate the process instead of reaching the caller as std::bad_alloc.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace qjit {

// Every entry of `directory` but "." and "..", in no particular order; nothing when it cannot
// be opened (errno says why).
std::optional<std::vector<std::string>> list_directory(const std::string& directory);

}  // namespace qjit
