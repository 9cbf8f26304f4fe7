#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
/* A disk whose flush takes SLOWSYNC_US microseconds (default 2000): fsync and fdatasync
   sleep that long, then flush. For measuring commit serialisation on a slow-flushing disk. */
static void pause_us(void) {
    const char *s = getenv("SLOWSYNC_US");
    long us = s ? atol(s) : 2000;
    struct timespec t = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&t, NULL);
}
int fdatasync(int fd) {
    static int (*real)(int);
    if (!real) real = dlsym(RTLD_NEXT, "fdatasync");
    pause_us();
    return real(fd);
}
int fsync(int fd) {
    static int (*real)(int);
    if (!real) real = dlsym(RTLD_NEXT, "fsync");
    pause_us();
    return real(fd);
}
