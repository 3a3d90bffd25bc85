/*
 * slurm-ft SPANK plugin: `sbatch --ft-ckpt-dir=DIR ...` instead of `slurm-ft sbatch --ckpt-dir DIR ...`.
 *
 * Submit side (sbatch, salloc, srun: the allocator and local contexts): registers the --ft-* options
 * (so they show in `sbatch --help`), refuses a bad value with one clear line before anything is sent,
 * and puts the values into the job control environment, where the job_submit policy
 * (etc/job_submit.lua) turns them into the fault-tolerance tag in AdminComment and the prolog and
 * epilog see them as SPANK_SLURM_FT_*.
 * Node side (slurmstepd, the remote context): exports SLURM_FT_* to every task; in the batch step,
 * before the script starts, runs slurm-ft's own start code (python -m slurm_ft.job.jobstart
 * --resolve) to find the newest complete checkpoint, exports SLURM_FT_CKPT / SLURM_FT_CKPT_STEP and
 * replaces {ckpt} in the script's arguments, exactly as `slurm-ft sbatch` does.
 *
 * plugstack.conf:  optional /opt/slurm-ft/spank/slurm_ft.so [python=PATH] [resolve_timeout=SECONDS]
 * The same source builds against Slurm 22.05, 24.11 and 26.05 (spank.h only).
 */
#define _GNU_SOURCE               /* pipe2 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <slurm/slurm.h>
#include <slurm/spank.h>

SPANK_PLUGIN(slurm_ft, 1);

#define CKPT_PLACEHOLDER "{ckpt}"
#define MAX_DIR_LEN 1024          /* a checkpoint dir longer than this is refused at submit time */
#define MAX_RESOLVE_OUTPUT 8192   /* what the resolver may print: one path and one step */

enum { OPT_CKPT_DIR = 1, OPT_HOT_SPARES, OPT_MAX_RESTARTS, OPT_HANG_TIMEOUT, OPT_MIN_NODES };

/* One option: its name, the variable it becomes, and the range of an integer option. */
struct ft_opt {
	const char *name;
	const char *env;
	long low, high;           /* high < low: not an integer (the checkpoint directory) */
	char value[MAX_DIR_LEN + 1];
	int set;
};

static struct ft_opt ft_opts[] = {
	[OPT_CKPT_DIR] = {"ft-ckpt-dir", "SLURM_FT_CKPT_DIR", 1, 0, "", 0},
	[OPT_HOT_SPARES] = {"ft-hot-spares", "SLURM_FT_HOT_SPARES", 0, 10000, "", 0},
	[OPT_MAX_RESTARTS] = {"ft-max-restarts", "SLURM_FT_MAX_RESTARTS", 0, 1000, "", 0},
	[OPT_HANG_TIMEOUT] = {"ft-hang-timeout", "SLURM_FT_HANG_TIMEOUT", 1, 604800, "", 0},
	[OPT_MIN_NODES] = {"ft-min-nodes", "SLURM_FT_MIN_NODES", 1, 100000, "", 0},
};
#define N_OPTS ((int)(sizeof(ft_opts) / sizeof(ft_opts[0])))

static char python[PATH_MAX] = "/opt/slurm-ft/.venv/bin/python";
static int resolve_timeout_s = 120;

static int opt_cb(int val, const char *optarg, int remote);

static struct spank_option spank_opts[] = {
	{"ft-ckpt-dir", "DIR",
	 "slurm-ft: fault-tolerant job; DIR holds its checkpoints (absolute path). {ckpt} in the script's "
	 "arguments and $SLURM_FT_CKPT become the newest complete one at every (re)start",
	 1, OPT_CKPT_DIR, opt_cb},
	{"ft-hot-spares", "K", "slurm-ft: spare nodes this job wants kept ready for it (0-10000)",
	 1, OPT_HOT_SPARES, opt_cb},
	{"ft-max-restarts", "N",
	 "slurm-ft: restarts without checkpoint progress before the job is held (0-1000, default 5)",
	 1, OPT_MAX_RESTARTS, opt_cb},
	{"ft-hang-timeout", "S",
	 "slurm-ft: seconds without progress after which the job counts as hung (1-604800); "
	 "exported as $SLURM_FT_HANG_TIMEOUT",
	 1, OPT_HANG_TIMEOUT, opt_cb},
	{"ft-min-nodes", "M", "slurm-ft: restart on fewer nodes, down to M, when no spare is left",
	 1, OPT_MIN_NODES, opt_cb},
	SPANK_OPTIONS_TABLE_END
};

/* Whether s is valid UTF-8 as Python decodes it strictly (no overlong forms, no surrogates, nothing
 * past U+10FFFF): the controller reads the tag's directory that way, and ignores a tag it cannot. */
static int valid_utf8(const unsigned char *s)
{
	while (*s) {
		unsigned char c = *s, lo = 0x80, hi = 0xBF;
		int need, k;

		if (c < 0x80)
			need = 0;
		else if (c >= 0xC2 && c <= 0xDF)
			need = 1;
		else if (c == 0xE0)
			need = 2, lo = 0xA0;
		else if (c == 0xED)
			need = 2, hi = 0x9F;
		else if (c >= 0xE1 && c <= 0xEF)
			need = 2;
		else if (c == 0xF0)
			need = 3, lo = 0x90;
		else if (c >= 0xF1 && c <= 0xF3)
			need = 3;
		else if (c == 0xF4)
			need = 3, hi = 0x8F;
		else
			return 0;
		for (k = 1; k <= need; k++) {
			if (s[k] < (k == 1 ? lo : 0x80) || s[k] > (k == 1 ? hi : 0xBF))
				return 0;     /* a NUL (the end) is below 0x80 too */
		}
		s += need + 1;
	}
	return 1;
}

/* A checkpoint directory the policy can judge: absolute, UTF-8, no control characters, no "." or ".."
 * components (a prefix test on roots must mean what it says). */
static const char *bad_dir(const char *d)
{
	const unsigned char *p;
	const char *c;

	if (d[0] != '/')
		return "must be an absolute path";
	if (strlen(d) > MAX_DIR_LEN)
		return "is longer than 1024 characters";
	for (p = (const unsigned char *)d; *p; p++)
		if (*p < 0x20 || *p == 0x7f)
			return "contains a control character";
	if (!valid_utf8((const unsigned char *)d))
		return "is not valid UTF-8 (slurm-ft reads the directory as UTF-8: rename it)";
	for (c = d; *c; c++) {
		if (*c != '/')
			continue;
		if (c[1] == '/')
			return "contains an empty component (//)";
		if (c[1] == '.' && (c[2] == '/' || c[2] == '\0'))
			return "contains a '.' component";
		if (c[1] == '.' && c[2] == '.' && (c[3] == '/' || c[3] == '\0'))
			return "contains a '..' component";
	}
	return NULL;
}

static int parse_int(const char *s, long low, long high, long *out)
{
	char *end = NULL;
	long v;

	if (!s || !*s || strspn(s, "0123456789") != strlen(s) || strlen(s) > 9)
		return -1;
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || *end || v < low || v > high)
		return -1;
	*out = v;
	return 0;
}

static int opt_cb(int val, const char *optarg, int remote)
{
	struct ft_opt *o;
	const char *why;
	long n;
	size_t len;

	if (val <= 0 || val >= N_OPTS)
		return -1;
	o = &ft_opts[val];
	if (!optarg) {
		slurm_error("slurm-ft: --%s needs a value", o->name);
		return -1;
	}
	if (o->high < o->low) {
		if (optarg[0] == '\0') {
			slurm_error("slurm-ft: --%s needs a directory", o->name);
			return -1;
		}
		len = strlen(optarg);
		if (len > 1 && optarg[len - 1] == '/')
			len--;            /* /ckpt/run7/ is /ckpt/run7 */
		if (len > MAX_DIR_LEN) {
			slurm_error("slurm-ft: --%s %.64s...: is longer than %d characters", o->name, optarg, MAX_DIR_LEN);
			return -1;
		}
		memcpy(o->value, optarg, len);
		o->value[len] = '\0';
		if ((why = bad_dir(o->value))) {
			if (valid_utf8((const unsigned char *)o->value))
				slurm_error("slurm-ft: --%s %s: the checkpoint directory %s", o->name, o->value, why);
			else          /* its bytes are not text: not printed into the user's terminal or a log */
				slurm_error("slurm-ft: --%s: the checkpoint directory %s", o->name, why);
			o->value[0] = '\0';
			return -1;
		}
	} else {
		if (parse_int(optarg, o->low, o->high, &n) < 0) {
			slurm_error("slurm-ft: --%s %.64s: must be a whole number from %ld to %ld", o->name, optarg,
				    o->low, o->high);
			return -1;
		}
		snprintf(o->value, sizeof(o->value), "%ld", n);
	}
	o->set = 1;
	(void)remote;
	return 0;
}

static int any_set(void)
{
	int i;

	for (i = 1; i < N_OPTS; i++)
		if (ft_opts[i].set)
			return 1;
	return 0;
}

static void read_args(int ac, char **av)
{
	int i;
	long n;

	for (i = 0; i < ac; i++) {
		if (!strncmp(av[i], "python=", 7) && av[i][7] == '/')
			snprintf(python, sizeof(python), "%s", av[i] + 7);
		else if (!strncmp(av[i], "resolve_timeout=", 16) && !parse_int(av[i] + 16, 1, 3600, &n))
			resolve_timeout_s = (int)n;
		else
			slurm_error("slurm-ft: plugstack.conf: ignoring unknown argument '%s' "
				    "(python=/abs/path, resolve_timeout=1..3600)", av[i]);
	}
}

int slurm_spank_init(spank_t sp, int ac, char **av)
{
	int i;

	read_args(ac, av);
	/* registered here, not only in a static table: only these show in `sbatch --help` */
	for (i = 0; spank_opts[i].name; i++)
		if (spank_option_register(sp, &spank_opts[i]) != ESPANK_SUCCESS) {
			slurm_error("slurm-ft: cannot register --%s", spank_opts[i].name);
			return -1;
		}
	return 0;
}

/* Submit side: every option given -> the job control environment (job_submit.lua, prolog, epilog). */
int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
	spank_context_t ctx = spank_context();
	int i;

	(void)ac;
	(void)av;
	if ((ctx != S_CTX_ALLOCATOR && ctx != S_CTX_LOCAL) || !any_set())
		return 0;
	/* every option into the job control environment first, a refused combination included: where
	 * plugstack.conf says `optional` Slurm ignores this callback's failure and submits the job, and the
	 * job_submit policy must then see the values to refuse it (without them it would pass as no FT job) */
	for (i = 1; i < N_OPTS; i++) {
		if (!ft_opts[i].set)
			continue;
		if (spank_job_control_setenv(sp, ft_opts[i].env, ft_opts[i].value, 1) != ESPANK_SUCCESS) {
			slurm_error("slurm-ft: cannot pass --%s to the job", ft_opts[i].name);
			return -1;
		}
	}
	if (ft_opts[OPT_HANG_TIMEOUT].set && !ft_opts[OPT_CKPT_DIR].set) {
		/* a restart in place is counted in the checkpoint directory: without one they never end */
		slurm_error("slurm-ft: --ft-hang-timeout needs --ft-ckpt-dir: restarts after a hang are counted "
			    "in the checkpoint directory, and without one --ft-max-restarts could never end them");
		return -1;
	}
	if (!ft_opts[OPT_CKPT_DIR].set) {
		/* without a checkpoint directory the job could only restart from scratch: say so, still FT */
		slurm_info("slurm-ft: no --ft-ckpt-dir: the job is fault-tolerant but restarts from scratch");
	}
	return 0;
}

static long long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* For the child between fork and execve (slurmstepd has threads): write(2) only, no stdio, no malloc. */
static void say(const char *s)
{
	size_t n = 0;
	ssize_t w;

	while (s[n])
		n++;
	while (n > 0) {
		w = write(STDERR_FILENO, s, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return;
		s += w;
		n -= (size_t)w;
	}
}

/* The child: stdout to the pipe, its own process group (the parent kills the whole group), exec. On
 * failure only async-signal-safe calls: write the reason (errno as digits, not strerror) and _exit. */
static void exec_child(char *const argv[], char **env, int rfd, int wfd)
{
	char num[16];
	int e, i = (int)sizeof(num) - 1;

	if (wfd != STDOUT_FILENO) {
		if (dup2(wfd, STDOUT_FILENO) < 0)
			_exit(127);
		close(wfd);
	}
	if (rfd != STDOUT_FILENO)
		close(rfd);
	setpgid(0, 0);
	execve(argv[0], argv, env);
	e = errno;
	num[i] = '\0';
	do {
		num[--i] = (char)('0' + e % 10);
		e /= 10;
	} while (e && i > 0);
	say("slurm-ft: cannot run ");
	say(argv[0]);
	say(": errno ");
	say(&num[i]);
	say("\n");
	_exit(127);
}

static void kill_child(pid_t pid)
{
	kill(-pid, SIGKILL);              /* its group: what it started too */
	kill(pid, SIGKILL);
	while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
		;
}

/* Run the resolver with the job's environment; its stdout into out (NUL-terminated, at most outsz - 1
 * bytes). Returns its exit status, or -1 when it could not run, printed more than fits (refused: never
 * cut and used as a path) or did not end within resolve_timeout_s; it is then killed. The deadline
 * covers the whole child, not only its output: one that closes stdout and runs on is killed too. */
static int run_resolver(char *const argv[], char **env, char *out, size_t outsz)
{
	int fds[2], status = 0;
	size_t got = 0;
	pid_t pid, w;
	long long deadline = now_ms() + resolve_timeout_s * 1000LL;
	const char *why = NULL;

	if (pipe2(fds, O_CLOEXEC) < 0)
		return -1;
	pid = fork();
	if (pid < 0) {
		close(fds[0]);
		close(fds[1]);
		return -1;
	}
	if (pid == 0)
		exec_child(argv, env, fds[0], fds[1]);
	setpgid(pid, pid);                /* also here: no race with the kill below */
	close(fds[1]);
	while (!why) {
		struct pollfd pfd = {fds[0], POLLIN, 0};
		long long left = deadline - now_ms();
		ssize_t n;
		int r;

		if (left <= 0) {
			why = "timeout";
			break;
		}
		r = poll(&pfd, 1, left > INT_MAX ? INT_MAX : (int)left);
		if (r < 0 && errno != EINTR)
			why = "poll";
		if (r <= 0)
			continue;
		/* one byte more than may be kept: output that reaches it is over the limit */
		n = read(fds[0], out + got, outsz - got);
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n < 0)
			why = "read";
		else if (n == 0)
			break;                /* EOF: the resolver may still run */
		else if ((got += (size_t)n) >= outsz)
			why = "output";
	}
	close(fds[0]);
	while (!why) {
		w = waitpid(pid, &status, WNOHANG);
		if (w == pid)
			break;
		if (w < 0 && errno != EINTR)
			return -1;
		if (now_ms() >= deadline)
			why = "timeout";
		else
			poll(NULL, 0, 10);
	}
	if (why) {
		kill_child(pid);
		out[0] = '\0';
		if (!strcmp(why, "output"))
			slurm_error("slurm-ft: %s printed more than %d bytes (one path and one step): refused, killed",
				    argv[0], (int)outsz - 1);
		else if (!strcmp(why, "timeout"))
			slurm_error("slurm-ft: %s took over %d s; killed", argv[0], resolve_timeout_s);
		else
			slurm_error("slurm-ft: %s: its output could not be read (%s failed); killed", argv[0], why);
		return -1;
	}
	out[got] = '\0';
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* "{ckpt}" in s replaced by value, in a new string */
static char *replace_all(const char *s, const char *value)
{
	size_t plen = strlen(CKPT_PLACEHOLDER), vlen = strlen(value), n = 0;
	const char *p;
	char *out, *o;

	for (p = s; (p = strstr(p, CKPT_PLACEHOLDER)); p += plen)
		n++;
	out = malloc(strlen(s) + n * vlen + 1);
	if (!out)
		return NULL;
	for (o = out, p = s; *p;) {
		if (!strncmp(p, CKPT_PLACEHOLDER, plen)) {
			memcpy(o, value, vlen);
			o += vlen;
			p += plen;
		} else {
			*o++ = *p++;
		}
	}
	*o = '\0';
	return out;
}

/* The batch step, before the script starts: the newest complete checkpoint, as `slurm-ft sbatch` finds it. */
static int resolve_ckpt(spank_t sp)
{
	char out[MAX_RESOLVE_OUTPUT];
	char *argv[] = {python, "-m", "slurm_ft.job.jobstart", "--resolve", "--ckpt-dir",
			ft_opts[OPT_CKPT_DIR].value, NULL};
	char **env = NULL, **job_argv = NULL, *nl, *step = "";
	int rc, job_argc = 0, i;

	if (spank_get_item(sp, S_JOB_ENV, &env) != ESPANK_SUCCESS)
		env = NULL;
	rc = run_resolver(argv, env, out, sizeof(out));
	if (rc == 4) {
		slurm_error("slurm-ft: %s holds checkpoint data none of which is complete, or cannot be read: "
			    "not starting the job over it", ft_opts[OPT_CKPT_DIR].value);
		return -1;
	}
	if (rc != 0) {
		slurm_error("slurm-ft: cannot find the newest checkpoint in %s (%s -m slurm_ft.job.jobstart "
			    "--resolve: status %d): not starting the job", ft_opts[OPT_CKPT_DIR].value, python, rc);
		return -1;
	}
	/* two lines: the checkpoint path ("" = none), its step ("" = unknown) */
	if ((nl = strchr(out, '\n'))) {
		*nl = '\0';
		step = nl + 1;
		if ((nl = strchr(step, '\n')))
			*nl = '\0';
	}
	if (spank_setenv(sp, "SLURM_FT_CKPT", out, 1) != ESPANK_SUCCESS ||
	    spank_setenv(sp, "SLURM_FT_CKPT_STEP", step, 1) != ESPANK_SUCCESS)
		return -1;
	if (spank_get_item(sp, S_JOB_ARGV, &job_argc, &job_argv) != ESPANK_SUCCESS)
		return 0;
	/* this process execs job_argv next: the script's own arguments get {ckpt}, as the wrapper's do */
	for (i = 1; i < job_argc; i++) {
		if (job_argv[i] && strstr(job_argv[i], CKPT_PLACEHOLDER)) {
			char *r = replace_all(job_argv[i], out);

			if (!r)
				return -1;
			job_argv[i] = r;
		}
	}
	return 0;
}

/* Node side, in each task just before it execs: SLURM_FT_*; the batch step also resolves {ckpt}. */
int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
	uint32_t stepid = 0;
	int i;

	(void)ac;
	(void)av;
	if (!spank_remote(sp) || !any_set())
		return 0;
	for (i = 1; i < N_OPTS; i++)
		if (ft_opts[i].set && spank_setenv(sp, ft_opts[i].env, ft_opts[i].value, 1) != ESPANK_SUCCESS)
			return -1;
	if (!ft_opts[OPT_CKPT_DIR].set)
		return 0;
	if (spank_get_item(sp, S_JOB_STEPID, &stepid) != ESPANK_SUCCESS || stepid != SLURM_BATCH_SCRIPT)
		return 0;        /* srun steps inherit SLURM_FT_CKPT from the batch script's environment */
	return resolve_ckpt(sp);
}
