/*
 * host_device.hpp: the one macro for functions that both the CPU path and
 * the GPU kernels run.  Arithmetic compiled from the same source on both
 * sides is what lets the two devices return the same bits.
 */
#pragma once

#if defined(__CUDACC__)
#define GPUREC_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define GPUREC_HOST_DEVICE inline
#endif
