/* restart --state SIZE: the state a replaced rank needs before it can go
 * on.  In-process, the survivors hold it and deliver it to the
 * replacement with hpct_fanout (the same hpct that recovered the world);
 * in a full restart every rank, a new process, reads it from a file on
 * local disk written once before the runs, its pages dropped from the
 * page cache before each run.  Both sides check every byte against the
 * same pattern, after their time is taken.
 *
 * Also the pattern itself (the fanout scenario's buffers) and sizes. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "hpct/fanout.h"
#include "hpct/hpct.h"
#include "tools/bench/bench.h"
#include "tools/common/bench_rank.h"

#define TMPFS_MAGIC 0x01021994
#define STATE_SEED  1 /* the state's version: survivors hold 1, a replacement 0 */

struct bench_state bench_state;

uint64_t bench_parse_size(const char *s)
{
	char *end;
	unsigned long long v = strtoull(s, &end, 10);
	int shift = *end == 'K' || *end == 'k'   ? 10
	            : *end == 'M' || *end == 'm' ? 20
	            : *end == 'G' || *end == 'g' ? 30
	                                         : 0;
	if (end == s || (shift && *++end) || (!shift && *end) || v == 0 || v > (1ull << 40))
		return 0;
	return (uint64_t)v << shift;
}

/* 64K, 64M, 2G: the largest unit that divides it */
const char *bench_size_name(uint64_t b, char *buf, size_t len)
{
	static const char units[] = "GMK";
	for (int i = 0; i < 3; i++) {
		uint64_t u = 1ull << (30 - 10 * i);
		if (b >= u && b % u == 0) {
			snprintf(buf, len, "%llu%c", (unsigned long long)(b / u), units[i]);
			return buf;
		}
	}
	snprintf(buf, len, "%llu", (unsigned long long)b);
	return buf;
}

/* word i of the pattern: every word differs, and a chunk put at the wrong
 * offset or taken from another seed does not match */
static inline uint64_t word_at(uint64_t i, uint64_t seed)
{
	uint64_t x = (i + 1) * 0x9e3779b97f4a7c15ull ^ seed * 0xbf58476d1ce4e5b9ull;
	return x ^ (x >> 31);
}

void bench_pattern_fill(void *buf, size_t len, uint64_t seed)
{
	uint64_t *w = buf;
	size_t n = len / 8;
	for (size_t i = 0; i < n; i++)
		w[i] = word_at(i, seed);
	uint64_t last = word_at(n, seed);
	memcpy((char *)buf + n * 8, &last, len % 8);
}

size_t bench_pattern_check(const void *buf, size_t len, uint64_t seed)
{
	const uint64_t *w = buf;
	size_t n = len / 8;
	for (size_t i = 0; i < n; i++)
		if (w[i] != word_at(i, seed))
			return i * 8 + 1;
	uint64_t last = word_at(n, seed);
	return memcmp((const char *)buf + n * 8, &last, len % 8) ? n * 8 + 1 : 0;
}

uint64_t bench_mem_total(void)
{
	FILE *f = fopen("/proc/meminfo", "r");
	char line[256];
	unsigned long long kb = 0;
	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "MemTotal: %llu", &kb) == 1)
			break;
	if (f)
		fclose(f);
	return (uint64_t)kb * 1024;
}

int bench_state_setup(uint64_t bytes, int max_ranks)
{
	uint64_t total = bench_mem_total(), need = ((uint64_t)max_ranks + 1) * bytes;
	if (total && need > total / 10 * 6) {
		fprintf(stderr,
		        "hpct-bench: --state %.0f MiB with %d ranks: %d ranks x %.0f MiB plus the "
		        "file's pages = %.1f GiB, more than 60%% of this machine's %.1f GiB "
		        "(MemTotal); fewer --ranks, or a smaller --state\n",
		        bytes / 1048576.0, max_ranks, max_ranks, bytes / 1048576.0,
		        need / 1073741824.0, total / 1073741824.0);
		return -1;
	}
	const char *dir = getenv("TMPDIR");
	if (!dir || !*dir)
		dir = "/var/tmp";
	snprintf(bench_state.file, sizeof(bench_state.file), "%s/hpct-bench-state-%d", dir,
	         (int)getpid());
	int fd = open(bench_state.file, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	size_t len = (size_t)bytes;
	char *buf = fd >= 0 ? malloc(len) : NULL;
	int rc = buf ? 0 : -1;
	if (buf) {
		bench_pattern_fill(buf, len, STATE_SEED);
		for (size_t off = 0; off < len && rc == 0;) {
			ssize_t k = write(fd, buf + off, len - off);
			if (k < 0 && errno == EINTR)
				continue;
			rc = k > 0 ? 0 : -1;
			off += k > 0 ? (size_t)k : 0;
		}
		if (rc == 0)
			rc = fsync(fd);
	}
	struct statfs fs;
	int tmpfs = fd >= 0 && fstatfs(fd, &fs) == 0 && fs.f_type == TMPFS_MAGIC;
	free(buf);
	if (fd >= 0)
		close(fd);
	if (rc < 0 || tmpfs) {
		fprintf(stderr,
		        "hpct-bench: --state: cannot write %s%s%s (set TMPDIR to a folder "
		        "on a local disk)\n",
		        bench_state.file,
		        tmpfs ? ": it is on tmpfs, whose pages cannot be "
		                "dropped"
		              : ": ",
		        tmpfs ? "" : strerror(errno));
		unlink(bench_state.file);
		return -1;
	}
	bench_state.bytes = bytes;
	bench_state.pages = (long)((len + (size_t)getpagesize() - 1) / (size_t)getpagesize());
	return 0;
}

/* The file's pages still in the page cache, by mincore; -1 if unknown. */
static long resident_pages(int fd)
{
	size_t len = (size_t)bench_state.bytes;
	void *map = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
	unsigned char *vec = malloc((size_t)bench_state.pages);
	long n = -1;
	if (map != MAP_FAILED && vec && mincore(map, len, vec) == 0)
		for (long i = n = 0; i < bench_state.pages; i++)
			n += vec[i] & 1;
	if (map != MAP_FAILED)
		munmap(map, len);
	free(vec);
	return n;
}

void bench_state_drop(void)
{
	int fd = open(bench_state.file, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	/* this file's pages, which needs no privilege and leaves the other
	 * programs' caches alone; the whole page cache only if some stayed */
	fdatasync(fd);
	posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	long left = resident_pages(fd);
	int dc = left != 0 ? open("/proc/sys/vm/drop_caches", O_WRONLY | O_CLOEXEC) : -1;
	if (dc >= 0) {
		sync();
		bench_state.dc_drops += write(dc, "1", 1) == 1;
		close(dc);
		left = resident_pages(fd);
	}
	if (left > bench_state.resident_max || left < 0)
		bench_state.resident_max = left < 0 ? bench_state.pages : left;
	bench_state.drops++;
	close(fd);
}

void bench_state_env(int on, int from_file)
{
	if (!on || !bench_state.bytes) {
		unsetenv("HPCT_BENCH_STATE");
		unsetenv("HPCT_BENCH_STATE_FILE");
		return;
	}
	char v[32];
	snprintf(v, sizeof(v), "%llu", (unsigned long long)bench_state.bytes);
	setenv("HPCT_BENCH_STATE", v, 1);
	if (from_file)
		setenv("HPCT_BENCH_STATE_FILE", bench_state.file, 1);
	else
		unsetenv("HPCT_BENCH_STATE_FILE");
}

void bench_state_finish(int max_ranks)
{
	if (!bench_state.bytes)
		return;
	char sz[24];
	bench_size_name(bench_state.bytes, sz, sizeof(sz));
	printf("state: %s per rank (pattern checked by every rank that got it), at most %d ranks "
	       "x %s = %.2f GiB held at once; in-process: the survivors deliver it to the "
	       "replacements with hpct_fanout (waves), inside the time; full: every rank reads it "
	       "from %s, inside the time\n",
	       sz, max_ranks, sz, (double)max_ranks * bench_state.bytes / 1073741824.0,
	       bench_state.file);
	if (bench_state.drops)
		printf("state: before each of the %d full restarts its pages left the page cache "
		       "by posix_fadvise(POSIX_FADV_DONTNEED) after fdatasync (%d times also by "
		       "/proc/sys/vm/drop_caches, where pages stayed); after that at most %ld of "
		       "its %ld pages were still resident (mincore); the host below this machine "
		       "may still cache its disk\n",
		       bench_state.drops, bench_state.dc_drops, bench_state.resident_max,
		       bench_state.pages);
	unlink(bench_state.file);
}

/* ------------------------------------------------------------ rank side */

static size_t state_bytes(void)
{
	const char *v = getenv("HPCT_BENCH_STATE");
	return v ? (size_t)strtoull(v, NULL, 10) : 0;
}

void *bench_state_hold(size_t *len)
{
	*len = state_bytes();
	char *buf = *len ? malloc(*len) : NULL;
	if (buf)
		bench_pattern_fill(buf, *len, STATE_SEED);
	return buf;
}

/* Reads the whole file into buf; 0 or -errno. */
static int read_file(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	size_t off = 0;
	while (off < len) {
		ssize_t k = read(fd, buf + off, len - off);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			break;
		off += (size_t)k;
	}
	int rc = off == len ? 0 : -(errno ? errno : EIO);
	close(fd);
	return rc;
}

int bench_state_get(hpct_world *w, void *held, size_t len, double *done)
{
	const char *epoch = getenv("HPCT_EPOCH"), *file = getenv("HPCT_BENCH_STATE_FILE");
	*done = mono();
	/* no state, or a rank of the steady state before the kill (a survivor,
	 * holding it, keeps its first epoch's environment) */
	if (!state_bytes() || (!held && (!epoch || atoi(epoch) < 1)))
		return 0;
	hpct_group *g = hpct_world_group(w);
	int me = hpct_group_rank(g), rc;
	char *buf = held;
	if (!held) {
		len = state_bytes();
		buf = malloc(len);
		if (!buf)
			return HPCT_ENOMEM;
	}
	if (file)
		rc = read_file(file, buf, len);
	else
		rc = hpct_fanout(g, "bench-state", STATE_SEED, held ? STATE_SEED : 0, buf, len,
		                 NULL, NULL);
	*done = mono();
	if (rc)
		fprintf(stderr, "hpct-bench: rank %d: state of %zu bytes from %s: %s\n", me, len,
		        file ? file : "the survivors", file ? strerror(-rc) : hpct_last_error());
	size_t bad = rc == 0 ? bench_pattern_check(buf, len, STATE_SEED) : 0;
	if (bad) {
		fprintf(stderr, "hpct-bench: rank %d: state from %s differs at byte %zu\n", me,
		        file ? file : "the survivors", bad - 1);
		rc = HPCT_EPROTO;
	}
	if (!held)
		free(buf);
	return rc;
}
