/* The fan-out's planners: one row per enum hpct_fanout_plan, each a pure
 * function of what every member knows alike (who held what, who finished,
 * who died, the wave), so every member computes the same plan with no
 * message.  Receivers are spread by identity: ordered by a hash of the
 * fan-out's id and their index, so the order differs from one fan-out to
 * the next and no member is always last. */
#include <stdlib.h>
#include <string.h>

#include "bootstrap/base/util.h"
#include "bootstrap/fanout/fanout_internal.h"

struct keyed {
	uint64_t key;
	int j;
};

static int by_key(const void *a, const void *b)
{
	const struct keyed *x = a, *y = b;
	if (x->key != y->key)
		return x->key < y->key ? -1 : 1;
	return x->j - y->j;
}

static int alive(const struct fo_plan_in *in, int j)
{
	return !in->dead || !in->dead[j];
}

/* Sources of this wave by index; receivers still waiting, by identity. */
static int sources(const struct fo_plan_in *in, int *out)
{
	int ns = 0;
	for (int j = 0; j < in->n; j++)
		if (in->finished[j] && alive(in, j))
			out[ns++] = j;
	return ns;
}

static int waiting(const struct fo_plan_in *in, struct keyed *out)
{
	int nr = 0;
	for (int j = 0; j < in->n; j++)
		if (!in->finished[j] && alive(in, j))
			out[nr++] = (struct keyed){ hpct__hash_u64(in->seed, (uint64_t)j), j };
	qsort(out, (size_t)nr, sizeof(*out), by_key);
	return nr;
}

/* WAVES: every source of the wave takes one waiting receiver. */
static int plan_waves(const struct fo_plan_in *in, int *assign)
{
	int *src = malloc((size_t)in->n * sizeof(int));
	struct keyed *rec = malloc((size_t)in->n * sizeof(*rec));
	int took = 0;
	for (int j = 0; j < in->n; j++)
		assign[j] = -1;
	if (src && rec) {
		int ns = sources(in, src), nr = waiting(in, rec);
		for (; took < ns && took < nr; took++)
			assign[rec[took].j] = src[took];
	}
	free(src);
	free(rec);
	return took;
}

/* PULL: the first wave takes every receiver, round robin over the sources
 * in identity order; later waves take nobody. */
static int plan_pull(const struct fo_plan_in *in, int *assign)
{
	int *src = malloc((size_t)in->n * sizeof(int));
	struct keyed *rec = malloc((size_t)in->n * sizeof(*rec));
	int took = 0;
	for (int j = 0; j < in->n; j++)
		assign[j] = -1;
	if (src && rec && in->wave == 1) {
		int ns = sources(in, src), nr = waiting(in, rec);
		for (; ns > 0 && took < nr; took++)
			assign[rec[took].j] = src[took % ns];
	}
	free(src);
	free(rec);
	return took;
}

/* TREE: a binomial tree over [root, receivers by index], the root the
 * lowest-indexed first source alive; position m > 0 is taken in wave
 * floor(log2 m) + 1 from position m - 2^floor(log2 m).  Other sources
 * idle.  Depends on the wave and the start only, not on `finished`. */
static int plan_tree(const struct fo_plan_in *in, int *assign)
{
	int *pos = malloc(((size_t)in->n + 1) * sizeof(int));
	int took = 0, np = 0;
	for (int j = 0; j < in->n; j++)
		assign[j] = -1;
	if (!pos)
		return 0;
	for (int j = 0; j < in->n && np == 0; j++)
		if (in->held[j] == in->want && alive(in, j))
			pos[np++] = j;
	for (int j = 0; np > 0 && j < in->n; j++)
		if (in->held[j] != in->want && alive(in, j))
			pos[np++] = j;
	if (in->wave >= 1 && in->wave < 31) {
		int lo = 1 << (in->wave - 1);
		for (int m = lo; m < 2 * lo && m < np; m++, took++)
			assign[pos[m]] = pos[m - lo];
	}
	free(pos);
	return took;
}

const struct fo_planner hpct__fo_planners[3] = {
	[HPCT_FANOUT_WAVES] = { "waves", plan_waves },
	[HPCT_FANOUT_PULL] = { "pull", plan_pull },
	[HPCT_FANOUT_TREE] = { "tree", plan_tree },
};

int hpct__fo_schedule(const struct fo_planner *p, int n, const uint64_t *held, uint64_t want,
                      uint64_t seed, int *src, int *wave_of, int *waves_out, int *sources_last_out)
{
	unsigned char *fin = calloc((size_t)n, 1);
	int *assign = malloc((size_t)n * sizeof(int));
	if (!fin || !assign) {
		free(fin);
		free(assign);
		return HPCT_ENOMEM;
	}
	int left = 0, waves = 0, last = 0, rc = 0;
	for (int j = 0; j < n; j++) {
		src[j] = -1;
		wave_of[j] = 0;
		fin[j] = held[j] == want;
		left += !fin[j];
		last += fin[j];
	}
	struct fo_plan_in in = { n, held, want, seed, fin, NULL, 0 };
	while (left > 0) {
		in.wave = waves + 1;
		int nsrc = 0;
		for (int j = 0; j < n; j++)
			nsrc += fin[j];
		int took = p->wave(&in, assign);
		if (took == 0) {
			rc = HPCT_ESTATE;
			break;
		}
		waves++;
		last = nsrc;
		for (int j = 0; j < n; j++)
			if (assign[j] >= 0) {
				src[j] = assign[j];
				wave_of[j] = waves;
			}
		for (int j = 0; j < n; j++)
			if (assign[j] >= 0) {
				fin[j] = 1;
				left--;
			}
	}
	free(fin);
	free(assign);
	if (rc == 0) {
		*waves_out = waves;
		*sources_last_out = last;
	}
	return rc;
}

int hpct__fo_replan(int n, const uint64_t *held, uint64_t want, uint64_t seed,
                    const unsigned char *dead, int me, int attempt)
{
	int ns = 0;
	for (int j = 0; j < n; j++)
		ns += held[j] == want && !dead[j];
	if (ns == 0)
		return -1;
	int k = (int)((hpct__hash_u64(seed, (uint64_t)me) + (uint64_t)attempt) % (uint64_t)ns);
	for (int j = 0; j < n; j++)
		if (held[j] == want && !dead[j] && k-- == 0)
			return j;
	return -1;
}
