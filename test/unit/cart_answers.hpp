/*
 * cart_answers.hpp: the unit tests' comparison of two optimize_carts
 * answers, every cart's totals and every line's chosen offer, for the tests
 * that compute one answer two ways (GPU and CPU, through the GPU service and
 * in the caller).
 */
#pragma once

#include <gtest/gtest.h>

#include "../../src/carts.hpp"

namespace gpurec {

inline void expect_same_answers(const CartsAnswer &a, const CartsAnswer &b)
{
	ASSERT_EQ(a.scale, b.scale);
	ASSERT_EQ(a.carts.size(), b.carts.size());
	for (size_t c = 0; c < a.carts.size(); ++c)
	{
		const CartAnswer &x = a.carts[c], &y = b.carts[c];
		EXPECT_EQ(x.cart_id, y.cart_id);
		EXPECT_EQ(x.total.units, y.total.units);
		EXPECT_EQ(x.total.display_scale, y.total.display_scale);
		EXPECT_EQ(x.shipping.units, y.shipping.units);
		EXPECT_EQ(x.stores_used, y.stores_used);
		EXPECT_EQ(x.complete, y.complete);
		EXPECT_EQ(x.has_current, y.has_current);
		EXPECT_EQ(x.current_total.units, y.current_total.units);
	}
	ASSERT_EQ(a.lines.size(), b.lines.size());
	for (size_t l = 0; l < a.lines.size(); ++l)
	{
		EXPECT_EQ(a.lines[l].line, b.lines[l].line);
		EXPECT_EQ(a.lines[l].offer_row, b.lines[l].offer_row);
	}
}

} // namespace gpurec
