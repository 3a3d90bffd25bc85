/*
 * The SPANK plugin (spank/slurm_ft.c) outside Slurm, for tests/unit/test_plugin_harness.py: Slurm's side
 * is stubbed (log lines to stderr, job control variables printed), the plugin's own code is compiled in.
 *
 *   spank_harness opt NAME=VALUE ...     each --NAME as sbatch hands it to the plugin, then init_post_opt;
 *                                        prints "opt NAME RC", "setenv VAR=VALUE", "post_opt RC"
 *   spank_harness resolve SECONDS PROG [ARG ...]
 *                                        run_resolver with resolve_timeout=SECONDS; prints "rc RC len N"
 *                                        then the output it kept
 *   spank_harness utf8 HEX               valid_utf8 of the bytes HEX spells; prints 1 or 0
 */
#include "slurm_ft.c"

#include <stdarg.h>

extern char **environ;

static void logline(const char *level, const char *fmt, va_list ap)
{
	fprintf(stderr, "%s: ", level);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
}

void slurm_error(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	logline("error", fmt, ap);
	va_end(ap);
}

void slurm_info(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	logline("info", fmt, ap);
	va_end(ap);
}

int spank_remote(spank_t sp)
{
	(void)sp;
	return 0;
}

spank_context_t spank_context(void)
{
	return S_CTX_ALLOCATOR;
}

spank_err_t spank_option_register(spank_t sp, struct spank_option *opt)
{
	(void)sp;
	(void)opt;
	return ESPANK_SUCCESS;
}

spank_err_t spank_get_item(spank_t sp, spank_item_t item, ...)
{
	(void)sp;
	(void)item;
	return ESPANK_ERROR;
}

spank_err_t spank_setenv(spank_t sp, const char *var, const char *val, int overwrite)
{
	(void)sp;
	(void)overwrite;
	printf("task setenv %s=%s\n", var, val);
	return ESPANK_SUCCESS;
}

spank_err_t spank_job_control_setenv(spank_t sp, const char *name, const char *value, int overwrite)
{
	(void)sp;
	(void)overwrite;
	printf("setenv %s=%s\n", name, value);
	return ESPANK_SUCCESS;
}

static int hexval(char c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

int main(int argc, char **argv)
{
	static char out[MAX_RESOLVE_OUTPUT];
	int i, j, rc;

	if (argc >= 2 && !strcmp(argv[1], "opt")) {
		for (i = 2; i < argc; i++) {
			char *eq = strchr(argv[i], '=');

			if (!eq)
				return 2;
			*eq = '\0';
			for (j = 1; j < N_OPTS && strcmp(ft_opts[j].name, argv[i]); j++)
				;
			if (j == N_OPTS)
				return 2;
			printf("opt %s %d\n", argv[i], opt_cb(j, eq + 1, 0));
		}
		fflush(stdout);
		printf("post_opt %d\n", slurm_spank_init_post_opt(NULL, 0, NULL));
		return 0;
	}
	if (argc >= 4 && !strcmp(argv[1], "resolve")) {
		char arg[64];
		char *args[] = {arg};

		snprintf(arg, sizeof(arg), "resolve_timeout=%s", argv[2]);
		read_args(1, args);
		rc = run_resolver(argv + 3, environ, out, sizeof(out));
		printf("rc %d len %zu\n%s", rc, strlen(out), out);
		return 0;
	}
	if (argc == 3 && !strcmp(argv[1], "utf8")) {
		size_t n = strlen(argv[2]) / 2;
		unsigned char *b = calloc(n + 1, 1);

		for (i = 0; b && i < (int)n; i++)
			b[i] = (unsigned char)(hexval(argv[2][2 * i]) * 16 + hexval(argv[2][2 * i + 1]));
		printf("%d\n", b ? valid_utf8(b) : -1);
		free(b);
		return 0;
	}
	return 2;
}
