"""CUDA back end: CUDA C++ renderer, NVRTC compiler (cubins, also with no GPU present),
driver-API runtime (primary context, one stream, pooled memory) and capabilities."""
