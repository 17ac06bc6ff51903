/* run_dp.c — `stepc run DIR --nproc N`: one host's data-parallel job, launched the way torchrun
 * launches one (run_artifact.h). Each rank is its own process running `stepc run DIR`, so a rank
 * that crashes takes only itself down and the others see it go (runtime/comm.h's fault rules).
 * The rendezvous listens on 127.0.0.1 only, and admits only holders of a secret made here for this
 * job (runtime/rdv_wire.h): other users of the host can reach the port, not join the job. */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli/run_artifact.h"
#include "runtime/rdv_wire.h"

/* seconds the other ranks get to report a failed rank before they are stopped */
enum { NPROC_GRACE_S = 5 };

/* A TCP port nobody listens on now (the kernel's pick): the rendezvous' MASTER_PORT. */
static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t n = sizeof a;
  int port = -1;
  if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(fd, (struct sockaddr *)&a, &n) == 0)
    port = ntohs(a.sin_port);
  close(fd);
  return port;
}

/* A fresh job secret: 32 random bytes as 64 hex digits. The children get it in their environment,
 * which only this user (and root) can read (/proc/PID/environ), never on a command line. */
static int make_secret(char out[65]) {
  unsigned char b[32];
  if (rdv_random(b, sizeof b) != 0) return -1;
  for (int i = 0; i < 32; i++)
    snprintf(out + 2 * i, 3, "%02x", b[i]);
  return 0;
}

/* Copies the child's stderr (fd) to ours, each line prefixed with its rank. */
static void relay(int fd, int rank) {
  FILE *in = fdopen(fd, "r");
  if (!in) return;
  char line[4096];
  while (fgets(line, sizeof line, in))
    fprintf(stderr, "[rank %d] %s", rank, line);
  fclose(in);
}

int run_nproc(const char *dir, int nproc, char *const *child_args, int nchild_args, FILE *progress) {
  char self[4096];
  ssize_t k = readlink("/proc/self/exe", self, sizeof self - 1);
  if (k <= 0) {
    fprintf(stderr, "stepc run --nproc: cannot find this executable (/proc/self/exe)\n");
    return 4;
  }
  self[k] = 0;
  int port = free_port();
  if (port < 0) {
    fprintf(stderr, "stepc run --nproc: no free TCP port on 127.0.0.1 for the rendezvous\n");
    return 4;
  }
  char secret[65];
  if (make_secret(secret) != 0) {
    fprintf(stderr, "stepc run --nproc: no random numbers for the job secret (getrandom, /dev/urandom)\n");
    return 4;
  }
  if (progress) fprintf(progress, "run: %d ranks on this host, rendezvous at 127.0.0.1:%d\n", nproc, port);
  pid_t *pid = calloc((size_t)nproc, sizeof *pid), *relay_pid = calloc((size_t)nproc, sizeof *relay_pid);
  char **argv = calloc((size_t)nchild_args + 4, sizeof *argv);
  if (!pid || !relay_pid || !argv) {
    free(pid), free(relay_pid), free(argv);
    fprintf(stderr, "stepc run --nproc: out of memory\n");
    return 4;
  }
  argv[0] = self, argv[1] = "run", argv[2] = (char *)dir;
  for (int i = 0; i < nchild_args; i++)
    argv[3 + i] = child_args[i];
  fflush(stdout), fflush(stderr);
  int started = 0;
  for (int r = 0; r < nproc; r++) {
    int errp[2];
    if (pipe(errp) != 0) break;
    pid_t p = fork();
    if (p < 0) {
      close(errp[0]), close(errp[1]);
      break;
    }
    if (p == 0) {
      char v[32];
      snprintf(v, sizeof v, "%d", r);
      setenv("RANK", v, 1), setenv("LOCAL_RANK", v, 1);
      snprintf(v, sizeof v, "%d", nproc);
      setenv("WORLD_SIZE", v, 1), setenv("LOCAL_WORLD_SIZE", v, 1);
      snprintf(v, sizeof v, "%d", port);
      setenv("MASTER_PORT", v, 1), setenv("MASTER_ADDR", "127.0.0.1", 1);
      setenv(RDV_SECRET_ENV, secret, 1);
      dup2(errp[1], 2);
      close(errp[0]), close(errp[1]);
      if (r != 0) { /* rank 0 speaks for the job; the others' losses are the same numbers */
        FILE *null = freopen("/dev/null", "w", stdout);
        (void)null;
      }
      execv(self, argv);
      _exit(127);
    }
    close(errp[1]);
    pid[r] = p;
    /* a relay per rank so that a full pipe never blocks a rank */
    pid_t q = fork();
    if (q == 0) {
      relay(errp[0], r);
      _exit(0);
    }
    close(errp[0]);
    relay_pid[r] = q;
    started++;
  }
  int code = 0, first_bad = -1;
  if (started < nproc) {
    fprintf(stderr, "stepc run --nproc: could not start rank %d: %s\n", started, strerror(errno));
    for (int r = 0; r < started; r++)
      kill(pid[r], SIGTERM);
    code = 4;
  }
  /* ranks in the order they end. Once one fails the others get a few seconds to notice and say so
   * (a closed connection, a rank that went away), then they are stopped: they would wait for it
   * until the communicator's timeout. The first failure's exit code is the job's. */
  struct timespec t0 = {0, 0};
  bool stopped = false;
  for (int left = started; left > 0;) {
    int ws = 0;
    pid_t w = waitpid(-1, &ws, first_bad >= 0 ? WNOHANG : 0);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) break;
    if (w == 0) { /* a failure is known and the others still run */
      struct timespec t;
      clock_gettime(CLOCK_MONOTONIC, &t);
      if (!stopped && t.tv_sec - t0.tv_sec >= NPROC_GRACE_S) {
        fprintf(stderr, "stepc run --nproc: stopping the other ranks\n");
        for (int k = 0; k < started; k++)
          if (pid[k] > 0) kill(pid[k], SIGTERM);
        stopped = true;
      }
      nanosleep(&(struct timespec){0, 50 * 1000 * 1000}, NULL);
      continue;
    }
    int r = 0;
    while (r < started && pid[r] != w)
      r++;
    if (r == started) continue; /* a relay */
    pid[r] = -1, left--;
    int c = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + (WIFSIGNALED(ws) ? WTERMSIG(ws) : 0);
    if (stopped && WIFSIGNALED(ws) && WTERMSIG(ws) == SIGTERM) continue;
    if (WIFSIGNALED(ws))
      fprintf(stderr, "stepc run --nproc: rank %d was killed by signal %d\n", r, WTERMSIG(ws));
    else if (c != 0)
      fprintf(stderr, "stepc run --nproc: rank %d exited %d\n", r, c);
    if (c != 0 && first_bad < 0) first_bad = r, code = code ? code : c, clock_gettime(CLOCK_MONOTONIC, &t0);
  }
  for (int r = 0; r < started; r++)
    if (relay_pid[r] > 0) waitpid(relay_pid[r], NULL, 0);
  if (first_bad >= 0) fprintf(stderr, "stepc run --nproc: the job failed (exit %d)\n", code);
  free(pid), free(relay_pid), free(argv);
  return code;
}
