#!/usr/bin/env python3
"""The linearizability checker (tools/jepsen/lincheck.py) on hand-made
histories: good ones it must pass and bad ones it must catch, so that a
checker that passes everything fails here.
Usage: test_lincheck.py [SOURCE_ROOT]"""
import os
import random
import sys
import unittest

root = sys.argv.pop(1) if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
sys.path.insert(0, os.path.join(root, "tools", "jepsen"))
import lincheck  # noqa: E402


def op(p, f, start, end, arg=None, ret=None, ok=True, key="k"):
    return {"p": p, "key": key, "f": f, "arg": arg, "start": start, "end": end, "ok": ok, "ret": ret}


def verdict(history, **kw):
    res = lincheck.check(history, **kw)
    vs = {v for v, _ in res.values()}
    return "violation" if "violation" in vs else "unknown" if "unknown" in vs else "ok"


def detail(history):
    return "\n".join(l for v, d in lincheck.check(history).values() if v == "violation" for l in d)


class Good(unittest.TestCase):
    def test_sequential_register(self):
        h = [op(0, "set", 0, 1, "a"), op(1, "get", 2, 3, ret="a"), op(0, "set", 4, 5, "b"),
             op(1, "get", 6, 7, ret="b"), op(1, "delete_key", 8, 9, ret=True),
             op(0, "check", 10, 11, ret=False), op(0, "delete_key", 12, 13, ret=False)]
        self.assertEqual(verdict(h), "ok")

    def test_concurrent_read_sees_either(self):
        # the read overlaps the write: old or new value are both fine
        for seen in ("a", "b"):
            h = [op(0, "set", 0, 1, "a"), op(0, "set", 2, 5, "b"), op(1, "get", 3, 4, ret=seen)]
            self.assertEqual(verdict(h), "ok", seen)

    def test_reordered_concurrent_adds(self):
        # two overlapping adds may take either order, reads follow the real order
        h = [op(0, "add", 0, 10, 1, 2), op(1, "add", 1, 9, 1, 1), op(2, "get", 11, 12, ret="2")]
        self.assertEqual(verdict(h), "ok")

    def test_raised_add_may_have_happened(self):
        h = [op(0, "add", 0, 1, 5, 5), op(1, "add", 2, 3, 5, ok=False), op(0, "add", 4, 5, 5, 15)]
        self.assertEqual(verdict(h), "ok")

    def test_raised_add_may_not_have_happened(self):
        h = [op(0, "add", 0, 1, 5, 5), op(1, "add", 2, 3, 5, ok=False), op(0, "add", 4, 5, 5, 10)]
        self.assertEqual(verdict(h), "ok")

    def test_raised_op_takes_effect_late(self):
        # a raised set may land long after it raised (a retry in flight)
        h = [op(0, "set", 0, 1, "a"), op(1, "set", 2, 3, "b", ok=False),
             op(0, "get", 4, 5, ret="a"), op(0, "get", 6, 7, ret="b")]
        self.assertEqual(verdict(h), "ok")

    def test_raised_read_is_dropped(self):
        h = [op(0, "set", 0, 1, "a"), op(1, "get", 2, 3, ret=None, ok=False), op(1, "get", 4, 5, ret="a")]
        self.assertEqual(verdict(h), "ok")

    def test_compare_set_semantics(self):
        h = [op(0, "compare_set", 0, 1, ["x", "y"], "x"),   # missing, expected non-empty: no change
             op(0, "check", 2, 3, ret=False),
             op(0, "compare_set", 4, 5, ["", "a"], "a"),    # missing, expected empty: set
             op(0, "compare_set", 6, 7, ["a", "b"], "b"),   # equal: set
             op(0, "compare_set", 8, 9, ["a", "c"], "b"),   # differs: current
             op(1, "get", 10, 11, ret="b")]
        self.assertEqual(verdict(h), "ok")

    def test_queue_fifo(self):
        h = [op(0, "queue_push", 0, 1, "1"), op(0, "queue_push", 2, 3, "2"), op(1, "queue_len", 4, 5, ret=2),
             op(1, "queue_pop", 6, 7, ret="1"), op(2, "queue_pop", 8, 9, ret="2"), op(2, "queue_pop", 10, 11, ret=None)]
        self.assertEqual(verdict(h), "ok")

    def test_keys_are_independent(self):
        h = [op(0, "set", 0, 1, "a", key="x"), op(1, "set", 0, 1, "b", key="y"),
             op(0, "get", 2, 3, ret="b", key="y"), op(1, "get", 2, 3, ret="a", key="x")]
        self.assertEqual(verdict(h), "ok")

    def test_many_concurrent_counters(self):
        # a correct atomic counter, 6 procs with random overlaps and some raised adds
        rnd = random.Random(7)
        h, value, t = [], 0, 0.0
        for i in range(600):
            p = i % 6
            s = t + rnd.random()
            t = s + rnd.random() * 0.5
            if rnd.random() < 0.03:
                if rnd.random() < 0.5:
                    value += 1
                h.append(op(p, "add", s, t + 2, 1, ok=False))
            else:
                value += 1
                h.append(op(p, "add", s, t + rnd.random() * 0.3, 1, value))
        self.assertEqual(verdict(h), "ok")


class Bad(unittest.TestCase):
    def test_duplicate_add_answer(self):
        h = [op(0, "add", 0, 1, 1, 415), op(1, "add", 2, 3, 1, 415)]
        self.assertEqual(verdict(h), "violation")
        self.assertIn("add answered 415 2 times", detail(h))

    def test_duplicate_add_answer_concurrent(self):
        h = [op(0, "add", 0, 5, 1, 1), op(1, "add", 1, 6, 1, 1)]
        self.assertEqual(verdict(h), "violation")

    def test_stale_read_after_acknowledged_write(self):
        h = [op(0, "set", 0, 1, "a"), op(0, "set", 2, 3, "b"), op(1, "get", 4, 5, ret="a")]
        self.assertEqual(verdict(h), "violation")
        self.assertIn("get", detail(h))

    def test_lost_write(self):
        h = [op(0, "add", 0, 1, 1, 1), op(1, "add", 2, 3, 1, 2), op(2, "get", 4, 5, ret="1")]
        self.assertEqual(verdict(h), "violation")
        self.assertIn("acknowledged adds lost", detail(h))

    def test_lost_set(self):
        h = [op(0, "set", 0, 1, "a"), op(1, "delete_key", 2, 3, ret=True), op(0, "check", 4, 5, ret=True)]
        self.assertEqual(verdict(h), "violation")

    def test_compare_set_two_winners(self):
        h = [op(0, "set", 0, 1, "0"), op(1, "compare_set", 2, 5, ["0", "a"], "a"),
             op(2, "compare_set", 2, 5, ["0", "b"], "b")]
        self.assertEqual(verdict(h), "violation")
        self.assertIn("won 2 times", detail(h))

    def test_queue_item_popped_twice(self):
        h = [op(0, "queue_push", 0, 1, "x"), op(1, "queue_pop", 2, 3, ret="x"), op(2, "queue_pop", 2, 4, ret="x")]
        self.assertEqual(verdict(h), "violation")
        self.assertIn("popped 2 times", detail(h))

    def test_queue_order(self):
        h = [op(0, "queue_push", 0, 1, "1"), op(0, "queue_push", 2, 3, "2"), op(1, "queue_pop", 4, 5, ret="2")]
        self.assertEqual(verdict(h), "violation")

    def test_read_of_a_value_never_written(self):
        h = [op(0, "set", 0, 1, "a"), op(1, "get", 2, 3, ret="z")]
        self.assertEqual(verdict(h), "violation")

    def test_raised_write_cannot_be_undone(self):
        # a raised set may land, but once seen it cannot vanish
        h = [op(0, "set", 0, 1, "a"), op(1, "set", 2, 3, "b", ok=False),
             op(0, "get", 4, 5, ret="b"), op(0, "get", 6, 7, ret="a")]
        self.assertEqual(verdict(h), "violation")

    def test_violation_in_one_key_of_many(self):
        h = [op(0, "set", 0, 1, "a", key="x"), op(0, "set", 0, 1, "a", key="y"),
             op(1, "get", 2, 3, ret="a", key="x"), op(1, "get", 2, 3, ret="q", key="y")]
        res = lincheck.check(h)
        self.assertEqual(res["x"][0], "ok")
        self.assertEqual(res["y"][0], "violation")

    def test_broken_counter_among_many(self):
        # a sequential counter of 300 adds, one answer repeated
        rnd = random.Random(3)
        hist, t = [], 0.0
        for i in range(300):
            s = t + rnd.random()
            t = s + 0.2
            hist.append(op(i % 4, "add", s, t, 1, i + 1))
        hist[200]["ret"] = 150
        self.assertEqual(verdict(hist), "violation")


    def test_duplicate_add_found_by_the_search(self):
        # a set on the key keeps the counter detector out: the search must find it
        h = [op(0, "set", 0, 1, "0"), op(0, "add", 2, 3, 1, 1), op(1, "add", 4, 5, 1, 1)]
        self.assertEqual(verdict(h), "violation")


class Cap(unittest.TestCase):
    def test_raised_ops_do_not_blow_up_a_violation(self):
        # 10 raised sets early, 600 ops, then a stale read: proven, not "unknown"
        h = [op(100 + p, "set", 0.5, 1, "lost%d" % p, ok=False) for p in range(10)]
        h += [op(100 + p, "get", 1.5 + p * 0.01, 1.505 + p * 0.01, ret="lost%d" % p) for p in range(10)]
        for i in range(600):
            h.append(op(i % 3, "set" if i % 2 == 0 else "get", 2 + i, 2.5 + i, "v%d" % (i // 2),
                        None if i % 2 == 0 else "v%d" % (i // 2)))
        h.append(op(9, "get", 1000, 1001, ret="v3"))
        self.assertEqual(verdict(h, max_steps=100_000), "violation")

    def test_raised_ops_do_not_blow_up_a_good_history(self):
        # 30 raised sets pending through 2000 sequential, explained ops
        h = [op(100 + p, "set", 0.5, 1, "lost%d" % p, ok=False) for p in range(30)]
        for i in range(2000):
            h.append(op(i % 3, "set" if i % 2 == 0 else "get", 2 + i, 2.5 + i, "v%d" % (i // 2),
                        None if i % 2 == 0 else "v%d" % (i // 2)))
        self.assertEqual(verdict(h, max_steps=200_000), "ok")

    def test_cap_says_unknown(self):
        # many concurrent raised adds and a read no subset explains, with a tiny cap
        h = [op(p, "add", 0, 1, 1 << p, ok=False) for p in range(14)] + [op(99, "get", 2, 3, ret="0.5")]
        self.assertEqual(verdict(h, max_steps=50), "unknown")


if __name__ == "__main__":
    unittest.main(verbosity=1)
