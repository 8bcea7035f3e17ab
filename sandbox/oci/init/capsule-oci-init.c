/*
 * capsule-oci-init: pid 1 of the containers the capsule-host oci backend
 * starts (protocol and rationale: sandbox/oci/init.go).
 *
 * Why C: pid 1 is inside the container's pids cgroup, where every thread
 * counts. A Go init brings 6-7 runtime threads, which would eat a small
 * pids budget before the program even starts. This init is one thread.
 *
 * Build (statically: it runs inside any rootfs, with no loader there):
 *   gcc -static -Os -o capsule-oci-init capsule-oci-init.c
 *
 * Usage: capsule-oci-init --capsule-init [-u KEY]... -- program [args...]
 * fd 3 is the report pipe to the monitor.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static void noop(int sig) { (void)sig; }

static int usage(void) {
	fputs("usage: capsule-oci-init --capsule-init [-u KEY]... -- program [args...]\n", stderr);
	return 127;
}

int main(int argc, char **argv) {
	if (argc < 2 || strcmp(argv[1], "--capsule-init") != 0)
		return usage();
	int i = 2;
	/* -u KEY: the runtime adds HOME when the spec has none; the seam
	 * promises the spec's environment exactly. */
	while (i + 1 < argc && strcmp(argv[i], "-u") == 0) {
		unsetenv(argv[i + 1]);
		i += 2;
	}
	if (i + 1 >= argc || strcmp(argv[i], "--") != 0)
		return usage();
	char **cmd = argv + i + 1;

	/* The report pipe must not leak into the program. */
	if (fcntl(3, F_SETFD, FD_CLOEXEC) < 0)
		return usage();

	/* The kernel drops signals an init has no handler for, even from the
	 * host: install a no-op handler for everything catchable, block it
	 * all, and take signals with sigwaitinfo. exec resets handlers in the
	 * child, so the program starts with default dispositions. */
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = noop;
	sigemptyset(&sa.sa_mask);
	for (int s = 1; s <= SIGRTMAX; s++) {
		if (s == SIGKILL || s == SIGSTOP || (s > SIGSYS && s < SIGRTMIN))
			continue;
		sigaction(s, &sa, NULL);
	}
	sigset_t all, old;
	sigfillset(&all);
	sigprocmask(SIG_BLOCK, &all, &old);

	int ep[2];
	if (pipe2(ep, O_CLOEXEC) < 0) {
		dprintf(3, "err %d pipe: %s\n", errno, strerror(errno));
		return 127;
	}
	pid_t child = fork();
	if (child < 0) {
		dprintf(3, "err %d fork: %s\n", errno, strerror(errno));
		return 127;
	}
	if (child == 0) {
		setpgid(0, 0);
		/* On a terminal (the runtime made it our controlling terminal):
		 * the program's group takes the foreground, or its first read
		 * would stop it with SIGTTIN and C-c would reach only us. Done
		 * here, with every signal still blocked (no SIGTTOU), before the
		 * program can start jobs of its own. */
		if (isatty(0))
			(void)tcsetpgrp(0, getpid());
		sigprocmask(SIG_SETMASK, &old, NULL);
		execve(cmd[0], cmd, environ);
		int e = errno;
		(void)!write(ep[1], &e, sizeof e);
		_exit(127);
	}
	setpgid(child, child); /* both sides: no window for a lost group signal */
	close(ep[1]);
	int e;
	ssize_t n;
	do {
		n = read(ep[0], &e, sizeof e);
	} while (n < 0 && errno == EINTR);
	close(ep[0]);
	if (n == (ssize_t)sizeof e) {
		dprintf(3, "err %d %s: %s\n", e, cmd[0], strerror(e));
		waitpid(child, NULL, 0);
		return 127;
	}
	dprintf(3, "ok\n");

	int reported = 0;
	for (;;) {
		siginfo_t si;
		int sig = sigwaitinfo(&all, &si);
		if (sig < 0) {
			if (errno == EINTR)
				continue;
			return 1;
		}
		if (sig != SIGCHLD) {
			/* Forward to the program's process group. */
			kill(-child, sig);
			continue;
		}
		for (;;) {
			int st;
			struct rusage ru;
			pid_t p = wait4(-1, &st, WNOHANG, &ru);
			if (p == 0)
				break;
			if (p < 0) {
				if (errno == EINTR)
					continue;
				/* ECHILD: nothing left in the namespace. */
				return 0;
			}
			if (p == child && !reported) {
				long long cpu = (long long)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000LL +
				                (long long)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000LL;
				dprintf(3, "exit %u %lld\n", (unsigned)st, cpu);
				close(3);
				reported = 1;
			}
		}
	}
}
