/* free_port.h — a TCP port on 127.0.0.1 that was free a moment ago (the tests' rendezvous ports):
 * bind port 0, read what the kernel chose, close. -1 when none could be had. */
#ifndef STEPC_TESTS_FREE_PORT_H
#define STEPC_TESTS_FREE_PORT_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

static inline int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t n = sizeof a;
  int p = -1;
  if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
      getsockname(fd, (struct sockaddr *)&a, &n) == 0)
    p = ntohs(a.sin_port);
  if (fd >= 0) close(fd);
  return p;
}

#endif
