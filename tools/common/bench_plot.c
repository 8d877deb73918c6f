/* hpct-bench --plot: the run's table as a PNG, drawn by gnuplot from data
 * and a script written to a private temporary directory. */
#include "tools/common/bench_plot.h"

#include <errno.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* restart and kill-root rows, labelled with their recovery ("restart/full") */
static int is_recovery(const char *scenario)
{
	return strncmp(scenario, "restart", 7) == 0 || strncmp(scenario, "kill-root", 9) == 0;
}

/* Writes the time-versus-N series, one gnuplot data block per (scenario,
 * path) in order of first appearance; returns the number of blocks. */
static int write_series(FILE *f, const struct plot_row *rows, int n, int *minr, int *maxr,
                        char titles[][64], int max_titles)
{
	int blocks = 0;
	for (int i = 0; i < n; i++) {
		if (is_recovery(rows[i].scenario))
			continue;
		int seen = 0;
		for (int j = 0; j < i && !seen; j++)
			seen = !is_recovery(rows[j].scenario) &&
			       strcmp(rows[j].scenario, rows[i].scenario) == 0 &&
			       strcmp(rows[j].path, rows[i].path) == 0;
		if (seen || blocks == max_titles)
			continue;
		snprintf(titles[blocks], 64, "%s, %s", rows[i].scenario, rows[i].path);
		if (blocks)
			fprintf(f, "\n\n");
		for (int j = i; j < n; j++) {
			if (strcmp(rows[j].scenario, rows[i].scenario) != 0 ||
			    strcmp(rows[j].path, rows[i].path) != 0)
				continue;
			fprintf(f, "%d %.3f %.3f %.3f\n", rows[j].ranks, rows[j].median_ms,
			        rows[j].min_ms, rows[j].max_ms);
			if (*minr == 0 || rows[j].ranks < *minr)
				*minr = rows[j].ranks;
			if (rows[j].ranks > *maxr)
				*maxr = rows[j].ranks;
		}
		blocks++;
	}
	return blocks;
}

/* One gnuplot data block per recovery scenario ("restart/full", ...), in
 * order of first appearance, a line per N: "N=16", the rootless and the
 * standard median, "?" where a path did not run.  Returns the number of
 * blocks; their names in names. */
static int write_bars(FILE *f, const struct plot_row *rows, int n, char names[][64], int max)
{
	int blocks = 0;
	for (int i = 0; i < n; i++) {
		if (!is_recovery(rows[i].scenario))
			continue;
		int seen = 0;
		for (int j = 0; j < i && !seen; j++)
			seen = strcmp(rows[j].scenario, rows[i].scenario) == 0;
		if (seen || blocks == max)
			continue;
		snprintf(names[blocks], 64, "%s", rows[i].scenario);
		if (blocks)
			fprintf(f, "\n\n");
		for (int j = i; j < n; j++) {
			if (strcmp(rows[j].scenario, rows[i].scenario) != 0)
				continue;
			int first = 1; /* this N's first row of the scenario */
			for (int k = i; k < j && first; k++)
				first = strcmp(rows[k].scenario, rows[j].scenario) != 0 ||
				        rows[k].ranks != rows[j].ranks;
			if (!first)
				continue;
			double v[2] = { -1, -1 };
			for (int k = j; k < n; k++)
				if (strcmp(rows[k].scenario, rows[j].scenario) == 0 &&
				    rows[k].ranks == rows[j].ranks)
					v[strcmp(rows[k].path, "rootless") == 0 ? 0 : 1] =
					        rows[k].median_ms;
			fprintf(f, "\"N=%d\"", rows[j].ranks);
			for (int k = 0; k < 2; k++)
				if (v[k] < 0)
					fprintf(f, " ?");
				else
					fprintf(f, " %.3f", v[k]);
			fprintf(f, "\n");
		}
		blocks++;
	}
	return blocks;
}

static int run_gnuplot(const char *script)
{
	pid_t pid;
	char *argv[] = { "gnuplot", (char *)script, NULL };
	int rc = posix_spawnp(&pid, "gnuplot", NULL, NULL, argv, environ);
	if (rc != 0) {
		if (rc == ENOENT)
			fprintf(stderr, "hpct-bench: --plot needs gnuplot, which is not installed "
			                "(Debian: apt-get install gnuplot-nox)\n");
		else
			fprintf(stderr, "hpct-bench: --plot: cannot run gnuplot: %s\n",
			        strerror(rc));
		return -1;
	}
	int st;
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return -1;
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		fprintf(stderr, "hpct-bench: --plot: gnuplot failed (status %d)\n", st);
		return -1;
	}
	return 0;
}

int bench_plot(const char *file, const struct plot_row *rows, int nrows, double rtt_ms)
{
	char dir[] = "/tmp/hpct-plot-XXXXXX";
	if (!mkdtemp(dir)) {
		fprintf(stderr, "hpct-bench: --plot: cannot make a temporary directory: %s\n",
		        strerror(errno));
		return -1;
	}
	char scale[64], bars[64], script[64];
	snprintf(scale, sizeof(scale), "%s/scale.dat", dir);
	snprintf(bars, sizeof(bars), "%s/recovery.dat", dir);
	snprintf(script, sizeof(script), "%s/plot.gp", dir);
	FILE *fs = fopen(scale, "w"), *fb = fopen(bars, "w"), *fg = fopen(script, "w");
	int rc = -1, minr = 0, maxr = 0, nseries = 0, nbars = 0;
	char titles[16][64], bar_names[8][64];
	if (!fs || !fb || !fg) {
		fprintf(stderr, "hpct-bench: --plot: cannot write in %s: %s\n", dir,
		        strerror(errno));
		goto out;
	}
	nseries = write_series(fs, rows, nrows, &minr, &maxr, titles, 16);
	nbars = write_bars(fb, rows, nrows, bar_names, 8);
	fclose(fs);
	fclose(fb);
	fs = fb = NULL;
	if (nseries + nbars == 0) {
		fprintf(stderr, "hpct-bench: --plot: no result to draw\n");
		goto out;
	}
	/* The output name goes into a gnuplot string: no quote may end it. */
	if (strchr(file, '"') || strchr(file, '\\') || strchr(file, '\n')) {
		fprintf(stderr, "hpct-bench: --plot %s: quotes and backslashes are not allowed\n",
		        file);
		goto out;
	}
	/* the scaling panel on the left; the recovery scenarios each a panel
	 * of their own on the right, two a row, their bars grouped by N */
	int brows = (nbars + 1) / 2, bcols = nbars > 1 ? 2 : nbars;
	double left = nseries ? (nbars ? 0.42 : 1.0) : 0.0;
	int width = nseries && nbars ? 1500 : nseries ? 640 : 420 * bcols;
	int height = nbars > 2 ? 300 * brows + 60 : 540;
	fprintf(fg, "set terminal pngcairo size %d,%d font 'sans,10'\n", width, height);
	fprintf(fg, "set output \"%s\"\n", file);
	fprintf(fg, "set datafile missing '?'\nset grid\nset samples 2000\nset multiplot\n");
	if (nseries) {
		fprintf(fg, "set origin 0,0\nset size %g,1\n", left);
		fprintf(fg, "set title 'Bootstrap time versus ranks (median, bars min-max)'\n"
		            "set logscale xy\nset xlabel 'ranks (N)'\nset ylabel 'ms (log scale)'\n"
		            "set key top left\n");
		fprintf(fg, "set xrange [%g:%g]\n", minr / 1.3, maxr * 1.3);
		/* powers of 2, spaced so that about 8 labels fit */
		int step = 2;
		while ((double)maxr / minr > 1.0 * step * step * step * step * step * step * step)
			step *= 2;
		fprintf(fg, "set xtics (");
		for (int r = 1, first = 1; r <= maxr * 2; r *= step)
			if (r >= minr / step) {
				fprintf(fg, "%s%d", first ? "" : ",", r);
				first = 0;
			}
		fprintf(fg, ")\n");
		fprintf(fg, "plot ");
		for (int s = 0; s < nseries; s++)
			fprintf(fg,
			        "%s'%s' index %d using 1:2:3:4 with yerrorlines lw 2 title '%s'",
			        s ? ", " : "", scale, s, titles[s]);
		if (rtt_ms > 0)
			fprintf(fg,
			        ", ceil(log(x)/log(2)-1e-9) * %.6f with lines dt 2 lw 2 lc rgb "
			        "'black' title 'floor: ceil(log2 N) x %.0f us round trip'",
			        rtt_ms, rtt_ms * 1000);
		fprintf(fg, "\n");
	}
	if (nbars) {
		const char *detail = "";
		for (int i = 0; i < nrows && !detail[0]; i++)
			if (is_recovery(rows[i].scenario) && rows[i].detail)
				detail = rows[i].detail;
		/* the panels' common title above them */
		double top = 1.0 - 50.0 / height, cw = (1.0 - left) / bcols, ch = top / brows;
		fprintf(fg,
		        "set label 99 \"Recovery: from the kill until every rank is done "
		        "(median ms, log scale)\\n%s\" at screen %g,%g center front\n",
		        detail, left + (1.0 - left) / 2, 1.0 - 22.0 / height);
		/* log: recoveries at 16 and at 1024 ranks differ a hundredfold */
		fprintf(fg, "unset logscale\nunset xrange\nset xtics auto\nset logscale y\n"
		            "set xlabel ''\nset ylabel ''\nset key top left\n"
		            "set style data histograms\nset style histogram clustered gap 1\n"
		            "set style fill solid 0.85 border -1\nset boxwidth 0.9\n"
		            "set xtics scale 0\nset offsets 0,0,graph 0.15,0\n");
		for (int b = 0; b < nbars; b++) {
			fprintf(fg, "set origin %g,%g\nset size %g,%g\nset title '%s'\n",
			        left + (b % 2) * cw, top - (b / 2 + 1) * ch, cw, ch, bar_names[b]);
			if (b == 1)
				fprintf(fg, "unset label 99\n");
			fprintf(fg,
			        "plot '%s' index %d using 2:xtic(1) title 'rootless', '' index %d "
			        "using 3 title 'standard', '' index %d using ($0-1.0/6):2:"
			        "(sprintf($2<100?'%%.1f':'%%.0f',$2)) with labels offset 0,0.7 "
			        "font ',8' notitle, '' index %d using ($0+1.0/6):3:"
			        "(sprintf($3<100?'%%.1f':'%%.0f',$3)) with labels offset 0,0.7 "
			        "font ',8' notitle\n",
			        bars, b, b, b, b);
		}
	}
	fprintf(fg, "unset multiplot\n");
	fclose(fg);
	fg = NULL;
	rc = run_gnuplot(script);
out:
	if (fs)
		fclose(fs);
	if (fb)
		fclose(fb);
	if (fg)
		fclose(fg);
	unlink(scale);
	unlink(bars);
	unlink(script);
	rmdir(dir);
	return rc;
}
