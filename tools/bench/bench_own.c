/* The options of the scenarios that run on their own (nvrx, nccl-init):
 * one parser, each scenario's defaults in, what the user gave out. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include "tools/bench/bench.h"

int bench_own_options(int argc, char **argv, struct bench_own_opts *o, const char *usage)
{
	static const struct option opts[] = {
		{ "scenario", required_argument, NULL, 's' },
		{ "ranks", required_argument, NULL, 'n' },
		{ "repeat", required_argument, NULL, 'r' },
		{ "path", required_argument, NULL, 'p' },
		{ "nodes", required_argument, NULL, 'N' },
		{ "port", required_argument, NULL, 'P' },
		{ "timeout", required_argument, NULL, 't' },
		{ "json", required_argument, NULL, 'j' },
		{ NULL, 0, NULL, 0 },
	};
	int c;
	while ((c = getopt_long(argc, argv, "s:n:r:p:N:P:t:j:", opts, NULL)) != -1) {
		switch (c) {
		case 's':
			break;
		case 'n':
			o->ranks = optarg;
			break;
		case 'r':
			o->repeat = atoi(optarg);
			break;
		case 'p':
			o->paths = optarg;
			break;
		case 'N':
			if (o->nodes < 0) { /* the scenario has none */
				fprintf(stderr, "%s", usage);
				return -1;
			}
			o->nodes = atoi(optarg);
			break;
		case 'P':
			o->port = atoi(optarg);
			break;
		case 't':
			o->timeout = atof(optarg);
			break;
		case 'j':
			o->json = optarg;
			break;
		default:
			fprintf(stderr, "%s", usage);
			return -1;
		}
	}
	return 0;
}
