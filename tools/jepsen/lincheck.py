#!/usr/bin/env python3
"""Linearizability checker for histories of a TCPStore (PyTorch's key-value store).

Wing & Gong's search with Lowe's memoization, as Porcupine does it: the
history is checked one key at a time (linearizability is P-compositional,
so a history is linearizable iff each key's sub-history is), and the search
never visits the same (set of ops linearized, model state) twice.  A search
that runs past its step or time cap says "unknown", never a wrong verdict.

History: JSON lines, one operation each:
  {"p": proc, "key": k, "f": op, "arg": ..., "start": t0, "end": t1,
   "ok": true|false, "ret": ...}
times from time.monotonic() on one kernel.  Values are str (the bytes
decoded as latin-1 by the recorder).  ok=false means the call raised: it
may or may not have taken effect, so it may be linearized anywhere after
its start, or never (it is given no return); a read that raised is dropped.

Ops and arguments (ret as the torch call returns it):
  set(value) -> None           get() -> value
  delete_key() -> bool         check() -> bool (the key exists)
  compare_set([expected, desired]) -> value (PyTorch's semantics, below)
  add(delta) -> int (the new value; a counter is stored as its decimal text)
  queue_push(value) -> None    queue_pop() -> value, or None: it was empty
  queue_len() -> int
Queues are modelled as their own keys (a key is used as a queue or as a
value, never both, by hpct-jepsen).

Usage: lincheck.py HISTORY.jsonl [--max-steps N] [--max-seconds S] [--quiet]
Exit 0 iff every key is linearizable; 1 on a violation; 2 when some key is
unknown (cap reached) and none is a violation.
"""
import argparse
import json
import sys
import time

READS = {"get", "check", "queue_len"}


class Model:
    """The state of one key: None (absent), a str (a value), or a tuple
    (a queue's items, oldest first).  step() returns (legal, new state):
    legal is whether the op may return what it returned from this state;
    an indeterminate op (ret unknown) is legal wherever it can run."""

    @staticmethod
    def step(state, op):
        f, arg, ret, known = op["f"], op.get("arg"), op.get("ret"), op["ok"]
        if f == "set":
            return True, arg
        if f == "get":
            # PyTorch's get waits for an absent key and raises: an ok get
            # always saw a value
            return state is not None and not isinstance(state, tuple) and ret == state, state
        if f == "check":
            return (not known) or ret == (state is not None and state != ()), state
        if f == "delete_key":
            return (not known) or ret == (state is not None), None
        if f == "compare_set":
            expected, desired = arg
            if state is None:
                new, out = (desired, desired) if expected == "" else (None, expected)
            elif state == expected:
                new, out = desired, desired
            else:
                new, out = state, state
            return (not known) or ret == out, new
        if f == "add":
            try:
                cur = 0 if state is None else int(state)
            except (TypeError, ValueError):
                return False, state
            new = cur + int(arg)
            return (not known) or ret == new, str(new)
        if f == "queue_push":
            q = state if isinstance(state, tuple) else ()
            return True, q + (arg,)
        if f == "queue_pop":
            q = state if isinstance(state, tuple) else ()
            if not q:
                return (not known) or ret is None, q
            return (not known) or ret == q[0], q[1:]
        if f == "queue_len":
            q = state if isinstance(state, tuple) else ()
            return ret == len(q), state
        raise ValueError("unknown op %r" % f)


class Node:
    __slots__ = ("op", "idx", "call", "match", "prev", "next")

    def __init__(self, op, idx, call):
        self.op, self.idx, self.call = op, idx, call
        self.match = self.prev = self.next = None


def _build(ops):
    """A doubly linked list of call and return events in time order.  At
    equal times calls come first: two ops whose ends touch are taken as
    concurrent, so a tie never makes a violation.  Indeterminate ops get no
    return event: they can always be put last, which is "never happened"."""
    events = []
    for i, op in enumerate(ops):
        events.append((op["start"], 0, i, True))
        if op["ok"]:
            events.append((op["end"], 1, i, False))
    events.sort()
    head = Node(None, -1, False)
    prev = head
    calls = {}
    for _, _, i, is_call in events:
        n = Node(ops[i], i, is_call)
        if is_call:
            calls[i] = n
        else:
            calls[i].match = n
        prev.next, n.prev = n, prev
        prev = n
    return head


def _lift(n):
    n.prev.next = n.next
    if n.next:
        n.next.prev = n.prev
    m = n.match
    if m:
        m.prev.next = m.next
        if m.next:
            m.next.prev = m.prev


def _unlift(n):
    m = n.match
    if m:
        m.prev.next = m
        if m.next:
            m.next.prev = m
    n.prev.next = n
    if n.next:
        n.next.prev = n


def _candidates(head):
    """The ops that may go next: every call before the first return still
    in the list.  Determinate ones first: an indeterminate op is needed
    only where a determinate one cannot be explained without it, and trying
    those first keeps a linearizable history's search near linear."""
    det, ind = [], []
    n = head.next
    while n is not None and n.call:
        (det if n.match else ind).append(n)
        n = n.next
    return det + ind, n


def _seen(cache, linearized, state, indet):
    """Lowe's memo, with indeterminate ops dominated: having used one (it
    has no return, so nothing forces it) can only leave fewer ways on than
    not having used it yet.  So (determinate ops done D, state s, the
    indeterminate ones used I) is pruned when (D, s) was reached with a
    subset of I.  Without it, k raised ops multiply the search by 2^k."""
    key = (linearized & ~indet, state)
    used = linearized & indet
    got = cache.get(key)
    if got is None:
        cache[key] = [used]
        return False
    for u in got:
        if u & ~used == 0:
            return True
    got.append(used)
    return False


def check_key(ops, max_steps=2_000_000, deadline=None):
    """WGL on one key's ops.  Returns (verdict, detail): verdict is
    "ok", "violation" or "unknown"; for a violation, detail (a list of
    lines) names what no order explains."""
    ops = unobserved_writes_dropped([o for o in ops if o["ok"] or o["f"] not in READS])
    sure = certain_anomalies(ops)
    if sure:
        return "violation", sure
    head = _build(ops)
    returns = sum(1 for o in ops if o["ok"])
    state, linearized, done = None, 0, 0
    stack, cache, steps = [], {}, 0
    indet = 0
    for i, o in enumerate(ops):
        if not o["ok"]:
            indet |= 1 << i
    best = (-1, None, None)  # (ops linearized, the order, the op it stuck on)
    cands, stuck = _candidates(head)
    i = 0
    while done < returns:
        steps += 1
        if steps > max_steps or (deadline and steps % 4096 == 0 and time.monotonic() > deadline):
            return "unknown", "search cap reached after %d steps (%d ops)" % (steps, len(ops))
        if i < len(cands):
            n = cands[i]
            i += 1
            legal, new = Model.step(state, n.op)
            bit = 1 << n.idx
            if legal and not _seen(cache, linearized | bit, new, indet):
                stack.append((cands, i, state, n))
                state, linearized = new, linearized | bit
                done += n.match is not None
                _lift(n)
                cands, stuck = _candidates(head)
                i = 0
            continue
        # every candidate tried: the op returning next cannot be reached
        # from here; undo the last choice
        if len(stack) > best[0]:
            best = (len(stack), [e[3].op for e in stack[-3:]], stuck.op if stuck else None)
        if not stack:
            return "violation", _explain(best, ops)
        cands, i, state, n = stack.pop()
        linearized &= ~(1 << n.idx)
        done -= n.match is not None
        _unlift(n)
    return "ok", "%d ops" % len(ops)


def fmt(op):
    s = "p%s %s(%s)" % (op.get("p"), op["f"], "" if op.get("arg") is None else json.dumps(op["arg"]))
    s += " -> %s" % json.dumps(op.get("ret")) if op["ok"] else " raised"
    return s + " [%.6f, %.6f]" % (op["start"], op["end"])


def _explain(best, ops):
    n, last, stuck = best
    lines = anomalies(ops)
    if stuck is not None:
        lines.append("no order of the ops reaches the return of %s; the longest "
                     "linearizable prefix has %d ops, ending: %s"
                     % (fmt(stuck), n, "; ".join(fmt(o) for o in last) or "(none)"))
    return lines


def unobserved_writes_dropped(ops):
    """On a key that is only set, read and compare_set (never absent once
    set), a raised set whose value no op ever saw (no answer, no winning
    compare_set's expected value) changes nothing anyone observed: put
    last, it is the same as never having happened, so it is dropped.  Each
    such op would otherwise double the orders a broken history must be
    searched in.  Sound only where the values written are unique, as
    hpct-jepsen's are (a value written twice keeps the op)."""
    if any(o["f"] not in ("set", "get", "compare_set") for o in ops):
        return ops
    written = {}
    for o in ops:
        if o["f"] == "set":
            written[o["arg"]] = written.get(o["arg"], 0) + 1
        elif o["f"] == "compare_set":
            written[o["arg"][1]] = written.get(o["arg"][1], 0) + 1
    seen = set()
    for o in ops:
        if o["ok"]:
            seen.add(o.get("ret"))
            if o["f"] == "compare_set":
                seen.add(o["arg"][0])
    return [o for o in ops if o["ok"] or o["f"] != "set" or o["arg"] in seen or written[o["arg"]] > 1]


def certain_anomalies(ops):
    """Anomalies that no linearization has, found without the search (which
    may blow up on a badly broken history, where raised ops multiply the
    orders to try), said the way a person looks for them:
    - on a counter (only adds of d > 0 and gets), each ok add answers a
      distinct value, and a read after every ok add ended is at least their sum;
    - on a queue whose items are pushed once each, no item is popped twice."""
    out = []
    adds = [o for o in ops if o["f"] == "add"]
    if adds and all(o["f"] in ("add", "get") for o in ops) and all(int(o["arg"]) > 0 for o in adds):
        seen = {}
        for o in adds:
            if o["ok"]:
                seen.setdefault(o["ret"], []).append(o)
        dups = {v: l for v, l in seen.items() if len(l) > 1}
        for v in sorted(dups)[:5]:
            out.append("add answered %s %d times: %s" % (v, len(dups[v]), "; ".join(fmt(o) for o in dups[v][:3])))
        if dups:
            out.append("%d values answered more than once, %d adds in all"
                       % (len(dups), sum(len(l) for l in dups.values())))
        acked = [o for o in adds if o["ok"]]
        if acked:
            floor = sum(int(o["arg"]) for o in acked)
            last = max(o["end"] for o in acked)
            low = [o for o in ops if o["f"] == "get" and o["ok"] and o["start"] > last and int(o["ret"]) < floor]
            if low:
                out.append("acknowledged adds lost: %s after ok adds summing to %d (%d such reads)"
                           % (fmt(low[0]), floor, len(low)))
    pushed = {}
    for o in ops:
        if o["f"] == "queue_push":
            pushed[o["arg"]] = pushed.get(o["arg"], 0) + 1
    pops = {}
    for o in ops:
        if o["f"] == "queue_pop" and o["ok"] and o["ret"] is not None:
            pops.setdefault(o["ret"], []).append(o)
    for v, l in pops.items():
        if len(l) > max(1, pushed.get(v, 0)):
            out.append("queue item %s popped %d times: %s" % (json.dumps(v), len(l), "; ".join(fmt(o) for o in l[:3])))
    return out


def anomalies(ops):
    """The certain anomalies, and hints that name what the search found no
    order for (two compare_sets that both won from the same value)."""
    out = certain_anomalies(ops)
    wins = {}
    for o in ops:
        if o["f"] == "compare_set" and o["ok"] and o["arg"][0] != o["arg"][1] and o["ret"] == o["arg"][1]:
            wins.setdefault(o["arg"][0], []).append(o)
    for v, l in wins.items():
        if len(l) > 1 and len({o["arg"][1] for o in l}) > 1:
            out.append("compare_set from %s won %d times: %s" % (json.dumps(v), len(l), "; ".join(fmt(o) for o in l[:3])))
    return out


def check(history, max_steps=2_000_000, max_seconds=60.0):
    """history: a list of op dicts.  Returns {key: (verdict, detail)}."""
    keys = {}
    for o in history:
        keys.setdefault(o["key"], []).append(o)
    out = {}
    t_end = time.monotonic() + max_seconds
    for k in sorted(keys, key=str):
        # each key gets its share of what time is left
        left = max(t_end - time.monotonic(), 0.5)
        out[k] = check_key(keys[k], max_steps, time.monotonic() + left / max(1, len(keys) - len(out)))
    return out


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def report(results, out=sys.stdout):
    """Prints a line per key and the counts; returns the exit code."""
    counts = {"ok": 0, "violation": 0, "unknown": 0}
    for k, (v, d) in results.items():
        counts[v] += 1
        if v == "ok":
            print("key %s: linearizable (%s)" % (k, d), file=out)
        elif v == "unknown":
            print("key %s: unknown (%s)" % (k, d), file=out)
        else:
            print("key %s: VIOLATION" % k, file=out)
            for line in d:
                print("  " + line, file=out)
    print("lincheck: %d keys: %d linearizable, %d violations, %d unknown"
          % (len(results), counts["ok"], counts["violation"], counts["unknown"]), file=out)
    return 1 if counts["violation"] else 2 if counts["unknown"] else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("history")
    ap.add_argument("--max-steps", type=int, default=2_000_000)
    ap.add_argument("--max-seconds", type=float, default=60.0)
    a = ap.parse_args()
    sys.exit(report(check(load(a.history), a.max_steps, a.max_seconds)))


if __name__ == "__main__":
    main()
