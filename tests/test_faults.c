/* Faults: a rank that never starts, a rank killed mid-collective, strangers
 * (another job, epoch, or shared secret)
 * knocking on a rank's port, a port already taken.  Children check the
 * error they got (code and that the message names the culprit) and report
 * through their exit code. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "hpct/hpct.h"
#include "tests/harness.h"

struct cfg {
	int n, port, rootless, victim;
	double timeout;
	struct ht_event waiting; /* a survivor is about to wait for the victim */
};

static void env_cb(int r, void *arg)
{
	struct cfg *c = arg;
	ht_setenv_world(r, c->n, 1, c->port, c->rootless, c->timeout);
}

/* Exit 0 when err is one of the expected codes and the message names the
 * victim ("rank V at 127.0.0.1:P"). */
static int check_error(int rc, int victim, int port)
{
	if (rc == 0)
		return 40;
	if (rc != HPCT_ETIMEDOUT && rc != HPCT_EPEERDEAD && rc != HPCT_EABORTED)
		return 41;
	char want[64];
	snprintf(want, sizeof(want), "rank %d at 127.0.0.1:%d", victim, port);
	if (!strstr(hpct_last_error(), want)) {
		fprintf(stderr, "expected '%s' in: %s\n", want, hpct_last_error());
		return 42;
	}
	return 0;
}

static int never_starts(int r, void *arg)
{
	struct cfg *c = arg;
	if (r == c->victim)
		return 0;
	hpct_world *w;
	if (hpct_world_create(&w) != 0)
		return 2;
	char addr[HPCT_ADDRSTRLEN];
	hpct_world_peer_addr(w, c->victim, addr);
	int port = atoi(strrchr(addr, ':') + 1);
	int item = r, all[8];
	int rc = hpct_allgather(hpct_world_group(w), &item, sizeof(item), all);
	hpct_world_destroy(w);
	return check_error(rc, c->victim, port);
}

Test(faults, rank_never_starts_is_named, .timeout = 120)
{
	struct cfg c = {
		.n = 4, .port = hpct_test_ports(0), .rootless = 1, .victim = 3, .timeout = 3
	};
	int codes[4];
	/* the deadline only catches a rank that never gives up */
	ht_spawn(4, env_cb, never_starts, &c, c.timeout + 60, NULL, codes);
	for (int r = 0; r < 3; r++)
		cr_expect_eq(codes[r], 0, "rank %d exited %d%s", r, codes[r],
		             codes[r] == 255 ? " (hung: never gave up on rank 3)" : "");
}

/* The same, with the rank that waits on the victim last to begin: the
 * others' deadlines pass first, while it still waits on the victim, and
 * they must not blame it (alive, answering their probe) but hear from it
 * who never came.  The skew shapes the race; nothing is timed. */
Test(faults, rank_never_starts_is_named_by_a_late_root, .timeout = 120)
{
	/* the upper half of slot 0, whose test uses 17 ports */
	struct cfg c = {
		.n = 4, .port = hpct_test_ports(0) + 100, .rootless = 1, .victim = 3, .timeout = 3
	};
	int codes[4], delay_ms[4] = { 1500, 0, 0, 0 };
	ht_spawn(4, env_cb, never_starts, &c, 2 * c.timeout + 60, delay_ms, codes);
	for (int r = 0; r < 3; r++)
		cr_expect_eq(codes[r], 0, "rank %d exited %d%s", r, codes[r],
		             codes[r] == 255 ? " (hung: never gave up on rank 3)" : "");
}

/* The victim dies after the first allgather, once every other rank has
 * begun the next one (an event each posts), so they wait for its part; they
 * must see it die, not wait out their 20 s deadline (HPCT_ETIMEDOUT), and
 * the error must name it. */
static int killed_midway(int r, void *arg)
{
	struct cfg *c = arg;
	hpct_world *w;
	if (hpct_world_create(&w) != 0)
		return 2;
	hpct_group *g = hpct_world_group(w);
	int item = r, all[8];
	if (hpct_allgather(g, &item, sizeof(item), all) != 0)
		return 3;
	if (r == c->victim) {
		if (ht_event_wait(&c->waiting, c->n - 1, c->timeout + 30) != 0)
			fprintf(stderr, "victim: the others never began the next allgather\n");
		raise(SIGKILL);
	}
	int port = 0;
	char addr[HPCT_ADDRSTRLEN];
	if (c->rootless && hpct_world_peer_addr(w, c->victim, addr) == 0)
		port = atoi(strrchr(addr, ':') + 1);
	ht_event_post(&c->waiting, 1);
	int rc = 0;
	for (int i = 0; i < 50 && rc == 0; i++)
		rc = hpct_allgather(g, &item, sizeof(item), all);
	char msg[1024];
	snprintf(msg, sizeof(msg), "%s", hpct_last_error());
	hpct_world_destroy(w);
	if (rc == HPCT_ETIMEDOUT) {
		fprintf(stderr, "rank %d waited out its deadline: %s\n", r, msg);
		return 44; /* did not see the victim die */
	}
	if (c->rootless) {
		int cr = check_error(rc, c->victim, port);
		if (cr == 42 && rc == HPCT_EABORTED && strstr(msg, "rank 2"))
			return 0; /* learned it from a neighbour, which named the victim */
		return cr;
	}
	/* standard path: the store saw the victim leave without goodbye */
	if (rc == 0)
		return 40;
	if (rc != HPCT_EPEERDEAD) {
		fprintf(stderr, "rank %d got %s: %s\n", r, hpct_errname(rc), msg);
		return 41;
	}
	char want[64];
	snprintf(want, sizeof(want), "rank %d at 127.0.0.1:", c->victim);
	if (!strstr(msg, want) || !strstr(msg, "left without saying goodbye")) {
		fprintf(stderr, "expected '%s' in: %s\n", want, msg);
		return 42;
	}
	return 0;
}

static void killed_test(int rootless, int slot)
{
	struct cfg c = { .n = 8,
		         .port = hpct_test_ports(slot),
		         .rootless = rootless,
		         .victim = 2,
		         .timeout = 20 };
	int codes[8];
	cr_assert_eq(ht_event_init(&c.waiting), 0);
	ht_spawn(8, env_cb, killed_midway, &c, c.timeout + 60, NULL, codes);
	ht_event_destroy(&c.waiting);
	for (int r = 0; r < 8; r++)
		if (r != c.victim)
			cr_expect_eq(codes[r], 0, "rank %d exited %d%s", r, codes[r],
			             codes[r] == 255 ? " (hung)" : "");
	cr_expect_eq(codes[c.victim], 128 + SIGKILL, "victim exited %d", codes[c.victim]);
}

Test(faults, rank_killed_midway_fails_fast, .timeout = 120)
{
	killed_test(1, 1);
}
Test(faults, rank_killed_midway_fails_fast_standard, .timeout = 120)
{
	killed_test(0, 6);
}

/* A stranger: a world of another job (or epoch, or secret) whose host
 * table points its rank 0 at the real job's rank 0.  It knocks once rank 0
 * listens (an event rank 0 posts), and must be refused; rank 0's log must
 * hold the refusal of the stranger itself: a line only its HELLO can cause
 * (it claims rank 1 of another job, epoch or secret), not the refusal of the
 * garbage real rank 1 sends too ("not an hpct handshake").  Real rank 1
 * joins in only once the stranger has its answer (so the stranger is not
 * refused as a duplicate of rank 1), and both real ranks go on for ten
 * allgathers more; they must not notice it. */
struct stranger {
	struct cfg real;
	const char *job, *epoch;
	const char *secret, *stranger_secret; /* HPCT_SECRET of the real ranks, the stranger's */
	int loris; /* the stranger is a slow-loris: half a frame, held open */
	int stranger_port;
	char log[128];             /* real rank 0's HPCT_DEBUG_FILE */
	struct ht_event listening; /* rank 0 listens: knock now */
	struct ht_event knocked;   /* the stranger has its answer, or the loris its connection */
	struct ht_event done;      /* a real rank is through its allgathers */
	struct ht_event looked;    /* the loris has looked at its connection: rank 0 may close */
};

/* The deadline of every wait here: it only catches a hang. */
#define HANG_S 120

static void stranger_env(int r, void *arg)
{
	struct stranger *s = arg;
	if (r < 2) {
		ht_setenv_world(r, 2, 1, s->real.port, 1, 30);
		/* one window: rank 0 listens at HPCT_PORT_BASE whatever the job */
		setenv("HPCT_PORT_RANGE", "2", 1);
		if (s->secret)
			setenv("HPCT_SECRET", s->secret, 1);
		if (r == 0) {
			setenv("HPCT_DEBUG", "WARN", 1);
			setenv("HPCT_DEBUG_FILE", s->log, 1);
		}
		return;
	}
	/* rank 1 of a 2-rank world whose rank 0 is the real job's rank 0 */
	char path[64], line[256];
	snprintf(path, sizeof(path), "/tmp/hpct-stranger-%d", (int)getpid());
	FILE *f = fopen(path, "w");
	snprintf(line, sizeof(line), "0 127.0.0.1:%d\n1 127.0.0.1:%d\n", s->real.port + 1,
	         s->stranger_port);
	fputs(line, f);
	fclose(f);
	ht_setenv_world(1, 2, 1, s->real.port, 1, 30);
	unsetenv("HPCT_HOSTS");
	unsetenv("HPCT_TASKS_PER_NODE");
	setenv("HPCT_HOSTFILE", path, 1);
	if (s->job)
		setenv("HPCT_JOB_ID", s->job, 1);
	if (s->epoch)
		setenv("HPCT_EPOCH", s->epoch, 1);
	if (s->stranger_secret)
		setenv("HPCT_SECRET", s->stranger_secret, 1);
}

/* Connects to rank 0 once it listens, sends one byte of a frame's length,
 * says it is connected, and holds the half frame open until both real ranks
 * are through all their allgathers. */
static int slow_loris(struct stranger *s)
{
	int port = s->real.port + 1;
	if (ht_event_wait(&s->listening, 1, HANG_S) != 0) {
		fprintf(stderr, "loris: rank 0 never said it listens\n");
		return 51;
	}
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
		fprintf(stderr, "loris: cannot connect to rank 0 at 127.0.0.1:%d: %s\n", port,
		        strerror(errno));
		return 52;
	}
	if (send(fd, "\0", 1, MSG_NOSIGNAL) != 1) {
		fprintf(stderr, "loris: rank 0 dropped it before its first byte\n");
		return 53;
	}
	ht_event_post(&s->knocked, 2);
	if (ht_event_wait(&s->done, 2, HANG_S) != 0) {
		fprintf(stderr, "loris: the real ranks hung while it held half a frame\n");
		return 54;
	}
	/* still connected when the job finished: the allgathers went on beside
	 * it, not after rank 0 gave up on it (its handshake deadline is 10 s) */
	char b;
	ssize_t n = recv(fd, &b, 1, MSG_DONTWAIT);
	if (n >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
		fprintf(stderr, "loris: rank 0 had closed it before the job finished (%s)\n",
		        n == 0 ? "end of stream" : n > 0 ? "it sent a byte" : strerror(errno));
		ht_event_post(&s->looked, 1);
		return 55;
	}
	ht_event_post(&s->looked, 1);
	close(fd);
	return 0;
}

static int stranger_main(int r, void *arg)
{
	struct stranger *s = arg;
	hpct_world *w;
	int rc;
	if (r == 2 && s->loris)
		return slow_loris(s);
	if (r == 2) {
		if (ht_event_wait(&s->listening, 1, HANG_S) != 0) {
			fprintf(stderr, "stranger: rank 0 never said it listens\n");
			return 51;
		}
		if ((rc = hpct_world_create(&w)) != 0)
			return 2;
		int item = 7, all[2];
		rc = hpct_allgather(hpct_world_group(w), &item, sizeof(item), all);
		int ok = rc == HPCT_EREFUSED && strstr(hpct_last_error(), "rank 0 at 127.0.0.1:");
		if (!ok)
			fprintf(stderr, "stranger got %d: %s\n", rc, hpct_last_error());
		hpct_world_destroy(w);
		ht_event_post(&s->knocked, 2);
		return ok ? 0 : 50;
	}
	if ((rc = hpct_world_create(&w)) != 0) {
		fprintf(stderr, "rank %d: %s\n", r, hpct_last_error());
		return 2;
	}
	if (r == 0)
		ht_event_post(&s->listening, 1);
	int item = r, all[2];
	/* a raw socket sends garbage to rank 0's port too */
	if (r == 1) {
		int fd = socket(AF_INET, SOCK_STREAM, 0);
		struct sockaddr_in a = { .sin_family = AF_INET };
		char addr[HPCT_ADDRSTRLEN];
		hpct_world_peer_addr(w, 0, addr);
		a.sin_port = htons((uint16_t)atoi(strrchr(addr, ':') + 1));
		inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
		if (connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0)
			(void)!write(
			        fd, "\0\0\0\x30GET / HTTP/1.0\r\n\r\nxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
			        52);
		close(fd);
	}
	/* work until the stranger has its answer (or the loris is connected),
	 * then ten allgathers more: no allgather may wait on the stranger.
	 * Each rank's item carries whether it heard so: both count the same
	 * rounds, and neither leaves while the other still needs it. */
	double until = ht_now() + HANG_S;
	int heard = 0;
	/* rank 1 starts only once the stranger has its answer: rank 0 then has
	 * no link from the real rank 1 yet, so what refuses the stranger is its
	 * job, epoch or secret, not 'source rank already connected' */
	if (r == 1) {
		if (ht_event_wait(&s->knocked, 1, HANG_S) != 0) {
			fprintf(stderr, "rank 1: the %s never came\n",
			        s->loris ? "loris" : "stranger's answer");
			return 8;
		}
		heard = 1;
	}
	for (int after = 0; after < 10;) {
		heard = heard || ht_event_try(&s->knocked);
		item = r | heard << 8;
		if ((rc = hpct_allgather(hpct_world_group(w), &item, sizeof(item), all)) != 0) {
			fprintf(stderr, "rank %d: allgather: %s\n", r, hpct_last_error());
			return 3;
		}
		if ((all[0] & 0xff) != 0 || (all[1] & 0xff) != 1)
			return 4;
		if (all[0] >> 8 && all[1] >> 8)
			after++;
		else if (ht_now() > until) {
			fprintf(stderr, "rank %d: the %s never came\n", r,
			        s->loris ? "loris" : "stranger's answer");
			return 7;
		}
	}
	ht_event_post(&s->done, 1);
	struct hpct_world_stats st;
	hpct_world_get_stats(w, &st);
	if (r == 0 && st.conns_refused < 1 && !s->loris)
		return 5; /* nothing at all was refused by rank 0 */
	/* rank 0's destroy closes the loris: not before it has looked */
	if (r == 0 && s->loris && ht_event_wait(&s->looked, 1, HANG_S) != 0) {
		fprintf(stderr, "rank 0: the loris never looked at its connection\n");
		return 6;
	}
	hpct_world_destroy(w);
	return 0;
}

/* A line of `path` that holds all of a, b and c. */
static int log_has(const char *path, const char *a, const char *b, const char *c)
{
	char line[2048];
	int found = 0;
	FILE *f = fopen(path, "r");
	while (f && !found && fgets(line, sizeof(line), f))
		found = strstr(line, a) && strstr(line, b) && strstr(line, c);
	if (f)
		fclose(f);
	return found;
}

static void stranger_test(int slot, const char *job, const char *epoch, const char *secret,
                          const char *stranger_secret, int loris, const char *why)
{
	struct stranger s = { .real = { .n = 2, .port = hpct_test_ports(slot), .rootless = 1 },
		              .job = job,
		              .epoch = epoch,
		              .secret = secret,
		              .stranger_secret = stranger_secret,
		              .loris = loris };
	s.stranger_port = s.real.port + 100;
	snprintf(s.log, sizeof(s.log), "/tmp/hpct-faults-%d-%d.log", (int)getpid(), slot);
	cr_assert(ht_event_init(&s.listening) == 0 && ht_event_init(&s.knocked) == 0 &&
	          ht_event_init(&s.done) == 0 && ht_event_init(&s.looked) == 0);
	int codes[3];
	ht_spawn(3, stranger_env, stranger_main, &s, 2 * HANG_S, NULL, codes);
	ht_event_destroy(&s.listening);
	ht_event_destroy(&s.knocked);
	ht_event_destroy(&s.done);
	ht_event_destroy(&s.looked);
	cr_expect_eq(codes[0], 0, "real rank 0 exited %d", codes[0]);
	cr_expect_eq(codes[1], 0, "real rank 1 exited %d", codes[1]);
	cr_expect_eq(codes[2], 0, "%s exited %d", loris ? "loris" : "stranger", codes[2]);
	if (why) {
		/* the stranger claims rank 1; the real rank 1 is never refused */
		char text[4096] = "";
		FILE *f = fopen(s.log, "r");
		if (f) {
			text[fread(text, 1, sizeof(text) - 1, f)] = 0;
			fclose(f);
		}
		cr_expect(log_has(s.log, "rank 0: refused connection from ", "claiming rank 1 of",
		                  why),
		          "rank 0's log has no refusal of the stranger for '%s':\n%s", why, text);
	}
	unlink(s.log);
}

Test(faults, foreign_job_refused, .timeout = 300)
{
	stranger_test(2, "another-job", NULL, NULL, NULL, 0, ": another job;");
}
Test(faults, stale_epoch_refused, .timeout = 300)
{
	stranger_test(3, NULL, "7", NULL, NULL, 0, ": another epoch;");
}
/* Same job and epoch, but not the secret: refused both ways (the real job
 * runs with HPCT_SECRET, the stranger with another one, or none) */
Test(faults, wrong_secret_refused, .timeout = 300)
{
	stranger_test(8, NULL, NULL, "the-real-secret", "not-the-secret", 0, "shared secret");
}
Test(faults, no_secret_refused, .timeout = 300)
{
	stranger_test(9, NULL, NULL, "the-real-secret", NULL, 0, "shared secret");
}
/* A slow-loris on rank 0's port (half a frame, held open while the job
 * runs) delays no allgather: the job finishes while it is connected. */
Test(faults, slow_loris_delays_nobody, .timeout = 300)
{
	stranger_test(10, NULL, NULL, NULL, NULL, 1, NULL);
}

static int port_taken(int r, void *arg)
{
	struct cfg *c = arg;
	(void)r;
	hpct_world *w;
	int rc = hpct_world_create(&w);
	if (rc != HPCT_EADDRINUSE)
		return 60;
	/* the port depends on the job's window: any port of the held range */
	const char *m = strstr(hpct_last_error(), "cannot listen on 127.0.0.1:");
	if (!m || !strstr(hpct_last_error(), "HPCT_PORT_BASE="))
		return 61;
	int port = atoi(m + strlen("cannot listen on 127.0.0.1:"));
	return port > c->port && port <= c->port + 16 ? 0 : 62;
}

Test(faults, port_taken_is_named)
{
	struct cfg c = { .n = 1, .port = hpct_test_ports(4), .rootless = 1, .timeout = 5 };
	/* hold every port of the derived range (HPCT_PORT_BASE = port + 1, 16 ports) */
	int fds[16];
	for (int i = 0; i < 16; i++) {
		fds[i] = socket(AF_INET, SOCK_STREAM, 0);
		struct sockaddr_in a = { .sin_family = AF_INET,
			                 .sin_port = htons((uint16_t)(c.port + 1 + i)) };
		inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
		cr_assert(bind(fds[i], (struct sockaddr *)&a, sizeof(a)) == 0 &&
		          listen(fds[i], 1) == 0);
	}
	int codes[1];
	ht_spawn(1, env_cb, port_taken, &c, 20, NULL, codes);
	for (int i = 0; i < 16; i++)
		close(fds[i]);
	cr_expect_eq(codes[0], 0, "exit %d: want HPCT_EADDRINUSE naming 127.0.0.1:port", codes[0]);
}

static int bad_ifname(int r, void *arg)
{
	(void)r;
	(void)arg;
	hpct_world *w;
	setenv("HPCT_SOCKET_IFNAME", "nosuch9", 1);
	int rc = hpct_world_create(&w);
	if (rc != HPCT_EBADENV)
		return 70;
	if (!strstr(hpct_last_error(), "HPCT_SOCKET_IFNAME=nosuch9 matches no interface (have: lo"))
		return 71;
	/* an interface that exists but does not hold the node's address */
	setenv("HPCT_SOCKET_IFNAME", "=lo", 1);
	setenv("HPCT_HOSTS", "127.0.0.1", 1);
	if ((rc = hpct_world_create(&w)) != 0)
		return 72; /* lo serves all of 127/8 */
	hpct_world_destroy(w);
	return 0;
}

Test(faults, unknown_interface_is_named)
{
	struct cfg c = { .n = 1, .port = hpct_test_ports(5), .rootless = 1, .timeout = 5 };
	int codes[1];
	ht_spawn(1, env_cb, bad_ifname, &c, 20, NULL, codes);
	cr_expect_eq(codes[0], 0, "exit %d", codes[0]);
}

/* After a world collective failed because one rank never came, the
 * survivors can still form a group among themselves and work in it: the
 * failed group's undeliverable sends must not hold up their collectives. */
static int survivors(int r, void *arg)
{
	struct cfg *c = arg;
	if (r == c->victim)
		return 0;
	hpct_world *w;
	if (hpct_world_create(&w) != 0)
		return 2;
	hpct_group *world = hpct_world_group(w);
	char b[16] = "from rank 0";
	if (hpct_broadcast(world, b, sizeof(b), 0) == 0 && r == 0)
		return 3; /* rank 0 must have failed: it sends to rank 2 */
	int members[2] = { 0, 1 }, item = r * 7, all[2];
	hpct_group *g;
	if (hpct_group_create(world, members, 2, &g) != 0 || !g)
		return 4;
	/* rank 1 waits out rank 0's failing broadcast in the barrier; after
	 * that, forty collectives: were each held up by the failed group's
	 * sends until a deadline, they would outlast the test's hang guard */
	if (hpct_barrier(g) != 0)
		return 5;
	for (int i = 0; i < 40; i++) {
		item = r * 7 + i;
		if (hpct_allgather(g, &item, sizeof(item), all) != 0 || hpct_barrier(g) != 0)
			return 5;
		if (all[0] != i || all[1] != 7 + i)
			return 6;
	}
	hpct_group_destroy(g);
	hpct_world_destroy(w);
	return 0;
}

Test(faults, survivors_form_a_group_after_a_failure, .timeout = 120)
{
	struct cfg c = {
		.n = 3, .port = hpct_test_ports(7), .rootless = 1, .victim = 2, .timeout = 3
	};
	int codes[3];
	ht_spawn(3, env_cb, survivors, &c, c.timeout + 60, NULL, codes);
	for (int r = 0; r < 2; r++)
		cr_expect_eq(codes[r], 0, "rank %d exited %d%s", r, codes[r],
		             codes[r] == 255 ? " (hung: the subgroup was held up)" : "");
}
