"""Prints where the installed torch keeps its C++ headers and libraries, for python/meson.build:
three lines (the include directory, its torch/csrc/api/include, the library directory), each
empty when torch does not have it there (Debian's libtorch-dev uses /usr/include and the
system's library directory instead), then the libstdc++ ABI torch was built with (0 or 1:
_GLIBCXX_USE_CXX11_ABI). Prints nothing when torch cannot be imported.
"""
import os
import sys

try:
    from torch.utils import cpp_extension
    import torch
    dirs = cpp_extension.include_paths()[:2] + cpp_extension.library_paths()[:1]
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
except Exception:  # no torch, or a torch without cpp_extension: the system's paths apply
    sys.exit(0)
print("\n".join([d if os.path.isdir(d) else "" for d in dirs] + [str(abi)]))
