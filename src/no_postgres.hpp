/*
 * no_postgres.hpp: included first by every engine source file (src/ files
 * not named pg_*, outside src/read/), it makes "the engine does not talk
 * to PostgreSQL" a compile error rather than a naming convention.
 *
 * Only src/pg_*.cpp and src/read/ include postgres.h.  An engine file that included it
 * before this header stops here; one that includes it after fails on the
 * poisoned names below, which postgres.h always declares.  The Makefile
 * also compiles the engine without PostgreSQL's include path, so the header
 * is not even found.  test/layers/check_layers.py shows all of it failing.
 */
#pragma once

#ifdef POSTGRES_H
#error "postgres.h in an engine file: only src/pg_*.cpp and src/read/ may include PostgreSQL headers"
#endif

#pragma GCC poison Datum palloc pfree ereport elog PG_FUNCTION_ARGS
