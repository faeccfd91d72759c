// SysError: an Error that carries errno and its text.
#include "base/error.h"

#include <cstring>

namespace squeeze {

SysError::SysError(const std::string& what, int err)
    : Error(ErrorCode::kSystem, strCat(what, ": ", std::strerror(err), " (errno ", err, ")")),
      err_(err) {}

}  // namespace squeeze
