"""CPU back end: llvmlite renderer, compiler, runtime and capabilities."""
