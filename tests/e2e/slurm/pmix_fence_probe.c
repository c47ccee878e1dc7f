/* Is the launcher's PMIx fence a barrier across nodes? Every rank prints when it entered and left a
 * PMIx_Fence that carries no data (the kind Open MPI 4.1 ends MPI_Init with); the last rank enters
 * SLEEP_S seconds late. A barrier lets no rank leave before the last one entered. Arguments are
 * ignored, so slurm/train.sbatch can run it in place of mpitron (MPITRON=this probe). */
#define _GNU_SOURCE /* strdup, setenv, usleep, clock_gettime: pmix.h uses them too */
#include <pmix.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(void) {
  pmix_proc_t me;
  pmix_status_t rc = PMIx_Init(&me, NULL, 0);
  if (rc != PMIX_SUCCESS) {
    fprintf(stderr, "pmix_fence_probe: PMIx_Init: %s\n", PMIx_Error_string(rc));
    return 1;
  }
  pmix_proc_t job;
  PMIX_LOAD_PROCID(&job, me.nspace, PMIX_RANK_WILDCARD);
  pmix_value_t* size = NULL;
  rc = PMIx_Get(&job, PMIX_JOB_SIZE, NULL, 0, &size);
  if (rc != PMIX_SUCCESS) {
    fprintf(stderr, "pmix_fence_probe: PMIx_Get(PMIX_JOB_SIZE): %s\n", PMIx_Error_string(rc));
    return 1;
  }
  const unsigned world = size->data.uint32;
  PMIX_VALUE_RELEASE(size);
  const char* s = getenv("SLEEP_S");
  if (me.rank == world - 1) usleep((useconds_t)(1e6 * (s ? atof(s) : 2.0)));
  const double enter = now();
  rc = PMIx_Fence(NULL, 0, NULL, 0);
  const double leave = now();
  printf("fence rank %u of %u enter %.6f leave %.6f status %d\n", me.rank, world, enter, leave, rc);
  fflush(stdout);
  PMIx_Finalize(NULL, 0);
  return rc == PMIX_SUCCESS ? 0 : 1;
}
