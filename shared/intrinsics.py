"""Compiled-code intrinsics shared by the numba kernels of several services.

Why this module exists: a cache-line prefetch is one LLVM call that numba does not expose; the
sampler's gathers and the partitioner's label propagation both issue it ahead of random reads
whose addresses they know a few iterations early (one definition, not one per service).
"""

from __future__ import annotations

from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

__all__ = ["prefetch"]


@intrinsic
def prefetch(typingctx, addr):
    """Hint the CPU to load the cache line at an int64 address (``llvm.prefetch``, read, keep)."""
    def codegen(context, builder, signature, args):
        from llvmlite import ir
        i8p, i32 = ir.IntType(8).as_pointer(), ir.IntType(32)
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]),
                                            "llvm.prefetch.p0")
        builder.call(fn, [builder.inttoptr(args[0], i8p), i32(0), i32(3), i32(1)])
        return context.get_dummy_value()
    return types.void(types.int64), codegen
