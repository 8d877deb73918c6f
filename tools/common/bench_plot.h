/* hpct-bench --plot: draws what a run measured with gnuplot (Debian's
 * gnuplot-nox), so the figures and the picture come from the same run. */
#ifndef HPCT_BENCH_PLOT_H
#define HPCT_BENCH_PLOT_H

/* One line of hpct-bench's table. */
struct plot_row {
	const char *scenario; /* cold, gloo, nccl-root: time versus N; restart/full,
	                         kill-root/inprocess ...: bars */
	const char *path;     /* rootless or standard */
	const char *detail;   /* restart/kill-root: what a recovery is; else NULL */
	int ranks;
	double median_ms, min_ms, max_ms;
};

/* Writes `file` (PNG): on the left, median time versus N (log-log, min-max
 * as error bars) for each scenario and path that ran at several sizes or is
 * not a recovery, with the floor ceil(log2 N) x rtt_ms drawn in (left out
 * when rtt_ms <= 0); on the right, each recovery scenario a panel of its
 * own, its bars (rootless, standard) grouped by N.  0, or -1
 * with a message on stderr (gnuplot missing: the package to install). */
int bench_plot(const char *file, const struct plot_row *rows, int nrows, double rtt_ms);

#endif
