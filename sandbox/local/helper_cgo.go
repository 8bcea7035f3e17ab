//go:build cgo && linux

package local

// The exec helper's fast path (helper.go has the protocol): where the
// binary is built with cgo, this constructor runs when the dynamic loader
// starts the process, before the Go runtime and every package's init. In
// a process started as the helper (argv[0] is helperArg0) it does the
// helper's whole job and execs the program, so the Go runtime never
// starts: no package init (the JSON Schema compiler's alone is 9-30 ms),
// no runtime threads, no page faults of a 46 MB binary's Go code. In any
// other process it reads /proc/self/cmdline and returns. runc's nsexec
// starts the same way, for the same reason. Without cgo (make purego),
// or where /proc cannot be read, the Go helper (helperMain) runs instead.
//
// Both speak the same protocol: flags in order (-join FILE writes the
// PID into a v1 cgroup, -nofile N and -cpu S set rlimits, -exec PATH the
// file to run), "--", the program's argv; the environment from fd 4
// until EOF; on failure "<errno> <message>" on fd 3 (close-on-exec, so a
// successful exec reads as EOF) and exit 127. -impl makes either report
// which one runs ("0 c" or "0 go") and exit 0: the tests use it.

/*
#cgo CFLAGS: -O2 -Wall
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define HELPER_ROLE "capsule-host-local-exec"

static void helper_fail(int err, const char *what, const char *arg) {
	char buf[1024];
	int n = snprintf(buf, sizeof buf, "%d %s%s%s", err, what, arg ? " " : "", arg ? arg : "");
	if (n > 0) {
		if (n >= (int)sizeof buf)
			n = sizeof buf - 1;
		ssize_t w = write(3, buf, (size_t)n);
		(void)w;
	}
	_exit(127);
}

// helper_read_all reads fd to EOF into a NUL-terminated buffer.
static char *helper_read_all(int fd, size_t *len) {
	size_t cap = 4096, n = 0;
	char *buf = malloc(cap + 1);
	if (!buf)
		return NULL;
	for (;;) {
		if (n == cap) {
			char *b = realloc(buf, 2 * cap + 1);
			if (!b) {
				free(buf);
				return NULL;
			}
			buf = b;
			cap *= 2;
		}
		ssize_t r = read(fd, buf + n, cap - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			free(buf);
			return NULL;
		}
		if (r == 0)
			break;
		n += (size_t)r;
	}
	buf[n] = 0;
	*len = n;
	return buf;
}

// helper_split makes a NULL-terminated vector of the NUL-terminated
// strings in buf[0:len]; skip_empty drops empty ones (environment).
static char **helper_split(char *buf, size_t len, int skip_empty) {
	size_t count = 0;
	for (size_t i = 0; i < len; i++)
		if (buf[i] == 0)
			count++;
	char **v = calloc(count + 2, sizeof *v);
	if (!v)
		return NULL;
	size_t k = 0;
	for (size_t i = 0; i < len;) {
		size_t l = strlen(buf + i);
		if (l > 0 || !skip_empty)
			v[k++] = buf + i;
		i += l + 1;
	}
	v[k] = NULL;
	return v;
}

static unsigned long long helper_number(const char *flag, const char *s) {
	char *end;
	errno = 0;
	unsigned long long n = strtoull(s, &end, 10);
	if (errno != 0 || *s == 0 || *end != 0)
		helper_fail(EINVAL, flag, s);
	return n;
}

__attribute__((constructor)) static void capsule_local_exec(void) {
	int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	char head[sizeof HELPER_ROLE];
	ssize_t r = read(fd, head, sizeof head);
	if (r != (ssize_t)sizeof head || memcmp(head, HELPER_ROLE, sizeof head) != 0) {
		close(fd);
		return; // not the helper (or a longer role name): the Go program runs
	}
	// The helper: from here on it execs the program or exits.
	if (lseek(fd, 0, SEEK_SET) != 0)
		helper_fail(errno, "helper: read arguments", NULL);
	size_t alen, elen;
	char *abuf = helper_read_all(fd, &alen);
	close(fd);
	if (fcntl(3, F_SETFD, FD_CLOEXEC) != 0)
		_exit(127); // no status pipe: nobody to tell
	char *ebuf = helper_read_all(4, &elen);
	close(4);
	if (!abuf)
		helper_fail(ENOMEM, "helper: read arguments", NULL);
	if (!ebuf)
		helper_fail(errno ? errno : ENOMEM, "helper: read env", NULL);
	char **args = helper_split(abuf, alen, 0), **env = helper_split(ebuf, elen, 1);
	if (!args || !env)
		helper_fail(ENOMEM, "helper: arguments", NULL);
	const char *exec = NULL;
	char **a = args + 1;
	for (; *a && strcmp(*a, "--") != 0; a += 2) {
		const char *flag = a[0], *val = a[1];
		if (!val)
			helper_fail(EINVAL, "helper: bad arguments", NULL);
		if (strcmp(flag, "-join") == 0) {
			char pid[32];
			int n = snprintf(pid, sizeof pid, "%d", (int)getpid());
			int cfd = open(val, O_WRONLY | O_CLOEXEC);
			if (cfd < 0 || write(cfd, pid, (size_t)n) != n)
				helper_fail(errno, "join cgroup", val);
			close(cfd);
		} else if (strcmp(flag, "-nofile") == 0) {
			rlim_t n = helper_number("rlimit open-files", val);
			struct rlimit rl = {n, n};
			if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
				helper_fail(errno, "rlimit open-files", val);
		} else if (strcmp(flag, "-cpu") == 0) {
			// Soft limit: SIGXCPU; hard limit one second later: SIGKILL.
			rlim_t n = helper_number("rlimit cpu", val);
			struct rlimit rl = {n, n + 1};
			if (setrlimit(RLIMIT_CPU, &rl) != 0)
				helper_fail(errno, "rlimit cpu", val);
		} else if (strcmp(flag, "-exec") == 0) {
			exec = val;
		} else if (strcmp(flag, "-impl") == 0) {
			ssize_t w = write(3, "0 c", 3);
			(void)w;
			_exit(0);
		} else {
			helper_fail(EINVAL, "helper: unknown flag", flag);
		}
	}
	if (!*a || !a[1])
		helper_fail(EINVAL, "helper: no program", NULL);
	char **argv = a + 1;
	if (!exec)
		exec = argv[0];
	// ETXTBSY: retried as retryBusy does (spawn.go), 1 to 128 ms apart.
	for (long ms = 1; execve(exec, argv, env) < 0 && errno == ETXTBSY && ms <= 128; ms *= 2) {
		struct timespec ts = {0, ms * 1000000L};
		nanosleep(&ts, NULL);
	}
	helper_fail(errno, "exec", exec);
}
*/
import "C"

// cHelper: this build has the C helper.
const cHelper = true
