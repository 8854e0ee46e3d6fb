/*
 * id_column.cpp: IdColumn (id_column.hpp): the dictionary (a direct array
 * for dense ids, a hash table for the others), numbering in id order, ids as
 * codes and their settling, and appending serialized parts.
 */
#include "no_postgres.hpp"

#include "id_column.hpp"

#include <utility>

namespace gpurec {

namespace {

/* A strong 64-bit mix, so that sequential or strided ids spread over the table. */
inline uint64_t hash_id(int64_t id)
{
	uint64_t x = static_cast<uint64_t>(id);
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ULL;
	x ^= x >> 33;
	return x;
}

} // namespace

int32_t IdColumn::find(int64_t id) const
{
	uint64_t direct = static_cast<uint64_t>(id);
	if (direct < dense_.size())
		return dense_[direct];
	if (table_.empty())
		return -1;
	for (size_t slot = hash_id(id) & mask_;; slot = (slot + 1) & mask_)
	{
		const Slot &entry = table_[slot];
		if (entry.code < 0 || entry.id == id)
			return entry.code;
	}
}

std::vector<int32_t> IdColumn::codes_in_id_order() const
{
	/*
	 * The ids in the direct array are in order there already; only the
	 * others are sorted: the negative ones come before them, the rest after.
	 */
	std::vector<std::pair<int64_t, int32_t>> hashed;
	hashed.reserve(hashed_);
	for (size_t code = 0; code < values_.size(); ++code)
		if (static_cast<uint64_t>(values_[code]) >= dense_.size())
			hashed.emplace_back(values_[code], static_cast<int32_t>(code));
	std::sort(hashed.begin(), hashed.end());
	std::vector<int32_t> codes;
	codes.reserve(values_.size());
	auto past_negative = std::partition_point(hashed.begin(), hashed.end(), [](const auto &p) { return p.first < 0; });
	for (auto it = hashed.begin(); it != past_negative; ++it)
		codes.push_back(it->second);
	for (int32_t code : dense_)
		if (code >= 0)
			codes.push_back(code);
	for (auto it = past_negative; it != hashed.end(); ++it)
		codes.push_back(it->second);
	return codes;
}

void IdColumn::rebuild_table(size_t capacity)
{
	table_.assign(capacity, Slot{0, -1});
	mask_ = capacity - 1;
	hashed_ = 0;
	for (size_t code = 0; code < values_.size(); ++code)
	{
		if (static_cast<uint64_t>(values_[code]) < dense_.size())
			continue;
		size_t slot = hash_id(values_[code]) & mask_;
		while (table_[slot].code >= 0)
			slot = (slot + 1) & mask_;
		table_[slot] = Slot{values_[code], static_cast<int32_t>(code)};
		++hashed_;
	}
}

bool IdColumn::cover_directly(uint64_t id)
{
	size_t size = std::max<size_t>(1024, dense_.size());
	while (size <= id)
		size *= 2;
	/* at most kMaxDirectIds, and an eighth of it in use once past the first 64k */
	if (size > kMaxDirectIds || !dense_enough(size, values_.size()))
		return false;
	size_t before = dense_.size();
	dense_.resize(size, -1);
	bool moved = false;
	for (size_t code = 0; code < values_.size(); ++code)
	{
		uint64_t value = static_cast<uint64_t>(values_[code]);
		if (value >= before && value < size)
		{
			dense_[value] = static_cast<int32_t>(code);
			moved = true;
		}
	}
	if (moved) /* those ids leave the hash table */
		rebuild_table(std::max<size_t>(table_.size(), 1024));
	return true;
}

void IdColumn::forget_rows()
{
	if (ids_as_codes_)
		throw Error(sqlstate::internal_error, "IdColumn::forget_rows: the column holds ids as codes");
	codes_.forget_rows();
}

void IdColumn::push_back(int64_t id)
{
	if (ids_as_codes_)
	{
		if (keeps_as_code(static_cast<uint64_t>(id), 1))
		{
			ids_held_ += id_rows_[static_cast<size_t>(id)]++ == 0;
			codes_.push_back(static_cast<int32_t>(id));
			return;
		}
		settle();
	}
	int32_t code = intern(id);
	codes_.push_back(code);
	++counts_[code];
}

int32_t IdColumn::new_code(int64_t id)
{
	if (values_.size() >= static_cast<size_t>(INT32_MAX))
		throw Error(sqlstate::program_limit_exceeded, "too many distinct ids in one input");
	if (!values_.empty() && id < values_.back())
		numbered_in_id_order_ = false;
	values_.push_back(id);
	counts_.push_back(0);
	return static_cast<int32_t>(values_.size() - 1);
}

IdColumn IdColumn::of_codes(ChunkedColumn<int32_t> codes, std::vector<int64_t> counts)
{
	IdColumn column;
	for (size_t id = 0; id < counts.size(); ++id)
		column.intern(static_cast<int64_t>(id));
	column.counts_ = std::move(counts);
	column.codes_ = std::move(codes);
	return column;
}

int32_t IdColumn::intern(int64_t id)
{
	uint64_t direct = static_cast<uint64_t>(id);
	if (direct < dense_.size() || (direct < kMaxDirectIds && cover_directly(direct)))
	{
		int32_t &code = dense_[direct];
		if (code < 0)
			code = new_code(id);
		return code;
	}
	if ((hashed_ + 1) * 2 > table_.size())
		rebuild_table(table_.empty() ? 1024 : table_.size() * 2);
	size_t slot = hash_id(id) & mask_;
	for (; table_[slot].code >= 0; slot = (slot + 1) & mask_)
		if (table_[slot].id == id)
			return table_[slot].code;
	int32_t code = new_code(id);
	table_[slot] = Slot{id, code};
	++hashed_;
	return code;
}

void IdColumn::number_in_id_order(const PieceRunner &run)
{
	if (numbered_in_id_order_)
		return;
	std::vector<int32_t> by_id = codes_in_id_order();
	std::vector<int32_t> rank(by_id.size());
	std::vector<int64_t> values(by_id.size()), counts(by_id.size());
	for (size_t r = 0; r < by_id.size(); ++r)
	{
		rank[by_id[r]] = static_cast<int32_t>(r);
		values[r] = values_[by_id[r]];
		counts[r] = counts_[by_id[r]];
	}
	values_ = std::move(values);
	counts_ = std::move(counts);
	for (int32_t &code : dense_)
		if (code >= 0)
			code = rank[code];
	for (Slot &slot : table_)
		if (slot.code >= 0)
			slot.code = rank[slot.code];
	codes_.visit_in_pieces(
		[&rank](int32_t *codes, size_t, size_t count) {
			for (size_t i = 0; i < count; ++i)
				codes[i] = rank[codes[i]];
		},
		run);
	numbered_in_id_order_ = true;
}

void IdColumn::map_ids(const std::function<int64_t(int64_t)> &new_id, const PieceRunner &run)
{
	if (ids_as_codes_)
		throw Error(sqlstate::internal_error, "IdColumn::map_ids: the column holds ids as codes");
	std::vector<int64_t> old_ids = std::move(values_);
	std::vector<int64_t> old_counts = std::move(counts_);
	values_.clear();
	counts_.clear();
	dense_.clear();
	table_.clear();
	mask_ = 0;
	hashed_ = 0;
	numbered_in_id_order_ = true;
	/* interned in code order: where every new id is new, each takes its old code */
	std::vector<int32_t> new_code(old_ids.size());
	bool merged = false;
	for (size_t code = 0; code < old_ids.size(); ++code)
	{
		new_code[code] = intern(new_id(old_ids[code]));
		merged |= new_code[code] != static_cast<int32_t>(code);
		counts_[static_cast<size_t>(new_code[code])] += old_counts[code];
	}
	if (merged)
		codes_.visit_in_pieces(
			[&new_code](int32_t *codes, size_t, size_t count) {
				for (size_t i = 0; i < count; ++i)
					codes[i] = new_code[static_cast<size_t>(codes[i])];
			},
			run);
}

void IdColumn::serialize(ByteWriter &out) const
{
	out.put<uint8_t>(ids_as_codes_ ? 1 : 0);
	if (ids_as_codes_)
	{
		out.put<uint64_t>(ids_held_);
		out.put<uint64_t>(id_rows_.size());
		out.write(id_rows_.data(), id_rows_.size() * sizeof(uint32_t));
	}
	else
	{
		out.put<uint64_t>(values_.size());
		out.write(values_.data(), values_.size() * sizeof(int64_t));
		out.write(counts_.data(), counts_.size() * sizeof(int64_t));
	}
	codes_.serialize(out);
}

IdColumn::PartDictionary IdColumn::read_dictionary(ByteReader &in)
{
	uint8_t form = in.get<uint8_t>();
	if (form == 1)
	{
		size_t held = in.get<uint64_t>(), entries = in.get<uint64_t>();
		if (entries > kMaxDirectIds || held > entries)
			throw Error(sqlstate::internal_error, "IdColumn: serialized ids as codes out of range");
		const uint8_t *counts = in.take(entries * sizeof(uint32_t));
		return PartDictionary{true, entries, held, nullptr, counts};
	}
	if (form != 0)
		throw Error(sqlstate::internal_error, "IdColumn: a serialized column of unknown form");
	size_t distinct = in.get<uint64_t>();
	if (distinct > static_cast<size_t>(INT32_MAX))
		throw Error(sqlstate::internal_error, "IdColumn: a serialized dictionary out of range");
	const uint8_t *values = in.take(distinct * sizeof(int64_t));
	const uint8_t *counts = in.take(distinct * sizeof(int64_t));
	return PartDictionary{false, distinct, distinct, values, counts};
}

void IdColumn::append_serialized(ByteReader &in, const PieceRunner &run, bool take_chunks)
{
	std::vector<ByteReader> parts{in};
	append_parts(parts, run, take_chunks);
	in = parts.front();
}

namespace {

/*
 * A part's codes turned into this column's: code_of[c] for each.  Codes out
 * of the part's dictionary are its bytes gone wrong, never a user's mistake.
 */
void translate_part_codes(int32_t *codes, size_t count, const std::vector<int32_t> &code_of)
{
	for (size_t i = 0; i < count; ++i)
	{
		if (static_cast<uint32_t>(codes[i]) >= code_of.size() || code_of[static_cast<size_t>(codes[i])] < 0)
			throw Error(sqlstate::internal_error, "IdColumn: a serialized code out of range");
		codes[i] = code_of[static_cast<size_t>(codes[i])];
	}
}

constexpr size_t kIdsPerPiece = size_t(1) << 16;

/*
 * The ids in [0, end) for which present(id) holds, numbered in id order:
 * dense[id] their code (-1 for the others) and values[code] their id.
 * Counted per block of ids, then given out, through run.
 */
template <typename Present>
void number_present_ids(size_t end, Present present, const PieceRunner &run, std::vector<int32_t> &dense,
						std::vector<int64_t> &values)
{
	size_t blocks = (end + kIdsPerPiece - 1) / kIdsPerPiece;
	std::vector<size_t> first_code(blocks + 1, 0);
	run(blocks, [&](size_t b) {
		size_t n = 0;
		for (size_t id = b * kIdsPerPiece, last = std::min<size_t>(end, id + kIdsPerPiece); id < last; ++id)
			n += present(id) ? 1 : 0;
		first_code[b + 1] = n;
	});
	for (size_t b = 0; b < blocks; ++b)
		first_code[b + 1] += first_code[b];
	if (first_code[blocks] > static_cast<size_t>(INT32_MAX))
		throw Error(sqlstate::program_limit_exceeded, "too many distinct ids in one input");
	dense.assign(end, -1);
	values.assign(first_code[blocks], 0);
	run(blocks, [&](size_t b) {
		auto code = static_cast<int32_t>(first_code[b]);
		for (size_t id = b * kIdsPerPiece, last = std::min<size_t>(end, id + kIdsPerPiece); id < last; ++id)
			if (present(id))
			{
				values[static_cast<size_t>(code)] = static_cast<int64_t>(id);
				dense[id] = code++;
			}
	});
}

/* (part, piece) for every piece of kIdsPerPiece ids of every part's dictionary. */
template <typename Dictionaries> std::vector<std::pair<uint32_t, uint32_t>> id_pieces(const Dictionaries &parts)
{
	std::vector<std::pair<uint32_t, uint32_t>> pieces;
	for (size_t p = 0; p < parts.size(); ++p)
		for (size_t piece = 0; piece * kIdsPerPiece < parts[p].entries; ++piece)
			pieces.emplace_back(static_cast<uint32_t>(p), static_cast<uint32_t>(piece));
	return pieces;
}

} // namespace

std::vector<std::vector<int32_t>> IdColumn::known_codes(const std::vector<PartDictionary> &parts,
														  const PieceRunner &run)
{
	std::vector<std::vector<int32_t>> code_of(parts.size());
	for (size_t p = 0; p < parts.size(); ++p)
		code_of[p].assign(parts[p].entries, -1);
	/*
	 * find only reads; parts share ids, so two pieces may count one id's
	 * rows at once: atomically (a part's pieces alone are too few to keep
	 * the threads busy, when many workers each met a share of the ids)
	 */
	std::vector<std::pair<uint32_t, uint32_t>> pieces = id_pieces(parts);
	run(pieces.size(), [&](size_t item) {
		const PartDictionary &part = parts[pieces[item].first];
		std::vector<int32_t> &codes = code_of[pieces[item].first];
		size_t first = size_t(pieces[item].second) * kIdsPerPiece, last = std::min(part.entries, first + kIdsPerPiece);
		for (size_t d = first; d < last; ++d)
			if (part.holds(d) && (codes[d] = find(part.id(d))) >= 0)
				__atomic_fetch_add(&counts_[static_cast<size_t>(codes[d])], part.count(d), __ATOMIC_RELAXED);
	});
	return code_of;
}

void IdColumn::append_part(const PartDictionary &dictionary, ByteReader &in, const PieceRunner &run, bool take_chunks)
{
	/*
	 * The ids this column holds already, then the new ones, added in the
	 * part's order.  Parts after the first bring mostly known ids: a
	 * million users read by every worker.
	 */
	std::vector<int32_t> code_of = std::move(known_codes({dictionary}, run)[0]);
	for (size_t d = 0; d < dictionary.entries; ++d)
		if (code_of[d] < 0 && dictionary.holds(d))
		{
			code_of[d] = intern(dictionary.id(d));
			counts_[static_cast<size_t>(code_of[d])] += dictionary.count(d);
		}
	ChunkedColumn<int32_t> part = ChunkedColumn<int32_t>::read_serialized(in, run);
	part.visit_in_pieces([&](int32_t *codes, size_t, size_t count) { translate_part_codes(codes, count, code_of); },
						 run);
	codes_.append_column(std::move(part), take_chunks, run);
}

bool IdColumn::number_union_in_id_order(const std::vector<PartDictionary> &parts, const PieceRunner &run)
{
	std::vector<std::pair<uint32_t, uint32_t>> pieces = id_pieces(parts);
	/*
	 * the largest id, this column's and the parts', as unsigned: a negative
	 * one is past every limit (ids as codes, not settled: below the end of
	 * their counts)
	 */
	uint64_t largest_held = ids_as_codes_ && !id_rows_.empty() ? id_rows_.size() - 1 : 0;
	for (int64_t id : values_)
		largest_held = std::max(largest_held, static_cast<uint64_t>(id));
	std::vector<uint64_t> largest(pieces.size(), 0);
	run(pieces.size(), [&](size_t item) {
		const PartDictionary &part = parts[pieces[item].first];
		size_t first = size_t(pieces[item].second) * kIdsPerPiece, last = std::min(part.entries, first + kIdsPerPiece);
		uint64_t most = 0;
		for (size_t d = first; d < last; ++d)
			if (part.holds(d))
				most = std::max(most, static_cast<uint64_t>(part.id(d)));
		largest[item] = most;
	});
	size_t most_distinct = ids_as_codes_ ? ids_held_ : values_.size();
	for (const PartDictionary &part : parts)
		most_distinct = std::max(most_distinct, part.held);
	uint64_t most = std::max(largest_held, largest.empty() ? 0 : *std::max_element(largest.begin(), largest.end()));
	/* cover_directly's limits: within the direct array, and an eighth of it in use once past the first 64k */
	if (most >= kMaxDirectIds)
		return false;
	uint64_t end = std::max<uint64_t>(dense_.size(), most + 1);
	if (!dense_enough(end, most_distinct))
		return false;

	/*
	 * Which ids there are: this column's, then every part's pieces at once
	 * (parts share ids, so two threads may mark one: atomically)
	 */
	std::vector<uint8_t> present(end, 0);
	for (int64_t id : values_)
		present[static_cast<uint64_t>(id)] = 1;
	if (ids_as_codes_)
		run((id_rows_.size() + kIdsPerPiece - 1) / kIdsPerPiece, [&](size_t piece) {
			for (size_t id = piece * kIdsPerPiece, last = std::min(id_rows_.size(), id + kIdsPerPiece); id < last; ++id)
				present[id] = id_rows_[id] != 0;
		});
	run(pieces.size(), [&](size_t item) {
		const PartDictionary &part = parts[pieces[item].first];
		size_t first = size_t(pieces[item].second) * kIdsPerPiece, last = std::min(part.entries, first + kIdsPerPiece);
		for (size_t d = first; d < last; ++d)
			if (part.holds(d))
				__atomic_store_n(&present[static_cast<uint64_t>(part.id(d))], uint8_t(1), __ATOMIC_RELAXED);
	});
	/* each present id's code, its rank among them */
	std::vector<int32_t> dense;
	std::vector<int64_t> values;
	number_present_ids(end, [&present](size_t id) { return present[id] != 0; }, run, dense, values);
	/* the rows held so far take their ids' new codes */
	std::vector<int64_t> counts(values.size(), 0);
	if (ids_as_codes_)
		leave_ids_as_codes(dense, counts, run); /* each row's code is its id: numbered once here, not settled first */
	else
	{
		std::vector<int32_t> rank(values_.size());
		for (size_t code = 0; code < values_.size(); ++code)
		{
			rank[code] = dense[static_cast<uint64_t>(values_[code])];
			counts[static_cast<size_t>(rank[code])] = counts_[code];
		}
		codes_.visit_in_pieces(
			[&rank](int32_t *codes, size_t, size_t count) {
				for (size_t i = 0; i < count; ++i)
					codes[i] = rank[codes[i]];
			},
			run);
	}
	values_ = std::move(values);
	counts_ = std::move(counts);
	dense_ = std::move(dense);
	table_.clear(); /* every id is in the direct array now */
	hashed_ = 0;
	numbered_in_id_order_ = true;
	return true;
}

void IdColumn::take_ids_as_codes()
{
	if (!codes_.empty() || !values_.empty())
		throw Error(sqlstate::internal_error, "IdColumn: ids as codes asked of a column that holds rows");
	ids_as_codes_ = true;
}

bool IdColumn::keeps_as_code(uint64_t largest, size_t n)
{
	/* counts of 32 bits: no id can have more rows than the column */
	if (codes_.size() + n > UINT32_MAX)
		return false;
	if (largest < id_rows_.size())
		return true;
	if (largest >= kMaxDirectIds)
		return false;
	size_t size = std::max<size_t>(1024, id_rows_.size());
	while (size <= largest)
		size *= 2;
	/*
	 * Within a fixed room, whatever the ids held so far: shuffled ids of a
	 * million users begin anywhere below their largest.  Past it, only as
	 * dense as the direct array of a dictionary.
	 */
	if (size > kIdsAsCodesRoom && !dense_enough(size, ids_held_))
		return false;
	id_rows_.resize(size, 0);
	return true;
}

void IdColumn::settle(const PieceRunner &run)
{
	if (!ids_as_codes_)
		return;
	std::vector<int32_t> dense;
	std::vector<int64_t> values;
	number_present_ids(id_rows_.size(), [this](size_t id) { return id_rows_[id] != 0; }, run, dense, values);
	std::vector<int64_t> counts(values.size());
	leave_ids_as_codes(dense, counts, run);
	values_ = std::move(values);
	counts_ = std::move(counts);
	dense_ = std::move(dense);
	table_.clear();
	mask_ = 0;
	hashed_ = 0;
	numbered_in_id_order_ = true;
}

void IdColumn::leave_ids_as_codes(const std::vector<int32_t> &dense, std::vector<int64_t> &counts, const PieceRunner &run)
{
	for (size_t id = 0; id < id_rows_.size(); ++id)
		if (id_rows_[id] != 0)
			counts[static_cast<size_t>(dense[id])] = id_rows_[id];
	/* a code of no id held is a part's bytes gone wrong */
	codes_.visit_in_pieces([&dense](int32_t *codes, size_t, size_t count) { translate_part_codes(codes, count, dense); },
						   run);
	ids_as_codes_ = false;
	id_rows_ = std::vector<uint32_t>();
	ids_held_ = 0;
}

void IdColumn::settle_if_sparse(const PieceRunner &run)
{
	if (ids_as_codes_ && !dense_enough(id_rows_.size(), ids_held_))
		settle(run);
}

bool IdColumn::add_parts_of_ids_as_codes(const std::vector<PartDictionary> &parts, std::vector<ByteReader> &readers,
										 const PieceRunner &run, bool take_chunks)
{
	std::vector<ByteReader> at_codes = readers;
	size_t rows = codes_.size(), end = id_rows_.size();
	std::vector<ChunkedColumn<int32_t>> codes;
	codes.reserve(parts.size());
	for (size_t p = 0; p < parts.size(); ++p)
	{
		codes.push_back(ChunkedColumn<int32_t>::read_serialized(readers[p], run));
		rows += codes[p].size();
		end = std::max(end, parts[p].entries);
	}
	if (rows > UINT32_MAX) /* more rows than a count holds: a dictionary's way, the parts' codes read again */
	{
		readers = at_codes;
		return false;
	}
	id_rows_.resize(end, 0);
	/* every id's rows added up, a block of ids at a time: no two threads write one count */
	size_t blocks = (end + kIdsPerPiece - 1) / kIdsPerPiece;
	std::vector<size_t> held(blocks, 0);
	run(blocks, [&](size_t b) {
		size_t first = b * kIdsPerPiece, last = std::min(end, first + kIdsPerPiece);
		for (const PartDictionary &part : parts)
			for (size_t id = first, stop = std::min(last, part.entries); id < stop; ++id)
				id_rows_[id] += static_cast<uint32_t>(part.count(id)); /* the rows, at most UINT32_MAX, bound every sum */
		for (size_t id = first; id < last; ++id)
			held[b] += id_rows_[id] != 0;
	});
	ids_held_ = 0;
	for (size_t n : held)
		ids_held_ += n;
	/* the codes are the ids: the parts' rows join as they came, translated once in settle() */
	for (ChunkedColumn<int32_t> &part : codes)
		codes_.append_column(std::move(part), take_chunks, run);
	return true;
}

void IdColumn::append_parts(std::vector<ByteReader> &parts, const PieceRunner &run, bool take_chunks,
							const IdRewrite &rewrite)
{
	std::vector<PartDictionary> dictionaries;
	dictionaries.reserve(parts.size());
	for (ByteReader &in : parts)
		dictionaries.push_back(read_dictionary(in));
	/*
	 * The rewritten ids of each part's dictionary, held here: a part's
	 * bytes are read in place, never written.  A part of ids as codes has
	 * its held ids rewritten (the others, entries without rows, are no id
	 * of the part's); its rows keep their codes, its entries' ids change.
	 */
	std::vector<std::vector<int64_t>> rewritten(rewrite ? parts.size() : 0);
	/* the parts at once: in a read whose rows do not cluster the ids, each part holds most of them */
	run(rewritten.size(), [&](size_t p) {
		PartDictionary &part = dictionaries[p];
		std::vector<int64_t> &ids = rewritten[p];
		if (part.ids_as_codes)
		{
			std::vector<int64_t> held;
			for (size_t d = 0; d < part.entries; ++d)
				if (part.holds(d))
					held.push_back(static_cast<int64_t>(d));
			std::vector<int64_t> entry = held;
			rewrite(p, held.data(), held.size());
			ids.assign(part.entries, -1);
			for (size_t i = 0; i < held.size(); ++i)
				ids[static_cast<size_t>(entry[i])] = held[i];
		}
		else
		{
			ids.resize(part.entries);
			if (part.entries > 0)
				std::memcpy(ids.data(), part.values, part.entries * sizeof(int64_t));
			rewrite(p, ids.data(), part.entries);
		}
		part.rewritten = ids.data();
	});
	if (ids_as_codes_ && !rewrite &&
		std::all_of(dictionaries.begin(), dictionaries.end(), [](const PartDictionary &part) { return part.ids_as_codes; }) &&
		add_parts_of_ids_as_codes(dictionaries, parts, run, take_chunks))
		return;
	if (!number_union_in_id_order(dictionaries, run))
	{
		settle(run);
		for (size_t p = 0; p < parts.size(); ++p)
			append_part(dictionaries[p], parts[p], run, take_chunks);
		return;
	}
	/* every id is known now: each part's codes of its ids, its rows counted */
	std::vector<std::vector<int32_t>> code_of = known_codes(dictionaries, run);
	/* the parts' codes (in place, where they came by reference), translated over all their pieces at once */
	std::vector<ChunkedColumn<int32_t>> codes;
	codes.reserve(parts.size());
	std::vector<std::pair<uint32_t, uint32_t>> row_pieces;
	for (size_t p = 0; p < parts.size(); ++p)
	{
		codes.push_back(ChunkedColumn<int32_t>::read_serialized(parts[p], run));
		for (size_t piece = 0; piece < codes[p].pieces(); ++piece)
			row_pieces.emplace_back(static_cast<uint32_t>(p), static_cast<uint32_t>(piece));
	}
	run(row_pieces.size(), [&](size_t item) {
		size_t p = row_pieces[item].first;
		codes[p].visit_piece(row_pieces[item].second,
							 [&](int32_t *rows, size_t, size_t count) { translate_part_codes(rows, count, code_of[p]); });
	});
	for (ChunkedColumn<int32_t> &part : codes)
		codes_.append_column(std::move(part), take_chunks, run);
}

} // namespace gpurec
