"""Named fake: a CUDA driver for a machine without a GPU, for Triton's real compiler.

No GPU exists where the suite runs. ``install()`` makes Triton's active driver answer what binding,
specialising and compiling a launch ask (device 0, stream 0, target sm_90), so ``kernel[grid](...)`` and
autotuners run Triton's own code and compile real sm_90 kernels (its compiler and ptxas). A launch of a
compiled kernel runs nothing: it is appended to ``LAUNCHES`` (the kernel's name), so a test can count
what would have run on a GPU.
"""
import torch
from triton.backends.compiler import GPUTarget
from triton.compiler.compiler import CompiledKernel
from triton.runtime import driver

#: the names of the kernels "launched", in order
LAUNCHES: list[str] = []


class NoGpuDriver:
    def get_current_target(self):
        return GPUTarget("cuda", 90, 32)

    def get_current_device(self):
        return 0

    def get_current_stream(self, device=None):
        return 0

    def get_active_torch_device(self):
        return torch.device("cpu")

    def map_python_to_cpp_type(self, ty):
        from triton.backends.nvidia.driver import ty_to_cpp
        return ty_to_cpp(ty)


def install() -> None:
    driver.set_active(NoGpuDriver())
    CompiledKernel.run = property(lambda self: lambda *args, **kwargs: LAUNCHES.append(self.name))
    CompiledKernel.launch_metadata = lambda self, *args: None  # nothing loaded, so nothing to describe
