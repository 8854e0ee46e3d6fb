/*
 * test_roc_fitness.cpp: ROC fitness against a brute-force oracle written
 * here (every positive against every negative, every rank by counting), on
 * random populations with many ties, NaN, NULL scores and labels,
 * single-class and one-example individuals, in both formats; the seed
 * formula; every ERROR of the engine.  With a usable GPU, the GPU path must
 * give the CPU's counts and AUC bit for bit, on every way the GPU packs its
 * keys (float, integer and double scores), in parts, and it must give way
 * on allocation failure and stop on cancel.
 */
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <random>

#include "../../src/array_column.hpp"
#include "../../src/id_column.hpp"
#include "../../src/number_column.hpp"
#include "../../src/roc_fitness.hpp"
#include "chunk_arena.hpp"
#include "test_random.hpp"

namespace gpurec {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

/* ---- inputs -------------------------------------------------------------- */

/* One example as the oracle sees it: its score's order key and its label. */
struct Example
{
	int64_t key;
	bool positive;
};

struct LongInput
{
	IdColumn individual;
	LabelColumn label;
	NumberColumn score;
	std::map<int64_t, std::vector<Example>> examples; /* the oracle's copy, by id */

	explicit LongInput(NumberType type) : score(type) {}
	void add(int64_t id, bool positive)
	{
		individual.push_back(id);
		label.push_back(positive ? 1 : 0);
		examples[id].push_back({score.key(score.size() - 1), positive});
	}
	void add_double(int64_t id, double score_value, bool positive)
	{
		score.push_double(score_value);
		add(id, positive);
	}
	void add_integer(int64_t id, int64_t score_value, bool positive)
	{
		score.push_integer(score_value);
		add(id, positive);
	}
};

struct ArrayInput
{
	Int64Column ids;
	FloatArrayColumn scores;
	std::vector<int8_t> labels;
	std::map<int64_t, std::vector<Example>> examples;

	/* real[] (floats) or double precision[] scores */
	explicit ArrayInput(bool doubles = true) { scores.set_doubles(doubles); }

	/*
	 * One row as PostgreSQL holds an array: the elements that are there
	 * packed, and a bitmap of which are (none when all are).  valid[i]
	 * false: a NULL element.  Under real[], values are rounded to floats.
	 */
	void add(int64_t id, const std::vector<double> &values, const std::vector<bool> &valid)
	{
		ids.push_back(id);
		std::vector<Example> &mine = examples[id];
		std::vector<double> doubles;
		std::vector<float> floats;
		std::vector<uint8_t> present((values.size() + 7) / 8, 0);
		bool any_null = false;
		for (size_t i = 0; i < values.size(); ++i)
		{
			any_null |= !valid[i];
			if (!valid[i])
				continue;
			present[i / 8] |= static_cast<uint8_t>(1u << (i % 8));
			double v = scores.doubles() ? values[i] : static_cast<double>(static_cast<float>(values[i]));
			doubles.push_back(v);
			floats.push_back(static_cast<float>(v));
			if (i < labels.size() && labels[i] >= 0)
				mine.push_back({order_key_from_double(v), labels[i] == 1});
		}
		const void *data = scores.doubles() ? static_cast<const void *>(doubles.data()) : floats.data();
		scores.append_row(data, values.size(), any_null ? present.data() : nullptr);
	}
};

/* ---- the oracle ---------------------------------------------------------- */

struct Expected
{
	int64_t id, n_positive = 0, n_negative = 0;
	uint64_t twice_wins = 0;
	int64_t lowest_rank = 0, highest_rank = 0;
};

Expected brute_force(int64_t id, const std::vector<Example> &examples)
{
	Expected e;
	e.id = id;
	for (const Example &a : examples)
	{
		(a.positive ? e.n_positive : e.n_negative)++;
		if (!a.positive)
			continue;
		int64_t above = 0;
		for (const Example &b : examples)
		{
			above += b.key > a.key;
			if (!b.positive)
				e.twice_wins += a.key > b.key ? 2 : a.key == b.key ? 1 : 0;
		}
		int64_t rank = above + 1;
		e.lowest_rank = e.lowest_rank == 0 ? rank : std::min(e.lowest_rank, rank);
		e.highest_rank = std::max(e.highest_rank, rank);
	}
	return e;
}

void expect_oracle(const std::vector<RocResult> &got, const std::map<int64_t, std::vector<Example>> &examples)
{
	ASSERT_EQ(got.size(), examples.size());
	size_t i = 0;
	for (const auto &[id, mine] : examples) /* ascending id */
	{
		Expected want = brute_force(id, mine);
		const RocResult &r = got[i++];
		SCOPED_TRACE("individual " + std::to_string(id));
		EXPECT_EQ(r.individual_id, id);
		EXPECT_EQ(r.counts.n_positive, want.n_positive);
		EXPECT_EQ(r.counts.n_negative, want.n_negative);
		EXPECT_EQ(r.counts.lowest_positive_rank, want.lowest_rank);
		EXPECT_EQ(r.counts.highest_positive_rank, want.highest_rank);
		EXPECT_EQ(r.has_auc, want.n_positive > 0 && want.n_negative > 0);
		if (r.has_auc)
		{
			EXPECT_EQ(r.counts.twice_wins, want.twice_wins);
			double pairs = 2.0 * want.n_positive * want.n_negative;
			EXPECT_NEAR(r.auc, want.twice_wins / pairs, 1e-15);
			EXPECT_NEAR(r.fitness, r.auc - 0.5, 1e-15);
		}
	}
}

void expect_identical(const std::vector<RocResult> &got, const std::vector<RocResult> &want)
{
	ASSERT_EQ(got.size(), want.size());
	for (size_t i = 0; i < got.size(); ++i)
	{
		SCOPED_TRACE("individual " + std::to_string(want[i].individual_id));
		EXPECT_EQ(got[i].individual_id, want[i].individual_id);
		EXPECT_EQ(got[i].counts.n_positive, want[i].counts.n_positive);
		EXPECT_EQ(got[i].counts.n_negative, want[i].counts.n_negative);
		EXPECT_EQ(got[i].counts.twice_wins, want[i].counts.twice_wins);
		EXPECT_EQ(got[i].counts.lowest_positive_rank, want[i].counts.lowest_positive_rank);
		EXPECT_EQ(got[i].counts.highest_positive_rank, want[i].counts.highest_positive_rank);
		EXPECT_EQ(got[i].has_auc, want[i].has_auc);
		if (want[i].has_auc)
		{
			/* bit for bit */
			EXPECT_EQ(std::memcmp(&got[i].auc, &want[i].auc, sizeof(double)), 0) << got[i].auc;
			EXPECT_EQ(std::memcmp(&got[i].fitness, &want[i].fitness, sizeof(double)), 0);
		}
	}
}

/* ---- random populations -------------------------------------------------- */

enum class ScoreKind
{
	FewFloats,	  /* a dozen values that are floats exactly (real[]), NaN now and then: 32-bit keys */
	UnitDoubles,  /* doubles in [0, 1), some tied: 64-bit keys */
	Doubles,	  /* any double, both signs, NaN, -inf: 128-bit keys */
	SmallIntegers, /* a few integers, many ties */
	HugeIntegers  /* integers across the whole 64-bit range: 128-bit keys again */
};

struct Shape
{
	int individuals;
	int max_examples;
	ScoreKind kind;
};

double random_double(std::mt19937_64 &rng, ScoreKind kind)
{
	switch (kind)
	{
		case ScoreKind::FewFloats:
			return rng() % 60 == 0 ? kNaN : static_cast<double>(static_cast<int>(rng() % 13) - 4) / 4;
		case ScoreKind::UnitDoubles:
			return rng() % 4 == 0 ? static_cast<double>(rng() % 5) / 5 : std::ldexp(static_cast<double>(rng() >> 11), -53);
		case ScoreKind::Doubles:
			if (rng() % 60 == 0)
				return rng() % 2 ? kNaN : -std::numeric_limits<double>::infinity();
			if (rng() % 3 == 0)
				return static_cast<double>(rng() % 5) / 3; /* ties among doubles too */
			return std::ldexp(static_cast<double>(rng() % 1000000) - 500000, static_cast<int>(rng() % 40) - 20);
		default:
			return static_cast<double>(rng() % 7);
	}
}

int64_t random_integer(std::mt19937_64 &rng, ScoreKind kind)
{
	if (kind != ScoreKind::HugeIntegers)
		return static_cast<int64_t>(rng() % 7) - 3;
	if (rng() % 4 == 0)
		return rng() % 2 ? INT64_MAX : INT64_MIN;
	return (static_cast<int64_t>(rng() % 9) - 4) * (INT64_MAX / 5);
}

/* How many examples an individual gets, and which classes. */
int random_size(std::mt19937_64 &rng, int max_examples)
{
	switch (rng() % 5)
	{
		case 0:
			return 1;
		case 1:
			return 2;
		default:
			return 1 + static_cast<int>(rng() % max_examples);
	}
}

bool random_label(std::mt19937_64 &rng, int individual_kind)
{
	return individual_kind == 0 ? true : individual_kind == 1 ? false : rng() % 3 == 0;
}

LongInput random_long(std::mt19937_64 &rng, const Shape &shape)
{
	bool integers = shape.kind == ScoreKind::SmallIntegers || shape.kind == ScoreKind::HugeIntegers;
	LongInput in(integers ? NumberType::Integer : NumberType::Float8);
	std::vector<std::pair<int64_t, int>> plan; /* id, examples left */
	std::vector<int> kinds;
	for (int i = 0; i < shape.individuals; ++i)
	{
		plan.push_back({static_cast<int64_t>(rng() % 1000000) * 7 - 3500000 + i, random_size(rng, shape.max_examples)});
		kinds.push_back(static_cast<int>(rng() % 8)); /* 0: positives only, 1: negatives only */
	}
	/* rows of all individuals interleaved, as a query returns them */
	size_t left = plan.size();
	while (left > 0)
	{
		size_t i = rng() % plan.size();
		if (plan[i].second == 0)
			continue;
		bool positive = random_label(rng, kinds[i]);
		if (integers)
			in.add_integer(plan[i].first, random_integer(rng, shape.kind), positive);
		else
			in.add_double(plan[i].first, random_double(rng, shape.kind), positive);
		if (--plan[i].second == 0)
			--left;
	}
	return in;
}

/* real[] scores (doubles false) are the random doubles rounded to floats */
ArrayInput random_arrays(std::mt19937_64 &rng, const Shape &shape, int length, bool doubles = true)
{
	ArrayInput in(doubles);
	for (int e = 0; e < length; ++e)
		in.labels.push_back(rng() % 40 == 0 ? -1 : rng() % 3 == 0 ? 1 : 0);
	for (int i = 0; i < shape.individuals; ++i)
	{
		std::vector<double> values(length);
		std::vector<bool> valid(length);
		int null_share = static_cast<int>(rng() % 4); /* some individuals have many NULLs */
		for (int e = 0; e < length; ++e)
		{
			values[e] = random_double(rng, shape.kind);
			valid[e] = static_cast<int>(rng() % 10) >= null_share * null_share;
		}
		/* distinct ids (an id twice is an error) in random order, negative ones too */
		in.add((static_cast<int64_t>(rng() % 1000000) - 500000) * 10000 + i, values, valid);
	}
	return in;
}

ExecContext on(DeviceMode mode)
{
	ExecContext ctx;
	ctx.mode = mode;
	return ctx;
}

/* ---- the CPU path against the oracle -------------------------------------- */

constexpr ScoreKind kEveryKind[] = {ScoreKind::FewFloats, ScoreKind::UnitDoubles, ScoreKind::Doubles,
									ScoreKind::SmallIntegers, ScoreKind::HugeIntegers};
constexpr ScoreKind kDoubleKinds[] = {ScoreKind::FewFloats, ScoreKind::UnitDoubles, ScoreKind::Doubles};

/* small individuals (a comparison sort), then large ones (the radix sort) */
/*
 * The same rows, lying apart with gaps between them as a parallel read
 * leaves them: rows 7-49 joined from a worker's part by reference
 * (FloatArrayColumn::append_serialized), after and before rows of the
 * calling backend's own.  Every path must read each row where it is.
 */
struct RowsApart
{
	std::unique_ptr<Arena> arena = std::make_unique<Arena>(); /* the part's chunks: they must outlive scores */
	FloatArrayColumn scores;
};

RowsApart rows_apart(const FloatArrayColumn &scores)
{
	auto copy_row = [&scores](FloatArrayColumn &to, size_t r) {
		size_t n = static_cast<size_t>(scores.row_end(r) - scores.row_begin(r));
		std::vector<double> d;
		std::vector<float> f;
		std::vector<uint8_t> present((n + 7) / 8, 0);
		for (size_t e = 0; e < n; ++e)
		{
			size_t at = static_cast<size_t>(scores.row_begin(r)) + e;
			if (!scores.valid(at))
				continue;
			present[e / 8] |= static_cast<uint8_t>(1u << (e % 8));
			d.push_back(scores.value(at));
			f.push_back(static_cast<float>(scores.value(at)));
		}
		to.append_row(scores.doubles() ? static_cast<const void *>(d.data()) : f.data(), n,
					  scores.has_nulls() ? present.data() : nullptr);
	};
	RowsApart out;
	FloatArrayColumn part;
	FloatArrayColumn &joined = out.scores;
	part.set_doubles(scores.doubles());
	joined.set_doubles(scores.doubles());
	part.use_chunk_source(*out.arena);
	for (size_t r = 7; r < 50; ++r)
		copy_row(part, r);
	for (size_t r = 0; r < 7; ++r)
		copy_row(joined, r);
	std::vector<uint8_t> bytes = serialized_by_reference(part);
	ByteReader reader(bytes.data(), bytes.size(), out.arena.get());
	joined.append_serialized(reader);
	for (size_t r = 50; r < scores.size(); ++r)
		copy_row(joined, r);
	EXPECT_GT(joined.row_begin(7), joined.row_end(6)) << "no gap: nothing apart to test";
	return out;
}

TEST(RocFitness, LongFormatMatchesBruteForce)
{
	std::mt19937_64 rng = seeded_rng();
	for (ScoreKind kind : kEveryKind)
		for (Shape shape : {Shape{150, 60, kind}, Shape{6, 3000, kind}})
		{
			SCOPED_TRACE(static_cast<int>(kind));
			LongInput in = random_long(rng, shape);
			ExecContext ctx = on(DeviceMode::Cpu);
			expect_oracle(roc_fitness_long(in.individual, in.label, in.score, ctx), in.examples);
		}
}

/* individuals past kLargeSegment: the radix sort's 11-bit digits, keys of 32, 64 and 128 bits */
TEST(RocFitness, LargeIndividualsMatchBruteForce)
{
	constexpr int kLargeSegment = 20000; /* 11-bit digits from 16,384 examples */
	std::mt19937_64 rng = seeded_rng();
	for (ScoreKind kind : kEveryKind)
	{
		SCOPED_TRACE(static_cast<int>(kind));
		bool integers = kind == ScoreKind::SmallIntegers || kind == ScoreKind::HugeIntegers;
		LongInput in(integers ? NumberType::Integer : NumberType::Float8);
		for (int64_t id : {-7, 11})
			for (int e = 0; e < kLargeSegment; ++e)
			{
				bool positive = rng() % 3 == 0;
				if (integers)
					in.add_integer(id, random_integer(rng, kind), positive);
				else
					in.add_double(id, random_double(rng, kind), positive);
			}
		ExecContext ctx = on(DeviceMode::Cpu);
		expect_oracle(roc_fitness_long(in.individual, in.label, in.score, ctx), in.examples);
	}
}

TEST(RocFitness, ArrayFormatMatchesBruteForce)
{
	std::mt19937_64 rng = seeded_rng();
	for (int length : {1, 2, 7, 120, 2500})
		for (ScoreKind kind : kDoubleKinds)
			for (bool doubles : {true, false})
			{
				SCOPED_TRACE(static_cast<int>(kind));
				SCOPED_TRACE(doubles ? "double precision[]" : "real[]");
				ArrayInput in = random_arrays(rng, {length > 1000 ? 5 : 60, 0, kind}, length, doubles);
				ExecContext ctx = on(DeviceMode::Cpu);
				expect_oracle(roc_fitness_arrays(in.ids, in.scores, in.labels, ctx), in.examples);
			}
}

/* gpurec.cpu_threads changes who counts which segment, never a result */
TEST(RocFitness, ArrayFormatOfRowsApart)
{
	std::mt19937_64 rng = seeded_rng();
	for (bool doubles : {true, false})
	{
		SCOPED_TRACE(doubles ? "double precision[]" : "real[]");
		ArrayInput in = random_arrays(rng, {60, 0, ScoreKind::FewFloats}, 30000, doubles);
		ExecContext cpu = on(DeviceMode::Cpu);
		std::vector<RocResult> whole = roc_fitness_arrays(in.ids, in.scores, in.labels, cpu);
		RowsApart apart = rows_apart(in.scores);
		in.scores = std::move(apart.scores);
		expect_identical(roc_fitness_arrays(in.ids, in.scores, in.labels, cpu), whole);
	}
}

TEST(RocFitness, SameResultsOnOneThreadAsOnEveryCore)
{
	std::mt19937_64 rng = seeded_rng();
	LongInput long_in = random_long(rng, {200, 400, ScoreKind::UnitDoubles});
	ArrayInput array_in = random_arrays(rng, {40, 0, ScoreKind::Doubles}, 3000);
	ExecContext every_core = on(DeviceMode::Cpu);
	std::vector<RocResult> long_want = roc_fitness_long(long_in.individual, long_in.label, long_in.score, every_core);
	std::vector<RocResult> array_want = roc_fitness_arrays(array_in.ids, array_in.scores, array_in.labels, every_core);
	for (size_t threads : {1, 3})
	{
		SCOPED_TRACE("cpu_threads " + std::to_string(threads));
		ExecContext ctx = on(DeviceMode::Cpu);
		ctx.cpu_threads = threads;
		expect_identical(roc_fitness_long(long_in.individual, long_in.label, long_in.score, ctx), long_want);
		expect_identical(roc_fitness_arrays(array_in.ids, array_in.scores, array_in.labels, ctx), array_want);
		EXPECT_LE(ctx.cpu_threads_used, threads);
	}
}

/* real[] scores over the whole float range: NaN, infinities, denormals, -0 */
ArrayInput real_scores_over_the_float_range(std::mt19937_64 &rng)
{
	ArrayInput in(false);
	for (int e = 0; e < 5000; ++e)
		in.labels.push_back(static_cast<int8_t>(rng() % 2));
	for (int i = 0; i < 20; ++i)
	{
		std::vector<double> values(5000);
		for (double &v : values)
		{
			uint32_t bits = static_cast<uint32_t>(rng());
			float f;
			std::memcpy(&f, &bits, sizeof f);
			v = rng() % 4 == 0 ? static_cast<float>(rng() % 10) * (rng() % 2 ? 1 : -1) : f;
		}
		in.add(i, values, std::vector<bool>(values.size(), true));
	}
	return in;
}

TEST(RocFitness, ArrayFormatOfRealScoresAcrossTheFloatRange)
{
	std::mt19937_64 rng = seeded_rng();
	ArrayInput in = real_scores_over_the_float_range(rng);
	ExecContext ctx = on(DeviceMode::Cpu);
	expect_oracle(roc_fitness_arrays(in.ids, in.scores, in.labels, ctx), in.examples);
}

TEST(RocFitness, NaNAboveEveryNumberAndNegativeZeroIsZero)
{
	LongInput in(NumberType::Float8);
	in.add_double(1, kNaN, false);
	in.add_double(1, std::numeric_limits<double>::infinity(), true);
	in.add_double(1, -0.0, true);
	in.add_double(1, 0.0, false);
	ExecContext ctx = on(DeviceMode::Cpu);
	std::vector<RocResult> r = roc_fitness_long(in.individual, in.label, in.score, ctx);
	ASSERT_EQ(r.size(), 1u);
	/* +inf: below the NaN, above the 0; -0: below the NaN, tied with the 0 */
	EXPECT_EQ(r[0].auc, (0 + 1 + 0 + 0.5) / 4);
	EXPECT_EQ(r[0].counts.lowest_positive_rank, 2);
	EXPECT_EQ(r[0].counts.highest_positive_rank, 3);
}

/* The seed formula: mean over sorted positions of (TPR - FPR), when no scores tie. */
TEST(RocFitness, SeedFormulaWithoutTies)
{
	std::mt19937_64 rng = seeded_rng();
	for (int trial = 0; trial < 50; ++trial)
	{
		int n = 2 + static_cast<int>(rng() % 300);
		std::vector<double> scores(n);
		for (int i = 0; i < n; ++i)
			scores[i] = i + 0.5;
		std::shuffle(scores.begin(), scores.end(), rng);
		ArrayInput in;
		int p = 0;
		for (int i = 0; i < n; ++i)
		{
			in.labels.push_back(static_cast<int8_t>(rng() % 2));
			p += in.labels.back();
		}
		in.add(1, scores, std::vector<bool>(n, true));
		if (p == 0 || p == n)
			continue;
		/* walk the examples from the highest score down */
		std::vector<int> order(n);
		for (int i = 0; i < n; ++i)
			order[i] = i;
		std::sort(order.begin(), order.end(), [&](int a, int b) { return scores[a] > scores[b]; });
		double tp = 0, fp = 0, sum = 0;
		for (int i : order)
		{
			(in.labels[i] ? tp : fp) += 1;
			sum += tp / p - fp / (n - p); /* TPR so far - FPR so far */
		}
		double seed = sum / n;
		ExecContext ctx = on(DeviceMode::Cpu);
		EXPECT_NEAR(roc_fitness_arrays(in.ids, in.scores, in.labels, ctx)[0].fitness, seed, 1e-12);
	}
}

TEST(RocFitness, ResultDoesNotDependOnRowOrder)
{
	std::mt19937_64 rng = seeded_rng();
	LongInput in = random_long(rng, {40, 50, ScoreKind::FewFloats});
	std::vector<size_t> order(in.individual.size());
	for (size_t i = 0; i < order.size(); ++i)
		order[i] = i;
	std::shuffle(order.begin(), order.end(), rng);
	LongInput shuffled(NumberType::Float8);
	for (size_t row : order)
	{
		shuffled.score.push_double(double_from_order_key(in.score.key(row)));
		shuffled.add(in.individual.value_of(in.individual.code(row)), in.label[row] == 1);
	}
	ExecContext a = on(DeviceMode::Cpu), b = on(DeviceMode::Cpu);
	expect_identical(roc_fitness_long(shuffled.individual, shuffled.label, shuffled.score, a),
					 roc_fitness_long(in.individual, in.label, in.score, b));
}

TEST(RocFitness, EmptyInputs)
{
	for (DeviceMode mode : {DeviceMode::Cpu, DeviceMode::Gpu})
	{
		if (mode == DeviceMode::Gpu && !gpu_usable())
			continue;
		ExecContext ctx = on(mode);
		LongInput none(NumberType::Integer);
		EXPECT_TRUE(roc_fitness_long(none.individual, none.label, none.score, ctx).empty());
		ArrayInput arrays;
		EXPECT_TRUE(roc_fitness_arrays(arrays.ids, arrays.scores, arrays.labels, ctx).empty());
		/* zero-length arrays and labels: every individual, without examples */
		arrays.add(5, {}, {});
		arrays.add(-5, {}, {});
		std::vector<RocResult> r = roc_fitness_arrays(arrays.ids, arrays.scores, arrays.labels, ctx);
		ASSERT_EQ(r.size(), 2u);
		EXPECT_EQ(r[0].individual_id, -5);
		EXPECT_FALSE(r[0].has_auc);
		EXPECT_EQ(r[0].counts.n_positive + r[0].counts.n_negative, 0);
		EXPECT_EQ(r[0].counts.lowest_positive_rank, 0);
		/* every score NULL */
		ArrayInput nulls;
		nulls.labels = {1, 0, -1};
		nulls.add(1, {0, 0, 0}, {false, false, false});
		r = roc_fitness_arrays(nulls.ids, nulls.scores, nulls.labels, ctx);
		ASSERT_EQ(r.size(), 1u);
		EXPECT_EQ(r[0].counts.n_positive + r[0].counts.n_negative, 0);
	}
}

/* ---- errors --------------------------------------------------------------- */

void expect_error(const std::function<void()> &call, const char *sqlstate, const std::string &message)
{
	try
	{
		call();
		ADD_FAILURE() << "no error; expected: " << message;
	}
	catch (const Error &e)
	{
		EXPECT_STREQ(e.sqlstate(), sqlstate);
		EXPECT_EQ(e.what(), message);
	}
}

TEST(RocFitness, ArrayErrors)
{
	ArrayInput in;
	in.labels = {1, 0, 1};
	in.add(7, {1, 2, 3}, {true, true, true});
	in.add(8, {1, 2}, {true, true});
	ExecContext ctx = on(DeviceMode::Cpu);
	expect_error([&] { roc_fitness_arrays(in.ids, in.scores, in.labels, ctx); },
				 sqlstate::invalid_parameter_value, "the scores of individual 8 have 2 elements, the labels 3");

	ArrayInput twice;
	twice.labels = {1, 0};
	twice.add(3, {1, 2}, {true, true});
	twice.add(4, {1, 2}, {true, true});
	twice.add(3, {2, 1}, {true, true});
	expect_error([&] { roc_fitness_arrays(twice.ids, twice.scores, twice.labels, ctx); },
				 sqlstate::invalid_parameter_value, "individual 3 appears more than once");
}

/* ---- scored segments (roc_counts_on_cpu): fit_exponent's AUC -------------- */

/* -1, 0, 1: a below, tied with, above b; NaN above every number and tied with NaN, as PostgreSQL sorts float8 */
int compare_scores(double a, double b)
{
	if (std::isnan(a) || std::isnan(b))
		return static_cast<int>(std::isnan(a)) - static_cast<int>(std::isnan(b));
	return static_cast<int>(a > b) - static_cast<int>(a < b);
}

/* One segment by brute force over the doubles themselves: every positive against every negative, ties half. */
struct PairOracle
{
	RocCounts counts;
	int64_t wins = 0, ties = 0;

	PairOracle(const std::vector<double> &scores, const std::vector<uint8_t> &labels)
	{
		RocCounts &c = counts;
		for (size_t a = 0; a < scores.size(); ++a)
		{
			(labels[a] ? c.n_positive : c.n_negative)++;
			if (!labels[a])
				continue;
			int64_t above = 0;
			for (size_t b = 0; b < scores.size(); ++b)
			{
				int order = compare_scores(scores[a], scores[b]);
				above += order < 0;
				if (!labels[b])
				{
					wins += order > 0;
					ties += order == 0;
				}
			}
			int64_t rank = above + 1; /* rank() OVER (ORDER BY score DESC) */
			c.lowest_positive_rank = c.lowest_positive_rank == 0 ? rank : std::min(c.lowest_positive_rank, rank);
			c.highest_positive_rank = std::max(c.highest_positive_rank, rank);
		}
		c.twice_wins = static_cast<uint64_t>(2 * wins + ties);
	}
	/* (wins + ties / 2) / pairs: exact numerator and denominator, so one rounding, as auc_of's */
	double auc() const
	{
		return (static_cast<double>(wins) + 0.5 * static_cast<double>(ties)) /
			   (static_cast<double>(counts.n_positive) * static_cast<double>(counts.n_negative));
	}
};

/* The engine's AUC of one segment, as fit_exponent takes it. */
double auc_of_scores(const std::vector<double> &scores, const std::vector<uint8_t> &labels)
{
	ExecContext ctx = on(DeviceMode::Cpu);
	std::vector<RocCounts> counts = roc_counts_on_cpu({{scores.data(), labels.data(), scores.size()}}, ctx);
	EXPECT_TRUE(has_auc(counts.at(0)));
	return auc_of(counts.at(0));
}

/* moved from test_geo.cpp with geo's own AUC, which this one replaced */
TEST(RocFitness, AucOfScoredSegmentCountsTiesHalf)
{
	EXPECT_EQ(auc_of_scores({1, 2, 3, 4}, {0, 0, 1, 1}), 1.0);
	EXPECT_EQ(auc_of_scores({4, 3, 2, 1}, {0, 0, 1, 1}), 0.0);
	EXPECT_EQ(auc_of_scores({1, 1, 1, 1}, {0, 1, 0, 1}), 0.5);
	/* positive 2 beats negative 1, ties negative 2: (1 + 0.5) / 2 */
	EXPECT_EQ(auc_of_scores({1, 2, 2}, {0, 0, 1}), 0.75);
}

struct RandomSegment
{
	std::vector<double> scores;
	std::vector<uint8_t> labels;
};

/*
 * Segments of every kind of score (ties, NaN, infinities, -0 among the
 * doubles), of every size from none to past the 11-bit radix digits, some
 * with one class only, some sharing their labels (as fit_exponent's
 * exponents share a user's).
 */
std::vector<RandomSegment> random_segments(std::mt19937_64 &rng, ScoreKind kind)
{
	std::vector<RandomSegment> out;
	for (int size : {0, 1, 2, 3, 17, 255, 256, 1000, 20000})
		for (int individual_kind : {0, 1, 2, 2, 2})
		{
			if (size > 1000 && individual_kind != 2)
				continue;
			RandomSegment segment;
			for (int i = 0; i < size; ++i)
			{
				double v = random_double(rng, kind);
				if (rng() % 50 == 0)
					v = rng() % 2 ? -0.0 : std::numeric_limits<double>::infinity();
				segment.scores.push_back(v);
				/* few positives in the large ones: the oracle is quadratic in them */
				segment.labels.push_back(size > 1000 ? rng() % 20 == 0 : random_label(rng, individual_kind));
			}
			out.push_back(std::move(segment));
			if (individual_kind == 2 && size > 0)
			{
				RandomSegment same_labels{{}, out.back().labels};
				for (int i = 0; i < size; ++i)
					same_labels.scores.push_back(random_double(rng, kind));
				out.push_back(std::move(same_labels));
			}
		}
	std::shuffle(out.begin(), out.end(), rng);
	return out;
}

std::vector<ScoredSegment> views_of(const std::vector<RandomSegment> &segments)
{
	std::vector<ScoredSegment> views;
	for (const RandomSegment &s : segments)
		views.push_back({s.scores.data(), s.labels.data(), s.scores.size()});
	return views;
}

TEST(RocFitness, ScoredSegmentsMatchEveryPair)
{
	std::mt19937_64 rng = seeded_rng();
	for (ScoreKind kind : kDoubleKinds)
	{
		SCOPED_TRACE(static_cast<int>(kind));
		std::vector<RandomSegment> segments = random_segments(rng, kind);
		ExecContext ctx = on(DeviceMode::Cpu);
		std::vector<RocCounts> got = roc_counts_on_cpu(views_of(segments), ctx);
		ASSERT_EQ(got.size(), segments.size());
		for (size_t s = 0; s < segments.size(); ++s)
		{
			SCOPED_TRACE("segment " + std::to_string(s) + " of " + std::to_string(segments[s].scores.size()));
			PairOracle want(segments[s].scores, segments[s].labels);
			EXPECT_EQ(got[s].n_positive, want.counts.n_positive);
			EXPECT_EQ(got[s].n_negative, want.counts.n_negative);
			EXPECT_EQ(got[s].lowest_positive_rank, want.counts.lowest_positive_rank);
			EXPECT_EQ(got[s].highest_positive_rank, want.counts.highest_positive_rank);
			EXPECT_EQ(has_auc(got[s]), want.counts.n_positive > 0 && want.counts.n_negative > 0);
			if (has_auc(got[s]))
			{
				EXPECT_EQ(got[s].twice_wins, want.counts.twice_wins);
				EXPECT_EQ(auc_of(got[s]), want.auc()); /* bit for bit */
			}
		}
	}
}

/* one segment alone or among others, on one thread or every core: the same counts */
TEST(RocFitness, ScoredSegmentsAloneOrTogether)
{
	std::mt19937_64 rng = seeded_rng();
	std::vector<RandomSegment> segments = random_segments(rng, ScoreKind::Doubles);
	ExecContext every_core = on(DeviceMode::Cpu);
	std::vector<RocCounts> together = roc_counts_on_cpu(views_of(segments), every_core);
	for (size_t threads : {1, 3})
	{
		ExecContext ctx = on(DeviceMode::Cpu);
		ctx.cpu_threads = threads;
		std::vector<RocCounts> again = roc_counts_on_cpu(views_of(segments), ctx);
		ASSERT_EQ(again.size(), together.size());
		for (size_t s = 0; s < segments.size(); ++s)
		{
			SCOPED_TRACE("cpu_threads " + std::to_string(threads) + ", segment " + std::to_string(s));
			std::vector<RocCounts> alone = roc_counts_on_cpu({views_of(segments)[s]}, ctx);
			for (const RocCounts &c : {again[s], alone.at(0)})
			{
				EXPECT_EQ(c.n_positive, together[s].n_positive);
				EXPECT_EQ(c.n_negative, together[s].n_negative);
				EXPECT_EQ(c.twice_wins, together[s].twice_wins);
				EXPECT_EQ(c.lowest_positive_rank, together[s].lowest_positive_rank);
				EXPECT_EQ(c.highest_positive_rank, together[s].highest_positive_rank);
			}
		}
	}
	ExecContext ctx = on(DeviceMode::Cpu);
	EXPECT_TRUE(roc_counts_on_cpu({}, ctx).empty());
}

/*
 * gpurec_shards' parts: the individuals split over three parts (one
 * empty), merged in any part order, are the brute force's rows in id
 * order; an individual in two parts calls split with the least such id
 * and its least and greatest part; other bytes are 22P03.
 */
TEST(RocFitness, PartsMergeAsOneServer)
{
	std::mt19937_64 rng = seeded_rng();
	LongInput in = random_long(rng, Shape{150, 60, ScoreKind::Doubles});
	ExecContext ctx = on(DeviceMode::Cpu);
	std::vector<RocResult> all = roc_fitness_long(in.individual, in.label, in.score, ctx);
	std::vector<std::vector<RocResult>> parts(3);
	for (const RocResult &r : all)
		parts[rng() % 2 ? 2 : 0].push_back(r); /* part 1 stays empty */
	std::shuffle(parts[2].begin(), parts[2].end(), rng);
	RocPartsMerge merge;
	for (const auto &part : parts)
	{
		std::vector<uint8_t> bytes = roc_part(part);
		merge.append_part(bytes.data(), bytes.size());
	}
	auto no_split = [](int64_t id, size_t, size_t) { ADD_FAILURE() << "individual " << id << " split"; };
	expect_oracle(merge.rows(no_split), in.examples);

	RocPartsMerge twice;
	for (size_t p = 0; p < 3; ++p)
	{
		std::vector<uint8_t> bytes = roc_part(p == 1 ? std::vector<RocResult>{} : all);
		twice.append_part(bytes.data(), bytes.size());
	}
	int64_t split_id = 0;
	size_t split_part = 9, split_other = 9, splits = 0;
	twice.rows([&](int64_t id, size_t part, size_t other) {
		if (splits++ == 0)
		{
			split_id = id;
			split_part = part;
			split_other = other;
		}
	});
	EXPECT_EQ(splits, all.size());
	EXPECT_EQ(split_id, in.examples.begin()->first);
	EXPECT_EQ(split_part, 0u);
	EXPECT_EQ(split_other, 2u);

	std::vector<uint8_t> good = roc_part(all);
	for (size_t cut : {size_t(0), size_t(5), good.size() - 1})
	{
		RocPartsMerge bad;
		expect_error([&] { bad.append_part(good.data(), cut); }, sqlstate::invalid_binary_representation,
					 "malformed roc_fitness part of a partition");
	}
	std::vector<uint8_t> other_version = good;
	other_version[4] = 99;
	RocPartsMerge bad;
	expect_error([&] { bad.append_part(other_version.data(), other_version.size()); },
				 sqlstate::invalid_binary_representation, "malformed roc_fitness part of a partition");
}

TEST(RocFitness, ScoredSegmentTooLarge)
{
	double score = 0;
	uint8_t label = 0;
	ExecContext ctx = on(DeviceMode::Cpu);
	size_t too_many = size_t(UINT32_MAX) + 1; /* refused before a score is read */
	expect_error([&] { roc_counts_on_cpu({{&score, &label, too_many}}, ctx); }, sqlstate::program_limit_exceeded,
				 "a segment of 4294967296 examples, more than an AUC can count");
}

/*
 * Cancel while the workers count: the error comes through, the workers
 * stop, and the next call counts everything again.  The segments are large
 * enough (a million examples each) that counting lasts longer than the
 * calling thread's first wait, whatever the number of cores.
 */
TEST(RocFitness, CancelStopsTheCpuPath)
{
	struct Cancelled
	{
	};
	std::mt19937_64 rng = seeded_rng();
	IdColumn individual;
	LabelColumn label;
	NumberColumn score(NumberType::Float8);
	for (int e = 0; e < 1000000; ++e)
		for (int64_t i = 1; i <= 4; ++i)
		{
			individual.push_back(i);
			label.push_back(rng() % 3 == 0 ? 1 : 0);
			score.push_double(random_double(rng, ScoreKind::UnitDoubles));
		}
	ExecContext whole = on(DeviceMode::Cpu);
	std::vector<RocResult> want = roc_fitness_long(individual, label, score, whole);

	ExecContext ctx = on(DeviceMode::Cpu);
	int calls = 0;
	ctx.check_interrupts = [&] {
		if (++calls == 2) /* the first check is before the counting, the second during it */
			throw Cancelled();
	};
	EXPECT_THROW(roc_fitness_long(individual, label, score, ctx), Cancelled);
	EXPECT_EQ(calls, 2);
	ExecContext again = on(DeviceMode::Cpu);
	expect_identical(roc_fitness_long(individual, label, score, again), want);
}

TEST(RocFitness, GpuModeWithoutGpuIsAnError)
{
	if (gpu_usable())
		GTEST_SKIP() << "a GPU is usable";
	LongInput in(NumberType::Integer);
	in.add_integer(1, 1, true);
	ExecContext ctx = on(DeviceMode::Gpu);
	EXPECT_THROW(roc_fitness_long(in.individual, in.label, in.score, ctx), Error);
}

/* ---- the GPU path against the CPU path ------------------------------------ */

class RocFitnessGpu : public ::testing::Test
{
  protected:
	void SetUp() override
	{
		if (!gpu_usable())
			GTEST_SKIP() << "no usable GPU";
	}

	/* the CPU's results, after checking that the GPU gives the same */
	static std::vector<RocResult> compare_long(const LongInput &in, size_t gpu_memory_budget = 0)
	{
		ExecContext cpu = on(DeviceMode::Cpu), gpu = on(DeviceMode::Gpu);
		gpu.gpu_memory_budget = gpu_memory_budget;
		std::vector<RocResult> want = roc_fitness_long(in.individual, in.label, in.score, cpu);
		std::vector<RocResult> got = roc_fitness_long(in.individual, in.label, in.score, gpu);
		EXPECT_TRUE(gpu.used_gpu);
		expect_identical(got, want);
		return want;
	}
	static std::vector<RocResult> compare_arrays(const ArrayInput &in, size_t gpu_memory_budget = 0)
	{
		ExecContext cpu = on(DeviceMode::Cpu), gpu = on(DeviceMode::Gpu);
		gpu.gpu_memory_budget = gpu_memory_budget;
		std::vector<RocResult> want = roc_fitness_arrays(in.ids, in.scores, in.labels, cpu);
		std::vector<RocResult> got = roc_fitness_arrays(in.ids, in.scores, in.labels, gpu);
		EXPECT_TRUE(gpu.used_gpu);
		expect_identical(got, want);
		return want;
	}
};

TEST_F(RocFitnessGpu, LongFormatEveryKeyLayout)
{
	std::mt19937_64 rng = seeded_rng();
	for (ScoreKind kind : kEveryKind)
	{
		SCOPED_TRACE(static_cast<int>(kind));
		/* small individuals, then individuals of many block tiles with long tie groups */
		LongInput small = random_long(rng, {700, 40, kind});
		expect_oracle(compare_long(small), small.examples);
		compare_long(random_long(rng, {12, 60000, kind}));
	}
}

TEST_F(RocFitnessGpu, ArrayFormatEveryKeyLayout)
{
	std::mt19937_64 rng = seeded_rng();
	for (ScoreKind kind : kDoubleKinds)
		for (bool doubles : {true, false})
		{
			SCOPED_TRACE(static_cast<int>(kind));
			SCOPED_TRACE(doubles ? "double precision[]" : "real[]");
			ArrayInput small = random_arrays(rng, {300, 0, kind}, 50, doubles);
			expect_oracle(compare_arrays(small), small.examples);
			compare_arrays(random_arrays(rng, {8, 0, kind}, 70000, doubles));
			compare_arrays(random_arrays(rng, {3000, 0, kind}, 1, doubles)); /* one example each */
		}
}

TEST_F(RocFitnessGpu, ArrayFormatOfRealScoresInFloatKeys)
{
	std::mt19937_64 rng = seeded_rng();
	ArrayInput in = real_scores_over_the_float_range(rng);
	expect_oracle(compare_arrays(in), in.examples);
}

TEST_F(RocFitnessGpu, ArrayFormatOfRowsApart)
{
	std::mt19937_64 rng = seeded_rng();
	for (bool doubles : {true, false})
	{
		SCOPED_TRACE(doubles ? "double precision[]" : "real[]");
		ArrayInput in = random_arrays(rng, {60, 0, ScoreKind::FewFloats}, 30000, doubles);
		std::vector<RocResult> whole = compare_arrays(in);
		RowsApart apart = rows_apart(in.scores);
		in.scores = std::move(apart.scores);
		expect_identical(compare_arrays(in), whole);
	}
}

TEST_F(RocFitnessGpu, InParts)
{
	std::mt19937_64 rng = seeded_rng();
	/* budgets that leave room for a handful of individuals per part */
	LongInput rows = random_long(rng, {60, 8000, ScoreKind::FewFloats});
	compare_long(rows, rows.individual.size() * 20 + 2 * 8000 * 40);
	ArrayInput arrays = random_arrays(rng, {40, 0, ScoreKind::FewFloats}, 20000);
	compare_arrays(arrays, 5 * 20000 * 50);
}

TEST_F(RocFitnessGpu, AllocationFailure)
{
	std::mt19937_64 rng = seeded_rng();
	ArrayInput in = random_arrays(rng, {3, 0, ScoreKind::FewFloats}, 1000);
	ExecContext gpu = on(DeviceMode::Gpu);
	gpu.fail_gpu_alloc = true;
	EXPECT_THROW(roc_fitness_arrays(in.ids, in.scores, in.labels, gpu), GpuOutOfMemory);
	/* under auto, large enough for the GPU: computed on the CPU, with a NOTICE */
	ArrayInput large = random_arrays(rng, {30, 0, ScoreKind::FewFloats}, 100000);
	ExecContext automatic = on(DeviceMode::Auto), cpu = on(DeviceMode::Cpu);
	automatic.fail_gpu_alloc = true;
	std::string notice;
	automatic.notice = [&](const std::string &text) { notice = text; };
	expect_identical(roc_fitness_arrays(large.ids, large.scores, large.labels, automatic),
					 roc_fitness_arrays(large.ids, large.scores, large.labels, cpu));
	EXPECT_FALSE(automatic.used_gpu);
	EXPECT_NE(notice.find("computing on the CPU instead"), std::string::npos) << notice;
}

TEST_F(RocFitnessGpu, CancelStopsTheGpuPath)
{
	struct Cancelled
	{
	};
	std::mt19937_64 rng = seeded_rng();
	LongInput in = random_long(rng, {50, 2000, ScoreKind::FewFloats});
	ExecContext gpu = on(DeviceMode::Gpu);
	gpu.check_interrupts = [] { throw Cancelled(); };
	EXPECT_THROW(roc_fitness_long(in.individual, in.label, in.score, gpu), Cancelled);
	/* and the next call works */
	compare_long(in);
}

TEST_F(RocFitnessGpu, ReportsTransferAndCompute)
{
	std::mt19937_64 rng = seeded_rng();
	ArrayInput in = random_arrays(rng, {20, 0, ScoreKind::FewFloats}, 20000);
	ExecContext gpu = on(DeviceMode::Gpu);
	roc_fitness_arrays(in.ids, in.scores, in.labels, gpu);
	EXPECT_GT(gpu.times.transfer_ms, 0);
	EXPECT_GT(gpu.times.compute_ms, 0);
}

/*
 * Packed labels: every length around the bitmaps' byte boundaries, each
 * label true, false or NULL at random, comes back as it was; bytes that
 * pack_labels did not write are 22P03.
 */
TEST(PackedLabels, RoundTripAndMalformed)
{
	std::mt19937_64 rng(20261128);
	for (size_t n : {size_t(0), size_t(1), size_t(7), size_t(8), size_t(9), size_t(63), size_t(64), size_t(65), size_t(100000)})
	{
		std::vector<int8_t> labels(n);
		for (int8_t &label : labels)
			label = static_cast<int8_t>(static_cast<int>(rng() % 3) - 1);
		std::vector<uint8_t> packed = pack_labels(labels);
		EXPECT_EQ(packed.size(), 9 + 2 * ((n + 7) / 8)) << n;
		EXPECT_EQ(unpack_labels(packed.data(), packed.size()), labels) << n;
		if (n == 0)
			continue;
		for (std::vector<uint8_t> bad : {std::vector<uint8_t>(packed.begin(), packed.end() - 1),
										 [&] { auto b = packed; b[0] = 2; return b; }(),
										 [&] { auto b = packed; b[1] ^= 0x80; return b; }()})
		{
			try
			{
				unpack_labels(bad.data(), bad.size());
				ADD_FAILURE() << "malformed packed labels of " << n << " accepted";
			}
			catch (const Error &e)
			{
				EXPECT_STREQ(e.sqlstate(), sqlstate::invalid_binary_representation) << n;
			}
		}
	}
}

} // namespace
} // namespace gpurec
