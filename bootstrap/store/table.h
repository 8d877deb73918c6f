/* The rootless store's key table (table.c): the keys whose home is this
 * rank, by namespace, and the caps on what clients can make it hold.  Used
 * by the server thread alone (no locking).
 *
 * Values are counted references: a reply on its way out holds the value it
 * sends instead of a copy, so a hundred clients reading one big value cost
 * it once, and a value replaced while a reply still sends it stays counted
 * until that reply is gone. */
#ifndef HPCT_STORE_TABLE_H
#define HPCT_STORE_TABLE_H

#include <stddef.h>
#include <stdint.h>

struct sval {
	size_t refs, len;
	unsigned char b[];
};

struct entry {
	struct entry *next;
	uint64_t ns;
	char *key;
	struct sval *val;
};

struct stab {
	struct entry **tab;
	size_t nb, n;
	/* keys and values held (a value until its last reference goes),
	 * with what each costs to keep (KEY_COST, VAL_COST in table.c) */
	size_t bytes;
	size_t max_keys, max_bytes;
	/* called after a key is set or deleted (replica.c: what a write changed
	 * goes to the key's other homes); NULL: none */
	void (*changed)(uint64_t ns, const char *key);
};

/* What stab_put refused, for the caller's log line. */
enum { STAB_OK = 0, STAB_NOMEM, STAB_FULL_KEYS, STAB_FULL_BYTES };

/* 0, or HPCT_ENOMEM. */
int stab_init(struct stab *t, size_t max_keys, size_t max_bytes);
/* Every key forgotten (values still referenced stay until released). */
void stab_clear(struct stab *t);

struct entry *stab_get(struct stab *t, uint64_t ns, const char *key);
/* Sets or replaces a value: STAB_OK, STAB_NOMEM, or STAB_FULL_* when the key
 * would pass max_keys or its bytes max_bytes; *need_out then holds what the
 * table would hold (keys or bytes) had it taken it. */
int stab_put(struct stab *t, uint64_t ns, const char *key, const void *val, size_t len,
             size_t *need_out);
/* stab_put of a || b (APPEND, a queue's PUSH: the old value and what comes
 * after it); `a` may point into the value it replaces. */
int stab_put2(struct stab *t, uint64_t ns, const char *key, const void *a, size_t alen,
              const void *b, size_t blen, size_t *need_out);
/* 1 when the key was there. */
int stab_del(struct stab *t, uint64_t ns, const char *key);
int64_t stab_count(const struct stab *t, uint64_t ns);
/* Calls fn on every key of namespace ns, in no order; stops at, and
 * returns, fn's first nonzero return. */
int stab_each(const struct stab *t, uint64_t ns, int (*fn)(const struct entry *e, void *arg),
              void *arg);
/* The same over every namespace. */
int stab_all(const struct stab *t, int (*fn)(const struct entry *e, void *arg), void *arg);

/* A reference to a value, and its release (freed, and uncounted, with the
 * last one). */
struct sval *sval_ref(struct sval *v);
void sval_release(struct stab *t, struct sval *v);

#endif
