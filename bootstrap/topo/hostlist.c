#include "bootstrap/topo/hostlist.h"

#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hpct/hpct.h"

/* DNS names stop at 253 characters; a longer expansion is a typo, and the
 * bound keeps every name in a fixed buffer. */
#define NAME_MAX_LEN 255
/* Slurm itself expands at most a handful of dimensions. */
#define MAX_GROUPS 16
/* Without a node count to check against, an expansion this long is a typo. */
#define TPN_MAX_COUNTS (1 << 24)
/* Offending text quoted in a message is cut here. */
#define QUOTE_MAX 40

static int is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static int is_digit(char c)
{
	return c >= '0' && c <= '9';
}

static int quote_len(size_t n)
{
	return n > QUOTE_MAX ? QUOTE_MAX : (int)n;
}

static int bad(char *err, size_t errlen, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
static int bad(char *err, size_t errlen, const char *fmt, ...)
{
	if (err && errlen) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return HPCT_EBADENV;
}

static int no_memory(char *err, size_t errlen)
{
	if (err && errlen)
		snprintf(err, errlen, "out of memory");
	return HPCT_ENOMEM;
}

/* "'x'" or "the end" for the character at s[p]. */
static const char *what(const char *s, size_t p, char buf[8])
{
	if (!s[p])
		return "the end";
	if ((unsigned char)s[p] < 0x20)
		snprintf(buf, 8, "\\x%02x", (unsigned char)s[p]);
	else
		snprintf(buf, 8, "'%c'", s[p]);
	return buf;
}

/* Digits at s[*p]; *ndigits_out counts them, leading zeros included. */
static int parse_number(const char *s, size_t *p, uint64_t *v_out, size_t *ndigits_out, char *err,
                        size_t errlen)
{
	size_t q = *p;
	uint64_t v = 0;
	char wb[8];
	if (!is_digit(s[q]))
		return bad(err, errlen, "expected a digit at position %zu, found %s", q + 1,
		           what(s, q, wb));
	for (; is_digit(s[q]); q++) {
		unsigned d = (unsigned)(s[q] - '0');
		if (v > (UINT64_MAX - d) / 10) {
			size_t e = q;
			while (is_digit(s[e]))
				e++;
			return bad(err, errlen, "number '%.*s' at position %zu is too large",
			           quote_len(e - *p), s + *p, *p + 1);
		}
		v = v * 10 + d;
	}
	*ndigits_out = q - *p;
	*v_out = v;
	*p = q;
	return 0;
}

static size_t digits_of(uint64_t v)
{
	size_t n = 1;
	while (v >= 10) {
		v /= 10;
		n++;
	}
	return n;
}

struct range {
	uint64_t lo, hi;
	int width;   /* printed with at least this many digits: Slurm keeps the low bound's */
	size_t next; /* index just after the range text */
};

/* One "lo" or "lo-hi" at s[p], inside the group [open, close]. */
static int parse_range(const char *s, size_t p, size_t open, size_t close, struct range *r,
                       char *err, size_t errlen)
{
	size_t start = p, nd, nd_hi;
	char wb[8];
	if (!is_digit(s[p])) {
		if (s[p] == ',' || s[p] == ']')
			return bad(err, errlen, "empty range at position %zu in '%.*s'", p + 1,
			           quote_len(close - open + 1), s + open);
		return bad(err, errlen, "%s at position %zu is not a digit (in '%.*s')",
		           what(s, p, wb), p + 1, quote_len(close - open + 1), s + open);
	}
	int rc = parse_number(s, &p, &r->lo, &nd, err, errlen);
	if (rc)
		return rc;
	r->hi = r->lo;
	if (s[p] == '-') {
		p++;
		if (!is_digit(s[p]))
			return bad(err, errlen, "%s at position %zu is not a digit (in '%.*s')",
			           what(s, p, wb), p + 1, quote_len(close - open + 1), s + open);
		rc = parse_number(s, &p, &r->hi, &nd_hi, err, errlen);
		if (rc)
			return rc;
		if (r->hi < r->lo)
			return bad(err, errlen, "descending range '%.*s' at position %zu",
			           quote_len(p - start), s + start, start + 1);
	}
	if (s[p] != ',' && s[p] != ']')
		return bad(err, errlen, "%s at position %zu is not a digit (in '%.*s')",
		           what(s, p, wb), p + 1, quote_len(close - open + 1), s + open);
	/* Capped so that "%0*" stays in int; the name-length check rejects it anyway. */
	r->width = nd > NAME_MAX_LEN ? NAME_MAX_LEN + 1 : (int)nd;
	r->next = p;
	return 0;
}

/* Checks "[...]" at s[open]: sets *close_out, the number of values (at most
 * room) and the widest value printed. */
static int scan_group(const char *s, size_t open, uint64_t room, size_t max_hosts,
                      size_t *close_out, uint64_t *count_out, size_t *width_out, char *err,
                      size_t errlen)
{
	size_t close = open + 1;
	while (s[close] && s[close] != ']' && s[close] != '[')
		close++;
	if (!s[close])
		return bad(err, errlen, "unbalanced '[' at position %zu", open + 1);
	if (s[close] == '[')
		return bad(err, errlen, "'[' at position %zu inside the '[' at position %zu",
		           close + 1, open + 1);
	uint64_t count = 0;
	size_t width = 0;
	size_t p = open + 1;
	for (;;) {
		struct range r;
		int rc = parse_range(s, p, open, close, &r, err, errlen);
		if (rc)
			return rc;
		if (r.hi - r.lo >= room || count + (r.hi - r.lo) + 1 > room)
			return bad(err, errlen, "more than %zu names (at '%.*s', position %zu)",
			           max_hosts, quote_len(close - open + 1), s + open, open + 1);
		count += r.hi - r.lo + 1;
		size_t w = digits_of(r.hi);
		if ((size_t)r.width > w)
			w = (size_t)r.width;
		if (w > width)
			width = w;
		if (s[r.next] == ']')
			break;
		p = r.next + 1;
	}
	*close_out = close;
	*count_out = count;
	*width_out = width;
	return 0;
}

struct group {
	size_t open, close;
};

struct item {
	size_t start, end;
	int ngroups;
	struct group g[MAX_GROUPS];
};

/* One name pattern at s[start] up to a top-level ',', blank or the end;
 * *count_out (at most room) is the number of names it expands to. */
static int scan_item(const char *s, size_t start, uint64_t room, size_t max_hosts, struct item *it,
                     uint64_t *count_out, char *err, size_t errlen)
{
	size_t p = start, namelen = 0;
	uint64_t count = 1;
	it->start = start;
	it->ngroups = 0;
	while (s[p] && s[p] != ',' && !is_space(s[p])) {
		if (s[p] == ']')
			return bad(err, errlen, "unbalanced ']' at position %zu", p + 1);
		if (s[p] != '[') {
			namelen++;
			p++;
			continue;
		}
		if (it->ngroups == MAX_GROUPS)
			return bad(err, errlen,
			           "more than %d '[...]' groups in one name at position %zu",
			           MAX_GROUPS, p + 1);
		size_t close = 0, width = 0;
		uint64_t n = 1;
		int rc = scan_group(s, p, room, max_hosts, &close, &n, &width, err, errlen);
		if (rc)
			return rc;
		if (count > room / n)
			return bad(err, errlen, "more than %zu names (at '%.*s', position %zu)",
			           max_hosts, quote_len(close + 1 - start), s + start, start + 1);
		count *= n;
		namelen += width;
		it->g[it->ngroups].open = p;
		it->g[it->ngroups].close = close;
		it->ngroups++;
		p = close + 1;
	}
	if (count > room)
		return bad(err, errlen, "more than %zu names (at '%.*s', position %zu)", max_hosts,
		           quote_len(p - start), s + start, start + 1);
	if (namelen > NAME_MAX_LEN)
		return bad(err, errlen,
		           "name at position %zu ('%.*s') is longer than %d characters", start + 1,
		           quote_len(p - start), s + start, NAME_MAX_LEN);
	it->end = p;
	*count_out = count;
	return 0;
}

static int append(char *name, size_t *o, const char *src, size_t n)
{
	if (*o + n > NAME_MAX_LEN)
		return -1;
	memcpy(name + *o, src, n);
	*o += n;
	return 0;
}

/* Writes the names of a checked item to out[], leftmost group varying
 * slowest, as Slurm expands "n[1-2]-ib[0-1]". */
static int emit_item(const char *s, const struct item *it, char **out, char *err, size_t errlen)
{
	struct range cur[MAX_GROUPS];
	for (int g = 0; g < it->ngroups; g++)
		if (parse_range(s, it->g[g].open + 1, it->g[g].open, it->g[g].close, &cur[g], err,
		                errlen))
			return HPCT_EBADENV;
	for (size_t k = 0;; k++) {
		char name[NAME_MAX_LEN + 1], num[32];
		size_t o = 0, lit = it->start;
		for (int g = 0; g < it->ngroups; g++) {
			int n = snprintf(num, sizeof(num), "%0*llu", cur[g].width,
			                 (unsigned long long)cur[g].lo);
			if (n < 0 || (size_t)n >= sizeof(num) ||
			    append(name, &o, s + lit, it->g[g].open - lit) ||
			    append(name, &o, num, (size_t)n))
				return bad(err, errlen, "name at position %zu is too long",
				           it->start + 1);
			lit = it->g[g].close + 1;
		}
		if (append(name, &o, s + lit, it->end - lit))
			return bad(err, errlen, "name at position %zu is too long", it->start + 1);
		name[o] = 0;
		out[k] = strdup(name);
		if (!out[k])
			return no_memory(err, errlen);
		int g = it->ngroups - 1;
		for (; g >= 0; g--) {
			if (cur[g].lo < cur[g].hi) {
				cur[g].lo++;
				break;
			}
			size_t from = s[cur[g].next] == ',' ? cur[g].next + 1 : it->g[g].open + 1;
			parse_range(s, from, it->g[g].open, it->g[g].close, &cur[g], err, errlen);
			if (from != it->g[g].open + 1)
				break;
		}
		if (g < 0)
			return 0;
	}
}

/* The whole list; out == NULL only checks and counts. */
static int scan_list(const char *s, size_t max_hosts, char **out, size_t *n_out, char *err,
                     size_t errlen)
{
	size_t p = 0, n = 0;
	while (is_space(s[p]))
		p++;
	if (!s[p])
		return bad(err, errlen, "empty host list");
	for (;;) {
		if (s[p] == ',')
			return bad(err, errlen, "empty name at position %zu", p + 1);
		struct item it = { 0 };
		uint64_t count = 0;
		int rc = scan_item(s, p, max_hosts - n, max_hosts, &it, &count, err, errlen);
		if (rc)
			return rc;
		if (out) {
			rc = emit_item(s, &it, out + n, err, errlen);
			if (rc)
				return rc;
		}
		n += (size_t)count;
		p = it.end;
		while (is_space(s[p]))
			p++;
		if (!s[p])
			break;
		if (s[p] == ',') {
			size_t comma = p++;
			while (is_space(s[p]))
				p++;
			if (!s[p])
				return bad(err, errlen, "trailing ',' at position %zu", comma + 1);
		}
	}
	*n_out = n;
	return 0;
}

int hpct__hostlist_parse(const char *s, size_t max_hosts, char ***hosts_out, int *n_out, char *err,
                         size_t errlen)
{
	if (err && errlen)
		err[0] = 0;
	if (!s)
		s = "";
	if (max_hosts > INT_MAX)
		max_hosts = INT_MAX;
	size_t n;
	int rc = scan_list(s, max_hosts, NULL, &n, err, errlen);
	if (rc)
		return rc;
	char **v = calloc(n, sizeof(*v));
	if (!v)
		return no_memory(err, errlen);
	size_t n2;
	rc = scan_list(s, max_hosts, v, &n2, err, errlen);
	if (rc) {
		hpct__strv_free(v, (int)n);
		return rc;
	}
	*hosts_out = v;
	*n_out = (int)n;
	return 0;
}

/* The list; out == NULL only checks and counts (at most cap entries). */
static int scan_tasks(const char *s, int nnodes, size_t cap, int *out, size_t *n_out, char *err,
                      size_t errlen)
{
	size_t p = 0, n = 0, nd;
	char wb[8];
	while (is_space(s[p]))
		p++;
	if (!s[p])
		return bad(err, errlen, "empty tasks-per-node list");
	for (;;) {
		if (s[p] == ',')
			return bad(err, errlen, "empty entry at position %zu", p + 1);
		size_t start = p;
		uint64_t count, rep = 1;
		int rc = parse_number(s, &p, &count, &nd, err, errlen);
		if (rc)
			return rc;
		if (count == 0)
			return bad(err, errlen, "count '%.*s' at position %zu must be at least 1",
			           quote_len(p - start), s + start, start + 1);
		if (count > INT_MAX)
			return bad(err, errlen, "count '%.*s' at position %zu is too large",
			           quote_len(p - start), s + start, start + 1);
		if (s[p] == '(') {
			size_t paren = p;
			if (s[p + 1] != 'x')
				return bad(err, errlen,
				           "expected 'x' after '(' at position %zu, found %s",
				           p + 2, what(s, p + 1, wb));
			p += 2;
			size_t rstart = p;
			rc = parse_number(s, &p, &rep, &nd, err, errlen);
			if (rc)
				return rc;
			if (rep == 0)
				return bad(
				        err, errlen,
				        "repeat count 'x%.*s' at position %zu must be at least 1",
				        quote_len(p - rstart), s + rstart, rstart);
			if (!s[p])
				return bad(err, errlen, "unbalanced '(' at position %zu",
				           paren + 1);
			if (s[p] != ')')
				return bad(err, errlen, "expected ')' at position %zu, found %s",
				           p + 1, what(s, p, wb));
			p++;
		}
		if (rep > cap - n) {
			if (nnodes > 0)
				return bad(err, errlen,
				           "more than %d counts for %d nodes (at '%.*s', position "
				           "%zu)",
				           nnodes, nnodes, quote_len(p - start), s + start,
				           start + 1);
			return bad(err, errlen, "more than %zu counts (at '%.*s', position %zu)",
			           cap, quote_len(p - start), s + start, start + 1);
		}
		for (uint64_t i = 0; out && i < rep; i++)
			out[n + i] = (int)count;
		n += (size_t)rep;
		size_t q = p;
		while (is_space(s[q]))
			q++;
		if (!s[q])
			break;
		if (s[p] != ',')
			return bad(err, errlen, "unexpected %s at position %zu", what(s, p, wb),
			           p + 1);
		size_t comma = p++;
		while (is_space(s[p]))
			p++;
		if (!s[p])
			return bad(err, errlen, "trailing ',' at position %zu", comma + 1);
	}
	if (nnodes > 0 && n != (size_t)nnodes)
		return bad(err, errlen, "%zu counts for %d nodes", n, nnodes);
	*n_out = n;
	return 0;
}

int hpct__tasks_per_node_parse(const char *s, int nnodes, int **counts_out, int *n_out, char *err,
                               size_t errlen)
{
	if (err && errlen)
		err[0] = 0;
	if (!s)
		s = "";
	size_t cap = nnodes > 0 ? (size_t)nnodes : TPN_MAX_COUNTS;
	size_t n;
	int rc = scan_tasks(s, nnodes, cap, NULL, &n, err, errlen);
	if (rc)
		return rc;
	int *v = malloc(n * sizeof(*v));
	if (!v)
		return no_memory(err, errlen);
	scan_tasks(s, nnodes, cap, v, &n, err, errlen);
	*counts_out = v;
	*n_out = (int)n;
	return 0;
}

void hpct__strv_free(char **v, int n)
{
	if (!v)
		return;
	for (int i = 0; i < n; i++)
		free(v[i]);
	free(v);
}
