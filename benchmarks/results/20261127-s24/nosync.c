/* An experiment, not the pack: fsync/fdatasync/sync_file_range made no-ops (LD_PRELOAD) to
   bound what the syncs cost a small batch (session 24). Build: gcc -shared -fPIC -O2 -o
   nosync.so nosync.c; run: LD_PRELOAD=$PWD/nosync.so scripts/bench --only smallbatch ... */
#define _GNU_SOURCE
#include <sys/types.h>
int fsync(int fd) { (void)fd; return 0; }
int fdatasync(int fd) { (void)fd; return 0; }
int sync_file_range(int fd, off_t o, off_t n, unsigned int f) { (void)fd; (void)o; (void)n; (void)f; return 0; }
