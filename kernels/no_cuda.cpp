/*
 * no_cuda.cpp: the kernels' API in a build made without nvcc, the one way
 * gpurec builds without CUDA.  There is no GPU: usable() says why, and every
 * entry point throws gpu::Failure (NoGpu), which the engine never reaches,
 * as its dispatch asks usable() first.
 */
#include "api/cart_kernels.hpp"
#include "api/geo_kernels.hpp"
#include "api/kernel_api.hpp"
#include "api/marketplace_kernels.hpp"
#include "api/roc_kernels.hpp"

namespace gpurec::gpu {

namespace {

[[noreturn]] void no_gpu() { throw Failure(Failure::Kind::NoGpu, "gpurec was built without CUDA"); }

} // namespace

bool usable(std::string *why_not)
{
	if (why_not)
		*why_not = "gpurec was built without CUDA (nvcc was not found at build time)";
	return false;
}

bool found_unusable() noexcept { return true; }

bool start_in_background() noexcept { return false; }

bool start_begun() noexcept { return false; }

void finish_background_start() noexcept {}

double start_ms() noexcept { return 0; }

std::vector<DeviceInfo> devices() { return {}; }

void use_device(int) { no_gpu(); }

void keep_device_memory(size_t) { no_gpu(); }

DeviceCosts measure_device_costs(const void *) { no_gpu(); }

void register_host_memory(void *, size_t) { no_gpu(); }

/* marketplace */
class OfferUpload
{
};
void OfferUploadDeleter::operator()(OfferUpload *upload) const noexcept { delete upload; }
OfferUploadPtr start_offer_upload(CallContext &) { no_gpu(); }
void upload_offer_chunks(OfferUpload &, const OfferColumns &, CallContext &) { no_gpu(); }
std::vector<uint32_t> cheapest_offer_picks(const OfferColumns &, size_t, int, OfferUpload *, CallContext &)
{
	no_gpu();
}

/* smart cart with shipping */
CartSolution solve_carts(const carts::CartArrays &, int64_t, CallContext &) { no_gpu(); }

/* geospatial */
class GeoSession
{
};
void GeoSessionDeleter::operator()(GeoSession *session) const noexcept { delete session; }
GeoSessionPtr open_geo_session(const GeoPointColumns &, const GeoCandidateColumns *, CallContext &) { no_gpu(); }
void geo_similarity_sums(GeoSession &, int32_t, double, std::vector<double> &, std::vector<double> &) { no_gpu(); }
void geo_similar_users(GeoSession &, int, double, int, int, std::vector<SimilarityEntry> &, std::vector<int32_t> &)
{
	no_gpu();
}
bool geo_similar_users_bounded(GeoSession &, int, double, int, int, bool, std::vector<SimilarityEntry> &,
							   std::vector<int32_t> &, double &, double &)
{
	no_gpu();
}
void geo_similar_users_listed(GeoSession &, int, double, int, int, GeoOtherLists &, std::vector<SimilarityEntry> &,
							  std::vector<int32_t> &, double &)
{
	no_gpu();
}
std::vector<std::vector<double>> geo_strengths(GeoSession &, int32_t, double, const StrengthParams &,
											   const std::vector<PowerPlan> &, const ReachGrid *)
{
	no_gpu();
}

/* ROC fitness */
std::vector<RocCounts> roc_counts_long(const RocExampleRows &, const std::vector<int32_t> &, CallContext &)
{
	no_gpu();
}
std::vector<RocCounts> roc_counts_arrays(const RocScoreArrays &, const std::vector<int8_t> &,
										 const std::vector<int32_t> &, CallContext &)
{
	no_gpu();
}

} // namespace gpurec::gpu
