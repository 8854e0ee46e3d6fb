#!/usr/bin/env python3
"""gpurec.optimize_carts against brute force.

Every run draws fresh data (replay one with GPUREC_SEED):
  * small markets: few stores, prices from a small set spelled several ways
    (1.5 and 1.50: ties of value and of spelling), several offers per
    (product, store), NULLs in every input column, products nobody offers,
    duplicated cart lines, NULL quantities and current stores, stores
    without a shipping row, fees of 0 and 0.00, free_from NULL or exactly
    at a subtotal some assignment reaches;
  * large carts: 12, 16 and 20 distinct products, two candidate stores
    each, so that every one of up to 2^20 assignments can still be tried
    (in Gray-code order, one product moved per step).
The oracle enumerates every assignment of a cart's products to the stores
offering them, in exact decimals, and picks the least total, then the
fewest stores, then the smallest store ids in product_id order.  Rows are
compared as text: values and their spelling (a sum shows the most decimals
of what it sums, as SQL's numeric does).  Every check runs under
gpurec.device = cpu and under gpu where a GPU is usable (else auto), and
the two devices' rows are compared with each other.
"""
import itertools
import os
import sys
from decimal import Decimal

sys.path.insert(0, os.path.dirname(__file__))
from pgtest import check, drop_database, fresh_database, seeded_random, sql  # noqa: E402

rng = seeded_random()
DB = "gpurec_property_carts"

PRICES = ["0.5", "1", "1.0", "1.5", "1.50", "2", "2.00", "2.25", "3", "4", "4.5", "6"]
FEES = ["0", "0.00", "1", "1.5", "2.50", "3", "5"]


def lit(v):
    return "NULL" if v is None else str(v)


def dec(text):
    return Decimal(text)


def decimals(text):
    d = Decimal(text)
    return max(0, -d.as_tuple().exponent)


def best_offers(offers):
    """(product, store) -> the cheapest price text, fewest decimals on ties."""
    best = {}
    for product, store, price in offers:
        if product is None or store is None or price is None:
            continue
        key = (product, store)
        if key not in best or (dec(price), decimals(price)) < (dec(best[key]), decimals(best[key])):
            best[key] = price
    return best


def shipping_map(shipping):
    out = {}
    for store, fee, free_from in shipping:
        if store is None:
            continue
        out[store] = (dec(fee), None if free_from is None else dec(free_from))
    return out


def store_shipping(ship, store, subtotal):
    """The shipping a used store costs (a Decimal), given its subtotal."""
    if store not in ship:
        return None
    fee, free_from = ship[store]
    if free_from is not None and subtotal >= free_from:
        return None
    return fee


def cost_of(assignment, demands, best, ship):
    """assignment: product -> store. Returns (total, shipping, stores used)."""
    items = Decimal(0)
    subtotal = {}
    for product, store in assignment.items():
        cost = dec(best[(product, store)]) * demands[product]
        items += cost
        subtotal[store] = subtotal.get(store, Decimal(0)) + cost
    shipping = Decimal(0)
    for store in sorted(subtotal):
        fee = store_shipping(ship, store, subtotal[store])
        if fee is not None:
            shipping += fee
    return items + shipping, shipping, len(subtotal)


def oracle(carts, offers, shipping):
    """Expected rows (as text) of optimize_carts, by brute force."""
    best = best_offers(offers)
    ship = shipping_map(shipping)
    stores_of = {}
    for (product, store) in best:
        stores_of.setdefault(product, []).append(store)
    lines_of = {}
    for cart, product, quantity, store in carts:
        if cart is None or product is None:
            continue
        lines_of.setdefault(cart, []).append((product, 1 if quantity is None else quantity, store))
    rows = []
    for cart in sorted(lines_of):
        lines = lines_of[cart]
        demands = {}
        for product, quantity, _ in lines:
            demands[product] = demands.get(product, 0) + quantity
        offered = sorted(p for p in demands if p in stores_of)
        complete = len(offered) == len(demands)
        best_key = None
        for choice in itertools.product(*[sorted(stores_of[p]) for p in offered]):
            assignment = dict(zip(offered, choice))
            total, shipping_cost, used = cost_of(assignment, demands, best, ship)
            key = (total, used, choice)
            if best_key is None or key < best_key:
                best_key, best_assignment, best_shipping = key, assignment, shipping_cost
        total, used = best_key[0], best_key[1]
        # current: every line's store offers its product
        current = None
        if all(s is not None and (p, s) in best for p, _, s in lines):
            items = Decimal(0)
            subtotal = {}
            for p, q, s in lines:
                items += dec(best[(p, s)]) * q
                subtotal[s] = subtotal.get(s, Decimal(0)) + dec(best[(p, s)]) * q
            current = items
            for s in sorted(subtotal):
                fee = store_shipping(ship, s, subtotal[s])
                if fee is not None:
                    current += fee
        for product, quantity, _ in lines:
            store = best_assignment.get(product)
            rows.append([str(cart), str(product), str(quantity),
                         None if store is None else str(store),
                         None if store is None else best[(product, store)],
                         str(total), str(best_shipping), str(used), "t" if complete else "f",
                         None if current is None else str(current),
                         None if current is None else str(current - total)])
    return sorted(rows, key=sort_key)


def sort_key(row):
    return [(v is None, v) for v in row]


def load(carts, offers, shipping):
    sql(f"""
        DROP TABLE IF EXISTS carts, offers, shipping;
        CREATE TABLE carts (cart_id bigint, product_id integer, quantity integer, store_id bigint);
        CREATE TABLE offers (product_id bigint, store_id integer, price numeric);
        CREATE TABLE shipping (store_id bigint, fee numeric, free_from numeric);
        INSERT INTO carts VALUES {", ".join(f"({lit(a)}, {lit(b)}, {lit(c)}, {lit(d)})" for a, b, c, d in carts)};
        INSERT INTO offers VALUES {", ".join(f"({lit(a)}, {lit(b)}, {lit(c)})" for a, b, c in offers)};
        INSERT INTO shipping VALUES {", ".join(f"({lit(a)}, {lit(b)}, {lit(c)})" for a, b, c in shipping)};
    """)


CALL = ("SELECT * FROM gpurec.optimize_carts('SELECT * FROM carts', 'SELECT * FROM offers', "
        "'SELECT * FROM shipping')")


def run(device):
    rows = sql(CALL, settings={"gpurec.device": device})
    return sorted(rows, key=sort_key)


def first_difference(got, want):
    if len(got) != len(want):
        return f"{len(got)} rows, expected {len(want)}"
    for g, w in zip(got, want):
        if g != w:
            return f"got {g}, expected {w}"
    return "same"


def small_market():
    stores = rng.sample([-3, 1, 2, 5, 7, 11, 40], rng.randint(2, 5))
    products = rng.sample(range(1, 30), 6)
    offers = []
    for p in products:
        for s in stores:
            if rng.random() < 0.6:
                for _ in range(rng.choice([1, 1, 2])):
                    offers.append((p, s, rng.choice(PRICES)))
    # NULLs in every column of offers, skipped
    offers += [(None, stores[0], "0.01"), (products[0], None, "0.01"), (products[0], stores[0], None)]
    missing = 99  # nobody offers it
    shipping = []
    for s in stores:
        if rng.random() < 0.25:
            continue  # ships free
        shipping.append((s, rng.choice(FEES), None))
    shipping.append((None, "0.01", None))
    carts = []
    for cart in range(1, 9):
        n = rng.randint(1, 5)
        for _ in range(n):
            product = rng.choice(products + [missing] if rng.random() < 0.15 else products)
            carts.append((cart, product, rng.choice([1, 1, 2, 3, None]),
                          rng.choice(stores + [None]) if rng.random() < 0.9 else None))
        if rng.random() < 0.4:  # a duplicated line
            carts.append(rng.choice([c for c in carts if c[0] == cart]))
    carts += [(None, products[0], 1, None), (1, None, 1, None)]
    # free_from at the boundary: exactly a subtotal that some line at some store reaches
    best = best_offers(offers)
    subtotals = []
    for cart, product, quantity, _ in carts:
        for s in stores:
            if (product, s) in best:
                subtotals.append((s, dec(best[(product, s)]) * (quantity or 1)))
    shipping = [(s, fee, free_from) for s, fee, free_from in shipping]
    for i, (s, fee, _) in enumerate(shipping):
        if s is None or rng.random() < 0.3:
            continue
        at_store = [v for st, v in subtotals if st == s]
        if at_store and rng.random() < 0.7:
            shipping[i] = (s, fee, str(rng.choice(at_store) + rng.choice([0, 0, 0, dec(PRICES[0])])))
        else:
            shipping[i] = (s, fee, rng.choice(["2", "3.00", "4.5", "6"]))
    return carts, offers, shipping


def large_carts():
    """Carts of 12, 16 and 20 products, each offered by exactly two of six stores."""
    stores = [3, 4, 8, 9, 15, 16]
    carts, offers = [], []
    product = 1000
    for cart, n in ((101, 12), (102, 16), (103, 20)):
        for _ in range(n):
            product += 1
            for s in rng.sample(stores, 2):
                offers.append((product, s, f"{rng.randint(100, 900) / 100:.2f}"))
            carts.append((cart, product, rng.choice([1, 2]), None))
    shipping = [(s, f"{rng.randint(0, 12)}.{rng.randint(0, 9)}0",
                 rng.choice([None, f"{rng.randint(10, 60)}.00"])) for s in stores if s != 16]
    return carts, offers, shipping


def gray_oracle(carts, offers, shipping):
    """The optimum of each large cart, by every assignment in Gray-code order."""
    best = best_offers(offers)
    ship = shipping_map(shipping)
    out = {}
    for cart in sorted({c for c, _, _, _ in carts}):
        lines = [(p, q) for c, p, q, _ in carts if c == cart]
        products = sorted(p for p, _ in lines)
        quantity = dict(lines)
        options = [sorted(s for (pp, s) in best if pp == p) for p in products]
        cost = [[dec(best[(p, s)]) * quantity[p] for s in opts] for p, opts in zip(products, options)]
        choice = [0] * len(products)
        subtotal, uses = {}, {}
        for i in range(len(products)):
            s = options[i][0]
            subtotal[s] = subtotal.get(s, Decimal(0)) + cost[i][0]
            uses[s] = uses.get(s, 0) + 1
        items = sum(cost[i][0] for i in range(len(products)))
        best_key = None
        for step in range(1 << len(products)):
            if step:
                i = (step & -step).bit_length() - 1  # the product that moves
                old, new = options[i][choice[i]], options[i][1 - choice[i]]
                subtotal[old] -= cost[i][choice[i]]
                uses[old] -= 1
                choice[i] = 1 - choice[i]
                subtotal[new] = subtotal.get(new, Decimal(0)) + cost[i][choice[i]]
                uses[new] = uses.get(new, 0) + 1
                items += cost[i][choice[i]] - cost[i][1 - choice[i]]
            shipping_cost = Decimal(0)
            used = 0
            for s, n in uses.items():
                if n:
                    used += 1
                    fee = store_shipping(ship, s, subtotal[s])
                    if fee is not None:
                        shipping_cost += fee
            total = items + shipping_cost
            if best_key is None or (total, used) <= best_key[:2]:
                key = (total, used, tuple(options[i][choice[i]] for i in range(len(products))))
                if best_key is None or key < best_key:
                    best_key = key
        out[cart] = best_key
    return out


def main():
    devices = fresh_database(DB)
    try:
        rounds = int(os.environ.get("GPUREC_CART_ROUNDS", "25"))
        for r in range(rounds):
            carts, offers, shipping = small_market()
            load(carts, offers, shipping)
            want = oracle(carts, offers, shipping)
            got = {d: run(d) for d in devices}
            for d in devices:
                check(f"optimize_carts round {r} ({d}) = brute force", got[d] == want,
                      first_difference(got[d], want))
            check(f"optimize_carts round {r}: {devices[0]} rows = {devices[1]} rows",
                  got[devices[0]] == got[devices[1]], first_difference(got[devices[1]], got[devices[0]]))

        for r in range(int(os.environ.get("GPUREC_LARGE_CART_ROUNDS", "2"))):
            carts, offers, shipping = large_carts()
            load(carts, offers, shipping)
            want = gray_oracle(carts, offers, shipping)
            for d in devices:
                rows = run(d)
                ok = True
                why = ""
                for cart, (total, used, choice) in want.items():
                    mine = [row for row in rows if row[0] == str(cart)]
                    stores = tuple(int(row[3]) for row in sorted(mine, key=lambda row: int(row[1])))
                    if (Decimal(mine[0][5]), int(mine[0][7]), stores) != (total, used, choice):
                        ok = False
                        why = f"cart {cart}: got {mine[0][5]} with {stores}, expected {total} with {choice}"
                check(f"optimize_carts large carts round {r} ({d}): 12, 16 and 20 products exact", ok, why)
    finally:
        drop_database(DB)


main()
