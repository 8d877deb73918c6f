/* The rootless store's key table (see table.h). */
#include "bootstrap/store/table.h"

#include <stdlib.h>
#include <string.h>

#include "bootstrap/base/util.h"
#include "hpct/hpct.h"

/* What a key and a value cost beyond their bytes: the entry, the value's
 * header, and malloc's own bookkeeping, roughly. */
#define KEY_COST(klen) (sizeof(struct entry) + (klen) + 1 + 32)
#define VAL_COST(len)  (sizeof(struct sval) + (len) + 16)

int stab_init(struct stab *t, size_t max_keys, size_t max_bytes)
{
	*t = (struct stab){ .max_keys = max_keys, .max_bytes = max_bytes };
	if (!(t->tab = calloc(t->nb = 1024, sizeof(*t->tab))))
		return HPCT_ENOMEM;
	return 0;
}

static size_t bucket(const struct stab *t, uint64_t ns, const char *key)
{
	return (size_t)(hpct__hash(key, strlen(key), ns) & (t->nb - 1));
}

static struct entry **find(struct stab *t, uint64_t ns, const char *key)
{
	struct entry **e = &t->tab[bucket(t, ns, key)];
	while (*e && ((*e)->ns != ns || strcmp((*e)->key, key) != 0))
		e = &(*e)->next;
	return e;
}

struct entry *stab_get(struct stab *t, uint64_t ns, const char *key)
{
	return *find(t, ns, key);
}

static void grow(struct stab *t)
{
	size_t nb = t->nb * 2;
	struct entry **n = calloc(nb, sizeof(*n));
	if (!n)
		return; /* longer chains, still right */
	struct entry **old = t->tab;
	size_t onb = t->nb;
	t->tab = n;
	t->nb = nb;
	for (size_t i = 0; i < onb; i++)
		for (struct entry *e = old[i], *next; e; e = next) {
			next = e->next;
			size_t b = bucket(t, e->ns, e->key);
			e->next = n[b];
			n[b] = e;
		}
	free(old);
}

struct sval *sval_ref(struct sval *v)
{
	v->refs++;
	return v;
}

void sval_release(struct stab *t, struct sval *v)
{
	if (v && --v->refs == 0) {
		t->bytes -= VAL_COST(v->len);
		free(v);
	}
}

int stab_put(struct stab *t, uint64_t ns, const char *key, const void *val, size_t len,
             size_t *need_out)
{
	return stab_put2(t, ns, key, val, len, NULL, 0, need_out);
}

int stab_put2(struct stab *t, uint64_t ns, const char *key, const void *a, size_t alen,
              const void *b, size_t blen, size_t *need_out)
{
	size_t len = alen + blen;
	struct entry **pe = find(t, ns, key), *e = *pe;
	size_t klen = strlen(key);
	if (!e && t->n + 1 > t->max_keys) {
		*need_out = t->n + 1;
		return STAB_FULL_KEYS;
	}
	/* what the old value gives back, if nothing else holds it */
	size_t freed = e && e->val->refs == 1 ? VAL_COST(e->val->len) : 0;
	size_t need = t->bytes - freed + VAL_COST(len) + (e ? 0 : KEY_COST(klen));
	if (need > t->max_bytes) {
		*need_out = need;
		return STAB_FULL_BYTES;
	}
	struct sval *v = malloc(sizeof(*v) + len);
	if (!v)
		return STAB_NOMEM;
	*v = (struct sval){ .refs = 1, .len = len };
	if (alen)
		memcpy(v->b, a, alen);
	if (blen)
		memcpy(v->b + alen, b, blen);
	if (!e) {
		if (!(e = calloc(1, sizeof(*e))) || !(e->key = strdup(key))) {
			free(e);
			free(v);
			return STAB_NOMEM;
		}
		e->ns = ns;
		*pe = e;
		t->bytes += KEY_COST(klen);
		if (++t->n > t->nb * 2)
			grow(t);
	} else {
		sval_release(t, e->val);
	}
	t->bytes += VAL_COST(len);
	e->val = v;
	if (t->changed)
		t->changed(ns, key);
	return STAB_OK;
}

static void unlink_entry(struct stab *t, struct entry **pe)
{
	struct entry *e = *pe;
	*pe = e->next;
	t->bytes -= KEY_COST(strlen(e->key));
	sval_release(t, e->val);
	free(e->key);
	free(e);
	t->n--;
}

int stab_del(struct stab *t, uint64_t ns, const char *key)
{
	struct entry **pe = find(t, ns, key);
	if (!*pe)
		return 0;
	unlink_entry(t, pe);
	if (t->changed)
		t->changed(ns, key);
	return 1;
}

int64_t stab_count(const struct stab *t, uint64_t ns)
{
	int64_t n = 0;
	for (size_t i = 0; i < t->nb; i++)
		for (const struct entry *x = t->tab[i]; x; x = x->next)
			n += x->ns == ns;
	return n;
}

static int each(const struct stab *t, const uint64_t *ns,
                int (*fn)(const struct entry *e, void *arg), void *arg)
{
	for (size_t i = 0; i < t->nb; i++)
		for (const struct entry *x = t->tab[i]; x; x = x->next) {
			int rc = !ns || x->ns == *ns ? fn(x, arg) : 0;
			if (rc)
				return rc;
		}
	return 0;
}

int stab_each(const struct stab *t, uint64_t ns, int (*fn)(const struct entry *e, void *arg),
              void *arg)
{
	return each(t, &ns, fn, arg);
}

int stab_all(const struct stab *t, int (*fn)(const struct entry *e, void *arg), void *arg)
{
	return each(t, NULL, fn, arg);
}

void stab_clear(struct stab *t)
{
	for (size_t i = 0; i < t->nb; i++)
		while (t->tab[i])
			unlink_entry(t, &t->tab[i]);
}
