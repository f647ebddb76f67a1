"""Builds tcoll_torch, tcoll's torch.distributed backend, against the installed torch.

torch.utils.cpp_extension gives the compiler and linker flags of the very torch that will
load the module (ABI flag, include and library paths), which a Meson build would have to
copy from it; tcoll's own headers come from ../include, nothing copied.

    python setup.py build_ext --inplace     # what scripts/build_torch.sh runs
"""
from pathlib import Path

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

here = Path(__file__).resolve().parent
setup(
    name="tcoll_torch",
    version="0.1.0",
    packages=["tcoll_torch"],
    ext_modules=[
        CppExtension(
            "tcoll_torch._C",
            ["tcoll_torch/csrc/backend.cpp", "tcoll_torch/csrc/ddp.cpp"],
            include_dirs=[str(here.parent / "include")],
            # C++20 for tcoll's concepts; no MPI: the backend bootstraps through c10d's store.
            # -g0 overrides the -g of Python's own flags: debug information for the template
            # instantiations made the build several minutes and the library 80 MB.
            extra_compile_args=["-std=c++20", "-O3", "-g0", "-DTCOLL_NO_MPI"],
        )
    ],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True)},
)
