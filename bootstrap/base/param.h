/* Every setting hpct reads is one row of one table (param.c): name, type,
 * default, help.  `hpct-info --env` prints the table with current values.
 * Values are read through a struct hpct_env so tests can supply their own
 * environment; hpct__env_process() reads the real one. */
#ifndef HPCT_PARAM_H
#define HPCT_PARAM_H

#include <stddef.h>
#include <stdint.h>

enum hpct_param_type { HPCT_PT_INT, HPCT_PT_STR, HPCT_PT_BOOL, HPCT_PT_SECONDS };

struct hpct_param {
	const char *name;
	enum hpct_param_type type;
	const char *def; /* default as text, NULL when there is none */
	const char *help;
};

/* The whole table, in display order. */
const struct hpct_param *hpct__params(size_t *n_out);
const struct hpct_param *hpct__param_find(const char *name);
const char *hpct__param_type_name(enum hpct_param_type t);

struct hpct_env {
	const char *(*get)(void *ctx, const char *name); /* NULL when unset */
	void *ctx;
};

/* The process environment (getenv). */
const struct hpct_env *hpct__env_process(void);

/* Raw value: NULL when unset or set to the empty string. */
const char *hpct__env_str(const struct hpct_env *env, const char *name);

/* Typed readers.  Unset -> *out is the table default (or `fallback` when the
 * table has none) and the return is 0; malformed or out of [min, max] ->
 * HPCT_EBADENV, logged with the variable and its value.  *set_out (may be
 * NULL) tells whether the variable was set. */
int hpct__env_int(const struct hpct_env *env, const char *name, long min, long max, long fallback,
                  long *out, int *set_out);
int hpct__env_bool(const struct hpct_env *env, const char *name, int *out, int *set_out);
int hpct__env_seconds(const struct hpct_env *env, const char *name, double *out, int *set_out);

#endif
