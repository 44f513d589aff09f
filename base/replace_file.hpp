// Writing a file so that readers see the old contents or the new, never a mix: the bytes go to a
// temporary file beside it, which is flushed to disk and renamed over it.
#pragma once

#include <string>
#include <string_view>

namespace qjit {

// QJIT_ERROR_IO naming the file and the reason; an existing file is left as it was.
void replace_file(const std::string& path, std::string_view bytes);

}  // namespace qjit
