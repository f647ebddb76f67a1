"""Builds tcoll_torch, tcoll's torch.distributed backend, against the installed torch.

torch.utils.cpp_extension gives the compiler and linker flags of the very torch that will
load the module (ABI flag, include and library paths), which a Meson build would have to
copy from it; tcoll's own headers come from ../include, nothing copied.

    python setup.py build_ext --inplace     # what scripts/build_torch.sh runs

With MPI found (pkg-config: Open MPI's ompi-c, else mpich) the backend can carry its
messages between nodes over MPI under an MPI launcher (csrc/mpi_link.hpp);
TCOLL_TORCH_MPI=0 builds without it.
"""
import os
import shlex
import subprocess
from pathlib import Path

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

here = Path(__file__).resolve().parent


def mpi_flags():
    """(compile, link) flags of the MPI to build with, or None."""
    if os.environ.get("TCOLL_TORCH_MPI", "1") == "0":
        return None
    for package in ("ompi-c", "mpich"):
        try:
            cflags = subprocess.run(["pkg-config", "--cflags", package], check=True,
                                    capture_output=True, text=True).stdout
            libs = subprocess.run(["pkg-config", "--libs", package], check=True,
                                  capture_output=True, text=True).stdout
        except (OSError, subprocess.CalledProcessError):
            continue
        libs = shlex.split(libs)  # and an rpath, for an MPI outside the loader's paths
        return shlex.split(cflags), libs + [f"-Wl,-rpath,{a[2:]}" for a in libs if a[:2] == "-L"]
    return None


mpi = mpi_flags()
# C++20 for tcoll's concepts. -g0 overrides the -g of Python's own flags: debug information
# for the template instantiations made the build several minutes and the library 80 MB.
compile_args = ["-std=c++20", "-O3", "-g0"]
# (MPI's deprecated C++ bindings off: they would need libmpi_cxx)
compile_args += (mpi[0] + ["-DTCOLL_TORCH_MPI=1", "-DOMPI_SKIP_MPICXX=1", "-DMPICH_SKIP_MPICXX=1"]
                 if mpi else ["-DTCOLL_NO_MPI"])
setup(
    name="tcoll_torch",
    version="0.1.0",
    packages=["tcoll_torch"],
    ext_modules=[
        CppExtension(
            "tcoll_torch._C",
            ["tcoll_torch/csrc/backend_setup.cpp", "tcoll_torch/csrc/backend_collectives.cpp",
             "tcoll_torch/csrc/backend_p2p.cpp", "tcoll_torch/csrc/flight_recorder.cpp",
             "tcoll_torch/csrc/module.cpp",
             "tcoll_torch/csrc/ddp.cpp"],
            include_dirs=[str(here.parent / "include")],
            # the backend bootstraps through c10d's store either way; MPI only between nodes
            extra_compile_args=compile_args,
            extra_link_args=mpi[1] if mpi else [],
        )
    ],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True)},
)
