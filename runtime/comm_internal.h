/* comm_internal.h — what comm.c (the collectives) and comm_rdv.c (the rendezvous) share: the
 * communicator's fields and the bounded socket I/O. Not part of comm.h's interface. */
#ifndef STEPC_COMM_INTERNAL_H
#define STEPC_COMM_INTERNAL_H

#include "runtime/comm.h"

struct RtComm {
  int rank, size;
  double timeout_s;
  int *fd; /* rank 0: fd[r] is rank r's connection (fd[0] = -1); others: fd[0] is rank 0's */
  int nfd;
  uint64_t seq; /* collectives so far: each message carries it, so ranks out of step are caught */
  unsigned char id[RT_COMM_ID_BYTES];
  unsigned char *tmp;
  size_t ntmp;
  char err[512];
  int broken;
};

double rt_comm_now_s(void);
/* Records the first failure and closes every socket; returns -1. */
int rt_comm_fail(RtComm *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Waits until fd is readable (POLLIN) or writable before the deadline: 0, 1 timed out, -1 error. */
int rt_comm_wait_fd(int fd, short ev, double deadline);
/* Sends or receives n bytes before the deadline. 0; 1 timed out; 2 the peer closed; -1 error. */
int rt_comm_io_all(int fd, void *buf, size_t n, int sending, double deadline);
/* Rank 0 admits the job's ranks, the others join it (comm_rdv.c): 0, or -1 with c->err. */
int rt_comm_rendezvous(RtComm *c, const RtRendezvous *rv);

#endif
