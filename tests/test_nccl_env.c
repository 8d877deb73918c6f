/* NCCL_COMM_ID shown to one NCCL call in one thread, through hpct's env
 * plugin, against the real libnccl.so.2 hpct loads (HPCT_NCCL_LIB, else
 * NCCL_HOME), whichever release: 2.30.7 and later take ncclEnvPlugin_v2,
 * 2.28.7 to 2.30.6 ncclEnvPlugin_v1, older ones ask no plugin (there only
 * the preload shim's getenv can show the value, and Tier 1 hosts hpct's
 * root in NCCL's place).  Linked with libhpct.so, as users get it: NCCL
 * must find the plugin there.  Each test runs in a process of its own
 * (NCCL's env init happens once a process). */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap/nccl/nccl_internal.h"
#include "hpct/nccl.h"
#include "tests/nccl_release.h"

#define NCCL_FIXED_MAGIC 0x0280028002800280ull

TestSuite(nccl_env, .timeout = 60);

struct other {
	const struct hpct_nccl_lib *l;
	hpct_nccl_id id;
	int rc;
	const char *env;
};

static void *other_thread(void *arg)
{
	struct other *o = arg;
	o->env = getenv("NCCL_COMM_ID");
	o->rc = o->l->get_unique_id(&o->id); /* starts a root of NCCL's: fine */
	return NULL;
}

static int version(void)
{
	int v;
	cr_assert_eq(hpct_nccl_version(&v), 0, "%s", hpct_last_error());
	return v;
}

/* "2.28.3" for 22803: how messages name a release */
static const char *dotted(int v)
{
	static char buf[32];
	snprintf(buf, sizeof(buf), "%d.%d.%d", v / 10000, v / 100 % 100, v % 100);
	return buf;
}

Test(nccl_env, the_plugin_nccl_takes_is_the_one_of_its_release)
{
	int v = version();
	const char *plugin = getenv("NCCL_ENV_PLUGIN");
	cr_assert(plugin && strstr(plugin, "libhpct.so"), "NCCL_ENV_PLUGIN=%s",
	          plugin ? plugin : "(unset)");
	cr_expect_eq(hpct__nccl_env_plugin_used(), 0, "taken before NCCL read its environment");
	int possible = hpct__nccl_comm_id_possible(hpct__nccl_lib()); /* NCCL's init runs */
	cr_expect_eq(hpct__nccl_env_plugin_used(), nr_env_plugin(v),
	             "NCCL %s took ncclEnvPlugin_v%d (0: none), not v%d", dotted(v),
	             hpct__nccl_env_plugin_used(), nr_env_plugin(v));
	cr_expect_eq(possible, nr_env_plugin(v) > 0);
}

Test(nccl_env, one_call_in_one_thread_sees_the_override)
{
	int v = version();
	const struct hpct_nccl_lib *l = hpct__nccl_lib();
	if (!nr_env_plugin(v)) {
		/* no plugin, no shim: NCCL cannot be shown the value, and says why */
		cr_expect_eq(hpct__nccl_comm_id_begin(l, "127.0.0.1:23456"), HPCT_ESTATE);
		cr_expect(strstr(hpct_last_error(), dotted(v)) &&
		                  strstr(hpct_last_error(),
		                         "asks no env plugin (2.28.7 and later do"),
		          "%s", hpct_last_error());
		cr_expect_null(getenv("NCCL_COMM_ID"));
		return;
	}
	cr_assert_eq(hpct__nccl_comm_id_begin(l, "127.0.0.1:23456"), 0, "%s", hpct_last_error());

	struct other o = { .l = l };
	pthread_t t;
	pthread_create(&t, NULL, other_thread, &o);
	pthread_join(t, NULL);
	cr_expect_null(o.env, "another thread's environment shows NCCL_COMM_ID");
	cr_assert_eq(o.rc, 0);
	struct hpct_nccl_id_info oi;
	cr_assert_eq(hpct_nccl_id_decode(&o.id, 0, &oi), 0);
	cr_expect_neq(oi.magic, NCCL_FIXED_MAGIC, "another thread's NCCL saw the override");

	cr_expect_null(getenv("NCCL_COMM_ID"), "the process environment shows NCCL_COMM_ID");
	hpct_nccl_id id;
	cr_assert_eq(l->get_unique_id(&id), 0);
	struct hpct_nccl_id_info in;
	cr_assert_eq(hpct_nccl_id_decode(&id, 0, &in), 0);
	cr_expect_eq(in.magic, NCCL_FIXED_MAGIC, "NCCL did not see NCCL_COMM_ID (magic %llx)",
	             (unsigned long long)in.magic);
	cr_expect_str_eq(in.host, "127.0.0.1");
	cr_expect_eq(in.port, 23456u);

	/* one lookup only: the next call, window still open, is NCCL's own */
	cr_assert_eq(l->get_unique_id(&id), 0);
	cr_assert_eq(hpct_nccl_id_decode(&id, 0, &in), 0);
	cr_expect_neq(in.magic, NCCL_FIXED_MAGIC, "the override was seen twice");
	hpct__nccl_comm_id_end();
}

Test(nccl_env, a_plugin_the_user_chose_is_left_alone_and_said_so)
{
	setenv("NCCL_ENV_PLUGIN", "none", 1);
	version();
	cr_expect_str_eq(getenv("NCCL_ENV_PLUGIN"), "none");
	cr_expect_eq(hpct__nccl_comm_id_begin(hpct__nccl_lib(), "127.0.0.1:23457"), HPCT_ESTATE);
	cr_expect(strstr(hpct_last_error(), "NCCL_ENV_PLUGIN=none"), "%s", hpct_last_error());
	cr_expect_eq(hpct__nccl_env_plugin_used(), 0);
}

/* No GPU here: NCCL refuses at cudaGetDevice, before any bootstrap.  What
 * can be checked is hpct's part around it: the right tier, NCCL's error
 * passed on with the tier named, the micro-root or the port check undone. */
static hpct_world *one_rank_of_two(int port)
{
	char buf[32];
	setenv("HPCT_HOSTS", "127.0.0.1", 1);
	setenv("HPCT_TASKS_PER_NODE", "2", 1);
	setenv("RANK", "0", 1);
	setenv("LOCAL_RANK", "0", 1);
	setenv("WORLD_SIZE", "2", 1);
	snprintf(buf, sizeof(buf), "%d", port);
	setenv("HPCT_PORT_BASE", buf, 1);
	setenv("HPCT_PORT_RANGE", "8", 1);
	setenv("HPCT_USE_ROOTLESS", "1", 1);
	setenv("HPCT_TIMEOUT", "2", 1); /* rank 1 never comes: its wait, per release */
	setenv("HPCT_JOB_ID", "nccl-env-test", 1);
	hpct_world *w = NULL;
	cr_assert_eq(hpct_world_create(&w), 0, "%s", hpct_last_error());
	return w;
}

static void expect_port_free(const hpct_nccl_id *id)
{
	cr_expect_eq(hpct__nccl_port_check(id), 0, "the derived port is still taken: %s",
	             hpct_last_error());
}

/* Rank 0 of this world waits for rank 1, which never comes, once its
 * roots listen and before NCCL is called; the failure names rank 1, and
 * the root started for the id is gone with it. */
static void expect_roots_up_fails(hpct_group *g, const hpct_nccl_id *id)
{
	void *comm;
	cr_expect_eq(hpct_nccl_comm_init(g, 0, NULL, &comm), HPCT_ETIMEDOUT, "%s",
	             hpct_last_error());
	cr_expect(strstr(hpct_last_error(), "wants its roots listening before any rank calls it") &&
	                  strstr(hpct_last_error(), "rank 1"),
	          "%s", hpct_last_error());
	expect_port_free(id);
}

Test(nccl_env, tier2_hosts_its_micro_root_and_passes_nccls_error_on)
{
	hpct_world *w = one_rank_of_two(13500);
	hpct_group *g = hpct_world_group(w);
	int v = version();
	if (!nr_tier2(v)) {
		cr_expect_eq(hpct_nccl_tier(g), HPCT_NCCL_TIER_ROOT, "NCCL %s", dotted(v));
		hpct_world_destroy(w);
		return;
	}
	cr_assert_eq(hpct_nccl_tier(g), HPCT_NCCL_TIER_ROOTLESS);
	/* its micro-root listens, then it waits for rank 1's, which never
	 * comes: NCCL is not called, and the micro-root is gone with it */
	hpct_nccl_id ids[2];
	cr_assert_eq(hpct_nccl_derive_ids(g, 0, ids), 0);
	expect_roots_up_fails(g, &ids[0]);
	hpct_world_destroy(w);
}

Test(nccl_env, tier1_on_rank_0_checks_its_port_and_shows_the_id)
{
	setenv("HPCT_NCCL_ROOTLESS", "0", 1);
	hpct_world *w = one_rank_of_two(13520);
	hpct_group *g = hpct_world_group(w);
	cr_assert_eq(hpct_nccl_tier(g), HPCT_NCCL_TIER_ROOT);
	hpct_nccl_id id;
	cr_assert_eq(hpct_nccl_derive_id(g, 0, &id), 0);
	void *comm;
	int v = version(), plugin = nr_env_plugin(v);
	if (!plugin && !nr_roots_speak(v)) {
		/* neither NCCL's root (no plugin to show it the id) nor hpct's */
		cr_expect_eq(hpct_nccl_comm_init(g, 0, NULL, &comm), HPCT_ESTATE);
		cr_expect(strstr(hpct_last_error(), dotted(v)), "%s", hpct_last_error());
		expect_port_free(&id);
		hpct_world_destroy(w);
		return;
	}
	/* a stale root holds the derived port: fail fast, naming it */
	struct hpct_nccl_roots *stale;
	cr_assert_eq(hpct__nccl_roots_start(&id, 1, 2, 10, 0, &stale), 0);
	cr_expect_eq(hpct_nccl_comm_init(g, 0, NULL, &comm), HPCT_EADDRINUSE);
	struct hpct_nccl_id_info in;
	cr_assert_eq(hpct_nccl_id_decode(&id, 0, &in), 0);
	char want[48];
	snprintf(want, sizeof(want), "127.0.0.1:%u", in.port);
	cr_expect(strstr(hpct_last_error(), want), "%s", hpct_last_error());
	hpct__nccl_roots_stop(stale);
	if (!plugin || v < 22400) {
		/* hpct's root listens first, then the ranks meet; rank 1 of this
		 * world never comes, and the root is gone with the failure (with
		 * NCCL's own root, below, the ranks do not meet: it listens only
		 * inside NCCL's init) */
		expect_roots_up_fails(g, &id);
		hpct_world_destroy(w);
		return;
	}
	/* port free: NCCL itself is called (and refuses, without a GPU) */
	cr_expect_eq(hpct_nccl_comm_init(g, 0, NULL, &comm), HPCT_ENCCL);
	/* NCCL's root where NCCL can be shown the id, else hpct's */
	const char *tier = plugin ? "(Tier 1, root here)" : "(Tier 1, hpct's root here)";
	cr_expect(strstr(hpct_last_error(), tier), "NCCL %s: want %s in: %s", dotted(v), tier,
	          hpct_last_error());
	cr_expect_null(getenv("NCCL_COMM_ID"));
	expect_port_free(&id);
	hpct_world_destroy(w);
}

Test(nccl_env, without_nccl_the_caller_is_told_to_take_the_standard_path)
{
	setenv("HPCT_NCCL_LIB", "/nonexistent/libnccl.so.2", 1);
	hpct_world *w = one_rank_of_two(13540);
	hpct_group *g = hpct_world_group(w);
	cr_expect_eq(hpct_nccl_tier(g), HPCT_NCCL_TIER_NONE);
	void *comm;
	cr_expect_eq(hpct_nccl_comm_init(g, 0, NULL, &comm), HPCT_ENONCCL);
	cr_expect(strstr(hpct_last_error(), "HPCT_NCCL_LIB=/nonexistent"), "%s", hpct_last_error());
	hpct_world_destroy(w);
}

Test(nccl_env, tier1_without_the_plugin_hosts_hpcts_root_on_rank_0)
{
	setenv("NCCL_ENV_PLUGIN", "none", 1); /* NCCL cannot be shown NCCL_COMM_ID */
	setenv("HPCT_NCCL_ROOTLESS", "0", 1);
	hpct_world *w = one_rank_of_two(13560);
	hpct_group *g = hpct_world_group(w);
	cr_assert_eq(hpct_nccl_tier(g), HPCT_NCCL_TIER_ROOT);
	void *comm;
	int v = version();
	hpct_nccl_id id;
	cr_assert_eq(hpct_nccl_derive_id(g, 0, &id), 0);
	if (nr_roots_speak(v)) {
		/* hpct's root listens, then the ranks meet: rank 1 never comes */
		expect_roots_up_fails(g, &id);
	} else {
		cr_expect_eq(hpct_nccl_comm_init(g, 0, NULL, &comm), HPCT_ESTATE);
		cr_expect(strstr(hpct_last_error(), dotted(v)), "NCCL %s: %s", dotted(v),
		          hpct_last_error());
		expect_port_free(&id);
	}
	hpct_world_destroy(w);
}
