"""Back ends of kerneldsl: `cpu/` (llvmlite), `opencl/` (pyopencl), `cuda/` (NVRTC + driver).

Each folder holds the same parts with the same contracts:
- `renderer.py`: IR -> source text (LLVM IR, OpenCL C, CUDA C++); makes text only;
- `compiler.py`: source text -> binary (cached); turns text into binaries only;
- `runtime.py`: memory, queue, launch; runs binaries only;
- `capabilities.py`: the device's `kerneldsl.capabilities.Capabilities` record.
"""
