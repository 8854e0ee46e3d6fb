/*
 * run_on_threads.hpp: a PieceRunner (column_chunks.hpp) for the unit tests
 * that runs every piece on a thread of its own, the last first: the code
 * under test must not depend on the pieces' order, and must bear their
 * running at once.
 */
#pragma once

#include <functional>
#include <thread>
#include <vector>

namespace gpurec {

inline void run_on_threads(size_t pieces, const std::function<void(size_t)> &piece)
{
	std::vector<std::thread> threads;
	for (size_t i = pieces; i-- > 0;)
		threads.emplace_back(piece, i);
	for (std::thread &t : threads)
		t.join();
}

} // namespace gpurec
