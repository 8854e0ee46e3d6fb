/*
 * cuda_util.cuh: what every .cu file of gpurec shares: error checks that
 * throw gpu::Failure, owning device and pinned buffers, and event timing.
 * Included by .cu files only.
 */
#pragma once

#include <cuda_runtime.h>

#include <string>
#include <algorithm>
#include <utility>
#include <vector>

#include "api/kernel_api.hpp"

namespace gpurec::gpu {

[[noreturn]] void throw_cuda_error(cudaError_t err, const char *what);

inline void check(cudaError_t err, const char *what)
{
	if (err != cudaSuccess)
		throw_cuda_error(err, what);
}

/* After a kernel launch: reports launch failures at once. */
inline void check_launch(const char *kernel) { check(cudaGetLastError(), kernel); }

/* Allocates bytes on the device; Failure (OutOfMemory) when it cannot. */
void *device_alloc(size_t bytes, const CallContext &ctx);

/* Gives back what device_alloc gave: to the device's pool where it keeps memory (keep_device_memory), else at once. */
void device_free(void *ptr) noexcept;

template <typename T> class DeviceBuffer
{
  public:
	DeviceBuffer() = default;
	DeviceBuffer(size_t count, const CallContext &ctx)
		: ptr_(static_cast<T *>(device_alloc(count * sizeof(T), ctx))), count_(count)
	{
	}
	~DeviceBuffer()
	{
		if (ptr_)
			device_free(ptr_);
	}
	DeviceBuffer(DeviceBuffer &&o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), count_(o.count_) {}
	DeviceBuffer &operator=(DeviceBuffer &&o) noexcept
	{
		std::swap(ptr_, o.ptr_);
		std::swap(count_, o.count_);
		return *this;
	}
	DeviceBuffer(const DeviceBuffer &) = delete;
	DeviceBuffer &operator=(const DeviceBuffer &) = delete;

	T *get() const { return ptr_; }
	size_t size() const { return count_; }

  private:
	T *ptr_ = nullptr;
	size_t count_ = 0;
};

/*
 * The buffers of one step of a kernel family in one device allocation:
 * each buffer's size is reserved first, then allocate() makes them all at
 * once and take() hands them out in the same order.  Each cudaFree waits
 * for the device, and where several processes share a GPU, every such
 * wait can cost a turn of their work: a step of six buffers waited six
 * times.
 */
class DeviceArena
{
  public:
	template <typename T> void reserve(size_t count) { bytes_ += aligned(count * sizeof(T)); }
	void allocate(const CallContext &ctx) { buffer_ = DeviceBuffer<char>(bytes_, ctx); }
	template <typename T> T *take(size_t count)
	{
		size_t bytes = aligned(count * sizeof(T));
		if (used_ + bytes > bytes_)
			throw Failure(Failure::Kind::Internal, "DeviceArena: more taken than reserved");
		T *at = reinterpret_cast<T *>(buffer_.get() + used_);
		used_ += bytes;
		return at;
	}

  private:
	/* every buffer starts at a multiple of 256 bytes, as cudaMalloc's do */
	static size_t aligned(size_t bytes) { return (bytes + 255) & ~size_t(255); }
	DeviceBuffer<char> buffer_;
	size_t bytes_ = 0, used_ = 0;
};

/* Page-locked host memory, so that copies run at full speed and asynchronously. */
template <typename T> class PinnedBuffer
{
  public:
	explicit PinnedBuffer(size_t count)
	{
		if (cudaMallocHost(reinterpret_cast<void **>(&ptr_), count * sizeof(T)) != cudaSuccess)
		{
			cudaGetLastError();
			throw Failure(Failure::Kind::OutOfMemory, "could not allocate pinned host memory");
		}
		count_ = count;
	}
	~PinnedBuffer() { cudaFreeHost(ptr_); }
	PinnedBuffer(const PinnedBuffer &) = delete;
	PinnedBuffer &operator=(const PinnedBuffer &) = delete;
	T *get() const { return ptr_; }
	size_t size() const { return count_; }

  private:
	T *ptr_ = nullptr;
	size_t count_ = 0;
};

/* Consecutive host ranges, copied to consecutive device memory by upload_staged. */
struct HostPiece
{
	const void *data;
	size_t bytes;
};

/*
 * Queues a copy of `pieces` (pageable host memory) to `device`, one after
 * the other, on `stream`, through the backend's pinned staging slots:
 * ctx.host_copy fills a slot while the GPU takes the one before.  From
 * pageable memory the driver stages a copy itself, on one core (6.5-7.5
 * GB/s on the H100 host, where pinned memory goes at 54 GB/s and 4 cores
 * copy at 18).  The slots (4 x 8 MB) are allocated by the backend's first
 * staged copy (pinned memory costs about 0.7 ms a MB to allocate, too much
 * for each call) and kept; where they cannot be, the copy goes as it is.
 */
void upload_staged(void *device, const HostPiece *pieces, size_t n, cudaStream_t stream, CallContext &ctx);
inline void upload_staged(void *device, const void *host, size_t bytes, cudaStream_t stream, CallContext &ctx)
{
	HostPiece piece{host, bytes};
	upload_staged(device, &piece, 1, stream, ctx);
}
/* Adds rows [begin, end) of a chunked host column to pieces: one piece for each chunk they lie in. */
template <typename T>
void add_pieces(std::vector<HostPiece> &pieces, const ChunkedView<T> &column, size_t begin, size_t end)
{
	while (begin < end)
	{
		size_t c = begin / kChunkRows, off = begin % kChunkRows;
		size_t n = std::min(end - begin, kChunkRows - off);
		pieces.push_back(HostPiece{column.chunk_data(c) + off, n * sizeof(T)});
		begin += n;
	}
}
/* Rows [begin, end) of a chunked host column, to `device` onwards: one staged copy of their pieces. */
template <typename T>
void upload_staged(T *device, const ChunkedView<T> &column, size_t begin, size_t end, cudaStream_t stream,
				   CallContext &ctx)
{
	std::vector<HostPiece> pieces;
	add_pieces(pieces, column, begin, end);
	upload_staged(device, pieces.data(), pieces.size(), stream, ctx);
}

class Stream
{
  public:
	Stream() { check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate"); }
	~Stream() { cudaStreamDestroy(stream_); }
	Stream(const Stream &) = delete;
	Stream &operator=(const Stream &) = delete;
	operator cudaStream_t() const { return stream_; }
	void synchronize() const { check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }

  private:
	cudaStream_t stream_;
};

/* Times a region of work queued on a stream, in milliseconds. */
class EventTimer
{
  public:
	explicit EventTimer(cudaStream_t stream) : stream_(stream)
	{
		check(cudaEventCreate(&start_), "cudaEventCreate");
		check(cudaEventCreate(&stop_), "cudaEventCreate");
		check(cudaEventRecord(start_, stream_), "cudaEventRecord");
	}
	~EventTimer()
	{
		cudaEventDestroy(start_);
		cudaEventDestroy(stop_);
	}
	EventTimer(const EventTimer &) = delete;
	EventTimer &operator=(const EventTimer &) = delete;
	/* Waits for the region to finish and returns its duration. */
	double stop_ms()
	{
		float ms = 0;
		check(cudaEventRecord(stop_, stream_), "cudaEventRecord");
		check(cudaEventSynchronize(stop_), "cudaEventSynchronize");
		check(cudaEventElapsedTime(&ms, start_, stop_), "cudaEventElapsedTime");
		return ms;
	}

  private:
	cudaStream_t stream_;
	cudaEvent_t start_, stop_;
};

/* Grid size for a grid-stride loop over n items. */
inline unsigned grid_for(size_t n, unsigned block = 256)
{
	size_t blocks = (n + block - 1) / block;
	if (blocks > 132u * 32u)
		blocks = 132u * 32u;
	return blocks ? static_cast<unsigned>(blocks) : 1u;
}

} // namespace gpurec::gpu
