/* NCCL_COMM_ID shown to one NCCL call in one thread, through hpct's env
 * plugin, against the real libnccl.so.2 of this machine.  Linked with
 * libhpct.so, as users get it: NCCL must find the plugin there.  Each test
 * runs in a process of its own (NCCL's env init happens once a process). */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap/nccl_internal.h"
#include "hpct/nccl.h"

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

Test(nccl_env, one_call_in_one_thread_sees_the_override)
{
	int v;
	cr_assert_eq(hpct_nccl_version(&v), 0, "%s", hpct_last_error());
	const char *plugin = getenv("NCCL_ENV_PLUGIN");
	cr_assert(plugin && strstr(plugin, "libhpct.so"), "NCCL_ENV_PLUGIN=%s",
	          plugin ? plugin : "(unset)");
	const struct hpct_nccl_lib *l = hpct__nccl_lib();
	cr_assert_eq(hpct__nccl_comm_id_begin("127.0.0.1:23456"), 0, "%s", hpct_last_error());

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
	int v;
	cr_assert_eq(hpct_nccl_version(&v), 0, "%s", hpct_last_error());
	cr_expect_str_eq(getenv("NCCL_ENV_PLUGIN"), "none");
	cr_expect_eq(hpct__nccl_comm_id_begin("127.0.0.1:23457"), HPCT_ESTATE);
	cr_expect(strstr(hpct_last_error(), "NCCL_ENV_PLUGIN=none"), "%s", hpct_last_error());
}
