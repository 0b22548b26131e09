/*
 * clockshim: moves a process's real-time clock by an amount that another
 * process sets at run time. Preloaded (LD_PRELOAD) into a redis-server
 * started by the chaos harness; see clockshim.go for the file layout.
 *
 * It overrides clock_gettime (CLOCK_REALTIME and CLOCK_REALTIME_COARSE; every
 * other clock passes through), gettimeofday and time. The real time is read
 * with the raw clock_gettime system call: no allocation, no dlsym, so an
 * allocator that reads the clock itself (jemalloc) cannot recurse into us.
 *
 * The shared file holds a sequence number and the clock's state: node time =
 * real time + offset + (rate - 1) * (real time - since). The writer makes the
 * sequence odd while it changes the state; a reader retries until it reads
 * the same even sequence before and after (a seqlock).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

struct clockshim_state {
	uint64_t seq;       /* odd while the writer changes the fields below */
	int64_t offset_ns;  /* node time - real time at since_ns */
	int64_t since_ns;   /* real time (Unix ns) the rate applies from */
	uint64_t rate_bits; /* IEEE 754 double: node seconds per real second */
	uint64_t magic;     /* CLOCKSHIM_MAGIC once the writer initialised it */
};

#define CLOCKSHIM_MAGIC 0x6d696873636f6c63ULL /* "clocshim" */

static const struct clockshim_state *state;

__attribute__((constructor)) static void clockshim_init(void) {
	const char *path = getenv("CLOCKSHIM_FILE");
	if (path == NULL || path[0] == '\0')
		return;
	int fd = (int)syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	void *m = mmap(NULL, sizeof(struct clockshim_state), PROT_READ, MAP_SHARED, fd, 0);
	syscall(SYS_close, fd);
	if (m == MAP_FAILED)
		return;
	state = m;
}

/* shift returns how far node time is ahead of real time at real time now. */
static int64_t shift(int64_t now) {
	const struct clockshim_state *s = state;
	if (s == NULL)
		return 0;
	for (int tries = 0; tries < 1000000; tries++) {
		uint64_t seq = __atomic_load_n(&s->seq, __ATOMIC_ACQUIRE);
		if (seq & 1)
			continue;
		uint64_t magic = __atomic_load_n(&s->magic, __ATOMIC_RELAXED);
		int64_t offset = __atomic_load_n(&s->offset_ns, __ATOMIC_RELAXED);
		int64_t since = __atomic_load_n(&s->since_ns, __ATOMIC_RELAXED);
		uint64_t bits = __atomic_load_n(&s->rate_bits, __ATOMIC_RELAXED);
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		if (__atomic_load_n(&s->seq, __ATOMIC_RELAXED) != seq)
			continue;
		if (magic != CLOCKSHIM_MAGIC)
			return 0;
		double rate;
		memcpy(&rate, &bits, sizeof rate);
		if (rate == 1.0)
			return offset;
		return offset + (int64_t)((rate - 1.0) * (double)(now - since));
	}
	return 0; /* a writer stopped half-way: give the real time */
}

static int real_time(clockid_t clk, struct timespec *ts) {
	return (int)syscall(SYS_clock_gettime, clk, ts);
}

static void add_ns(struct timespec *ts, int64_t d) {
	int64_t ns = (int64_t)ts->tv_sec * 1000000000LL + ts->tv_nsec + d;
	ts->tv_sec = (time_t)(ns / 1000000000LL);
	ts->tv_nsec = (long)(ns % 1000000000LL);
	if (ts->tv_nsec < 0) {
		ts->tv_nsec += 1000000000L;
		ts->tv_sec--;
	}
}

static int node_time(struct timespec *ts) {
	if (real_time(CLOCK_REALTIME, ts) != 0)
		return -1;
	add_ns(ts, shift((int64_t)ts->tv_sec * 1000000000LL + ts->tv_nsec));
	return 0;
}

int clock_gettime(clockid_t clk, struct timespec *ts) {
	if (clk != CLOCK_REALTIME && clk != CLOCK_REALTIME_COARSE)
		return real_time(clk, ts);
	if (real_time(clk, ts) != 0)
		return -1;
	add_ns(ts, shift((int64_t)ts->tv_sec * 1000000000LL + ts->tv_nsec));
	return 0;
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
	if (tz != NULL)
		memset(tz, 0, 2 * sizeof(int)); /* struct timezone: obsolete, zero */
	struct timespec ts;
	if (node_time(&ts) != 0)
		return -1;
	tv->tv_sec = ts.tv_sec;
	tv->tv_usec = ts.tv_nsec / 1000;
	return 0;
}

time_t time(time_t *t) {
	struct timespec ts;
	if (node_time(&ts) != 0)
		return (time_t)-1;
	if (t != NULL)
		*t = ts.tv_sec;
	return ts.tv_sec;
}
