/* A fake launcher environment for the topology tests (topo_env.c): set
 * variables, read the topology from them, expect success or an error. */
#ifndef HPCT_TESTS_TOPO_ENV_H
#define HPCT_TESTS_TOPO_ENV_H

#include "bootstrap/base/param.h"
#include "bootstrap/topo/topo.h"

extern const struct hpct_env topo_fake_env;

void topo_env_set(const char *name, const char *value);
void topo_env_unset(const char *name);
void topo_env_set_int(const char *name, long v);
/* Every variable unset (each test's .init). */
void topo_env_reset(void);
/* The host file removed, then a reset (each test's .fini). */
void topo_env_cleanup(void);
/* Writes text to a temporary file and points HPCT_HOSTFILE at it. */
const char *topo_env_hostfile(const char *text);
/* RANK and WORLD_SIZE. */
void topo_env_world(int rank, int size);
/* hpct__topo_read of the fake environment, asserted to succeed. */
void topo_read_ok(struct hpct_topo *t);
/* Expects code and `text` in the message, and nothing left allocated. */
void topo_read_bad(int code, const char *text);

#endif
