/* probe.h — a stranger's view of the rendezvous port, for test_comm.c and test_dp.c: connect to
 * it, wait until rank 0 listens there. */
#ifndef STEPC_TEST_PROBE_H
#define STEPC_TEST_PROBE_H

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* A TCP connection to host:port, or -1 (errno says why). */
static inline int probe_dial(const char *host, int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  inet_pton(AF_INET, host, &a.sin_addr);
  if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0) return fd;
  int e = errno;
  if (fd >= 0) close(fd);
  errno = e;
  return -1;
}

/* Waits (up to 4 s) until something listens at host:port: 0, or -1. The probe connection is one
 * more stranger to rank 0, closed at once. */
static inline int probe_await(const char *host, int port) {
  for (int i = 0; i < 200; i++) {
    int fd = probe_dial(host, port);
    if (fd >= 0) return close(fd), 0;
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  return -1;
}

#endif
