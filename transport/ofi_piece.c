/* The OFI transport's reassembly (see ofi.c): the DATA pieces of a conn's
 * messages put together by the ranges they cover, in a buffer that grows
 * with the bytes that arrived. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transport/ofi_internal.h"

/* Room in a message's buffer up to byte `end` of a piece just counted in
 * q->got: it grows with the bytes that arrived (doubling, for few copies),
 * never past them by more than REASM_WINDOW (a piece starts at most that
 * far past the bytes before it), never past the message. */
static int part_room(struct part *q, uint32_t end)
{
	if (end <= q->cap)
		return 0;
	uint64_t want = (uint64_t)q->cap * 2, most = (uint64_t)q->got + REASM_WINDOW;
	if (want < 4096)
		want = 4096;
	if (want > most)
		want = most;
	if (want > q->total)
		want = q->total;
	if (want < end)
		want = end;
	unsigned char *d = realloc(q->data, want);
	if (!d)
		return -ENOMEM;
	q->data = d;
	q->cap = (uint32_t)want;
	return 0;
}

/* Marks [lo, hi) of a message covered: refused (why set) where it
 * overlaps bytes already there, or would make MAX_RANGES separate runs. */
static int cover(struct part *q, uint32_t lo, uint32_t hi, enum refusal *kind)
{
	unsigned i = 0;
	while (i < q->nranges && q->ranges[i].hi <= lo)
		i++; /* runs wholly before it; ranges[i] is the first that is not */
	if (i < q->nranges && q->ranges[i].lo < hi) {
		*kind = R_PIECE;
		return -1;
	}
	int join_prev = i > 0 && q->ranges[i - 1].hi == lo,
	    join_next = i < q->nranges && q->ranges[i].lo == hi;
	if (join_prev && join_next) {
		q->ranges[i - 1].hi = q->ranges[i].hi;
		memmove(&q->ranges[i], &q->ranges[i + 1],
		        (q->nranges - i - 1) * sizeof(q->ranges[0]));
		q->nranges--;
	} else if (join_prev) {
		q->ranges[i - 1].hi = hi;
	} else if (join_next) {
		q->ranges[i].lo = lo;
	} else {
		if (q->nranges == MAX_RANGES) {
			*kind = R_RANGES;
			return -1;
		}
		memmove(&q->ranges[i + 1], &q->ranges[i], (q->nranges - i) * sizeof(q->ranges[0]));
		q->ranges[i].lo = lo;
		q->ranges[i].hi = hi;
		q->nranges++;
	}
	q->got += hi - lo;
	return 0;
}

/* A DATA piece into its message: a message is whole when its pieces
 * covered every byte of it exactly once.  NULL when taken, else why not
 * (the peer is broken or hostile: its conn is closed), its kind in *kind. */
const char *hpct__ofi_take_piece(struct ofi_conn *c, uint32_t seq, uint32_t total, uint32_t off,
                                 const unsigned char *p, size_t plen, enum refusal *kind, char *why,
                                 size_t whylen)
{
	*kind = R_PIECE;
	uint64_t end = (uint64_t)off + plen;
	if (seq < c->rx_next) {
		snprintf(why, whylen, "a piece of message %u, which was already whole", seq);
		return why;
	}
	if (end > total || (plen == 0 && total != 0)) {
		snprintf(why, whylen, "a piece [%u, %llu) of message %u, which is %u bytes", off,
		         (unsigned long long)end, seq, total);
		return why;
	}
	struct part *q = c->parts;
	while (q && q->seq != seq)
		q = q->next;
	if (!q) {
		if (c->nparts >= MAX_PARTS) {
			*kind = R_PARTS;
			snprintf(why, whylen,
			         "message %u while %u others are incomplete (capped at %u per "
			         "connection)",
			         seq, c->nparts, MAX_PARTS);
			return why;
		}
		if (!(q = calloc(1, sizeof(*q)))) {
			snprintf(why, whylen, "no memory for message %u", seq);
			return why;
		}
		q->seq = seq;
		q->total = total;
		q->next = c->parts;
		c->parts = q;
		c->nparts++;
		if (total == 0)
			return NULL; /* whole already */
	}
	if (q->total != total) {
		snprintf(why, whylen, "a piece of message %u saying it is %u bytes, not %u", seq,
		         total, q->total);
		return why;
	}
	if (plen == 0) {
		snprintf(why, whylen, "a second empty piece of message %u", seq);
		return why;
	}
	if (off > (uint64_t)q->got + REASM_WINDOW) {
		*kind = R_WINDOW;
		snprintf(why, whylen,
		         "a piece at offset %u of message %u (%u bytes), %u bytes received: past "
		         "the window of %u",
		         off, seq, total, q->got, REASM_WINDOW);
		return why;
	}
	if (cover(q, off, (uint32_t)end, kind) < 0) {
		if (*kind == R_RANGES)
			snprintf(why, whylen,
			         "a piece [%u, %llu) of message %u making more than %u separate "
			         "runs",
			         off, (unsigned long long)end, seq, MAX_RANGES);
		else
			snprintf(why, whylen,
			         "a piece [%u, %llu) of message %u overlapping bytes already "
			         "received",
			         off, (unsigned long long)end, seq);
		return why;
	}
	if (part_room(q, (uint32_t)end) < 0) {
		*kind = R_PIECE;
		snprintf(why, whylen, "no memory for message %u", seq);
		return why;
	}
	memcpy(q->data + off, p, plen);
	return NULL;
}
