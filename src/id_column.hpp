/*
 * id_column.hpp: IdColumn, an integer id column dictionary-encoded (each
 * row a dense code; the distinct ids with their row counts), or while it
 * is being read, ids as codes until it settles; its flat form, and the
 * merge of parts' dictionaries into one.
 */
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <vector>

#include "byte_stream.hpp"
#include "column_chunks.hpp"
#include "errors.hpp"

namespace gpurec {

/*
 * Rewrites n ids of the dictionary of part `part` (its index among the
 * parts) in place, before they join a column's (IdColumn::append_parts):
 * distinct ids must stay distinct.  A parallel read's uuid and text ids
 * take the call's codes there (CallKeys::lane_to_call_codes), so that
 * the workers' dictionaries join as one.
 * Called for several parts at once, from the threads of the PieceRunner.
 */
using IdRewrite = std::function<void(size_t part, int64_t *ids, size_t n)>;

/*
 * An integer id column, dictionary-encoded while it is read: each row holds a
 * dense code 0..n_distinct-1 in order of first appearance, so that engines
 * group by plain array indexing (on the CPU and on the GPU alike).
 */
class IdColumn
{
  public:
	void push_back(int64_t id);
	/* Appends n ids, id_at(i) the i-th: push_back n times, with the codes written a chunk at a time. */
	template <typename IdAt> void append(size_t n, IdAt id_at)
	{
		if (ids_as_codes_)
		{
			uint64_t largest = 0; /* as unsigned: a negative id is past every limit */
			for (size_t i = 0; i < n; ++i)
				largest = std::max(largest, static_cast<uint64_t>(id_at(i)));
			if (n == 0 || keeps_as_code(largest, n))
			{
				codes_.append(n, [&](int32_t *out, size_t first, size_t count) {
					for (size_t i = 0; i < count; ++i)
					{
						auto id = static_cast<size_t>(id_at(first + i));
						ids_held_ += id_rows_[id]++ == 0;
						out[i] = static_cast<int32_t>(id);
					}
				});
				return;
			}
			settle();
		}
		codes_.append(n, [&](int32_t *out, size_t first, size_t count) {
			for (size_t i = 0; i < count; ++i)
			{
				int32_t code = intern(id_at(first + i));
				out[i] = code;
				++counts_[code];
			}
		});
	}

	/*
	 * Ids as codes, for a column being read: while every id is an integer
	 * in [0, 2^22) and the ids are not too sparse, each row's code is its id
	 * and the column only counts each id's rows, in an array by id.  That
	 * is one look into memory a row, where a dictionary takes two (its
	 * direct array, then the id's count), each a cache miss when the ids
	 * come shuffled.  Parts read so meet without dictionaries to merge
	 * (append_parts adds their counts), and settle() numbers the ids, in id
	 * order, once, over all the rows.  Until then the column has no
	 * dictionary: only size(), appending, serialize() and settle() may be
	 * used.  An id past those limits settles the column, which goes on as
	 * a dictionary.  Only on an empty column.
	 */
	void take_ids_as_codes();
	/* Whether the column holds ids as codes, not settled yet. */
	bool holds_ids_as_codes() const { return ids_as_codes_; }
	/*
	 * Makes a column of ids as codes a dictionary again, numbered in id
	 * order: every row's code rewritten in pieces through run.  Nothing to
	 * do for a dictionary.
	 */
	void settle(const PieceRunner &run = run_serially);
	/*
	 * settle() where the ids as codes are sparse (their array of counts
	 * more than 8 for each id held, past its first 2^16): what serialize()
	 * then writes is a dictionary, not a count for every integer below the
	 * largest id.
	 */
	void settle_if_sparse(const PieceRunner &run = run_serially);

	/*
	 * A column whose every code is its own id: the ids 0 .. counts.size()-1,
	 * id c with counts[c] rows, the rows' codes as given.  For the device
	 * part of another process's column (the GPU service), which must rank
	 * by that column's codes: appending its serialized form would number
	 * the ids afresh.
	 */
	static IdColumn of_codes(ChunkedColumn<int32_t> codes, std::vector<int64_t> counts);
	size_t size() const { return codes_.size(); }
	/*
	 * Drops every row but keeps the dictionary, and the counts of the rows
	 * dropped: the ids keep their codes for the rows to come, and counts()
	 * counts every row ever pushed.  A dictionary only (not ids as codes).
	 */
	void forget_rows();
	size_t distinct() const { return values_.size(); }
	const ChunkedColumn<int32_t> &codes() const { return codes_; }
	int32_t code(size_t row) const { return codes_[row]; }
	int64_t value_of(int32_t code) const { return values_[code]; }
	const std::vector<int64_t> &values() const { return values_; }
	/* Rows per code. */
	const std::vector<int64_t> &counts() const { return counts_; }
	/* The code of id, or -1 when the column never held it. */
	int32_t find(int64_t id) const;
	/* Every code, in ascending order of its id. */
	std::vector<int32_t> codes_in_id_order() const;

	/*
	 * Renumbers the codes so that they ascend with the ids (code 0 the
	 * lowest id); the rows stay where they are, each row's code rewritten
	 * in pieces through run.  Work of the order of the distinct ids, plus
	 * one table lookup per row.
	 */
	void number_in_id_order(const PieceRunner &run = run_serially);
	/*
	 * Replaces each id by new_id(id) (the codes of a KeyDictionary,
	 * renumbered, or a parallel read's codes made the call's:
	 * key_dictionary.hpp).  Where distinct ids stay distinct, the rows keep
	 * their codes and the work is of the order of the distinct ids; ids
	 * that become one merge, their rows' codes rewritten through run.  A
	 * dictionary only (not ids as codes).
	 */
	void map_ids(const std::function<int64_t(int64_t)> &new_id, const PieceRunner &run = run_serially);
	/* Whether the codes ascend with the ids: after number_in_id_order, or ids that first came in ascending order. */
	bool numbered_in_id_order() const { return numbered_in_id_order_; }

	void use_chunk_source(ChunkSource &source) { codes_.use_chunk_source(source); }

	/*
	 * The flat form: a form byte, then the distinct ids with their row
	 * counts (form 0), or, for ids as codes (form 1), how many ids are held
	 * and every integer's row count up to the largest id; then the codes.
	 */
	void serialize(ByteWriter &out) const;
	/*
	 * Appends a column that serialize() wrote: its ids join this dictionary
	 * (new ones get the next codes) and its codes are translated, in place
	 * where they came by reference, so the work is per distinct id plus one
	 * table lookup per row (through run).  Rows as
	 * ChunkedColumn::append_column places them.
	 */
	void append_serialized(ByteReader &in, const PieceRunner &run = run_serially, bool take_chunks = false);
	/*
	 * append_serialized() of several parts, each reader at its own, in
	 * order.  Where every id, this column's and the parts', is one the
	 * direct array may hold, the dictionary first becomes their union,
	 * numbered in id order (the rows held renumbered), and then every
	 * part's codes are translated at once, over all the parts' pieces
	 * together: no id is interned one by one, and the column comes out
	 * numbered in id order, so number_in_id_order has nothing left to do.
	 */
	void append_parts(std::vector<ByteReader> &parts, const PieceRunner &run = run_serially, bool take_chunks = false,
					  const IdRewrite &rewrite = nullptr);

  private:
	/*
	 * A part's dictionary as serialize() wrote it, read in place: entries
	 * d = 0 .. entries - 1, each an id with its rows; for a part of ids as
	 * codes, entry d is the id d, which the part holds where it has rows.
	 * Rewritten (append_parts' rewrite), entry d's id is rewritten[d].
	 */
	struct PartDictionary
	{
		bool ids_as_codes;
		size_t entries;
		size_t held; /* the entries with rows */
		const uint8_t *values;
		const uint8_t *counts;
		const int64_t *rewritten = nullptr;
		int64_t id(size_t d) const
		{
			if (rewritten)
				return rewritten[d];
			if (ids_as_codes)
				return static_cast<int64_t>(d);
			int64_t id;
			std::memcpy(&id, values + d * sizeof id, sizeof id);
			return id;
		}
		int64_t count(size_t d) const
		{
			if (ids_as_codes)
			{
				uint32_t rows;
				std::memcpy(&rows, counts + d * sizeof rows, sizeof rows);
				return rows;
			}
			int64_t count;
			std::memcpy(&count, counts + d * sizeof count, sizeof count);
			return count;
		}
		bool holds(size_t d) const { return !ids_as_codes || count(d) != 0; }
	};
	static PartDictionary read_dictionary(ByteReader &in);
	/*
	 * Each part's ids' codes here, -1 where the column lacks one; the known
	 * ones' rows counted.  Every part's pieces at once.
	 */
	std::vector<std::vector<int32_t>> known_codes(const std::vector<PartDictionary> &parts, const PieceRunner &run);
	/* append_serialized() once the part's dictionary is read. */
	void append_part(const PartDictionary &dictionary, ByteReader &in, const PieceRunner &run, bool take_chunks);
	/* The union of this column's ids and the parts' numbered in id order (append_parts); false, and nothing done, where some id is beyond the direct array. */
	bool number_union_in_id_order(const std::vector<PartDictionary> &parts, const PieceRunner &run);
	/*
	 * A column of ids as codes becomes one of codes through dense (an id's
	 * code, -1 for an id not numbered): its rows rewritten, each held id's
	 * rows counted into counts by code, its counts by id dropped.
	 */
	void leave_ids_as_codes(const std::vector<int32_t> &dense, std::vector<int64_t> &counts, const PieceRunner &run);

	/*
	 * append_parts of parts all of ids as codes, into a column of ids as
	 * codes: their rows counted, their codes kept.  False, and the readers
	 * as they were, where the rows would be more than a count holds.
	 */
	bool add_parts_of_ids_as_codes(const std::vector<PartDictionary> &parts, std::vector<ByteReader> &readers,
								   const PieceRunner &run, bool take_chunks);

	/* Ids below this are looked up in a direct array (dense_) when they are dense enough. */
	static constexpr uint64_t kMaxDirectIds = uint64_t(1) << 22;
	/*
	 * Whether an array over `span` integers is worth it for `ids` of them:
	 * an eighth of it in use once past its first 64k (the direct array's
	 * rule, and that of ids as codes past their fixed room).
	 */
	static bool dense_enough(size_t span, size_t ids) { return span <= 8 * ids + 65536; }
	/* Ids as codes count the rows of every integer below the largest id: up to this many, or 8 for each id held. */
	static constexpr size_t kIdsAsCodesRoom = size_t(1) << 20;

	/*
	 * Whether `n` more rows of ids at most `largest` stay ids as codes:
	 * id_rows_ grown to hold `largest` where the limits allow.
	 */
	bool keeps_as_code(uint64_t largest, size_t n);

	/* Makes dense_ reach id, moving the ids it now covers out of the hash table; false when too sparse. */
	bool cover_directly(uint64_t id);
	void rebuild_table(size_t capacity);
	/* The code of id, added to the dictionary (with no row) when new. */
	int32_t intern(int64_t id);
	int32_t new_code(int64_t id);

	/* an open-addressing slot: the id beside its code, so a probe is one cache line */
	struct Slot
	{
		int64_t id;
		int32_t code; /* -1: empty */
	};

	ChunkedColumn<int32_t> codes_;
	std::vector<int64_t> values_;
	std::vector<int64_t> counts_;
	/*
	 * The code of each id in [0, dense_.size()), or -1: serial keys, most
	 * inputs' ids, are found by one look into an array a fraction of the
	 * hash table's size (in cache, where the table's random probes are
	 * not).  The hash table holds every other id.
	 */
	std::vector<int32_t> dense_;
	std::vector<Slot> table_;
	size_t mask_ = 0;
	size_t hashed_ = 0;
	bool numbered_in_id_order_ = true;
	/* ids as codes: the rows of each id below id_rows_.size(), and how many have any */
	bool ids_as_codes_ = false;
	std::vector<uint32_t> id_rows_;
	size_t ids_held_ = 0;
};

} // namespace gpurec
