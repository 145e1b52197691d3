/* The hot read path of bench.httpstream, compiled: one epoll set of stream sockets, read
 * with recvmsg and the kernel's receive stamps, chunked framing removed in C.
 *
 * Why it exists: with kernel stamps a token event's time is exact as long as the client
 * reads the socket before the server's next event lands behind it (the kernel then merges
 * the two and keeps the newer stamp). At thousands of streams that depends only on the cost
 * of a read: here one costs a syscall and a few hundred nanoseconds, where the Python path
 * pays an event-loop callback, a Python recvmsg and the framing in bytecode.
 *
 * Invariants:
 * - one recvmsg per ready socket per poll() (level-triggered: what is left is reported on
 *   the next poll); each read keeps its own stamp (CLOCK_REALTIME seconds: the kernel's
 *   SO_TIMESTAMPNS receive stamp, or the clock at the read when the kernel gave none);
 * - a socket in raw mode hands every read to Python at once, unchanged (Python parses the
 *   head and anything that is not a 200 chunked body); a socket in stream mode, set by
 *   Python after the head, hands over each read's stamp and body bytes in batches of at most
 *   BATCH_READS reads or BATCH_BYTES bytes, and at once when the message ends, the peer
 *   closes or the framing is bad;
 * - body bytes are handed over in order, once; nothing a socket delivered is dropped
 *   before unregister() returns it;
 * - in fast mode (asked for by Python when the body is a completions stream with cumulative
 *   usage) the usual SSE event, one `data: {...}` line, is parsed here with Python's own
 *   `loads` and checked exactly as bench.client.EventSink checks it; it is handed over as
 *   (stamp, tokens). The first event that is anything else ends fast mode for the response:
 *   it and every byte after it go to Python as body bytes, so Python sees them in order
 *   and its parser stays the reference for every unusual event.
 *
 * Packet stamps (capture(), where the process may open an AF_PACKET socket): one read can
 * hold several events once the client is behind, and a read has one kernel stamp, the
 * newest segment's. A packet ring of the server's TCP segments (headers only, filtered in
 * the kernel by source port) gives every segment its own arrival stamp, taken by the kernel
 * before the bytes reach the socket; a read is then split where its segments end and each
 * part carries its own segment's stamp, so the client's lag no longer enters the times.
 * - a socket's bytes are matched to segments by TCP sequence number, from the SYN-ACK seen
 *   in the ring; register() comes before any read of the socket;
 * - a part's stamp is never earlier than the arrival of any of its bytes: stamps are made
 *   non-decreasing along a stream, a retransmission raises the stamps of what it filled,
 *   and bytes with no segment in the ring (ring full, a connection made before the
 *   capture) take the next segment's stamp or, failing that, the read's.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <arpa/inet.h>
#include <errno.h>
#include <linux/filter.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define READ_SIZE 65536
#define MAX_EVENTS 1024
#define BATCH_READS 32
#define BATCH_BYTES 65536     /* a batch is handed over once it holds this many bytes */
#define FAST_MAX 4096         /* ... or this many fast events */
#define LINE_MAX_BYTES 1024
#define MAX_CHUNK ((long long)1 << 40)

enum { RAW = 0, CHUNKED = 1, TRAILER = 2 };

#define CAP_SNAP 128          /* bytes kept of each segment: IPv6 + the longest TCP header */
#define CAP_FRAME 256
#define CAP_BLOCK (1 << 22)
#define SSE_EVENT_MAX ((Py_ssize_t)8 << 20)   /* client.py's MAX_EVENT_BYTES */
#define CAP_BLOCKS 16         /* a 64 MB ring: 262,144 segments */
#define CAP_PORTS 16          /* server ports watched at once */
#ifndef PACKET_IGNORE_OUTGOING
#define PACKET_IGNORE_OUTGOING 23
#endif

/* A connection as the ring saw it open (by our local port): the server's initial sequence
 * number from its SYN-ACK, and the fd reading it once registered. */
typedef struct {
    uint32_t isn;
    uint16_t rport;
    uint8_t raddr[16];
    int8_t valid;
    int fd;               /* -1: no registered socket */
} CapConn;

/* A captured segment of a socket, not yet read: its end (sequence number after its last
 * byte) and arrival stamp. */
typedef struct {
    uint32_t end;
    double stamp;
} Seg;

typedef struct {
    PyObject *conn;       /* the Python transport; NULL when the fd is not registered */
    /* reads not yet handed over, kept in C (no Python objects for the collector to walk):
     * read i's bytes are bodies[ends[i-1]:ends[i]], its stamp stamps[i] */
    char *bodies;
    Py_ssize_t blen, bcap;
    double stamps[BATCH_READS];
    Py_ssize_t ends[BATCH_READS];
    int nreads;
    int batch_reads;      /* reads since the last hand-over (fast events leave no body) */
    /* fast mode: */
    int fast;
    char *sse;            /* an incomplete SSE event */
    Py_ssize_t slen, scap;
    double *fstamps;      /* fast events not yet handed over: stamp and tokens */
    long long *fcounts;
    Py_ssize_t nfast, fcap;
    long long cum;        /* the last cumulative completion_tokens (has_cum: seen one) */
    int has_cum;
    PyObject *finish;     /* the last truthy finish_reason not yet handed over */
    int done;             /* [DONE] seen, not yet handed over */
    int mode;
    long long left;       /* bytes left of the current chunk, its CRLF included */
    char line[LINE_MAX_BYTES + 2];   /* an incomplete size or trailer line */
    Py_ssize_t nline;
    /* packet stamps: */
    int cap;              /* this socket's bytes are matched to captured segments */
    uint16_t lport;
    uint32_t rx_seq;      /* sequence number of the next byte to read */
    Seg *segs;            /* captured, not yet read, in stream order: segs[shead:nsegs] */
    Py_ssize_t shead, nsegs, scap_;
} FdState;

typedef struct {
    PyObject_HEAD
    int epfd;
    FdState **fds;
    int nfds;
    char *raw;            /* one read */
    char *scratch;        /* an incomplete line joined with the next read */
    char *body;           /* the body bytes of one read */
    PyObject *loads;      /* the JSON parser EventSink uses */
    PyObject *k_choices, *k_usage, *k_tokens, *k_text, *k_finish, *k_error;
    long long reads, stamped;
    double wait_max;
    /* packet stamps (cap_fd >= 0 once capture() succeeded): */
    int cap_fd;
    char *ring;
    size_t ring_len;
    unsigned frame_nr, cap_next;
    uint16_t ports[CAP_PORTS];
    int nports;
    CapConn *conns;       /* by local port */
    long long pstamped, segments, orphans;   /* reads with every byte segment-stamped; ... */
    /* one read split where its segments end: part i is raw[poff[i-1]:poff[i]] */
    Py_ssize_t *poff;
    double *pstamp;
    Py_ssize_t pcap;
} Poller;

static double realtime_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static FdState *state_of(Poller *self, int fd) {
    if (fd < 0 || fd >= self->nfds) return NULL;
    return self->fds[fd];
}

/* ------------------------------------------------------------------ packet stamps */

static int seq_lt(uint32_t a, uint32_t b) { return (int32_t)(a - b) < 0; }
static int seq_le(uint32_t a, uint32_t b) { return (int32_t)(a - b) <= 0; }

/* The kernel-side filter: IPv4 or IPv6 TCP segments from a watched port, not this host's
 * own outgoing copies (loopback shows every packet twice); CAP_SNAP bytes of each. */
static int cap_filter(Poller *self) {
    struct sock_filter f[17 + CAP_PORTS];
    int n = self->nports, PORTS = 15, DROP = 15 + n, ACCEPT = 16 + n, i = 0;
#define J(code, k, t, e) f[i] = (struct sock_filter)BPF_JUMP(code, k, (t) - i - 1, (e) - i - 1), i++
#define S(code, k) f[i] = (struct sock_filter)BPF_STMT(code, k), i++
    S(BPF_LD | BPF_W | BPF_ABS, SKF_AD_OFF + SKF_AD_PKTTYPE);
    J(BPF_JMP | BPF_JEQ | BPF_K, PACKET_OUTGOING, DROP, i + 1);
    S(BPF_LD | BPF_W | BPF_ABS, SKF_AD_OFF + SKF_AD_PROTOCOL);
    J(BPF_JMP | BPF_JEQ | BPF_K, ETH_P_IP, i + 1, 11);
    S(BPF_LD | BPF_B | BPF_ABS, 9);                       /* IPv4: protocol */
    J(BPF_JMP | BPF_JEQ | BPF_K, IPPROTO_TCP, i + 1, DROP);
    S(BPF_LD | BPF_H | BPF_ABS, 6);                       /* not a later fragment */
    J(BPF_JMP | BPF_JSET | BPF_K, 0x1fff, DROP, i + 1);
    S(BPF_LDX | BPF_B | BPF_MSH, 0);                      /* X = header length */
    S(BPF_LD | BPF_H | BPF_IND, 0);                       /* TCP source port */
    S(BPF_JMP | BPF_JA, PORTS - i - 1);
    J(BPF_JMP | BPF_JEQ | BPF_K, ETH_P_IPV6, i + 1, DROP); /* 11 */
    S(BPF_LD | BPF_B | BPF_ABS, 6);                       /* IPv6: next header */
    J(BPF_JMP | BPF_JEQ | BPF_K, IPPROTO_TCP, i + 1, DROP);
    S(BPF_LD | BPF_H | BPF_ABS, 40);                      /* TCP source port */
    for (int k = 0; k < n; k++)                           /* PORTS */
        J(BPF_JMP | BPF_JEQ | BPF_K, self->ports[k], ACCEPT, i + 1);
    S(BPF_RET | BPF_K, 0);                                /* DROP */
    S(BPF_RET | BPF_K, CAP_SNAP);                         /* ACCEPT */
#undef J
#undef S
    struct sock_fprog prog = {(unsigned short)i, f};
    return setsockopt(self->cap_fd, SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof prog);
}

/* Append a captured segment [START, END) of ST's stream, arrived at STAMP. */
static void seg_add(Poller *self, FdState *st, uint32_t start, uint32_t end, double stamp) {
    Py_ssize_t k = st->nsegs;
    if (k > st->shead) {
        Seg *last = &st->segs[k - 1];
        if (seq_le(end, last->end)) {
            /* a retransmission: the bytes it filled, and every byte after them, could be
             * read only from now on */
            for (Py_ssize_t i = st->shead; i < k; i++)
                if (seq_lt(start, st->segs[i].end) && st->segs[i].stamp < stamp)
                    st->segs[i].stamp = stamp;
            return;
        }
        if (stamp < last->stamp) stamp = last->stamp;
    } else if (seq_le(end, st->rx_seq)) {
        return;                                /* bytes already read, sent again */
    }
    if (k == st->scap_) {
        if (st->shead > 0) {
            memmove(st->segs, st->segs + st->shead, (k - st->shead) * sizeof(Seg));
            k = st->nsegs = k - st->shead;
            st->shead = 0;
        }
        if (k == st->scap_) {
            if (k >= (1 << 20)) { self->orphans++; return; }   /* a socket nobody reads */
            Py_ssize_t cap = k ? 2 * k : 64;
            Seg *g = PyMem_Realloc(st->segs, cap * sizeof(Seg));
            if (!g) { self->orphans++; return; }
            st->segs = g;
            st->scap_ = cap;
        }
    }
    st->segs[k].end = end;
    st->segs[k].stamp = stamp;
    st->nsegs = k + 1;
}

/* One captured frame: the IP header at P (N bytes kept of a LEN-byte packet), arrived at
 * STAMP. */
static void cap_frame(Poller *self, const uint8_t *p, unsigned n, unsigned len_all, double stamp) {
    const uint8_t *tcp, *saddr;
    unsigned iplen, alen;
    if (n < 1) return;
    if ((p[0] >> 4) == 4) {
        unsigned ihl = (p[0] & 15) * 4;
        unsigned tot = (unsigned)p[2] << 8 | p[3];
        if (tot == 0) tot = len_all;          /* a segment over 64 KB (BIG TCP) */
        if (ihl < 20 || n < ihl + 20 || tot < ihl) return;
        iplen = tot - ihl;
        tcp = p + ihl;
        saddr = p + 12;
        alen = 4;
    } else if ((p[0] >> 4) == 6) {
        if (n < 60 || p[6] != IPPROTO_TCP) return;
        iplen = (unsigned)p[4] << 8 | p[5];
        if (iplen == 0 && len_all >= 40) iplen = len_all - 40;   /* a jumbogram */
        tcp = p + 40;
        saddr = p + 8;
        alen = 16;
    } else {
        return;
    }
    uint16_t sport = (uint16_t)(tcp[0] << 8 | tcp[1]), dport = (uint16_t)(tcp[2] << 8 | tcp[3]);
    uint32_t seq = (uint32_t)tcp[4] << 24 | (uint32_t)tcp[5] << 16 | (uint32_t)tcp[6] << 8 | tcp[7];
    unsigned doff = (tcp[12] >> 4) * 4;
    uint8_t flags = tcp[13];
    if (iplen < doff) return;
    unsigned len = iplen - doff;
    CapConn *c = &self->conns[dport];
    if ((flags & 0x12) == 0x12) {             /* SYN-ACK: a connection to our port DPORT */
        if (c->valid && c->isn == seq && c->rport == sport && memcmp(c->raddr, saddr, alen) == 0)
            return;                           /* the same one again (a retransmission) */
        c->isn = seq;
        c->rport = sport;
        memset(c->raddr, 0, sizeof c->raddr);
        memcpy(c->raddr, saddr, alen);
        c->valid = 1;
        c->fd = -1;
        return;
    }
    if (len == 0) return;
    self->segments++;
    if (!c->valid || c->fd < 0 || c->rport != sport || memcmp(c->raddr, saddr, alen) != 0) {
        self->orphans++;
        return;
    }
    FdState *st = state_of(self, c->fd);
    if (!st || !st->cap) { self->orphans++; return; }
    seg_add(self, st, seq, seq + len, stamp);
}

/* Take every frame the kernel has put in the ring. */
static void cap_drain(Poller *self) {
    if (self->cap_fd < 0) return;
    for (;;) {
        struct tpacket2_hdr *h = (struct tpacket2_hdr *)(self->ring + (size_t)self->cap_next * CAP_FRAME);
        if (!(__atomic_load_n(&h->tp_status, __ATOMIC_ACQUIRE) & TP_STATUS_USER)) break;
        cap_frame(self, (const uint8_t *)h + h->tp_net, h->tp_snaplen, h->tp_len,
                  (double)h->tp_sec + (double)h->tp_nsec * 1e-9);
        __atomic_store_n(&h->tp_status, TP_STATUS_KERNEL, __ATOMIC_RELEASE);
        self->cap_next = (self->cap_next + 1) % self->frame_nr;
    }
}

/* Match FD's bytes to captured segments, if the ring saw its connection open. */
static void cap_attach(Poller *self, int fd, FdState *st) {
    struct sockaddr_storage la, ra;
    socklen_t ll = sizeof la, rl = sizeof ra;
    if (getsockname(fd, (struct sockaddr *)&la, &ll) < 0) return;
    if (getpeername(fd, (struct sockaddr *)&ra, &rl) < 0) return;
    uint16_t lport, rport;
    uint8_t raddr[16] = {0};
    unsigned alen;
    if (ra.ss_family == AF_INET) {
        lport = ntohs(((struct sockaddr_in *)&la)->sin_port);
        rport = ntohs(((struct sockaddr_in *)&ra)->sin_port);
        memcpy(raddr, &((struct sockaddr_in *)&ra)->sin_addr, 4);
        alen = 4;
    } else if (ra.ss_family == AF_INET6) {
        lport = ntohs(((struct sockaddr_in6 *)&la)->sin6_port);
        rport = ntohs(((struct sockaddr_in6 *)&ra)->sin6_port);
        memcpy(raddr, &((struct sockaddr_in6 *)&ra)->sin6_addr, 16);
        alen = 16;
    } else {
        return;
    }
    int watched = 0;
    for (int k = 0; k < self->nports; k++) watched |= self->ports[k] == rport;
    if (!watched) return;
    cap_drain(self);                          /* its SYN-ACK is in the ring by now */
    CapConn *c = &self->conns[lport];
    if (!c->valid || c->rport != rport || memcmp(c->raddr, raddr, alen) != 0) return;
    c->fd = fd;
    st->cap = 1;
    st->lport = lport;
    st->rx_seq = c->isn + 1;                  /* nothing of it has been read yet */
    st->shead = st->nsegs = 0;
}

static void cap_detach(Poller *self, int fd, FdState *st) {
    if (st->cap && self->conns && self->conns[st->lport].fd == fd) self->conns[st->lport].fd = -1;
    st->cap = 0;
    st->shead = st->nsegs = 0;
}

static int parts_room(Poller *self, Py_ssize_t need) {
    if (need <= self->pcap) return 0;
    Py_ssize_t cap = self->pcap ? self->pcap : 64;
    while (cap < need) cap *= 2;
    Py_ssize_t *o = PyMem_Realloc(self->poff, cap * sizeof(Py_ssize_t));
    if (o) self->poff = o;
    double *t = o ? PyMem_Realloc(self->pstamp, cap * sizeof(double)) : NULL;
    if (!o || !t) { PyErr_NoMemory(); return -1; }
    self->pstamp = t;
    self->pcap = cap;
    return 0;
}

/* Split a read of N bytes of ST at STAMP (the read's own) where its segments end: parts in
 * self->poff/pstamp. Returns the number of parts (1 without capture), or -1 on an error;
 * *COVERED: every byte had a segment. */
static Py_ssize_t split_read(Poller *self, FdState *st, Py_ssize_t n, double stamp, int *covered) {
    *covered = 0;
    if (parts_room(self, 1) < 0) return -1;
    if (!st->cap) {
        self->poff[0] = n;
        self->pstamp[0] = stamp;
        return 1;
    }
    uint32_t start = st->rx_seq, end = start + (uint32_t)n, at = start;
    if (st->nsegs == st->shead || seq_lt(st->segs[st->nsegs - 1].end, end)) cap_drain(self);
    Py_ssize_t np = 0;
    *covered = 1;
    while (seq_lt(at, end)) {
        while (st->shead < st->nsegs && seq_le(st->segs[st->shead].end, at)) st->shead++;
        uint32_t pe = end;
        double ps = stamp;
        if (st->shead < st->nsegs) {
            Seg *g = &st->segs[st->shead];
            if (seq_lt(g->end, end)) pe = g->end;
            ps = g->stamp;
        } else {
            *covered = 0;                     /* no segment: the read's stamp */
        }
        if (np > 0 && self->pstamp[np - 1] == ps) {
            self->poff[np - 1] = (Py_ssize_t)(pe - start);
        } else {
            if (parts_room(self, np + 1) < 0) return -1;
            self->poff[np] = (Py_ssize_t)(pe - start);
            self->pstamp[np] = ps;
            np++;
        }
        at = pe;
    }
    while (st->shead < st->nsegs && seq_le(st->segs[st->shead].end, end)) st->shead++;
    if (st->shead == st->nsegs) st->shead = st->nsegs = 0;
    st->rx_seq = end;
    return np;
}

/* Empty the batch of reads and fast events not yet handed over. */
static void batch_reset(FdState *st) {
    st->nreads = 0;
    st->batch_reads = 0;
    st->blen = 0;
    st->nfast = 0;
    st->done = 0;
    Py_CLEAR(st->finish);
}

/* Forget a response's fast-mode state (its batch is handed over or reset apart). */
static void fast_reset(FdState *st) {
    st->fast = 0;
    st->slen = 0;
    st->cum = 0;
    st->has_cum = 0;
}

static void state_clear(FdState *st) {
    Py_CLEAR(st->conn);
    batch_reset(st);
    fast_reset(st);
    if (st->bcap > 4 * BATCH_BYTES) {      /* a burst's buffer is not kept for the next one */
        PyMem_Free(st->bodies);
        st->bodies = NULL;
        st->bcap = 0;
    }
    st->mode = RAW;
    st->left = 0;
    st->nline = 0;
}

/* Parse a chunk-size line: optional blanks, hex digits, optional blanks, then the end or a
 * ';' that starts extensions. Returns the size, or -1 when the line is not one. */
static long long parse_size(const char *s, Py_ssize_t n) {
    Py_ssize_t i = 0;
    long long v = 0;
    int digits = 0;
    while (i < n && (s[i] == ' ' || s[i] == '\t')) i++;
    for (; i < n; i++) {
        char c = s[i];
        int d;
        if (c >= '0' && c <= '9') d = c - '0';
        else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
        else break;
        v = v * 16 + d;
        if (v > MAX_CHUNK) return -1;
        digits++;
    }
    if (!digits) return -1;
    while (i < n && (s[i] == ' ' || s[i] == '\t')) i++;
    if (i < n && s[i] != ';') return -1;
    return v;
}

/* Framing outcome of one read. */
enum { GO_ON = 0, MSG_DONE = 1, BAD_SIZE = 2, LONG_LINE = 3 };

/* Remove chunked framing from DATA[0:N] (continuing ST's state); body bytes go to OUT.
 * On MSG_DONE, *extra is the count of bytes after the message; on BAD_SIZE, *bad and *nbad
 * point at the offending line. */
static int dechunk(FdState *st, const char *data, Py_ssize_t n, char *out, Py_ssize_t *olen,
                   Py_ssize_t *extra, const char **bad, Py_ssize_t *nbad) {
    Py_ssize_t pos = 0, o = 0;
    long long left = st->left;
    if (left > 2) {                         /* the rest of a chunk's data */
        Py_ssize_t take = (left - 2 < n) ? (Py_ssize_t)(left - 2) : n;
        memcpy(out, data, take);
        o = take;
        pos = take;
        left -= take;
    }
    if (left > 0 && left <= 2 && pos < n) { /* the CRLF after a chunk's data */
        Py_ssize_t take = (left < n - pos) ? (Py_ssize_t)left : n - pos;
        pos += take;
        left -= take;
    }
    int rc = GO_ON;
    while (pos < n && left == 0) {
        const char *eol = memchr(data + pos, '\n', n - pos);
        /* a line ends with CRLF: a bare LF inside a line is part of it (as in Python) */
        while (eol && (eol == data + pos || eol[-1] != '\r'))
            eol = memchr(eol + 1, '\n', data + n - eol - 1);
        if (!eol) {
            Py_ssize_t rest = n - pos;
            if (rest > LINE_MAX_BYTES) { rc = LONG_LINE; break; }
            memcpy(st->line, data + pos, rest);
            st->nline = rest;
            pos = n;
            break;
        }
        const char *line = data + pos;
        Py_ssize_t nl = (eol - 1) - line;     /* without the CRLF */
        pos = (eol - data) + 1;
        if (st->mode == TRAILER) {
            if (nl == 0) { rc = MSG_DONE; break; }
            continue;
        }
        long long size = parse_size(line, nl);
        if (size < 0) { *bad = line; *nbad = nl; rc = BAD_SIZE; break; }
        if (size == 0) { st->mode = TRAILER; continue; }
        Py_ssize_t avail = n - pos;
        if (size + 2 <= avail) {             /* the whole chunk is here */
            memcpy(out + o, data + pos, (size_t)size);
            o += (Py_ssize_t)size;
            pos += (Py_ssize_t)size + 2;
        } else {
            Py_ssize_t take = (size < avail) ? (Py_ssize_t)size : avail;
            memcpy(out + o, data + pos, take);
            o += take;
            left = size + 2 - avail;
            pos = n;
        }
    }
    st->left = left;
    *olen = o;
    *extra = (rc == MSG_DONE) ? n - pos : 0;
    return rc;
}

/* ST's reads as two new lists (stamps, bodies), and its fast events as FAST: None, or
 * (stamps, tokens, cum or None, finish_reason or None, done); the batch is emptied. */
static int take_reads(FdState *st, PyObject **stamps, PyObject **bodies, PyObject **fast) {
    int n = st->nreads;
    *fast = NULL;
    *stamps = PyList_New(n);
    *bodies = PyList_New(n);
    if (!*stamps || !*bodies) goto fail;
    Py_ssize_t a = 0;
    for (int i = 0; i < n; i++) {
        PyObject *f = PyFloat_FromDouble(st->stamps[i]);
        PyObject *b = PyBytes_FromStringAndSize(st->bodies + a, st->ends[i] - a);
        if (!f || !b) { Py_XDECREF(f); Py_XDECREF(b); goto fail; }
        PyList_SET_ITEM(*stamps, i, f);
        PyList_SET_ITEM(*bodies, i, b);
        a = st->ends[i];
    }
    if (st->nfast || st->done || st->finish) {
        PyObject *fs = PyList_New(st->nfast), *fc = PyList_New(st->nfast);
        if (!fs || !fc) { Py_XDECREF(fs); Py_XDECREF(fc); goto fail; }
        for (Py_ssize_t i = 0; i < st->nfast; i++) {
            PyObject *f = PyFloat_FromDouble(st->fstamps[i]);
            PyObject *c = PyLong_FromLongLong(st->fcounts[i]);
            if (!f || !c) {
                Py_XDECREF(f); Py_XDECREF(c); Py_DECREF(fs); Py_DECREF(fc);
                goto fail;
            }
            PyList_SET_ITEM(fs, i, f);
            PyList_SET_ITEM(fc, i, c);
        }
        PyObject *cum = st->has_cum ? PyLong_FromLongLong(st->cum) : Py_NewRef(Py_None);
        *fast = cum ? Py_BuildValue("(NNNOO)", fs, fc, cum, st->finish ? st->finish : Py_None,
                                    st->done ? Py_True : Py_False)
                    : NULL;
        if (!cum) { Py_DECREF(fs); Py_DECREF(fc); }
        if (!*fast) goto fail;
    } else {
        *fast = Py_NewRef(Py_None);
    }
    batch_reset(st);
    return 0;
fail:
    Py_CLEAR(*stamps);
    Py_CLEAR(*bodies);
    Py_CLEAR(*fast);
    return -1;
}

/* Append (conn, stamps, bodies, end, fast) to OUT, emptying ST's batch. Steals END. */
static int emit(PyObject *out, FdState *st, PyObject *end) {
    PyObject *stamps, *bodies, *fast;
    if (!end) { end = Py_None; Py_INCREF(end); }
    if (take_reads(st, &stamps, &bodies, &fast) < 0) { Py_DECREF(end); return -1; }
    PyObject *item = PyTuple_Pack(5, st->conn, stamps, bodies, end, fast);
    Py_DECREF(stamps);
    Py_DECREF(bodies);
    Py_DECREF(end);
    Py_DECREF(fast);
    if (!item) return -1;
    int r = PyList_Append(out, item);
    Py_DECREF(item);
    return r;
}

static int batch_add(FdState *st, double stamp, const char *p, Py_ssize_t n) {
    if (st->blen + n > st->bcap) {
        Py_ssize_t cap = st->bcap ? st->bcap : 4096;
        while (cap < st->blen + n) cap *= 2;
        char *grown = PyMem_Realloc(st->bodies, cap);
        if (!grown) { PyErr_NoMemory(); return -1; }
        st->bodies = grown;
        st->bcap = cap;
    }
    memcpy(st->bodies + st->blen, p, n);
    st->blen += n;
    st->stamps[st->nreads] = stamp;
    st->ends[st->nreads] = st->blen;
    st->nreads++;
    return 0;
}

static int grow(char **buf, Py_ssize_t *cap, Py_ssize_t need) {
    if (need <= *cap) return 0;
    Py_ssize_t c = *cap ? *cap : 4096;
    while (c < need) c *= 2;
    char *g = PyMem_Realloc(*buf, c);
    if (!g) { PyErr_NoMemory(); return -1; }
    *buf = g;
    *cap = c;
    return 0;
}

static int is_blank(char c) {     /* what bytes.strip() strips */
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\x0b' || c == '\x0c';
}

/* One event's data P[0:N] at STAMP, as EventSink._payload's fast path takes it: 1 if taken
 * here, 0 if Python must see it, -1 on an error (set). */
static int fast_event(Poller *self, FdState *st, const char *p, Py_ssize_t n, double stamp) {
    if (n == 0 || p[0] != '{') {
        Py_ssize_t a = 0, b = n;
        while (a < b && is_blank(p[a])) a++;
        while (b > a && is_blank(p[b - 1])) b--;
        if (b - a == 6 && memcmp(p + a, "[DONE]", 6) == 0) { st->done = 1; return 1; }
        return 0;
    }
    PyObject *raw = PyBytes_FromStringAndSize(p, n);
    if (!raw) return -1;
    PyObject *ev = PyObject_CallOneArg(self->loads, raw);
    Py_DECREF(raw);
    if (!ev) {
        if (!PyErr_ExceptionMatches(PyExc_ValueError)) return -1;
        PyErr_Clear();                 /* malformed: Python records it */
        return 0;
    }
    int taken = 0;
    PyObject *choices, *c, *usage, *tokens, *fr;
    long long cum, tok;
    int overflow = 0;
    if (!PyDict_CheckExact(ev) || PyDict_GetItemWithError(ev, self->k_error)) goto out;
    choices = PyDict_GetItemWithError(ev, self->k_choices);
    if (!choices || !PyList_CheckExact(choices) || PyList_GET_SIZE(choices) == 0) goto out;
    c = PyList_GET_ITEM(choices, 0);
    if (!PyDict_CheckExact(c) || !PyDict_GetItemWithError(c, self->k_text)) goto out;
    usage = PyDict_GetItemWithError(ev, self->k_usage);
    if (!usage || !PyDict_CheckExact(usage)) goto out;
    tokens = PyDict_GetItemWithError(usage, self->k_tokens);
    if (!tokens || !PyLong_CheckExact(tokens)) goto out;
    cum = PyLong_AsLongLongAndOverflow(tokens, &overflow);
    if (overflow || (cum == -1 && PyErr_Occurred())) { PyErr_Clear(); goto out; }
    if (__builtin_sub_overflow(cum, st->has_cum ? st->cum : 0, &tok)) goto out;
    fr = PyDict_GetItemWithError(c, self->k_finish);
    if (fr) {
        int truthy = PyObject_IsTrue(fr);
        if (truthy < 0) { Py_DECREF(ev); return -1; }
        if (truthy) Py_XSETREF(st->finish, Py_NewRef(fr));
    }
    if (st->nfast == st->fcap) {
        Py_ssize_t cap = st->fcap ? 2 * st->fcap : 64;
        double *fs = PyMem_Realloc(st->fstamps, cap * sizeof(double));
        if (fs) st->fstamps = fs;
        long long *fc = fs ? PyMem_Realloc(st->fcounts, cap * sizeof(long long)) : NULL;
        if (!fs || !fc) { Py_DECREF(ev); PyErr_NoMemory(); return -1; }
        st->fcounts = fc;
        st->fcap = cap;
    }
    st->fstamps[st->nfast] = stamp;
    st->fcounts[st->nfast] = tok;
    st->nfast++;
    st->cum = cum;
    st->has_cum = 1;
    taken = 1;
out:
    Py_DECREF(ev);
    if (PyErr_Occurred()) return -1;
    return taken;
}

/* Body bytes P[0:N] of one read at STAMP, in fast mode: complete events are taken here
 * until one is not the usual kind; from it on, the bytes go to Python. */
static int sse_feed(Poller *self, FdState *st, const char *p, Py_ssize_t n, double stamp) {
    if (grow(&st->sse, &st->scap, st->slen + n) < 0) return -1;
    /* what was kept holds no separator: search from its last byte on, not from its start
     * (an event spread over many reads is scanned once) */
    Py_ssize_t from = st->slen > 0 ? st->slen - 1 : 0;
    memcpy(st->sse + st->slen, p, n);
    st->slen += n;
    Py_ssize_t start = 0;
    if (!memchr(p, '\r', n)) {         /* CR line ends: Python's parser handles them */
        for (;;) {
            const char *sep = memmem(st->sse + from, st->slen - from, "\n\n", 2);
            if (!sep) break;
            const char *ev = st->sse + start;
            Py_ssize_t elen = sep - ev;
            if (elen > 0) {
                if (elen < 6 || memcmp(ev, "data: ", 6) != 0 || memchr(ev, '\n', elen))
                    goto slow;
                int r = fast_event(self, st, ev + 6, elen - 6, stamp);
                if (r < 0) return -1;
                if (r == 0) goto slow;
            }
            start = from = (sep - st->sse) + 2;
        }
        /* an event this long is not a token event: Python's parser refuses it (client.py's
         * MAX_EVENT_BYTES), so it is handed over rather than gathered here without end */
        if (st->slen - start > SSE_EVENT_MAX) goto slow;
        memmove(st->sse, st->sse + start, st->slen - start);
        st->slen -= start;
        return 0;
    }
slow:
    st->fast = 0;
    if (batch_add(st, stamp, st->sse + start, st->slen - start) < 0) return -1;
    st->slen = 0;
    return 0;
}

static void forget(Poller *self, int fd) {
    epoll_ctl(self->epfd, EPOLL_CTL_DEL, fd, NULL);
}

/* Bytes P[0:N] of a 200 chunked body (one read, or one segment's part of it) that arrived
 * at STAMP, REST more bytes of the read after them. Returns -1 on an error, 1 when the
 * message ended or its framing failed (handed over; the rest is not this response's), 0 to
 * go on. */
static int chunked_part(Poller *self, int fd, FdState *st, PyObject *out, const char *p,
                        Py_ssize_t n, double stamp, Py_ssize_t rest) {
    /* a part adds at most two reads to the batch */
    if (st->nreads + 2 > BATCH_READS && emit(out, st, NULL) < 0) return -1;
    const char *data = p;
    if (st->nline) {          /* an incomplete line from the last part goes first */
        memcpy(self->scratch, st->line, st->nline);
        memcpy(self->scratch + st->nline, p, n);
        n += st->nline;
        st->nline = 0;
        data = self->scratch;
    }
    Py_ssize_t olen = 0, extra = 0, nbad = 0;
    const char *bad = NULL;
    int rc = dechunk(st, data, n, self->body, &olen, &extra, &bad, &nbad);
    if (olen > 0) {
        if (st->fast) {
            if (sse_feed(self, st, self->body, olen, stamp) < 0) return -1;
        } else if (batch_add(st, stamp, self->body, olen) < 0) {
            return -1;
        }
    }
    if (rc != GO_ON && st->fast) {
        /* an incomplete last event goes to Python, which keeps it as it would */
        if (st->slen && batch_add(st, stamp, st->sse, st->slen) < 0) return -1;
        st->slen = 0;
        st->fast = 0;
    }
    switch (rc) {
    case MSG_DONE:
        st->mode = RAW;
        st->left = 0;
        return emit(out, st, Py_BuildValue("(sn)", "done", extra + rest)) < 0 ? -1 : 1;
    case BAD_SIZE:
        st->mode = RAW;
        forget(self, fd);
        return emit(out, st, Py_BuildValue("(sy#)", "badsize", bad, nbad > 40 ? 40 : nbad)) < 0
               ? -1 : 1;
    case LONG_LINE:
        st->mode = RAW;
        forget(self, fd);
        return emit(out, st, Py_BuildValue("(s)", "longline")) < 0 ? -1 : 1;
    }
    return 0;
}

/* One read of a ready socket; appends what Python must see to OUT. */
static int read_one(Poller *self, int fd, FdState *st, PyObject *out) {
    char cbuf[CMSG_SPACE(sizeof(struct timespec)) * 2];
    struct iovec iov = {self->raw, READ_SIZE};
    struct msghdr msg;
    memset(&msg, 0, sizeof msg);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf;
    msg.msg_controllen = sizeof cbuf;
    ssize_t n = recvmsg(fd, &msg, MSG_DONTWAIT);
    if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return 0;
        int err = errno;
        forget(self, fd);
        return emit(out, st, Py_BuildValue("(si)", "oserror", err));
    }
    if (n == 0) {
        forget(self, fd);
        return emit(out, st, Py_BuildValue("(s)", "eof"));
    }
    double now = realtime_now(), stamp = now, wait = 0.0;
    int kstamped = 0, covered;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPNS
            && c->cmsg_len >= CMSG_LEN(sizeof(struct timespec))) {
            struct timespec ts;
            memcpy(&ts, CMSG_DATA(c), sizeof ts);
            double k = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
            if (k < now) {
                stamp = k;
                wait = now - k;
            }
            kstamped = 1;
            break;
        }
    }
    self->reads++;
    self->stamped += kstamped;
    Py_ssize_t np = split_read(self, st, n, stamp, &covered);
    if (np < 0) return -1;
    if (covered) self->pstamped++;
    /* the wait of bytes in the socket buffer matters only where the read's stamp is used */
    else if (kstamped && wait > self->wait_max) self->wait_max = wait;
    if (st->mode == RAW) {
        /* A raw read is one hand-over (Python parses all of it before it hands the framing
         * to C, which reads on from there): parts beyond the batch's room are joined into
         * its last, with the newest stamp. The batch is empty here: raw reads go at once. */
        Py_ssize_t a = 0;
        for (Py_ssize_t i = 0; i < np; i++) {
            int last = i == BATCH_READS - 1;
            Py_ssize_t b = self->poff[last ? np - 1 : i];
            if (batch_add(st, self->pstamp[last ? np - 1 : i], self->raw + a, b - a) < 0) return -1;
            a = b;
            if (last) break;
        }
        return emit(out, st, NULL);
    }
    Py_ssize_t a = 0;
    for (Py_ssize_t i = 0; i < np; i++) {
        Py_ssize_t b = self->poff[i];
        int r = chunked_part(self, fd, st, out, self->raw + a, b - a, self->pstamp[i], n - b);
        if (r != 0) return r < 0 ? -1 : 0;
        a = b;
    }
    st->batch_reads++;
    /* Streams that started together would fill their batches together, and hand them all
     * over in one poll: the size a socket's batch is handed over at depends on its fd. */
    if (st->batch_reads >= BATCH_READS - (fd * 7) % (BATCH_READS / 2)
        || st->blen >= BATCH_BYTES || st->nfast >= FAST_MAX)
        return emit(out, st, NULL);
    return 0;
}

static PyObject *Poller_poll(Poller *self, PyObject *Py_UNUSED(ignored)) {
    if (self->epfd < 0) return PyErr_Format(PyExc_ValueError, "the poller is closed");
    struct epoll_event evs[MAX_EVENTS];
    int n = epoll_wait(self->epfd, evs, MAX_EVENTS, 0);
    if (n < 0) {
        if (errno == EINTR) return PyList_New(0);
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    PyObject *out = PyList_New(0);
    if (!out) return NULL;
    for (int i = 0; i < n; i++) {
        int fd = evs[i].data.fd;
        FdState *st = state_of(self, fd);
        if (!st || !st->conn) { forget(self, fd); continue; }
        if (read_one(self, fd, st, out) < 0) { Py_DECREF(out); return NULL; }
    }
    return out;
}

static PyObject *Poller_register(Poller *self, PyObject *args) {
    int fd;
    PyObject *conn;
    if (!PyArg_ParseTuple(args, "iO", &fd, &conn)) return NULL;
    if (self->epfd < 0) return PyErr_Format(PyExc_ValueError, "the poller is closed");
    if (fd < 0) return PyErr_Format(PyExc_ValueError, "bad fd %d", fd);
    if (fd >= self->nfds) {
        int m = self->nfds ? self->nfds : 1024;
        while (m <= fd) m *= 2;
        FdState **grown = PyMem_Realloc(self->fds, sizeof(FdState *) * m);
        if (!grown) return PyErr_NoMemory();
        memset(grown + self->nfds, 0, sizeof(FdState *) * (m - self->nfds));
        self->fds = grown;
        self->nfds = m;
    }
    FdState *st = self->fds[fd];
    if (!st) {
        st = PyMem_Calloc(1, sizeof(FdState));
        if (!st) return PyErr_NoMemory();
        self->fds[fd] = st;
    }
    if (st->conn) return PyErr_Format(PyExc_ValueError, "fd %d is already registered", fd);
    struct epoll_event ev;
    memset(&ev, 0, sizeof ev);
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    if (epoll_ctl(self->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) return PyErr_SetFromErrno(PyExc_OSError);
    state_clear(st);
    cap_detach(self, fd, st);
    if (self->cap_fd >= 0) cap_attach(self, fd, st);
    Py_INCREF(conn);
    st->conn = conn;
    Py_RETURN_NONE;
}

static PyObject *Poller_stream(Poller *self, PyObject *args) {
    int fd, trailer, fast = 0;
    long long left;
    const char *line;
    Py_ssize_t nline;
    PyObject *cum = Py_None;
    if (!PyArg_ParseTuple(args, "iLy#p|pO", &fd, &left, &line, &nline, &trailer, &fast, &cum))
        return NULL;
    FdState *st = state_of(self, fd);
    if (!st || !st->conn) return PyErr_Format(PyExc_ValueError, "fd %d is not registered", fd);
    if (nline > LINE_MAX_BYTES || left < 0)
        return PyErr_Format(PyExc_ValueError, "bad framing state");
    long long c = 0;
    if (cum != Py_None) {         /* what Python's parser already counted of this response */
        c = PyLong_AsLongLong(cum);
        if (c == -1 && PyErr_Occurred()) return NULL;
    }
    st->mode = trailer ? TRAILER : CHUNKED;
    fast_reset(st);
    st->fast = fast && self->loads != NULL;
    st->cum = c;
    st->has_cum = cum != Py_None;
    st->left = left;
    memcpy(st->line, line, nline);
    st->nline = nline;
    Py_RETURN_NONE;
}

static PyObject *Poller_unregister(Poller *self, PyObject *args) {
    int fd;
    if (!PyArg_ParseTuple(args, "i", &fd)) return NULL;
    FdState *st = state_of(self, fd);
    if (!st) return Py_BuildValue("([][]O)", Py_None);
    PyObject *stamps, *bodies, *fast;
    if (take_reads(st, &stamps, &bodies, &fast) < 0) return NULL;
    if (st->conn && self->epfd >= 0) forget(self, fd);
    state_clear(st);
    cap_detach(self, fd, st);
    return Py_BuildValue("(NNN)", stamps, bodies, fast);
}

/* Start the packet ring (first call), watching segments from PORT too. */
static PyObject *Poller_capture(Poller *self, PyObject *args) {
    int port;
    if (!PyArg_ParseTuple(args, "i", &port)) return NULL;
    if (self->epfd < 0) return PyErr_Format(PyExc_ValueError, "the poller is closed");
    if (port <= 0 || port > 65535) return PyErr_Format(PyExc_ValueError, "bad port %d", port);
    for (int k = 0; k < self->nports; k++)
        if (self->ports[k] == port) Py_RETURN_NONE;
    if (self->nports == CAP_PORTS)
        return PyErr_Format(PyExc_ValueError, "at most %d ports are watched", CAP_PORTS);
    int opened = 0;
    if (self->cap_fd < 0) {
        int fd = socket(AF_PACKET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, htons(ETH_P_ALL));
        if (fd < 0) return PyErr_SetFromErrno(PyExc_OSError);
        self->cap_fd = fd;
        opened = 1;
    }
    self->ports[self->nports++] = (uint16_t)port;
    if (cap_filter(self) < 0) goto fail;       /* the filter comes before the ring */
    if (opened) {
        int v = TPACKET_V2;
        struct tpacket_req req = {CAP_BLOCK, CAP_BLOCKS, CAP_FRAME,
                                  (CAP_BLOCK / CAP_FRAME) * CAP_BLOCKS};
        if (setsockopt(self->cap_fd, SOL_PACKET, PACKET_VERSION, &v, sizeof v) < 0) goto fail;
        /* Outgoing packets are not offered to the ring at all (the filter drops them too,
         * on kernels before 4.20): on loopback each would cost a clone on the sender. */
        int one = 1;
        setsockopt(self->cap_fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof one);
        if (setsockopt(self->cap_fd, SOL_PACKET, PACKET_RX_RING, &req, sizeof req) < 0) goto fail;
        size_t len = (size_t)CAP_BLOCK * CAP_BLOCKS;
        void *ring = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, self->cap_fd, 0);
        if (ring == MAP_FAILED) goto fail;
        self->ring = ring;
        self->ring_len = len;
        self->frame_nr = req.tp_frame_nr;
        self->cap_next = 0;
        self->conns = PyMem_Calloc(65536, sizeof(CapConn));
        if (!self->conns) { PyErr_NoMemory(); goto undo; }
        for (int i = 0; i < 65536; i++) self->conns[i].fd = -1;
    }
    Py_RETURN_NONE;
fail:
    PyErr_SetFromErrno(PyExc_OSError);
undo:
    self->nports--;
    if (opened) {
        if (self->ring) munmap(self->ring, self->ring_len);
        self->ring = NULL;
        close(self->cap_fd);
        self->cap_fd = -1;
        self->nports = 0;
    } else {
        cap_filter(self);
    }
    return NULL;
}

static PyObject *Poller_take_stats(Poller *self, PyObject *Py_UNUSED(ignored)) {
    long long drops = -1;            /* -1: no packet ring */
    if (self->cap_fd >= 0) {
        struct tpacket_stats ts;
        socklen_t len = sizeof ts;
        drops = getsockopt(self->cap_fd, SOL_PACKET, PACKET_STATISTICS, &ts, &len) == 0
                ? (long long)ts.tp_drops : 0;
    }
    PyObject *r = Py_BuildValue("(LLdLLLL)", self->reads, self->stamped, self->wait_max,
                                self->pstamped, self->segments, self->orphans, drops);
    self->reads = self->stamped = self->pstamped = self->segments = self->orphans = 0;
    self->wait_max = 0.0;
    return r;
}

static PyObject *Poller_fileno(Poller *self, PyObject *Py_UNUSED(ignored)) {
    return PyLong_FromLong(self->epfd);
}

static void poller_release(Poller *self) {
    for (int i = 0; i < self->nfds; i++) {
        if (self->fds[i]) {
            state_clear(self->fds[i]);
            PyMem_Free(self->fds[i]->bodies);
            PyMem_Free(self->fds[i]->sse);
            PyMem_Free(self->fds[i]->fstamps);
            PyMem_Free(self->fds[i]->fcounts);
            PyMem_Free(self->fds[i]->segs);
            PyMem_Free(self->fds[i]);
        }
    }
    PyMem_Free(self->fds);
    self->fds = NULL;
    self->nfds = 0;
    if (self->epfd >= 0) close(self->epfd);
    self->epfd = -1;
    if (self->ring) munmap(self->ring, self->ring_len);
    self->ring = NULL;
    if (self->cap_fd >= 0) close(self->cap_fd);
    self->cap_fd = -1;
    self->nports = 0;
    PyMem_Free(self->conns);
    self->conns = NULL;
}

static PyObject *Poller_close(Poller *self, PyObject *Py_UNUSED(ignored)) {
    poller_release(self);
    Py_RETURN_NONE;
}

static int Poller_init(Poller *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"loads", NULL};
    PyObject *loads = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|O", kwlist, &loads)) return -1;
    poller_release(self);
    Py_XSETREF(self->loads, loads && loads != Py_None ? Py_NewRef(loads) : NULL);
#define KEY(f, s) if (!self->f && !(self->f = PyUnicode_InternFromString(s))) return -1
    KEY(k_choices, "choices");
    KEY(k_usage, "usage");
    KEY(k_tokens, "completion_tokens");
    KEY(k_text, "text");
    KEY(k_finish, "finish_reason");
    KEY(k_error, "error");
#undef KEY
    self->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (self->epfd < 0) { PyErr_SetFromErrno(PyExc_OSError); return -1; }
    if (!self->raw) self->raw = PyMem_Malloc(READ_SIZE);
    if (!self->scratch) self->scratch = PyMem_Malloc(READ_SIZE + LINE_MAX_BYTES + 2);
    if (!self->body) self->body = PyMem_Malloc(READ_SIZE + LINE_MAX_BYTES + 2);
    if (!self->raw || !self->scratch || !self->body) { PyErr_NoMemory(); return -1; }
    return 0;
}

static PyObject *Poller_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    Poller *self = (Poller *)type->tp_alloc(type, 0);
    if (self) self->epfd = self->cap_fd = -1;
    return (PyObject *)self;
}

static int Poller_traverse(Poller *self, visitproc visit, void *arg) {
    Py_VISIT(self->loads);
    for (int i = 0; i < self->nfds; i++) {
        if (self->fds[i]) {
            Py_VISIT(self->fds[i]->conn);
            Py_VISIT(self->fds[i]->finish);
        }
    }
    return 0;
}

static int Poller_clear(Poller *self) {
    Py_CLEAR(self->loads);
    for (int i = 0; i < self->nfds; i++)
        if (self->fds[i]) state_clear(self->fds[i]);
    return 0;
}

static void Poller_dealloc(Poller *self) {
    PyObject_GC_UnTrack(self);
    poller_release(self);
    PyMem_Free(self->raw);
    PyMem_Free(self->scratch);
    PyMem_Free(self->body);
    PyMem_Free(self->poff);
    PyMem_Free(self->pstamp);
    Py_CLEAR(self->loads);
    Py_CLEAR(self->k_choices);
    Py_CLEAR(self->k_usage);
    Py_CLEAR(self->k_tokens);
    Py_CLEAR(self->k_text);
    Py_CLEAR(self->k_finish);
    Py_CLEAR(self->k_error);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef Poller_methods[] = {
    {"poll", (PyCFunction)Poller_poll, METH_NOARGS,
     "Read every ready socket once; a list of (conn, stamps, bodies, end, fast)."},
    {"register", (PyCFunction)Poller_register, METH_VARARGS,
     "register(fd, conn): watch FD (raw mode); CONN is handed back with its reads."},
    {"stream", (PyCFunction)Poller_stream, METH_VARARGS,
     "stream(fd, left, line, trailer, fast=False, cum=None): FD's 200 chunked body continues "
     "in C from this state; FAST: its usual SSE events are parsed here too, their token "
     "counts continuing from the cumulative count CUM."},
    {"unregister", (PyCFunction)Poller_unregister, METH_VARARGS,
     "unregister(fd): stop watching FD; (stamps, bodies, fast) not yet handed over."},
    {"capture", (PyCFunction)Poller_capture, METH_VARARGS,
     "capture(port): time the bytes of sockets connected to PORT by their TCP segments' "
     "arrival (a packet ring; OSError where the process may not open one)."},
    {"take_stats", (PyCFunction)Poller_take_stats, METH_NOARGS,
     "(reads, kernel-stamped reads, longest wait in a socket buffer of bytes timed by their "
     "read s, reads timed wholly by segments, segments captured, segments of no registered "
     "socket, segments the ring dropped or -1 without one) since the last call."},
    {"fileno", (PyCFunction)Poller_fileno, METH_NOARGS, "The epoll descriptor."},
    {"close", (PyCFunction)Poller_close, METH_NOARGS, "Close the epoll set."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject PollerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "bench._streamread.Poller",
    .tp_basicsize = sizeof(Poller),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "An epoll set of stream sockets read with kernel receive stamps.",
    .tp_new = Poller_new,
    .tp_init = (initproc)Poller_init,
    .tp_dealloc = (destructor)Poller_dealloc,
    .tp_traverse = (traverseproc)Poller_traverse,
    .tp_clear = (inquiry)Poller_clear,
    .tp_methods = Poller_methods,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "bench._streamread",
    "The compiled read path of bench.httpstream (Linux).", -1, NULL,
};

PyMODINIT_FUNC PyInit__streamread(void) {
    if (PyType_Ready(&PollerType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&PollerType);
    if (PyModule_AddObject(m, "Poller", (PyObject *)&PollerType) < 0) {
        Py_DECREF(&PollerType);
        Py_DECREF(m);
        return NULL;
    }
    PyModule_AddIntConstant(m, "BATCH_READS", BATCH_READS);
    PyModule_AddIntConstant(m, "READ_SIZE", READ_SIZE);
    return m;
}
