// Buffer registration (ncclCommRegister, ncclCommDeregister) is accepted and has no effect on
// the data path. In NCCL, registering a buffer is an optimisation: its collectives may then use
// the buffer in place (zero-copy over the network or NVLink). Squeeze registers nothing; its
// calls move a buffer's bytes the same way whether or not it was registered. So here a
// registration is bookkeeping, enough for what NCCL's contract lets a caller see: each one gets a
// handle of its own, recorded on the communicator (a range inside one already registered gets
// that handle again, counted, as in NCCL). ncclCommDeregister releases one count and refuses a
// handle that the communicator did not hand out, or has released, with ncclInvalidArgument. It
// accepts NULL, which is what NCCL hands out when registration is off. ncclCommDestroy and
// ncclCommAbort free what is left. torch calls both from its caching allocator's hooks
// (TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK=1) and for registered memory pools, and throws
// on any failure. Window registration (ncclCommWindowRegister) is another matter: NCCL's device
// code reads a window's contents, so it stays refused (unsupported.cc).
#include <cstdint>
#include <memory>
#include <mutex>

#include "nccl_shim/shim_call.h"

using namespace squeeze;
using namespace squeeze::nccl_shim;

ncclResult_t ncclCommRegister(const ncclComm_t comm, void* buff, size_t size, void** handle) {
  enter();
  SQZ_SHIM_CHECK_COMM(comm, "ncclCommRegister");
  if (!handle) return fail(ncclInvalidArgument, "ncclCommRegister: handle is NULL.");
  *handle = nullptr;
  if (!buff) return fail(ncclInvalidArgument, "ncclCommRegister: buff is NULL.");
  if (size == 0)
    return fail(ncclInvalidArgument, "ncclCommRegister: size is 0; register at least one byte.");
  const uintptr_t begin = reinterpret_cast<uintptr_t>(buff);
  if (size > UINTPTR_MAX - begin)
    return fail(ncclInvalidArgument, "ncclCommRegister: buff ", buff, " plus size ", size,
                " runs past the end of the address space.");
  const uintptr_t end = begin + size;
  std::lock_guard<std::mutex> lock(comm->registrationsMu);
  for (auto& entry : comm->registrations) {
    Registration& reg = *entry.second;
    if (reg.begin <= begin && end <= reg.end) {
      ++reg.refs;
      *handle = &reg;
      return ncclSuccess;
    }
  }
  auto reg = std::make_unique<Registration>(Registration{begin, end, 1});
  Registration* made = reg.get();
  comm->registrations.emplace(made, std::move(reg));
  *handle = made;
  return ncclSuccess;
}

ncclResult_t ncclCommDeregister(const ncclComm_t comm, void* handle) {
  enter();
  SQZ_SHIM_CHECK_COMM(comm, "ncclCommDeregister");
  if (!handle) return ncclSuccess;  // NCCL's handle for a buffer it did not register
  std::lock_guard<std::mutex> lock(comm->registrationsMu);
  auto it = comm->registrations.find(handle);
  if (it == comm->registrations.end())
    return fail(ncclInvalidArgument, "ncclCommDeregister: handle ", handle,
                " is not one that ncclCommRegister handed out on this communicator, or it was "
                "deregistered already (once per ncclCommRegister call).");
  if (--it->second->refs == 0) comm->registrations.erase(it);
  return ncclSuccess;
}
