/*
 * pg_roc_fitness.cpp: SQL entry points of the ROC fitness family
 * (roc_fitness over rows or arrays, roc_auc): each reads its arguments and
 * inner query, runs the engine (roc_fitness.hpp) and returns its result.
 */
#include "pg_boundary.hpp"

extern "C" {
#include "catalog/pg_type.h"
#include "utils/array.h"
#include "utils/memutils.h"
}

#include <algorithm>

#include "array_column.hpp"
#include "number_column.hpp"
#include "pg_arguments.hpp"
#include "pg_output.hpp"
#include "pg_settings.hpp"
#include "read/read.hpp"
#include "roc_fitness.hpp"

namespace gpurec {

namespace {


void write_results(FunctionCallInfo fcinfo, const std::vector<RocResult> &results, ExecContext &ctx)
{
	ResultWriter out(fcinfo, ctx, "roc_fitness");
	ResultIds individual(out, 0, ctx, "individual_id");
	for (const RocResult &r : results)
	{
		Datum values[7];
		bool nulls[7] = {false, !r.has_auc, !r.has_auc, false, false, r.counts.n_positive == 0,
						 r.counts.n_positive == 0};
		values[0] = individual(r.individual_id);
		values[1] = Float8GetDatum(r.auc);
		values[2] = Float8GetDatum(r.fitness);
		values[3] = Int64GetDatum(r.counts.n_positive);
		values[4] = Int64GetDatum(r.counts.n_negative);
		values[5] = Int64GetDatum(r.counts.lowest_positive_rank);
		values[6] = Int64GetDatum(r.counts.highest_positive_rank);
		out.put(values, nulls);
	}
	out.finish();
}

/* roc_fitness(scores_query): individual_id, label, score per row */
std::vector<RocResult> results_of_scores_query(FunctionCallInfo fcinfo, ExecContext &ctx)
{
	const char *scores_query = text_argument(fcinfo, 0);
	InputTable rows("scores query", {{"individual_id", ColumnKind::Id},
									 {"label", ColumnKind::Label},
									 {"score", ColumnKind::Number}});
	rows.set_gpu_from_rows(gpu_scores_from(ctx));
	read_inner_query(scores_query, rows, ctx);
	std::vector<RocResult> results = roc_fitness_long(rows.id(0), rows.label(1), rows.number(2), ctx);
	release_while_call_goes_on(std::move(rows), ctx);
	return results;
}

/* roc_fitness(population_query, labels): individual_id, scores per row */
std::vector<RocResult> results_of_population_query(FunctionCallInfo fcinfo, ExecContext &ctx)
{
	const char *population_query = text_argument(fcinfo, 0);
	std::vector<int8_t> labels = label_list_argument(fcinfo, 1, "labels");
	InputTable population("population query", {id_spec("individual_id"),
											   {"scores", ColumnKind::FloatArray}});
	population.set_gpu_from_rows(gpu_scores_from(ctx) / static_cast<double>(std::max<size_t>(1, labels.size())));
	read_inner_query(population_query, population, ctx);
	std::vector<RocResult> results = roc_fitness_arrays(population.int64(0), population.float_array(1), labels, ctx);
	release_while_call_goes_on(std::move(population), ctx);
	return results;
}

Datum roc_fitness_rows_body(FunctionCallInfo fcinfo)
{
	ExecContext ctx = exec_context_from_settings();
	write_results(fcinfo, results_of_scores_query(fcinfo, ctx), ctx);
	return (Datum) 0;
}

Datum roc_fitness_arrays_body(FunctionCallInfo fcinfo)
{
	ExecContext ctx = exec_context_from_settings();
	write_results(fcinfo, results_of_population_query(fcinfo, ctx), ctx);
	return (Datum) 0;
}

/*
 * _roc_fitness_part(query, labels): a partition's roc_fitness (labels
 * NULL: of a scores query; else of a population query) as one bytea, the
 * part gpurec_shards' coordinator merges (roc_part).  Integer ids only: a
 * dictionary's codes would mean nothing on the coordinator.
 */
Datum roc_fitness_part_rows(FunctionCallInfo fcinfo)
{
	if (PG_ARGISNULL(0))
		throw Error(sqlstate::null_value_not_allowed, "_roc_fitness_part needs a query");
	ExecContext ctx = exec_context_from_settings();
	std::vector<RocResult> results =
		PG_ARGISNULL(1) ? results_of_scores_query(fcinfo, ctx) : results_of_population_query(fcinfo, ctx);
	if (ctx.keys && ctx.keys->codes_values())
		throw Error(sqlstate::feature_not_supported, "gpurec_shards' roc_fitness takes integer individual ids",
					"A partition's query gives uuid or text ids.");
	Datum part = bytes_result(roc_part(results), "a partition's answer to roc_fitness is larger than 1 GB");
	report_timing("_roc_fitness_part", ctx);
	return part;
}

Datum roc_fitness_part_body(FunctionCallInfo fcinfo)
{
	return part_or_refusal([fcinfo] { return roc_fitness_part_rows(fcinfo); });
}

/*
 * _merge_roc_fitness(cluster, parts) and _merge_roc_auc(cluster, parts):
 * gpurec_shards' roc_fitness and roc_auc on the coordinator, the
 * partitions' parts (in partition order) merged into one server's rows.
 */
std::vector<RocResult> merged_roc_parts(FunctionCallInfo fcinfo, ExecContext &ctx)
{
	std::string cluster = text_argument(fcinfo, 0);
	Stopwatch clock;
	RocPartsMerge merge;
	for (const ByteSpan &part : partition_parts_argument(fcinfo, 1, "parts"))
		merge.append_part(part.data, part.size);
	std::vector<RocResult> rows = merge.rows([&](int64_t id, size_t part, size_t other_part) {
		throw split_key_error("individual", id, cluster, static_cast<int64_t>(part), static_cast<int64_t>(other_part));
	});
	ctx.times.read_ms += clock.elapsed_ms();
	return rows;
}

Datum merge_roc_fitness_body(FunctionCallInfo fcinfo)
{
	ExecContext ctx = exec_context_from_settings();
	write_results(fcinfo, merged_roc_parts(fcinfo, ctx), ctx);
	return (Datum) 0;
}

Datum merge_roc_auc_body(FunctionCallInfo fcinfo)
{
	ExecContext ctx = exec_context_from_settings();
	std::vector<RocResult> rows = merged_roc_parts(fcinfo, ctx);
	ResultWriter out(fcinfo, ctx, "_merge_roc_auc");
	for (const RocResult &r : rows)
	{
		Datum values[2] = {Int64GetDatum(r.individual_id), Float8GetDatum(r.auc)};
		bool nulls[2] = {false, !r.has_auc};
		out.put(values, nulls);
	}
	out.finish();
	return (Datum) 0;
}

/* roc_fitness(query, labels, id_type): labels NULL, a scores query; else a population query */
Datum roc_fitness_typed_body(FunctionCallInfo fcinfo)
{
	if (answered_null_as_strict(fcinfo, {1, 2}))
		return (Datum) 0;
	return PG_ARGISNULL(1) ? roc_fitness_rows_body(fcinfo) : roc_fitness_arrays_body(fcinfo);
}

/* roc_auc(scores float8[], labels boolean[]) for one individual */
Datum roc_auc_body(FunctionCallInfo fcinfo)
{
	ExecContext ctx = exec_context_from_settings();
	ArrayType *array = list_array_argument(fcinfo, 0, "scores");
	size_t count = pg_call([&] { return ArrayGetNItems(ARR_NDIM(array), ARR_DIMS(array)); });
	std::vector<int8_t> labels = label_list_argument(fcinfo, 1, "labels");
	if (count != labels.size())
		throw Error(sqlstate::invalid_parameter_value, "scores and labels must have the same length",
					"scores has " + std::to_string(count) + " elements, labels " +
						std::to_string(labels.size()) + ".");
	FloatArrayColumn scores;
	scores.set_doubles(true);
	scores.append_row(ARR_DATA_PTR(array), count, ARR_NULLBITMAP(array));
	Int64Column individual;
	individual.push_back(0);
	std::vector<RocResult> results = roc_fitness_arrays(individual, scores, labels, ctx);
	if (!results[0].has_auc)
	{
		fcinfo->isnull = true;
		return (Datum) 0;
	}
	return Float8GetDatum(results[0].auc);
}

/* _labels_pack(labels boolean[]): the labels as gpurec_shards sends them to its partitions (pack_labels) */
Datum labels_pack_body(FunctionCallInfo fcinfo)
{
	return bytes_result(pack_labels(label_list_argument(fcinfo, 0, "labels")), "too many labels to pack into one bytea");
}

/* _labels_unpack(packed bytea): the boolean[] that _labels_pack was given, with lower bound 1 */
Datum labels_unpack_body(FunctionCallInfo fcinfo)
{
	bytea *packed = pg_call([&] { return PG_GETARG_BYTEA_PP(0); });
	std::vector<int8_t> labels =
		unpack_labels(reinterpret_cast<const uint8_t *>(VARDATA_ANY(packed)), VARSIZE_ANY_EXHDR(packed));
	if (labels.size() > MaxArraySize)
		throw Error(sqlstate::program_limit_exceeded, "too many packed labels for one array");
	int count = static_cast<int>(labels.size());
	const int8_t *given = labels.data();
	ArrayType *array = pg_call([count, given] {
		if (count == 0)
			return construct_empty_array(BOOLOID);
		auto *values = static_cast<Datum *>(palloc(count * sizeof(Datum)));
		auto *nulls = static_cast<bool *>(palloc(count * sizeof(bool)));
		for (int i = 0; i < count; ++i)
		{
			values[i] = BoolGetDatum(given[i] == 1);
			nulls[i] = given[i] < 0;
		}
		int lower_bound = 1;
		return construct_md_array(values, nulls, 1, const_cast<int *>(&count), &lower_bound, BOOLOID, 1, true,
								  TYPALIGN_CHAR);
	});
	PG_RETURN_ARRAYTYPE_P(array);
}

} // namespace
} // namespace gpurec

GPUREC_SQL_FUNCTION(gpurec_labels_pack, gpurec::labels_pack_body)
GPUREC_PARTITION_FUNCTION(gpurec_labels_unpack, gpurec::labels_unpack_body)
GPUREC_SQL_FUNCTION(gpurec_roc_fitness_rows, gpurec::roc_fitness_rows_body)
GPUREC_SQL_FUNCTION(gpurec_roc_fitness_arrays, gpurec::roc_fitness_arrays_body)
GPUREC_SQL_FUNCTION(gpurec_roc_fitness_typed, gpurec::roc_fitness_typed_body)
GPUREC_SQL_FUNCTION(gpurec_roc_auc, gpurec::roc_auc_body)
GPUREC_PARTITION_FUNCTION(gpurec_roc_fitness_part, gpurec::roc_fitness_part_body)
GPUREC_SQL_FUNCTION(gpurec_merge_roc_fitness, gpurec::merge_roc_fitness_body)
GPUREC_SQL_FUNCTION(gpurec_merge_roc_auc, gpurec::merge_roc_auc_body)
