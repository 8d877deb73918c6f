/* Slurm hostlist and tasks-per-node parsers: expansions, and the message of
 * every kind of malformed input. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap/topo/hostlist.h"
#include "hpct/hpct.h"

static char err[256];

/* Parses s and compares with the space-separated names in want. */
static void expect_hosts(const char *s, size_t max, const char *want)
{
	char **h = NULL;
	int n = -1;
	int rc = hpct__hostlist_parse(s, max, &h, &n, err, sizeof(err));
	cr_assert_eq(rc, 0, "'%s': rc %d, %s", s, rc, err);
	char joined[4096] = "";
	size_t o = 0;
	for (int i = 0; i < n; i++)
		o += (size_t)snprintf(joined + o, sizeof(joined) - o, "%s%s", i ? " " : "", h[i]);
	cr_assert_str_eq(joined, want, "'%s' expanded to '%s'", s, joined);
	hpct__strv_free(h, n);
}

/* Parses s, expects HPCT_EBADENV, outputs untouched and `text` in err. */
static void expect_bad(const char *s, size_t max, const char *text)
{
	char **h = (char **)(uintptr_t)0x1;
	int n = -7;
	memset(err, 0, sizeof(err));
	int rc = hpct__hostlist_parse(s, max, &h, &n, err, sizeof(err));
	cr_assert_eq(rc, HPCT_EBADENV, "'%s': rc %d (%s)", s, rc, err);
	cr_assert(h == (char **)(uintptr_t)0x1 && n == -7, "'%s': outputs set on error", s);
	cr_assert(strstr(err, text), "'%s': message '%s' lacks '%s'", s, err, text);
}

static void expect_tasks(const char *s, int nnodes, const char *want)
{
	int *c = NULL, n = -1;
	int rc = hpct__tasks_per_node_parse(s, nnodes, &c, &n, err, sizeof(err));
	cr_assert_eq(rc, 0, "'%s': rc %d, %s", s, rc, err);
	char joined[1024] = "";
	size_t o = 0;
	for (int i = 0; i < n; i++)
		o += (size_t)snprintf(joined + o, sizeof(joined) - o, "%s%d", i ? " " : "", c[i]);
	cr_assert_str_eq(joined, want, "'%s' expanded to '%s'", s, joined);
	free(c);
}

static void expect_tasks_bad(const char *s, int nnodes, const char *text)
{
	int *c = (int *)(uintptr_t)0x1, n = -7;
	memset(err, 0, sizeof(err));
	int rc = hpct__tasks_per_node_parse(s, nnodes, &c, &n, err, sizeof(err));
	cr_assert_eq(rc, HPCT_EBADENV, "'%s': rc %d (%s)", s, rc, err);
	cr_assert(c == (int *)(uintptr_t)0x1 && n == -7, "'%s': outputs set on error", s);
	cr_assert(strstr(err, text), "'%s': message '%s' lacks '%s'", s, err, text);
}

Test(hostlist, plain_names)
{
	expect_hosts("gpu01", 10, "gpu01");
	expect_hosts("a,b,c", 10, "a b c");
	expect_hosts("10.0.0.1,10.0.0.2", 10, "10.0.0.1 10.0.0.2");
	expect_hosts("fd00::1,fe80::2", 10, "fd00::1 fe80::2");
	expect_hosts("  a , b\tc\n", 10, "a b c");
}

Test(hostlist, ranges_and_padding)
{
	expect_hosts("gpu-[01-04,07],cpu7", 10, "gpu-01 gpu-02 gpu-03 gpu-04 gpu-07 cpu7");
	expect_hosts("n[08-11]", 10, "n08 n09 n10 n11");
	expect_hosts("n[8-11]", 10, "n8 n9 n10 n11");
	expect_hosts("n[001-3]", 10, "n001 n002 n003");
	expect_hosts("n[98-101]", 10, "n98 n99 n100 n101");
	expect_hosts("n[5]", 10, "n5");
	expect_hosts("[1-3]", 10, "1 2 3");
	expect_hosts("10.0.0.[1-3]", 10, "10.0.0.1 10.0.0.2 10.0.0.3");
	expect_hosts("rack[1-2]-n", 10, "rack1-n rack2-n");
}

Test(hostlist, several_groups_leftmost_slowest)
{
	expect_hosts("n[1-2]-ib[0-1]", 10, "n1-ib0 n1-ib1 n2-ib0 n2-ib1");
	expect_hosts("r[1,3]n[08-09]x[5]", 10, "r1n08x5 r1n09x5 r3n08x5 r3n09x5");
	expect_hosts("a[1-2]b[1-2]c[1-2]", 8,
	             "a1b1c1 a1b1c2 a1b2c1 a1b2c2 a2b1c1 a2b1c2 a2b2c1 a2b2c2");
	expect_hosts("x,n[1-2]-ib[0,2],y", 10, "x n1-ib0 n1-ib2 n2-ib0 n2-ib2 y");
}

Test(hostlist, exactly_max_hosts)
{
	expect_hosts("n[1-4]", 4, "n1 n2 n3 n4");
	expect_hosts("a,b,c,d", 4, "a b c d");
	expect_bad("n[1-5]", 4, "more than 4 names (at '[1-5]', position 2)");
	expect_bad("a,b,c,d,e", 4, "more than 4 names (at 'e', position 9)");
	expect_bad("n[1-2]x[1-3]", 5, "more than 5 names");
	expect_bad("a", 0, "more than 0 names");
}

Test(hostlist, malformed)
{
	expect_bad("", 10, "empty host list");
	expect_bad(" \t", 10, "empty host list");
	expect_bad("gpu-[01-", 10, "unbalanced '[' at position 5");
	expect_bad("gpu-[01-02", 10, "unbalanced '[' at position 5");
	expect_bad("gpu-01]", 10, "unbalanced ']' at position 7");
	expect_bad("n[1[2]]", 10, "'[' at position 4 inside the '[' at position 2");
	expect_bad("a,,b", 10, "empty name at position 3");
	expect_bad(",a", 10, "empty name at position 1");
	expect_bad("a, ,b", 10, "empty name at position 4");
	expect_bad("a,", 10, "trailing ',' at position 2");
	expect_bad("a, ", 10, "trailing ',' at position 2");
	expect_bad("n[5-3]", 10, "descending range '5-3' at position 3");
	expect_bad("n[1,09-08]", 10, "descending range '09-08' at position 5");
	expect_bad("n[1-a]", 10, "'a' at position 5 is not a digit (in '[1-a]')");
	expect_bad("n[x]", 10, "'x' at position 3 is not a digit");
	expect_bad("n[1-]", 10, "']' at position 5 is not a digit");
	expect_bad("n[-3]", 10, "'-' at position 3 is not a digit");
	expect_bad("n[1-2-3]", 10, "'-' at position 6 is not a digit");
	expect_bad("n[1 ]", 10, "' ' at position 4 is not a digit");
	expect_bad("n[]", 10, "empty range at position 3 in '[]'");
	expect_bad("n[1,]", 10, "empty range at position 5 in '[1,]'");
	expect_bad("n[,1]", 10, "empty range at position 3");
	expect_bad("n[99999999999999999999999]", 10,
	           "number '99999999999999999999999' at position 3 is too large");
}

Test(hostlist, huge_expansions_rejected_before_allocating)
{
	expect_bad("n[1-1000000000]", 100, "more than 100 names");
	expect_bad("n[0-18446744073709551615]", 100, "more than 100 names");
	expect_bad("n[1-100000]x[1-100000]y[1-100000]", 1000000, "more than 1000000 names");
	expect_bad("a,b,n[1-3]", 4, "more than 4 names (at '[1-3]', position 6)");
}

Test(hostlist, long_names)
{
	char s[600];
	memset(s, 'a', 255);
	s[255] = 0;
	char **h;
	int n;
	cr_assert_eq(hpct__hostlist_parse(s, 1, &h, &n, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(strlen(h[0]), 255);
	hpct__strv_free(h, n);
	strcat(s, "b");
	expect_bad(s, 1, "is longer than 255 characters");
	memset(s, 'a', 250);
	strcpy(s + 250, "[1-100000]");
	expect_bad(s, 200000, "is longer than 255 characters");
	strcpy(s, "n[");
	memset(s + 2, '0', 300);
	strcpy(s + 302, "1]");
	expect_bad(s, 10, "is longer than 255 characters");
}

Test(hostlist, err_may_be_null_or_short)
{
	char **h;
	int n;
	cr_assert_eq(hpct__hostlist_parse("a[", 10, &h, &n, NULL, 0), HPCT_EBADENV);
	char tiny[8];
	memset(tiny, 'z', sizeof(tiny));
	cr_assert_eq(hpct__hostlist_parse("a[", 10, &h, &n, tiny, sizeof(tiny)), HPCT_EBADENV);
	cr_assert_eq(tiny[7], 0, "message not terminated inside errlen");
	int *c;
	cr_assert_eq(hpct__tasks_per_node_parse("0", 0, &c, &n, NULL, 0), HPCT_EBADENV);
	cr_assert_eq(hpct__hostlist_parse(NULL, 10, &h, &n, err, sizeof(err)), HPCT_EBADENV);
	hpct__strv_free(NULL, 0);
}

Test(hostlist, large_list_is_linear)
{
	char **h;
	int n;
	cr_assert_eq(hpct__hostlist_parse("gpu-[00001-10000]", 10000, &h, &n, err, sizeof(err)), 0,
	             "%s", err);
	cr_assert_eq(n, 10000);
	cr_assert_str_eq(h[0], "gpu-00001");
	cr_assert_str_eq(h[9999], "gpu-10000");
	hpct__strv_free(h, n);
}

/* Random strings over the syntax's alphabet: no crash, no read past the end
 * (run under ASan), and every success is a sane list. */
Test(hostlist, random_inputs)
{
	static const char alphabet[] = "[]-,0123456789ab x.:";
	unsigned seed = 12345;
	for (int iter = 0; iter < 20000; iter++) {
		char s[24];
		seed = seed * 1103515245u + 12345u;
		int len = (int)((seed >> 16) % (sizeof(s) - 1));
		for (int i = 0; i < len; i++) {
			seed = seed * 1103515245u + 12345u;
			s[i] = alphabet[(seed >> 16) % (sizeof(alphabet) - 1)];
		}
		s[len] = 0;
		char **h;
		int n;
		int rc = hpct__hostlist_parse(s, 64, &h, &n, err, sizeof(err));
		if (rc) {
			cr_assert_eq(rc, HPCT_EBADENV, "'%s': rc %d", s, rc);
			cr_assert(err[0], "'%s': no message", s);
			continue;
		}
		cr_assert(n >= 1 && n <= 64, "'%s': %d names", s, n);
		for (int i = 0; i < n; i++)
			cr_assert(h[i][0] && !strpbrk(h[i], "[], \t"), "'%s': name '%s'", s, h[i]);
		hpct__strv_free(h, n);
		int *c;
		if (hpct__tasks_per_node_parse(s, 0, &c, &n, err, sizeof(err)) == 0) {
			for (int i = 0; i < n; i++)
				cr_assert(c[i] >= 1, "'%s': count %d", s, c[i]);
			free(c);
		}
	}
}

Test(tasks_per_node, expansions)
{
	expect_tasks("8(x4),2", 5, "8 8 8 8 2");
	expect_tasks("8(x4),2", 0, "8 8 8 8 2");
	expect_tasks("8(x4),2", -1, "8 8 8 8 2");
	expect_tasks("3,1,2", 3, "3 1 2");
	expect_tasks("1", 1, "1");
	expect_tasks("2(x1)", 1, "2");
	expect_tasks(" 4(x2) ", 2, "4 4");
}

Test(tasks_per_node, malformed)
{
	expect_tasks_bad("", 0, "empty tasks-per-node list");
	expect_tasks_bad("8(x0)", 0, "repeat count 'x0' at position 3 must be at least 1");
	expect_tasks_bad("0", 0, "count '0' at position 1 must be at least 1");
	expect_tasks_bad("4,0(x2)", 0, "count '0' at position 3");
	expect_tasks_bad("8,", 0, "trailing ',' at position 2");
	expect_tasks_bad(",8", 0, "empty entry at position 1");
	expect_tasks_bad("8,,2", 0, "empty entry at position 3");
	expect_tasks_bad("8(4)", 0, "expected 'x' after '(' at position 3, found '4'");
	expect_tasks_bad("8(x4", 0, "unbalanced '(' at position 2");
	expect_tasks_bad("8(x4]", 0, "expected ')' at position 5, found ']'");
	expect_tasks_bad("8(x)", 0, "expected a digit at position 4, found ')'");
	expect_tasks_bad("8(x4)x", 0, "unexpected 'x' at position 6");
	expect_tasks_bad("8 2", 0, "unexpected ' ' at position 2");
	expect_tasks_bad("a", 0, "expected a digit at position 1, found 'a'");
	expect_tasks_bad("-1", 0, "expected a digit at position 1, found '-'");
	expect_tasks_bad("99999999999", 0, "count '99999999999' at position 1 is too large");
	expect_tasks_bad("1(x99999999999999999999999)", 0, "is too large");
}

Test(tasks_per_node, count_must_match_nodes)
{
	expect_tasks_bad("8(x4),2", 4, "more than 4 counts for 4 nodes");
	expect_tasks_bad("8(x3)", 4, "3 counts for 4 nodes");
	expect_tasks_bad("1(x99999999999)", 0, "more than 16777216 counts");
	expect_tasks_bad("1(x2000000000)", 10000, "more than 10000 counts for 10000 nodes");
}
