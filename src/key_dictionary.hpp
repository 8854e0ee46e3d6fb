/*
 * key_dictionary.hpp: ids of a type the engine does not compute on (uuid,
 * text) as dense int64 codes: KeyDictionary, one id column's distinct
 * values and their codes, numbered in the key type's order; and CallKeys,
 * a call's dictionaries, one per id column name, which every inner query of
 * the call shares, with the columns coded from them.
 *
 * The engine computes on integers: an IdColumn or Int64Column of a uuid or
 * text id holds codes, not the values.  The codes ascend in the values'
 * order (KeyDictionary::number_in_key_order, uuid's byte order and text's
 * byte order), so that a tie rule that compares ids (a lower store_id
 * first) compares them as the key type orders them; the result rows turn a
 * code back into its value (KeyDictionary::value).
 */
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "byte_stream.hpp"
#include "column_chunks.hpp"
#include "id_column.hpp"
#include "number_column.hpp"

namespace gpurec {

/*
 * The n <= 8 bytes at p as a word, zero past them: two loads of 4 that
 * overlap where n < 8, not a call of memcpy of a variable size.
 */
inline uint64_t bytes_as_word(const uint8_t *p, size_t n)
{
	if (n >= 4)
	{
		uint32_t low, high;
		std::memcpy(&low, p, 4);
		std::memcpy(&high, p + n - 4, 4);
		return low | (static_cast<uint64_t>(high) << (8 * (n - 4)));
	}
	uint64_t word = 0;
	for (size_t i = 0; i < n; ++i)
		word |= static_cast<uint64_t>(p[i]) << (8 * i);
	return word;
}

/*
 * Two words mixed by one multiply, 64 x 64 bits into 128, its halves
 * folded (wyhash's): every bit of either word reaches the folded result's
 * bits, low and high, which the table's mask and hash tag take.
 */
inline uint64_t multiply_fold(uint64_t a, uint64_t b)
{
	unsigned __int128 product = static_cast<unsigned __int128>(a) * b;
	return static_cast<uint64_t>(product) ^ static_cast<uint64_t>(product >> 64);
}

/*
 * A value's first 16 bytes as two words, zero past its end, in loads of
 * fixed sizes, not a call of memcpy of a variable size (most text ids).
 */
__attribute__((always_inline)) inline void key_head(const uint8_t *bytes, size_t size, uint64_t head[2])
{
	if (size >= 16)
		std::memcpy(head, bytes, 16);
	else if (size > 8)
	{
		std::memcpy(&head[0], bytes, 8);
		head[1] = bytes_as_word(bytes + 8, size - 8);
	}
	else
	{
		head[0] = bytes_as_word(bytes, size);
		head[1] = 0;
	}
}

/*
 * A value's hash from its size and its first 16 bytes as two words
 * (key_head), then 16 bytes at a time past them:
 * a uuid, or a text id of up to 16 bytes, is one multiply, where the
 * lookup of every row of a read spends on it.  Inline: a read hashes
 * every row's id as it stages it (KeyDictionary::stage).
 */
__attribute__((always_inline)) inline uint64_t key_hash(const uint8_t *bytes, size_t size, const uint64_t head[2])
{
	constexpr uint64_t k0 = 0xA0761D6478BD642Full, k1 = 0xE7037ED1A0B428DBull, k2 = 0x8EBC6AF09C88C6E3ull;
	uint64_t h = multiply_fold(head[0] ^ k0, head[1] ^ k1 ^ size);
	for (size_t i = 16; i < size; i += 16)
	{
		uint64_t word[2] = {0, 0};
		size_t n = std::min<size_t>(16, size - i);
		if (n > 8)
		{
			std::memcpy(&word[0], bytes + i, 8);
			word[1] = bytes_as_word(bytes + i + 8, n - 8);
		}
		else
			word[0] = bytes_as_word(bytes + i, n);
		h = multiply_fold(word[0] ^ h ^ k2, word[1] ^ k1);
	}
	return h;
}

/* What an id column's values are: integers (the codes are the ids), or values coded through a KeyDictionary. */
enum class KeyType : uint8_t
{
	Integer, /* smallint, integer, bigint */
	Uuid,	 /* 16 bytes, ordered bytewise as uuid's btree orders them */
	Text	 /* text or varchar: the bytes, ordered bytewise (the C collation) */
};

/* The name of a key type in messages: "uuid". */
const char *key_type_name(KeyType type);

/*
 * Id values held as they came, not coded: the values a read stages for a
 * dictionary's next batch (KeyDictionary::stage), or a piece's column of
 * uuid or text ids of which only a few rows will ever need a code (a
 * partial result's late key column, partials.hpp: cheapest_offers'
 * stores, wanted only for the offers that enter a product's k cheapest).
 * Holding a value appends its bytes, without the lookup of a dictionary,
 * and the row holds the index it got.
 */
class KeyBytes
{
  public:
	/*
	 * The index of the value, appended; -1 when memory runs out (for
	 * PostgreSQL code).  Every row of a read holds its value here: a copy
	 * of up to 16 bytes is a few moves inline, not a call.
	 */
	__attribute__((always_inline)) int64_t hold(const uint8_t *bytes, size_t size) noexcept
	{
		if (used_ + size > bytes_.size() || count_ + 1 >= offsets_.size())
			if (!grow(size))
				return -1;
		copy_small(bytes_.data() + used_, bytes, size);
		used_ += size;
		offsets_[++count_] = used_;
		return static_cast<int64_t>(count_ - 1);
	}
	const uint8_t *value(int64_t index) const { return bytes_.data() + offsets_[static_cast<size_t>(index)]; }
	size_t value_size(int64_t index) const
	{
		return offsets_[static_cast<size_t>(index) + 1] - offsets_[static_cast<size_t>(index)];
	}
	size_t size() const { return count_; }
	/* Forgets every value, keeping the room they took. */
	void clear()
	{
		used_ = 0;
		count_ = 0;
	}

  private:
	static void copy_small(uint8_t *to, const uint8_t *from, size_t n)
	{
		if (n > 16)
			std::memcpy(to, from, n);
		else if (n >= 8) /* two moves of 8 that overlap where n < 16 */
		{
			std::memcpy(to, from, 8);
			std::memcpy(to + n - 8, from + n - 8, 8);
		}
		else
			for (size_t i = 0; i < n; ++i)
				to[i] = from[i];
	}
	/* Room for one more value of size bytes; false when memory runs out.  Out of line: rare. */
	bool grow(size_t size) noexcept;

	/* values' bytes and their offsets, index i's from offsets_[i] to offsets_[i + 1]; the vectors' sizes are their room */
	std::vector<uint8_t> bytes_;
	std::vector<uint64_t> offsets_{0};
	size_t used_ = 0;
	size_t count_ = 0;
};

/*
 * The distinct values of one id column, each a byte string, coded 0..n-1:
 * a new value takes the next code (intern); number_in_key_order renumbers
 * them in the values' order.  An open-addressing hash table over an arena
 * of the values' bytes.
 */
class KeyDictionary
{
  public:
	size_t size() const { return offsets_.size() - 1; }
	/* The code of the value, a new one when the dictionary lacks it; -1 when memory runs out (for PostgreSQL code). */
	int64_t intern(const uint8_t *bytes, size_t size) noexcept;
	/* The code of the value, or -1 when the dictionary lacks it. */
	int64_t find(const uint8_t *bytes, size_t size) const;
	/*
	 * A value read, held for the next intern_staged: the index to give it
	 * there; -1 when memory runs out (for PostgreSQL code).  A read codes
	 * a batch of rows at once, not each row as it comes: between two rows'
	 * lookups lie a tuple's fetch and conversion, so that each lookup's
	 * miss of the core's cache came alone, where a batch's lookups, their
	 * slots prefetched a few ahead, overlap theirs.
	 */
	__attribute__((always_inline)) int64_t stage(const uint8_t *bytes, size_t size) noexcept
	{
		if ((staged_count_ == staged_.size() && !grow_staged()) || size > UINT32_MAX)
			return -1;
		Probe probe(bytes, size);
		uint32_t tail = 0;
		if (size > 16)
		{
			int64_t held = staged_tails_.hold(bytes, size);
			if (held < 0)
				return -1;
			tail = static_cast<uint32_t>(held);
		}
		staged_[staged_count_] = StagedValue{{probe.head[0], probe.head[1]}, probe.hash, static_cast<uint32_t>(size), tail};
		return static_cast<int64_t>(staged_count_++);
	}
	/*
	 * Each index given by stage since the last call replaced by the code
	 * of its value, new values interned in the indices' order; then the
	 * staged values are forgotten (those no index named too).  Error 53200
	 * past 2147483647 distinct values.
	 */
	void intern_staged(std::vector<int64_t> &indices);
	/* The value of code. */
	const uint8_t *value(int64_t code) const { return bytes_.data() + offsets_[static_cast<size_t>(code)]; }
	size_t value_size(int64_t code) const
	{
		return offsets_[static_cast<size_t>(code) + 1] - offsets_[static_cast<size_t>(code)];
	}
	/* Whether the value of code a comes before that of code b: bytewise, a prefix before the longer value. */
	bool less(int64_t a, int64_t b) const
	{
		size_t na = value_size(a), nb = value_size(b);
		int c = std::memcmp(value(a), value(b), std::min(na, nb));
		return c != 0 ? c < 0 : na < nb;
	}
	/* Whether the codes ascend with the values: the last number_in_key_order came after the last new value. */
	bool numbered_in_key_order() const { return numbered_ == size(); }
	/*
	 * Renumbers the codes so that they ascend with the values (less):
	 * returns the new code of each old code.  The work runs through run,
	 * the sort in `slices` slices (sort_in_buckets, or parallel_sort where
	 * buckets would not divide it: as many as run has threads; 1 where run
	 * is serial).
	 */
	std::vector<int64_t> number_in_key_order(const PieceRunner &run = run_serially, size_t slices = 1);

	/* The flat form: the count, then each value's size and bytes, in code order. */
	void serialize(ByteWriter &out) const;
	/* Interns every value of a flat form (serialize): the code here of each of its codes.  ERROR 53200 past the limits. */
	std::vector<int64_t> intern_serialized(ByteReader &in);
	/* A flat form (serialize) read in place: each value's address and size; the reader moves past it. */
	struct SerializedValues
	{
		std::vector<const uint8_t *> values;
		std::vector<uint32_t> sizes;
	};
	static SerializedValues read_serialized(ByteReader &in);
	/*
	 * The code here of every value of each of `parts`, in order, as
	 * intern_serialized of each in turn gives them: the values known
	 * already are found first, every part's at once through run (in a
	 * parallel read whose rows do not cluster the ids, each worker meets
	 * most of them, and interning them one by one on the calling backend's
	 * thread took a third of the read); then the others' occurrences told
	 * apart on every core, and only each value's first occurrence in the
	 * parts' order interned.  ERROR 53200 past the limits.
	 */
	std::vector<std::vector<int64_t>> intern_parts(const std::vector<SerializedValues> &parts, const PieceRunner &run);

  private:
	/*
	 * An open-addressing slot: the value's size and its first 16 bytes
	 * (zero past its end) beside its code, so that a probe compares a uuid,
	 * or a text id of up to 16 bytes, without reaching into the arena: a
	 * lookup is one look into memory, where the arena's offsets and bytes
	 * took two more, each a miss of the core's own cache for every row
	 * (the most of a uuid read's coding).  Longer values compare their
	 * rest in the arena.  Aligned to its size: a slot never straddles two
	 * cache lines, so that the one line a batch prefetches holds all of it.
	 */
	struct alignas(32) Slot
	{
		/* the value's hash, whole: most probes of another value stop here, and a table grows by moving its slots */
		uint64_t hash;
		int32_t code; /* -1: empty */
		uint32_t size;
		uint64_t head[2];
	};
	/*
	 * A value staged (stage): its size, first 16 bytes and hash, taken as
	 * it is read, so that its batch only probes the table; the bytes past
	 * 16 of a longer value are held in staged_tails_, at index tail.
	 */
	struct StagedValue
	{
		uint64_t head[2];
		uint64_t hash;
		uint32_t size;
		uint32_t tail;
	};
	/* A value's size, first 16 bytes and hash (key_hash), as a slot holds them, to compare with slots. */
	struct Probe
	{
		const uint8_t *bytes;
		size_t size;
		uint64_t head[2];
		uint64_t hash;
		Probe() = default;
		__attribute__((always_inline)) Probe(const uint8_t *value, size_t value_size) : bytes(value), size(value_size)
		{
			key_head(bytes, size, head);
			hash = key_hash(bytes, size, head);
		}
		/*
		 * A staged value's: a value of up to 16 bytes is its head (the
		 * words hold its bytes in order on a little-endian machine), a
		 * longer one lies in tails.
		 */
		Probe(const StagedValue &staged, const KeyBytes &tails)
			: bytes(staged.size > 16 ? tails.value(staged.tail) : reinterpret_cast<const uint8_t *>(staged.head)),
			  size(staged.size), head{staged.head[0], staged.head[1]}, hash(staged.hash)
		{
			static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "a short value's bytes are its head's");
		}
	};
	bool equals(const Slot &slot, const Probe &probe) const
	{
		if (slot.size != probe.size || slot.head[0] != probe.head[0] || slot.head[1] != probe.head[1])
			return false;
		return probe.size <= 16 || std::memcmp(value(slot.code) + 16, probe.bytes + 16, probe.size - 16) == 0;
	}
	void rebuild_table(size_t capacity);
	/* The table grown, where needed, to take `more` new values at its load limit (a half). */
	void make_room(size_t more);
	/*
	 * intern() of a probe, the table with room for it; -1 past the codes'
	 * limit.  Inline in the batches that call it for every row; a new
	 * value's insertion (insert) is out of line.
	 */
	int64_t intern_hashed(const Probe &probe);
	/* A new value's code, its slot (empty) taken; -1 past the codes' limit. */
	int64_t insert(const Probe &probe, size_t slot);
	/* find() of a probe, the table not empty */
	int64_t find_hashed(const Probe &probe) const;
	/* Room for more staged values; false when memory runs out.  Out of line: rare. */
	bool grow_staged() noexcept;
	/* Prefetches what a lookup of hash h reads first (in_batches). */
	template <typename Self> static void prefetch_probe(Self &self, uint64_t h);
	/*
	 * look(i, value_of(i)) for i < n, a Probe each, in batches of rows whose
	 * slots are prefetched a few ahead, so that their misses of the core's
	 * cache overlap; before_batch(rows) runs before each batch's probes and
	 * prefetches.  Self is KeyDictionary or const KeyDictionary.
	 */
	template <typename Self, typename ValueOf, typename BeforeBatch, typename Look>
	static void in_batches(Self &self, size_t n, ValueOf value_of, BeforeBatch before_batch, Look look);
	/*
	 * codes[i] = the code of value_of(i) (a Probe), new values interned in
	 * order, for i < n, in batches (in_batches).  ERROR 53200 with message
	 * out_of_codes past the codes' limit.
	 */
	template <typename ValueOf>
	void intern_in_batches(size_t n, ValueOf value_of, int64_t *codes, const char *out_of_codes);
	/* codes[i] = find() of value_of(i) for i < n, in batches (in_batches): reads only, so any threads may at once */
	template <typename ValueOf> void find_in_batches(size_t n, ValueOf value_of, int64_t *codes) const;

	std::vector<uint8_t> bytes_;
	std::vector<uint64_t> offsets_{0};
	BulkVector<Slot> table_; /* on huge pages from 2 MiB: a million values' table spans 64 MiB */
	size_t mask_ = 0;
	size_t numbered_ = 0;
	std::vector<StagedValue> staged_; /* its size is its room: staged_count_ values staged */
	size_t staged_count_ = 0;
	KeyBytes staged_tails_;
};

/*
 * The order of a column whose values are codes of a dictionary that is
 * not numbered in key order yet: a process's own codes while it reads
 * (an IdColumn's codes themselves, stride 1; an Int64Column's code x
 * stride + its lane, CallKeys::learn_lane).  So that a process
 * ranks its share by the ids' order before any code is the call's
 * (cheapest_offers' partial results, RunningCheapestOffers): the order of
 * the values is their bytes', which every process knows alike.
 */
struct KeyOrder
{
	const KeyDictionary *dictionary;
	int64_t stride;

	/* The dictionary's code of a column's value. */
	int64_t code(int64_t value) const { return value / stride; }
	bool less(int64_t a, int64_t b) const { return dictionary->less(code(a), code(b)); }
};

/* A uuid or text id as PostgreSQL shows it: a uuid as 8-4-4-4-12 hex digits, a text as its characters. */
std::string shown_key(KeyType type, const uint8_t *bytes, size_t size);

/*
 * A call's id columns, by name (product_id in the offers query and in the
 * carts query are one): each name's key type, and for uuid or text its
 * dictionary and the columns coded from it, so that each inner query's
 * read leaves every column of that name coded in the values' order
 * (settle).  Columns are registered by address (a table's columns stay
 * where they are when the table moves) and forgotten when their table
 * goes.
 */
class CallKeys
{
  public:
	struct Key
	{
		std::string name;
		KeyType type;
		std::unique_ptr<KeyDictionary> dictionary; /* null for integers */
	};
	/* Whether some id column of the call is uuid or text. */
	bool codes_values() const
	{
		for (const Key &key : keys_)
			if (key.dictionary)
				return true;
		return false;
	}
	/* The key of the columns named name, or null when no query of the call had one. */
	const Key *find(const std::string &name) const;
	/* The id of column name as PostgreSQL shows it (shown_key): an integer as itself, a code as its value. */
	std::string shown(const std::string &name, int64_t id) const;
	/* The key named name, added with type when new; its type stays as first given. */
	Key &key(const std::string &name, KeyType type);
	/* A column coded from the dictionary of key name: it is renumbered with it. */
	void code_column(const std::string &name, IdColumn *column);
	void code_column(const std::string &name, Int64Column *column);
	/* Forgets the column at this address (its table goes). */
	void forget(const void *column);
	/*
	 * After a read: every dictionary that took new values numbered in
	 * key order, and every column coded from it rewritten (an IdColumn's
	 * distinct ids, an Int64Column's rows, through run; a value outside
	 * the codes, a column's fallback for NULL, stays as it is).  slices:
	 * KeyDictionary::number_in_key_order's.
	 */
	void settle(const PieceRunner &run = run_serially, size_t slices = 1);

	/*
	 * A parallel read of such ids: each process codes its rows apart, the
	 * calling backend through the call's dictionary (lane 0), worker w
	 * through one of its own (lane w + 1).  learn_lane: lane's code l of
	 * the ids named name is the call's codes[l].
	 */
	void learn_lane(const std::string &name, int64_t lane, std::vector<int64_t> codes);
	/*
	 * An Int64Column's rows hold code x stride + lane (so processes never
	 * give one value): each made its code in the call's dictionary; a
	 * value below 0 (a NULL's fallback) stays.
	 */
	void recode_lanes(const std::string &name, Int64Column &column, int64_t stride, const PieceRunner &run);
	/*
	 * Each of n values, a code of the dictionary of lane `lane` (learned),
	 * written as the call's code of its value; a value below 0 stays.  An
	 * IdColumn's part holds its process's own codes: so that a parallel
	 * read's parts join it as one dictionary of the call's codes, not one
	 * of every worker's own (InputTable::append_parts).
	 */
	void lane_to_call_codes(const std::string &name, int64_t lane, int64_t *values, size_t n) const;
	void forget_lanes() { lanes_.clear(); }

  private:
	struct Lane
	{
		std::string name;
		int64_t lane;
		std::vector<int64_t> codes;
	};
	/* the call's code of a row's value coded code x stride + lane */
	int64_t code_of(const std::vector<const std::vector<int64_t> *> &lanes, int64_t value, int64_t stride) const;
	std::vector<const std::vector<int64_t> *> lanes_of(const std::string &name, int64_t stride) const;
	std::vector<Lane> lanes_;

	struct Coded
	{
		KeyDictionary *dictionary;
		IdColumn *ids;
		Int64Column *rows;
	};
	KeyDictionary *dictionary_of(const std::string &name);
	std::vector<Key> keys_;
	std::vector<Coded> columns_;
};

/*
 * An id of the call's column `name` as an error names it: through keys
 * (CallKeys::shown) where the call has them, a uuid's or text's value in
 * place of its code; else the integer itself.
 */
std::string shown_id(const CallKeys *keys, const std::string &name, int64_t id);

} // namespace gpurec
