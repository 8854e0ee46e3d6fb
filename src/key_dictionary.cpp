/*
 * key_dictionary.cpp: KeyDictionary (uuid and text ids as dense codes, in
 * the values' order) and CallKeys (a call's dictionaries and the columns
 * coded from them); see key_dictionary.hpp.
 */
#include "no_postgres.hpp"

#include "key_dictionary.hpp"

#include <algorithm>
#include <functional>
#include <utility>

#include "cpu_parallel.hpp"
#include "errors.hpp"

namespace gpurec {

const char *key_type_name(KeyType type)
{
	switch (type)
	{
		case KeyType::Integer:
			return "an integer type";
		case KeyType::Uuid:
			return "uuid";
		case KeyType::Text:
			return "text";
	}
	return "";
}

void KeyDictionary::rebuild_table(size_t capacity)
{
	BulkVector<Slot> old = std::exchange(table_, BulkVector<Slot>(capacity, Slot{0, -1, 0, {0, 0}}));
	mask_ = capacity - 1;
	/* each slot moves by the hash it keeps: no value is hashed again, nor read from the arena */
	for (const Slot &slot : old)
	{
		if (slot.code < 0)
			continue;
		size_t at = slot.hash & mask_;
		while (table_[at].code >= 0)
			at = (at + 1) & mask_;
		table_[at] = slot;
	}
}

int64_t KeyDictionary::find(const uint8_t *bytes, size_t size) const
{
	if (table_.empty())
		return -1;
	Probe probe(bytes, size);
	return find_hashed(probe);
}

__attribute__((always_inline)) inline int64_t KeyDictionary::find_hashed(const Probe &probe) const
{
	for (size_t slot = probe.hash & mask_; table_[slot].code >= 0; slot = (slot + 1) & mask_)
		if (table_[slot].hash == probe.hash && equals(table_[slot], probe))
			return table_[slot].code;
	return -1;
}

bool KeyBytes::grow(size_t size) noexcept
{
	try
	{
		if (used_ + size > bytes_.size())
			bytes_.resize(std::max(2 * bytes_.size(), std::max<size_t>(used_ + size, 4096)));
		if (count_ + 1 >= offsets_.size())
			offsets_.resize(std::max<size_t>(2 * offsets_.size(), 256));
		return true;
	}
	catch (const std::bad_alloc &)
	{
		return false;
	}
}

bool KeyDictionary::grow_staged() noexcept
{
	try
	{
		staged_.resize(std::max<size_t>(2 * staged_.size(), 256));
		return true;
	}
	catch (const std::bad_alloc &)
	{
		return false;
	}
}

void KeyDictionary::make_room(size_t more)
{
	size_t capacity = table_.empty() ? 1024 : table_.size();
	while ((size() + more) * 2 > capacity)
		capacity *= 2;
	if (capacity != table_.size())
		rebuild_table(capacity);
}

__attribute__((always_inline)) inline int64_t KeyDictionary::intern_hashed(const Probe &probe)
{
	size_t slot = probe.hash & mask_;
	for (; table_[slot].code >= 0; slot = (slot + 1) & mask_)
		if (table_[slot].hash == probe.hash && equals(table_[slot], probe))
			return table_[slot].code;
	return insert(probe, slot);
}

int64_t KeyDictionary::insert(const Probe &probe, size_t slot)
{
	if (size() >= static_cast<size_t>(INT32_MAX) || probe.size > UINT32_MAX)
		return -1;
	auto code = static_cast<int32_t>(size());
	bytes_.insert(bytes_.end(), probe.bytes, probe.bytes + probe.size);
	offsets_.push_back(bytes_.size());
	table_[slot] = Slot{probe.hash, code, static_cast<uint32_t>(probe.size), {probe.head[0], probe.head[1]}};
	return code;
}

int64_t KeyDictionary::intern(const uint8_t *bytes, size_t size) noexcept
{
	try
	{
		make_room(1);
		Probe probe(bytes, size);
		return intern_hashed(probe);
	}
	catch (const std::bad_alloc &)
	{
		return -1;
	}
}

/*
 * The lines of the first two slots a lookup of hash h probes: a slot is
 * half a line, and four lookups in ten probe past their first slot, half
 * of them into the next line (a miss not prefetched stalled the batch's
 * lookups more than all their first slots did).
 */
template <typename Self> __attribute__((always_inline)) inline void KeyDictionary::prefetch_probe(Self &self, uint64_t h)
{
	__builtin_prefetch(&self.table_[h & self.mask_]);
	__builtin_prefetch(&self.table_[(h + 1) & self.mask_]);
}

template <typename Self, typename ValueOf, typename BeforeBatch, typename Look>
void KeyDictionary::in_batches(Self &self, size_t n, ValueOf value_of, BeforeBatch before_batch, Look look)
{
	constexpr size_t kBatch = 256, kAhead = 16;
	Probe probes[kBatch];
	for (size_t first = 0; first < n; first += kBatch)
	{
		size_t m = std::min(kBatch, n - first);
		before_batch(m);
		for (size_t i = 0; i < m; ++i)
			probes[i] = value_of(first + i);
		for (size_t i = 0; i < std::min(m, kAhead); ++i)
			prefetch_probe(self, probes[i].hash);
		for (size_t i = 0; i < m; ++i)
		{
			if (i + kAhead < m)
				prefetch_probe(self, probes[i + kAhead].hash);
			look(first + i, probes[i]);
		}
	}
}

template <typename ValueOf>
void KeyDictionary::intern_in_batches(size_t n, ValueOf value_of, int64_t *codes, const char *out_of_codes)
{
	/* no rebuild amid a batch: a prefetched slot stays where it was */
	in_batches(
		*this, n, value_of, [this](size_t m) { make_room(m); },
		[&](size_t i, const Probe &probe) {
			if ((codes[i] = intern_hashed(probe)) < 0)
				throw Error(sqlstate::out_of_memory, out_of_codes);
		});
}

template <typename ValueOf> void KeyDictionary::find_in_batches(size_t n, ValueOf value_of, int64_t *codes) const
{
	if (table_.empty())
	{
		std::fill(codes, codes + n, -1);
		return;
	}
	in_batches(
		*this, n, value_of, [](size_t) {},
		[&](size_t i, const Probe &probe) { codes[i] = find_hashed(probe); });
}

void KeyDictionary::intern_staged(std::vector<int64_t> &indices)
{
	/* each index checked as its batch reads it, before any of the batch is interned */
	intern_in_batches(
		indices.size(),
		[&](size_t i) {
			auto index = static_cast<uint64_t>(indices[i]); /* a negative index is past any count */
			if (__builtin_expect(index >= staged_count_, 0))
				throw Error(sqlstate::internal_error, "KeyDictionary: a staged value out of range");
			return Probe(staged_[index], staged_tails_);
		},
		indices.data(), "could not code the ids read: more than 2147483647 distinct ids");
	staged_count_ = 0;
	staged_tails_.clear();
}

namespace {

/*
 * A value's first 16 bytes as two words that compare as the bytes do
 * (big-endian, zero past its end), and its code: most comparisons end at
 * the words, where a call of memcmp each made the sort of a call's
 * 100,000 uuids tens of ms of its serial end.  Equal words fall back to
 * the dictionary's less (a longer value, or one that ends in zero bytes).
 */
struct RankedValue
{
	uint64_t high, low;
	int64_t code;
};

/*
 * Sorts ranked by less (which orders by high, then low, first) in two
 * steps: into 2^16 buckets by 16 bits of the first word in which the
 * values differ, the bits just below the highest bit that differs (those
 * above it are the same in every value, so the buckets come in the
 * values' order), each slice of rows counting, then placing, its own; then
 * each bucket sorted alone, the buckets spread over the threads.  Random
 * uuids fall about 15 to a bucket.  False, ranked untouched, where that
 * would not divide the work: every value shares its first 16 bytes, or one
 * bucket holds more than a slice's share (text ids of one long prefix).
 */
template <typename Less>
bool sort_in_buckets(BulkVector<RankedValue> &ranked, size_t slices, const PieceRunner &run, Less less)
{
	constexpr int kBits = 16;
	constexpr size_t kBuckets = size_t(1) << kBits;
	size_t n = ranked.size();
	slices = std::max<size_t>(1, std::min(slices, n));
	std::vector<size_t> bounds(slices + 1);
	for (size_t s = 0; s <= slices; ++s)
		bounds[s] = n * s / slices;
	std::vector<uint64_t> differs_high(slices, 0), differs_low(slices, 0);
	run(slices, [&](size_t s) {
		for (size_t i = bounds[s]; i < bounds[s + 1]; ++i)
		{
			differs_high[s] |= ranked[i].high ^ ranked[0].high;
			differs_low[s] |= ranked[i].low ^ ranked[0].low;
		}
	});
	uint64_t high = 0, low = 0;
	for (size_t s = 0; s < slices; ++s)
	{
		high |= differs_high[s];
		low |= differs_low[s];
	}
	bool by_high = high != 0;
	uint64_t differs = by_high ? high : low;
	if (differs == 0)
		return false;
	int shift = std::max(0, 64 - __builtin_clzll(differs) - kBits);
	auto bucket_of = [by_high, shift](const RankedValue &v) {
		return static_cast<size_t>(((by_high ? v.high : v.low) >> shift) & (kBuckets - 1));
	};
	BucketPlacement buckets(std::move(bounds), kBuckets, [&](size_t i) { return bucket_of(ranked[i]); }, run);
	const std::vector<size_t> &starts = buckets.starts();
	size_t largest = 0;
	for (size_t b = 0; b < kBuckets; ++b)
		largest = std::max(largest, starts[b + 1] - starts[b]);
	if (largest > n / slices && slices > 1)
		return false;
	BulkVector<RankedValue> placed(n);
	buckets.place([&](size_t i, size_t position) { placed[position] = ranked[i]; });
	/* the buckets in runs of about a slice's rows each, a run a thread */
	std::vector<size_t> runs{0};
	for (size_t b = 1; b <= kBuckets; ++b)
		if (starts[b] - starts[runs.back()] >= n / (4 * slices) || b == kBuckets)
			runs.push_back(b);
	run(runs.size() - 1, [&](size_t r) {
		for (size_t b = runs[r]; b < runs[r + 1]; ++b)
			std::sort(placed.begin() + static_cast<std::ptrdiff_t>(starts[b]),
					  placed.begin() + static_cast<std::ptrdiff_t>(starts[b + 1]), less);
	});
	ranked.swap(placed);
	return true;
}

} // namespace

std::vector<int64_t> KeyDictionary::number_in_key_order(const PieceRunner &run, size_t slices)
{
	constexpr size_t kPiece = size_t(1) << 16;
	size_t n = size(), pieces = (n + kPiece - 1) / kPiece;
	auto in_pieces = [&](const std::function<void(size_t first, size_t last)> &work) {
		run(pieces, [&](size_t p) { work(p * kPiece, std::min(n, (p + 1) * kPiece)); });
	};
	BulkVector<RankedValue> ranked(n); /* filled on every core: no serial zeroing (BulkVector) */
	in_pieces([&](size_t first, size_t last) {
		for (size_t code = first; code < last; ++code)
		{
			auto c = static_cast<int64_t>(code);
			uint64_t head[2]; /* no hash: the sort wants only the first words */
			key_head(value(c), value_size(c), head);
			ranked[code] = RankedValue{__builtin_bswap64(head[0]), __builtin_bswap64(head[1]), c};
		}
	});
	auto ranked_less = [this](const RankedValue &a, const RankedValue &b) {
		if (a.high != b.high)
			return a.high < b.high;
		if (a.low != b.low)
			return a.low < b.low;
		return less(a.code, b.code);
	};
	/* a million users' uuids took about a tenth of a second on one core in a comparison sort alone */
	if (n < 4 * kPiece || !sort_in_buckets(ranked, slices, run, ranked_less))
		parallel_sort(ranked, n >= 4 * kPiece ? slices : 1, run, ranked_less);
	std::vector<int64_t> new_code(n);
	std::vector<uint64_t> offsets(n + 1, 0);
	for (size_t r = 0; r < n; ++r)
		offsets[r + 1] = offsets[r] + value_size(ranked[r].code);
	std::vector<uint8_t> bytes(offsets[n]);
	in_pieces([&](size_t first, size_t last) {
		for (size_t r = first; r < last; ++r)
		{
			int64_t code = ranked[r].code;
			new_code[static_cast<size_t>(code)] = static_cast<int64_t>(r);
			if (value_size(code) > 0) /* the empty text: no bytes, and perhaps no arena at all */
				std::memcpy(bytes.data() + offsets[r], value(code), value_size(code));
		}
	});
	bytes_ = std::move(bytes);
	offsets_ = std::move(offsets);
	/* a slot's place comes from its value's hash alone: its code changes, the table's shape does not */
	size_t slot_pieces = (table_.size() + kPiece - 1) / kPiece;
	run(slot_pieces, [&](size_t p) {
		for (size_t i = p * kPiece, last = std::min(table_.size(), (p + 1) * kPiece); i < last; ++i)
			if (table_[i].code >= 0)
				table_[i].code = static_cast<int32_t>(new_code[static_cast<size_t>(table_[i].code)]);
	});
	numbered_ = n;
	return new_code;
}

void KeyDictionary::serialize(ByteWriter &out) const
{
	out.put<uint64_t>(size());
	for (size_t code = 0; code < size(); ++code)
	{
		auto c = static_cast<int64_t>(code);
		out.put<uint32_t>(static_cast<uint32_t>(value_size(c)));
		out.write(value(c), value_size(c));
	}
}

KeyDictionary::SerializedValues KeyDictionary::read_serialized(ByteReader &in)
{
	auto n = in.get<uint64_t>();
	if (n > in.remaining() / sizeof(uint32_t))
		throw Error(sqlstate::internal_error, "KeyDictionary: a serialized count out of range");
	SerializedValues part;
	part.values.resize(n);
	part.sizes.resize(n);
	for (uint64_t c = 0; c < n; ++c)
	{
		part.sizes[c] = in.get<uint32_t>();
		part.values[c] = in.take(part.sizes[c]);
	}
	return part;
}

namespace {

constexpr const char *kOutOfPartCodes =
	"could not code the ids of a parallel read: out of memory, or more than 2147483647 distinct ids";

} // namespace

std::vector<int64_t> KeyDictionary::intern_serialized(ByteReader &in)
{
	/* one pass, each value hashed once: a lone part gains nothing from finding the known values first */
	SerializedValues part = read_serialized(in);
	std::vector<int64_t> codes(part.values.size());
	intern_in_batches(
		codes.size(), [&](size_t i) { return Probe(part.values[i], part.sizes[i]); }, codes.data(), kOutOfPartCodes);
	return codes;
}

std::vector<std::vector<int64_t>> KeyDictionary::intern_parts(const std::vector<SerializedValues> &parts,
															  const PieceRunner &run)
{
	constexpr size_t kPiece = size_t(1) << 14;
	std::vector<std::vector<int64_t>> codes(parts.size());
	/* each part's codes filled on a thread of its own: a million values a part are 8 MB to touch */
	run(parts.size(), [&](size_t p) { codes[p].resize(parts[p].values.size()); });
	std::vector<std::pair<size_t, size_t>> pieces; /* (part, piece) */
	for (size_t p = 0; p < parts.size(); ++p)
		for (size_t piece = 0; piece * kPiece < codes[p].size(); ++piece)
			pieces.emplace_back(p, piece);
	/* find only reads the table: every part's pieces at once, each noting the values it lacks */
	std::vector<std::vector<uint32_t>> missing(pieces.size());
	run(pieces.size(), [&](size_t item) {
		auto [p, piece] = pieces[item];
		const SerializedValues &part = parts[p];
		size_t first = piece * kPiece, n = std::min(part.values.size() - first, kPiece);
		int64_t *found = codes[p].data() + first;
		find_in_batches(n, [&](size_t i) { return Probe(part.values[first + i], part.sizes[first + i]); }, found);
		for (size_t i = 0; i < n; ++i)
			if (found[i] < 0)
				missing[item].push_back(static_cast<uint32_t>(i));
	});
	/*
	 * Then the lacking ones, which many parts share (in a read whose rows
	 * do not cluster the ids, each worker met most of those the calling
	 * backend did not): told apart on every core first, each occurrence
	 * taken to the bucket of its hash, where a dictionary of the bucket's
	 * own finds the first occurrence of each value in the parts' order.
	 * Only those are interned here, in that order (the codes of one by
	 * one); every other occurrence takes its first's code.
	 */
	struct Occurrence
	{
		uint32_t part, index;
	};
	std::vector<size_t> start(pieces.size() + 1, 0);
	for (size_t item = 0; item < pieces.size(); ++item)
		start[item + 1] = start[item] + missing[item].size();
	size_t total = start.back();
	if (total == 0)
		return codes;
	constexpr size_t kBuckets = 256;
	/* scratch of every occurrence, written before it is read: no serial zeroing of it (BulkVector) */
	BulkVector<Occurrence> occurrences(total);
	BulkVector<uint8_t> bucket_of(total), is_first(total);
	run(pieces.size(), [&](size_t item) {
		auto [p, piece] = pieces[item];
		for (size_t j = 0; j < missing[item].size(); ++j)
		{
			auto i = static_cast<uint32_t>(piece * kPiece + missing[item][j]);
			Probe probe(parts[p].values[i], parts[p].sizes[i]);
			occurrences[start[item] + j] = Occurrence{static_cast<uint32_t>(p), i};
			bucket_of[start[item] + j] = static_cast<uint8_t>(probe.hash >> 56);
			is_first[start[item] + j] = 0;
		}
	});
	BucketPlacement buckets(start, kBuckets, [&](size_t o) { return bucket_of[o]; }, run);
	const std::vector<size_t> &bucket_start = buckets.starts();
	BulkVector<size_t> by_bucket(total); /* each bucket's occurrences, in the parts' order */
	buckets.place([&](size_t o, size_t position) { by_bucket[position] = o; });
	BulkVector<size_t> first_of(total);
	run(kBuckets, [&](size_t b) {
		KeyDictionary seen;
		std::vector<size_t> first;
		for (size_t k = bucket_start[b]; k < bucket_start[b + 1]; ++k)
		{
			size_t o = by_bucket[k];
			const Occurrence &at_o = occurrences[o];
			int64_t local = seen.intern(parts[at_o.part].values[at_o.index], parts[at_o.part].sizes[at_o.index]);
			if (local < 0)
				throw Error(sqlstate::out_of_memory, kOutOfPartCodes);
			if (static_cast<size_t>(local) == first.size())
			{
				first.push_back(o);
				is_first[o] = 1;
			}
			first_of[o] = first[static_cast<size_t>(local)];
		}
	});
	std::vector<size_t> firsts;
	for (size_t o = 0; o < total; ++o)
		if (is_first[o])
			firsts.push_back(o);
	std::vector<int64_t> interned(firsts.size());
	intern_in_batches(
		firsts.size(),
		[&](size_t j) {
			const Occurrence &o = occurrences[firsts[j]];
			return Probe(parts[o.part].values[o.index], parts[o.part].sizes[o.index]);
		},
		interned.data(), kOutOfPartCodes);
	for (size_t j = 0; j < firsts.size(); ++j)
		codes[occurrences[firsts[j]].part][occurrences[firsts[j]].index] = interned[j];
	run(pieces.size(), [&](size_t item) {
		for (size_t o = start[item]; o < start[item + 1]; ++o)
		{
			if (first_of[o] == o) /* its code interned above */
				continue;
			const Occurrence &first = occurrences[first_of[o]];
			codes[occurrences[o].part][occurrences[o].index] = codes[first.part][first.index];
		}
	});
	return codes;
}

std::string shown_key(KeyType type, const uint8_t *bytes, size_t size)
{
	if (type != KeyType::Uuid || size != 16)
		return std::string(reinterpret_cast<const char *>(bytes), size);
	static const char digits[] = "0123456789abcdef";
	std::string out;
	for (size_t i = 0; i < 16; ++i)
	{
		if (i == 4 || i == 6 || i == 8 || i == 10)
			out += '-';
		out += digits[bytes[i] >> 4];
		out += digits[bytes[i] & 15];
	}
	return out;
}

std::string CallKeys::shown(const std::string &name, int64_t id) const
{
	const Key *key = find(name);
	if (!key || !key->dictionary || id < 0 || static_cast<size_t>(id) >= key->dictionary->size())
		return std::to_string(id);
	return shown_key(key->type, key->dictionary->value(id), key->dictionary->value_size(id));
}

std::string shown_id(const CallKeys *keys, const std::string &name, int64_t id)
{
	return keys ? keys->shown(name, id) : std::to_string(id);
}

const CallKeys::Key *CallKeys::find(const std::string &name) const
{
	for (const Key &key : keys_)
		if (key.name == name)
			return &key;
	return nullptr;
}

CallKeys::Key &CallKeys::key(const std::string &name, KeyType type)
{
	for (Key &key : keys_)
		if (key.name == name)
			return key;
	keys_.push_back(Key{name, type, type == KeyType::Integer ? nullptr : std::make_unique<KeyDictionary>()});
	return keys_.back();
}

KeyDictionary *CallKeys::dictionary_of(const std::string &name)
{
	const Key *key = find(name);
	if (!key || !key->dictionary)
		throw Error(sqlstate::internal_error, "CallKeys: no dictionary for column " + name);
	return key->dictionary.get();
}

void CallKeys::code_column(const std::string &name, IdColumn *column)
{
	columns_.push_back(Coded{dictionary_of(name), column, nullptr});
}

void CallKeys::code_column(const std::string &name, Int64Column *column)
{
	columns_.push_back(Coded{dictionary_of(name), nullptr, column});
}

void CallKeys::forget(const void *column)
{
	columns_.erase(std::remove_if(columns_.begin(), columns_.end(),
								  [column](const Coded &c) { return c.ids == column || c.rows == column; }),
				   columns_.end());
}

void CallKeys::settle(const PieceRunner &run, size_t slices)
{
	for (Key &key : keys_)
	{
		if (!key.dictionary || key.dictionary->numbered_in_key_order())
			continue;
		KeyDictionary *dictionary = key.dictionary.get();
		std::vector<int64_t> new_code = dictionary->number_in_key_order(run, slices);
		auto codes = static_cast<int64_t>(new_code.size());
		for (const Coded &coded : columns_)
		{
			if (coded.dictionary != dictionary)
				continue;
			if (coded.ids)
				coded.ids->map_ids([&new_code](int64_t id) { return new_code[static_cast<size_t>(id)]; }, run);
			else
				coded.rows->visit_in_pieces(
					[&new_code, codes](int64_t *rows, size_t, size_t count) {
						for (size_t i = 0; i < count; ++i)
							if (rows[i] >= 0 && rows[i] < codes)
								rows[i] = new_code[static_cast<size_t>(rows[i])];
					},
					run);
		}
	}
}

void CallKeys::learn_lane(const std::string &name, int64_t lane, std::vector<int64_t> codes)
{
	lanes_.push_back(Lane{name, lane, std::move(codes)});
}

std::vector<const std::vector<int64_t> *> CallKeys::lanes_of(const std::string &name, int64_t stride) const
{
	std::vector<const std::vector<int64_t> *> lanes(static_cast<size_t>(stride), nullptr);
	for (const Lane &lane : lanes_)
	{
		if (lane.name != name)
			continue;
		if (lane.lane <= 0 || lane.lane >= stride)
			throw Error(sqlstate::internal_error, "CallKeys: a parallel read's lane out of range");
		lanes[static_cast<size_t>(lane.lane)] = &lane.codes;
	}
	return lanes;
}

int64_t CallKeys::code_of(const std::vector<const std::vector<int64_t> *> &lanes, int64_t value, int64_t stride) const
{
	if (value < 0)
		return value;
	int64_t code = value / stride, lane = value - code * stride;
	if (lane == 0)
		return code;
	const std::vector<int64_t> *codes = lanes[static_cast<size_t>(lane)];
	if (!codes || static_cast<uint64_t>(code) >= codes->size())
		throw Error(sqlstate::internal_error, "CallKeys: a parallel read's code without its worker's dictionary");
	return (*codes)[static_cast<size_t>(code)];
}

void CallKeys::lane_to_call_codes(const std::string &name, int64_t lane, int64_t *values, size_t n) const
{
	const std::vector<int64_t> *codes = nullptr;
	for (const Lane &learned : lanes_)
		if (learned.name == name && learned.lane == lane)
			codes = &learned.codes;
	if (!codes)
		throw Error(sqlstate::internal_error, "CallKeys: a parallel read's part without its worker's dictionary");
	for (size_t i = 0; i < n; ++i)
	{
		if (values[i] < 0)
			continue;
		if (static_cast<uint64_t>(values[i]) >= codes->size())
			throw Error(sqlstate::internal_error, "CallKeys: a parallel read's code past its worker's dictionary");
		values[i] = (*codes)[static_cast<size_t>(values[i])];
	}
}

void CallKeys::recode_lanes(const std::string &name, Int64Column &column, int64_t stride, const PieceRunner &run)
{
	std::vector<const std::vector<int64_t> *> lanes = lanes_of(name, stride);
	column.visit_in_pieces(
		[&](int64_t *rows, size_t, size_t count) {
			for (size_t i = 0; i < count; ++i)
				rows[i] = code_of(lanes, rows[i], stride);
		},
		run);
}

} // namespace gpurec
