/*
 * fake_nvml.c - a stand-in for libnvidia-ml.so.1 on machines without NVIDIA GPUs (the slurm-ft lab).
 *
 * The real pynvml loads it through CDLL("libnvidia-ml.so.1") (put its directory on LD_LIBRARY_PATH),
 * so the real telemetry and health code run unchanged. It presents the GPUs of one lab node:
 *
 *   node   $SLURMD_NODENAME, else $SLURM_FT_FAKE_NODE
 *   state  $SLURM_FT_FAKE_NVML_STATE, else $SLURM_FT_LAB_DIR/nodes/<node>/nvml.state
 *
 * No node or no state file: 8 healthy "NVIDIA H100 80GB HBM3". The state file is re-read whenever its
 * inode, size or mtime changes, so `slurm-ft lab inject` shows up without restarting anything.
 * State file format (written by lab/slurm_ft_lab/inject.py), one setting per line, '#' comments:
 *
 *   gpus 8                      nvlinks 18                 name NVIDIA H100 80GB HBM3   driver 570.133.20
 *   gpu <i> uuid GPU-...        gpu <i> pci 00000000:18:00.0
 *   gpu <i> lost 1              (every call on that GPU -> NVML_ERROR_GPU_IS_LOST)
 *   gpu <i> ecc_dbe_volatile N  ecc_dbe_aggregate N  ecc_sbe_volatile N  ecc_sbe_aggregate N
 *   gpu <i> ecc_sbe_rate R T0   (corrected errors keep coming: R a minute since unix time T0, on top of the counts)
 *   gpu <i> remap_corrected N   remap_uncorrected N  remap_pending 0|1   remap_failure 0|1
 *   gpu <i> nvlink_down L       nvlink_err L COUNTER N   (COUNTER: 0 replay 1 recovery 2 crc_flit 3 crc_data 4 ecc)
 *   gpu <i> pcie_gen G          pcie_width W         clock_events 0xMASK  slow F (SM clock = F x max)
 *   gpu <i> temp C              power_w W
 *   gpu <i> recovery_action N   (field NVML_FI_DEV_GET_GPU_RECOVERY_ACTION: 1 reset, 2 reboot, 4 drain+reset)
 *   gpu <i> hang_ms N           (every call on that GPU sleeps N ms first: a hung driver call)
 *   init_error CODE             (nvmlInit fails with CODE, e.g. 9 = driver not loaded)
 *   gpu <i> xid SEQ CODE        (history; each event set gets every xid with a SEQ newer than at registration)
 *   gpu <i> proc PID BYTES      (a compute process on the GPU)
 *
 * Only what slurm-ft reads is implemented; any other symbol is missing, which pynvml reports as
 * NVMLError_FunctionNotFound.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>

#define EXPORT __attribute__((visibility("default")))

typedef int nvmlReturn_t;
enum {
    NVML_SUCCESS = 0, NVML_ERROR_UNINITIALIZED = 1, NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3, NVML_ERROR_NOT_FOUND = 6, NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_TIMEOUT = 10, NVML_ERROR_GPU_IS_LOST = 15, NVML_ERROR_UNKNOWN = 999,
};

#define MAX_GPUS 64
#define MAX_LINKS 18          /* NVLink4 on H100/H200 */
#define MAX_XIDS 64
#define MAX_PROCS 32
#define EV_SBE 0x1ULL
#define EV_DBE 0x2ULL
#define EV_PSTATE 0x4ULL
#define EV_XID 0x8ULL
#define EV_CLOCK 0x10ULL
#define EV_SUPPORTED (EV_SBE | EV_DBE | EV_PSTATE | EV_XID | EV_CLOCK)
#define SM_MAX_MHZ 1980
#define MEM_TOTAL 85520809984ULL   /* 79.6 GiB, as an H100 80GB reports */

struct xid { unsigned long long seq; unsigned int code; };
struct proc { unsigned int pid; unsigned long long mem; };

struct gpu {
    char uuid[96], pci[32];
    int lost;
    unsigned long long ecc[2][2];           /* [corrected=0 | uncorrected=1][volatile=0 | aggregate=1] */
    double sbe_rate, sbe_since;             /* corrected errors a minute since sbe_since (epoch seconds) */
    unsigned int remap[4];                  /* corrected, uncorrected, pending, failure */
    int link_down[MAX_LINKS];
    unsigned long long link_err[MAX_LINKS][5];
    unsigned int pcie_gen, pcie_width;
    unsigned long long clock_events;
    double slow;
    unsigned int temp, power_mw, hang_ms, recovery_action;
    struct xid xids[MAX_XIDS];
    int nxids;
    struct proc procs[MAX_PROCS];
    int nprocs;
};

struct state {
    int ngpus, nlinks, init_error;
    char name[96], driver[32];
    struct gpu g[MAX_GPUS];
};

/* Handles stay valid across state reloads: a handle is a pointer into this array. */
struct nvmlDevice_st { int index; };
typedef struct nvmlDevice_st *nvmlDevice_t;
static struct nvmlDevice_st handles[MAX_GPUS];

struct nvmlEventSet_st {
    unsigned long long mask[MAX_GPUS];
    unsigned long long last_seq[MAX_GPUS];
};
typedef struct nvmlEventSet_st *nvmlEventSet_t;

typedef struct {
    nvmlDevice_t device;
    unsigned long long eventType, eventData;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlEventData_t;

typedef struct {            /* nvmlPciInfo_t as of NVML 9.0 (nvmlDeviceGetPciInfo_v3) */
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;

typedef struct {            /* legacy layout for _v1/_v2 */
    char busId[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId, reserved[4];
} nvmlPciInfo_v2_t;

typedef struct {            /* nvmlFieldValue_t */
    unsigned int fieldId, scopeId;
    long long timestamp, latencyUsec;
    int valueType, nvmlReturn;
    union { double dVal; unsigned int uiVal; unsigned long ulVal; unsigned long long ullVal; long long sllVal; } value;
} nvmlFieldValue_t;

typedef struct { unsigned int pid; unsigned long long usedGpuMemory; unsigned int gpuInstanceId, computeInstanceId; } nvmlProcessInfo_t;
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct { unsigned int version; int sensorType; int temperature; } nvmlTemperature_t;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct state st;
static int loaded;
static int init_count;
static char node[128], state_path[4096];
static struct stat last_stat;
static const unsigned int default_bus[8] = {0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb};  /* DGX H100 */

/* FNV-1a, so the default UUIDs are stable per node and GPU (inject.py computes the same ones). */
static unsigned long long fnv1a(const char *s)
{
    unsigned long long h = 1469598103934665603ULL;
    for (; *s; s++) { h ^= (unsigned char)*s; h *= 1099511628211ULL; }
    return h;
}

static void set_defaults(struct state *s)
{
    memset(s, 0, sizeof(*s));
    s->ngpus = 8;
    s->nlinks = MAX_LINKS;
    snprintf(s->name, sizeof(s->name), "NVIDIA H100 80GB HBM3");
    snprintf(s->driver, sizeof(s->driver), "570.133.20");
    for (int i = 0; i < MAX_GPUS; i++) {
        struct gpu *g = &s->g[i];
        char key[200];
        snprintf(key, sizeof(key), "%s:%d", node[0] ? node : "localhost", i);
        unsigned long long a = fnv1a(key), b = fnv1a(key) * 31 + 0x9e3779b97f4a7c15ULL;
        snprintf(g->uuid, sizeof(g->uuid), "GPU-%08llx-%04llx-%04llx-%04llx-%012llx",
                 a >> 32, (a >> 16) & 0xffff, a & 0xffff, b >> 48, b & 0xffffffffffffULL);
        snprintf(g->pci, sizeof(g->pci), "00000000:%02x:00.0", i < 8 ? default_bus[i] : (unsigned int)(0x10 + i));
        g->pcie_gen = 5;
        g->pcie_width = 16;
        g->slow = 1.0;
        g->temp = 40 + i % 3;
        g->power_mw = 120000;
    }
}

static void chomp(char *s) { size_t n = strlen(s); while (n && (s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == ' ')) s[--n] = 0; }

static void parse_gpu_line(struct gpu *g, const char *key, char *rest)
{
    if (!strcmp(key, "uuid")) snprintf(g->uuid, sizeof(g->uuid), "%s", rest);
    else if (!strcmp(key, "pci")) snprintf(g->pci, sizeof(g->pci), "%s", rest);
    else if (!strcmp(key, "lost")) g->lost = atoi(rest);
    else if (!strcmp(key, "ecc_sbe_volatile")) g->ecc[0][0] = strtoull(rest, NULL, 0);
    else if (!strcmp(key, "ecc_sbe_aggregate")) g->ecc[0][1] = strtoull(rest, NULL, 0);
    else if (!strcmp(key, "ecc_dbe_volatile")) g->ecc[1][0] = strtoull(rest, NULL, 0);
    else if (!strcmp(key, "ecc_dbe_aggregate")) g->ecc[1][1] = strtoull(rest, NULL, 0);
    else if (!strcmp(key, "ecc_sbe_rate")) {
        double r, t;
        if (sscanf(rest, "%lf %lf", &r, &t) == 2 && r >= 0) { g->sbe_rate = r; g->sbe_since = t; }
    }
    else if (!strcmp(key, "remap_corrected")) g->remap[0] = atoi(rest);
    else if (!strcmp(key, "remap_uncorrected")) g->remap[1] = atoi(rest);
    else if (!strcmp(key, "remap_pending")) g->remap[2] = atoi(rest);
    else if (!strcmp(key, "remap_failure")) g->remap[3] = atoi(rest);
    else if (!strcmp(key, "nvlink_down")) {
        int l = atoi(rest);
        if (l >= 0 && l < MAX_LINKS) g->link_down[l] = 1;
    } else if (!strcmp(key, "nvlink_err")) {
        int l, c; unsigned long long v;
        if (sscanf(rest, "%d %d %llu", &l, &c, &v) == 3 && l >= 0 && l < MAX_LINKS && c >= 0 && c < 5)
            g->link_err[l][c] = v;
    } else if (!strcmp(key, "pcie_gen")) g->pcie_gen = atoi(rest);
    else if (!strcmp(key, "pcie_width")) g->pcie_width = atoi(rest);
    else if (!strcmp(key, "clock_events")) g->clock_events = strtoull(rest, NULL, 0);
    else if (!strcmp(key, "slow")) g->slow = atof(rest);
    else if (!strcmp(key, "temp")) g->temp = atoi(rest);
    else if (!strcmp(key, "power_w")) g->power_mw = (unsigned int)(atof(rest) * 1000);
    else if (!strcmp(key, "hang_ms")) g->hang_ms = (unsigned int)strtoul(rest, NULL, 0);
    else if (!strcmp(key, "recovery_action")) g->recovery_action = (unsigned int)strtoul(rest, NULL, 0);
    else if (!strcmp(key, "xid")) {
        struct xid x;
        if (sscanf(rest, "%llu %u", &x.seq, &x.code) != 2) return;
        if (g->nxids == MAX_XIDS) {             /* keep the newest: drop the oldest */
            memmove(g->xids, g->xids + 1, sizeof(g->xids[0]) * (MAX_XIDS - 1));
            g->nxids--;
        }
        g->xids[g->nxids++] = x;
    } else if (!strcmp(key, "proc") && g->nprocs < MAX_PROCS) {
        struct proc *p = &g->procs[g->nprocs];
        if (sscanf(rest, "%u %llu", &p->pid, &p->mem) >= 1) g->nprocs++;
    }
}

static void parse_state(struct state *s, FILE *fh)
{
    char line[512];
    while (fgets(line, sizeof(line), fh)) {
        chomp(line);
        char *p = line;
        while (*p == ' ' || *p == '\t') p++;
        if (!*p || *p == '#') continue;
        char *key = strtok(p, " \t");
        char *rest = strtok(NULL, "");
        if (!rest) rest = "";
        while (*rest == ' ' || *rest == '\t') rest++;
        if (!strcmp(key, "gpus")) {
            int n = atoi(rest);
            s->ngpus = n < 0 ? 0 : n > MAX_GPUS ? MAX_GPUS : n;
        } else if (!strcmp(key, "nvlinks")) {
            int n = atoi(rest);
            s->nlinks = n < 0 ? 0 : n > MAX_LINKS ? MAX_LINKS : n;
        } else if (!strcmp(key, "init_error")) s->init_error = atoi(rest);
        else if (!strcmp(key, "name")) snprintf(s->name, sizeof(s->name), "%s", rest);
        else if (!strcmp(key, "driver")) snprintf(s->driver, sizeof(s->driver), "%s", rest);
        else if (!strcmp(key, "gpu")) {
            char *idx = strtok(rest, " \t"), *gkey = strtok(NULL, " \t"), *grest = strtok(NULL, "");
            if (!idx || !gkey) continue;
            int i = atoi(idx);
            if (i < 0 || i >= MAX_GPUS) continue;
            parse_gpu_line(&s->g[i], gkey, grest ? grest : "");
        }
    }
}

/* Called with the lock held: make `st` match the state file (defaults when there is none). */
static void refresh(void)
{
    struct stat now;
    int have = state_path[0] && stat(state_path, &now) == 0;
    if (loaded && have && now.st_ino == last_stat.st_ino && now.st_size == last_stat.st_size &&
        now.st_mtim.tv_sec == last_stat.st_mtim.tv_sec && now.st_mtim.tv_nsec == last_stat.st_mtim.tv_nsec)
        return;
    if (loaded && !have && last_stat.st_ino == 0)
        return;
    static struct state fresh;
    set_defaults(&fresh);
    if (have) {
        FILE *fh = fopen(state_path, "r");
        if (fh) { parse_state(&fresh, fh); fclose(fh); }
        last_stat = now;
    } else {
        memset(&last_stat, 0, sizeof(last_stat));
    }
    st = fresh;
    loaded = 1;
}

static void locate(void)
{
    const char *n = getenv("SLURMD_NODENAME");
    if (!n || !*n) n = getenv("SLURM_FT_FAKE_NODE");
    snprintf(node, sizeof(node), "%s", n ? n : "");
    const char *explicit = getenv("SLURM_FT_FAKE_NVML_STATE");
    const char *lab = getenv("SLURM_FT_LAB_DIR");
    if (explicit && *explicit) snprintf(state_path, sizeof(state_path), "%s", explicit);
    else if (lab && *lab && node[0]) snprintf(state_path, sizeof(state_path), "%s/nodes/%s/nvml.state", lab, node);
    else state_path[0] = 0;
    for (int i = 0; i < MAX_GPUS; i++) handles[i].index = i;
}

/* ---- library ------------------------------------------------------------------------------- */

EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    (void)flags;
    pthread_mutex_lock(&lock);
    if (init_count == 0) { locate(); loaded = 0; }
    refresh();
    nvmlReturn_t r = st.init_error;
    if (r == NVML_SUCCESS) init_count++;
    pthread_mutex_unlock(&lock);
    return r;
}
EXPORT nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
EXPORT nvmlReturn_t nvmlInit(void) { return nvmlInitWithFlags(0); }

EXPORT nvmlReturn_t nvmlShutdown(void)
{
    pthread_mutex_lock(&lock);
    nvmlReturn_t r = init_count > 0 ? (init_count--, NVML_SUCCESS) : NVML_ERROR_UNINITIALIZED;
    pthread_mutex_unlock(&lock);
    return r;
}

EXPORT const char *nvmlErrorString(nvmlReturn_t r)
{
    switch (r) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case 9: return "Driver Not Loaded";
    default: return "Unknown Error";
    }
}

static nvmlReturn_t copy_str(char *dst, unsigned int len, const char *src)
{
    if (!dst) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(src) + 1 > len) return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(dst, src, strlen(src) + 1);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *v, unsigned int len)
{
    if (!init_count) return NVML_ERROR_UNINITIALIZED;
    pthread_mutex_lock(&lock); refresh();
    nvmlReturn_t r = copy_str(v, len, st.driver);
    pthread_mutex_unlock(&lock);
    return r;
}

EXPORT nvmlReturn_t nvmlSystemGetNVMLVersion(char *v, unsigned int len)
{
    char buf[64];
    pthread_mutex_lock(&lock); refresh();
    snprintf(buf, sizeof(buf), "12.%s", st.driver);
    pthread_mutex_unlock(&lock);
    return copy_str(v, len, buf);
}

EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *v) { if (!v) return NVML_ERROR_INVALID_ARGUMENT; *v = 12040; return NVML_SUCCESS; }
EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v) { return nvmlSystemGetCudaDriverVersion(v); }

/* ---- devices ------------------------------------------------------------------------------- */

EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count)
{
    if (!init_count) return NVML_ERROR_UNINITIALIZED;
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    pthread_mutex_lock(&lock); refresh();
    *count = st.ngpus;
    pthread_mutex_unlock(&lock);
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int *count) { return nvmlDeviceGetCount_v2(count); }

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *dev)
{
    if (!init_count) return NVML_ERROR_UNINITIALIZED;
    if (!dev) return NVML_ERROR_INVALID_ARGUMENT;
    pthread_mutex_lock(&lock); refresh();
    int n = st.ngpus;
    pthread_mutex_unlock(&lock);
    if (i >= (unsigned int)n) return NVML_ERROR_INVALID_ARGUMENT;
    *dev = &handles[i];
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int i, nvmlDevice_t *dev) { return nvmlDeviceGetHandleByIndex_v2(i, dev); }

static nvmlReturn_t find_by(int by_pci, const char *key, nvmlDevice_t *dev)
{
    if (!init_count) return NVML_ERROR_UNINITIALIZED;
    if (!key || !dev) return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t r = NVML_ERROR_NOT_FOUND;
    pthread_mutex_lock(&lock); refresh();
    for (int i = 0; i < st.ngpus; i++) {
        const char *have = by_pci ? st.g[i].pci : st.g[i].uuid;
        /* PCI ids compare on their tail so 0000:18:00.0 matches 00000000:18:00.0 */
        size_t lh = strlen(have), lk = strlen(key);
        int match = by_pci ? (lk <= lh && !strcasecmp(have + lh - lk, key)) : !strcmp(have, key);
        if (match) {
            *dev = &handles[i];
            r = st.g[i].lost ? NVML_ERROR_GPU_IS_LOST : NVML_SUCCESS;
            break;
        }
    }
    pthread_mutex_unlock(&lock);
    return r;
}
EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *dev) { return find_by(0, uuid, dev); }
EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pci, nvmlDevice_t *dev) { return find_by(1, pci, dev); }
EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *pci, nvmlDevice_t *dev) { return find_by(1, pci, dev); }

/*
 * Every per-device query starts with GPU(): check the library and the handle, refresh the state,
 * take a private copy of this GPU (so the lock is not held while filling outputs), and fail with
 * GPU_IS_LOST for a lost GPU.
 */
static nvmlReturn_t get_gpu(nvmlDevice_t dev, struct gpu *out, int *nlinks)
{
    if (!init_count) return NVML_ERROR_UNINITIALIZED;
    if (!dev || dev < handles || dev >= handles + MAX_GPUS) return NVML_ERROR_INVALID_ARGUMENT;
    pthread_mutex_lock(&lock); refresh();
    int i = dev->index;
    nvmlReturn_t r = NVML_SUCCESS;
    if (i >= st.ngpus) r = NVML_ERROR_INVALID_ARGUMENT;
    else if (st.g[i].lost) r = NVML_ERROR_GPU_IS_LOST;
    else {
        *out = st.g[i];
        if (nlinks) *nlinks = st.nlinks;
    }
    pthread_mutex_unlock(&lock);
    if (r == NVML_SUCCESS && out->hang_ms) {     /* a hung driver call, outside the lock */
        struct timespec t = {out->hang_ms / 1000, (long)(out->hang_ms % 1000) * 1000000L};
        nanosleep(&t, NULL);
    }
    return r;
}
#define GPU(dev, var) struct gpu var; { nvmlReturn_t _r = get_gpu(dev, &var, NULL); if (_r) return _r; }
#define OUT(p) if (!(p)) return NVML_ERROR_INVALID_ARGUMENT

EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t dev, unsigned int *index)
{
    GPU(dev, g); OUT(index);
    *index = dev->index;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t dev, char *name, unsigned int len)
{
    GPU(dev, g);
    char buf[96];
    pthread_mutex_lock(&lock); snprintf(buf, sizeof(buf), "%s", st.name); pthread_mutex_unlock(&lock);
    return copy_str(name, len, buf);
}

EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t dev, char *uuid, unsigned int len) { GPU(dev, g); return copy_str(uuid, len, g.uuid); }

EXPORT nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t dev, char *serial, unsigned int len)
{
    GPU(dev, g);
    char buf[32];
    snprintf(buf, sizeof(buf), "16549220%05llu", fnv1a(g.uuid) % 100000);
    return copy_str(serial, len, buf);
}

static void pci_fields(const char *pci, unsigned int *dom, unsigned int *bus, unsigned int *devn)
{
    *dom = *bus = *devn = 0;
    sscanf(pci, "%x:%x:%x", dom, bus, devn);
}

EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t dev, nvmlPciInfo_t *pci)
{
    GPU(dev, g); OUT(pci);
    memset(pci, 0, sizeof(*pci));
    pci_fields(g.pci, &pci->domain, &pci->bus, &pci->device);
    snprintf(pci->busId, sizeof(pci->busId), "%s", g.pci);
    snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "%04x:%02x:%02x.0", pci->domain, pci->bus, pci->device);
    pci->pciDeviceId = 0x233010de;      /* H100 SXM5 */
    pci->pciSubSystemId = 0x16c110de;
    return NVML_SUCCESS;
}

static nvmlReturn_t pci_legacy(nvmlDevice_t dev, nvmlPciInfo_v2_t *pci)
{
    GPU(dev, g); OUT(pci);
    memset(pci, 0, sizeof(*pci));
    pci_fields(g.pci, &pci->domain, &pci->bus, &pci->device);
    snprintf(pci->busId, sizeof(pci->busId), "%04x:%02x:%02x.0", pci->domain, pci->bus, pci->device);
    pci->pciDeviceId = 0x233010de;
    pci->pciSubSystemId = 0x16c110de;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t dev, nvmlPciInfo_v2_t *pci) { return pci_legacy(dev, pci); }
EXPORT nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t dev, nvmlPciInfo_v2_t *pci) { return pci_legacy(dev, pci); }

EXPORT nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t dev, int *mode) { GPU(dev, g); OUT(mode); *mode = 1; return NVML_SUCCESS; }
EXPORT nvmlReturn_t nvmlDeviceGetPerformanceState(nvmlDevice_t dev, int *p) { GPU(dev, g); OUT(p); *p = 0; return NVML_SUCCESS; }

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t dev, nvmlMemory_t *m)
{
    GPU(dev, g); OUT(m);
    unsigned long long used = 0;
    for (int i = 0; i < g.nprocs; i++) used += g.procs[i].mem;
    m->total = MEM_TOTAL;
    m->used = used < MEM_TOTAL ? used : MEM_TOTAL;
    m->free = MEM_TOTAL - m->used;
    return NVML_SUCCESS;
}

/* ---- ECC, row remapping, retired pages ----------------------------------------------------- */

EXPORT nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t dev, int *current, int *pending)
{
    GPU(dev, g); OUT(current); OUT(pending);
    *current = *pending = 1;
    return NVML_SUCCESS;
}

/* The count now: the state's, plus the corrected errors a rate has added since it was set. */
static unsigned long long ecc_count(const struct gpu *g, int type, int counter)
{
    unsigned long long n = g->ecc[type][counter];
    if (type == 0 && g->sbe_rate > 0) {
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        double minutes = (now.tv_sec + now.tv_nsec / 1e9 - g->sbe_since) / 60.0;
        if (minutes > 0) n += (unsigned long long)(g->sbe_rate * minutes);
    }
    return n;
}

EXPORT nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t dev, int type, int counter, unsigned long long *count)
{
    GPU(dev, g); OUT(count);
    if (type < 0 || type > 1 || counter < 0 || counter > 1) return NVML_ERROR_INVALID_ARGUMENT;
    *count = ecc_count(&g, type, counter);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryErrorCounter(nvmlDevice_t dev, int type, int counter, int location,
                                                    unsigned long long *count)
{
    GPU(dev, g); OUT(count);
    if (type < 0 || type > 1 || counter < 0 || counter > 1) return NVML_ERROR_INVALID_ARGUMENT;
    switch (location) {
    case 2: *count = ecc_count(&g, type, counter); return NVML_SUCCESS;   /* DRAM: where injected errors live */
    case 0: case 1: case 3: case 7: *count = 0; return NVML_SUCCESS; /* L1, L2, register file, SRAM */
    default: return NVML_ERROR_NOT_SUPPORTED;                       /* texture, CBU: not on Hopper */
    }
}

EXPORT nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t dev, unsigned int *corr, unsigned int *unc,
                                              unsigned int *pending, unsigned int *failure)
{
    GPU(dev, g); OUT(corr); OUT(unc); OUT(pending); OUT(failure);
    *corr = g.remap[0]; *unc = g.remap[1]; *pending = g.remap[2]; *failure = g.remap[3];
    return NVML_SUCCESS;
}

/* Hopper uses row remapping, not page retirement: NVML answers NOT_SUPPORTED, and so do we. */
EXPORT nvmlReturn_t nvmlDeviceGetRetiredPages(nvmlDevice_t dev, int cause, unsigned int *count, unsigned long long *a)
{ GPU(dev, g); (void)cause; (void)count; (void)a; return NVML_ERROR_NOT_SUPPORTED; }
EXPORT nvmlReturn_t nvmlDeviceGetRetiredPages_v2(nvmlDevice_t dev, int cause, unsigned int *count,
                                                 unsigned long long *a, unsigned long long *t)
{ GPU(dev, g); (void)cause; (void)count; (void)a; (void)t; return NVML_ERROR_NOT_SUPPORTED; }
EXPORT nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t dev, int *pending)
{ GPU(dev, g); (void)pending; return NVML_ERROR_NOT_SUPPORTED; }

/* ---- NVLink -------------------------------------------------------------------------------- */

static nvmlReturn_t link_gpu(nvmlDevice_t dev, unsigned int link, struct gpu *g)
{
    int nlinks = 0;
    nvmlReturn_t r = get_gpu(dev, g, &nlinks);
    if (r) return r;
    if (nlinks == 0) return NVML_ERROR_NOT_SUPPORTED;      /* a PCIe card without NVLink */
    if (link >= (unsigned int)nlinks) return NVML_ERROR_INVALID_ARGUMENT;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t dev, unsigned int link, int *active)
{
    struct gpu g; nvmlReturn_t r = link_gpu(dev, link, &g);
    if (r) return r;
    OUT(active);
    *active = !g.link_down[link];
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetNvLinkErrorCounter(nvmlDevice_t dev, unsigned int link, int counter,
                                                    unsigned long long *value)
{
    struct gpu g; nvmlReturn_t r = link_gpu(dev, link, &g);
    if (r) return r;
    OUT(value);
    if (counter < 0 || counter > 4) return NVML_ERROR_INVALID_ARGUMENT;
    *value = g.link_err[link][counter];
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetNvLinkVersion(nvmlDevice_t dev, unsigned int link, unsigned int *v)
{
    struct gpu g; nvmlReturn_t r = link_gpu(dev, link, &g);
    if (r) return r;
    OUT(v);
    *v = 4;
    return NVML_SUCCESS;
}

/* ---- PCIe, clocks, thermals, power --------------------------------------------------------- */

EXPORT nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t dev, unsigned int *v) { GPU(dev, g); OUT(v); *v = g.pcie_gen; return NVML_SUCCESS; }
EXPORT nvmlReturn_t nvmlDeviceGetMaxPcieLinkGeneration(nvmlDevice_t dev, unsigned int *v) { GPU(dev, g); OUT(v); *v = 5; return NVML_SUCCESS; }
EXPORT nvmlReturn_t nvmlDeviceGetGpuMaxPcieLinkGeneration(nvmlDevice_t dev, unsigned int *v) { GPU(dev, g); OUT(v); *v = 5; return NVML_SUCCESS; }
EXPORT nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t dev, unsigned int *v) { GPU(dev, g); OUT(v); *v = g.pcie_width; return NVML_SUCCESS; }
EXPORT nvmlReturn_t nvmlDeviceGetMaxPcieLinkWidth(nvmlDevice_t dev, unsigned int *v) { GPU(dev, g); OUT(v); *v = 16; return NVML_SUCCESS; }
EXPORT nvmlReturn_t nvmlDeviceGetPcieReplayCounter(nvmlDevice_t dev, unsigned int *v) { GPU(dev, g); OUT(v); *v = 0; return NVML_SUCCESS; }

EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t dev, unsigned long long *v) { GPU(dev, g); OUT(v); *v = g.clock_events; return NVML_SUCCESS; }
EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t dev, unsigned long long *v) { return nvmlDeviceGetCurrentClocksEventReasons(dev, v); }
EXPORT nvmlReturn_t nvmlDeviceGetSupportedClocksEventReasons(nvmlDevice_t dev, unsigned long long *v) { GPU(dev, g); OUT(v); *v = 0x1ff; return NVML_SUCCESS; }
EXPORT nvmlReturn_t nvmlDeviceGetSupportedClocksThrottleReasons(nvmlDevice_t dev, unsigned long long *v) { return nvmlDeviceGetSupportedClocksEventReasons(dev, v); }

/* clock types: 0 graphics, 1 SM, 2 memory, 3 video */
static const unsigned int max_clock[4] = {SM_MAX_MHZ, SM_MAX_MHZ, 2619, 1755};

EXPORT nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t dev, int type, unsigned int *mhz)
{
    GPU(dev, g); OUT(mhz);
    if (type < 0 || type > 3) return NVML_ERROR_INVALID_ARGUMENT;
    *mhz = max_clock[type];
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t dev, int type, unsigned int *mhz)
{
    GPU(dev, g); OUT(mhz);
    if (type < 0 || type > 3) return NVML_ERROR_INVALID_ARGUMENT;
    *mhz = type <= 1 ? (unsigned int)(max_clock[type] * g.slow + 0.5) : max_clock[type];
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t dev, int sensor, unsigned int *t)
{
    GPU(dev, g); OUT(t);
    if (sensor != 0) return NVML_ERROR_INVALID_ARGUMENT;
    *t = g.temp;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetTemperatureV(nvmlDevice_t dev, nvmlTemperature_t *t)
{
    GPU(dev, g); OUT(t);
    if (t->sensorType != 0) return NVML_ERROR_INVALID_ARGUMENT;
    t->temperature = (int)g.temp;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetTemperatureThreshold(nvmlDevice_t dev, int which, unsigned int *t)
{
    static const unsigned int thresholds[4] = {92, 89, 95, 87};   /* shutdown, slowdown, mem max, gpu max */
    GPU(dev, g); OUT(t);
    if (which < 0 || which > 3) return NVML_ERROR_NOT_SUPPORTED;
    *t = thresholds[which];
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t dev, unsigned int *mw) { GPU(dev, g); OUT(mw); *mw = g.power_mw; return NVML_SUCCESS; }
EXPORT nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t dev, unsigned int *mw) { GPU(dev, g); OUT(mw); *mw = 700000; return NVML_SUCCESS; }

/* ---- field values: only the GPU recovery action; every other field answers NOT_SUPPORTED ------ */

#define FI_DEV_GET_GPU_RECOVERY_ACTION 230

EXPORT nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t dev, int count, nvmlFieldValue_t *values)
{
    GPU(dev, g);
    if (count < 0 || (count > 0 && !values)) return NVML_ERROR_INVALID_ARGUMENT;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    for (int i = 0; i < count; i++) {
        nvmlFieldValue_t *v = &values[i];
        v->timestamp = (long long)now.tv_sec * 1000000 + now.tv_nsec / 1000;
        v->latencyUsec = 0;
        memset(&v->value, 0, sizeof(v->value));
        if (v->fieldId == FI_DEV_GET_GPU_RECOVERY_ACTION) {
            v->valueType = 1;                   /* NVML_VALUE_TYPE_UNSIGNED_INT */
            v->nvmlReturn = NVML_SUCCESS;
            v->value.uiVal = g.recovery_action;
        } else {
            v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        }
    }
    return NVML_SUCCESS;
}

/* ---- processes ----------------------------------------------------------------------------- */

static nvmlReturn_t procs(nvmlDevice_t dev, unsigned int *count, nvmlProcessInfo_t *infos)
{
    GPU(dev, g); OUT(count);
    unsigned int have = *count;
    *count = g.nprocs;
    if (g.nprocs == 0) return NVML_SUCCESS;
    if (!infos || have < (unsigned int)g.nprocs) return NVML_ERROR_INSUFFICIENT_SIZE;
    for (int i = 0; i < g.nprocs; i++) {
        infos[i].pid = g.procs[i].pid;
        infos[i].usedGpuMemory = g.procs[i].mem;
        infos[i].gpuInstanceId = infos[i].computeInstanceId = 0xFFFFFFFF;
    }
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int *c, nvmlProcessInfo_t *p) { return procs(d, c, p); }
EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t d, unsigned int *c, nvmlProcessInfo_t *p) { return procs(d, c, p); }
EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t d, unsigned int *c, nvmlProcessInfo_t *p)
{ GPU(d, g); OUT(c); (void)p; *c = 0; return NVML_SUCCESS; }

/* ---- events -------------------------------------------------------------------------------- */

EXPORT nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set)
{
    if (!init_count) return NVML_ERROR_UNINITIALIZED;
    if (!set) return NVML_ERROR_INVALID_ARGUMENT;
    *set = calloc(1, sizeof(**set));
    return *set ? NVML_SUCCESS : NVML_ERROR_UNKNOWN;
}

EXPORT nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t dev, unsigned long long *types)
{
    GPU(dev, g); OUT(types);
    *types = EV_SUPPORTED;
    return NVML_SUCCESS;
}

static unsigned long long newest_seq(const struct gpu *g)
{
    unsigned long long m = 0;
    for (int i = 0; i < g->nxids; i++) if (g->xids[i].seq > m) m = g->xids[i].seq;
    return m;
}

EXPORT nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t dev, unsigned long long types, nvmlEventSet_t set)
{
    GPU(dev, g);
    if (!set) return NVML_ERROR_INVALID_ARGUMENT;
    if (types & ~EV_SUPPORTED) return NVML_ERROR_NOT_SUPPORTED;
    pthread_mutex_lock(&lock);
    set->mask[dev->index] |= types;
    set->last_seq[dev->index] = newest_seq(&g);     /* only Xids logged from now on */
    pthread_mutex_unlock(&lock);
    return NVML_SUCCESS;
}

/* The oldest Xid this set has not seen, on any registered GPU; 0 when none. Lock held. */
static int next_event(nvmlEventSet_t set, nvmlEventData_t *data)
{
    int best_gpu = -1;
    struct xid best = {0, 0};
    for (int i = 0; i < st.ngpus; i++) {
        if (!(set->mask[i] & EV_XID)) continue;
        for (int k = 0; k < st.g[i].nxids; k++) {
            const struct xid *x = &st.g[i].xids[k];
            if (x->seq > set->last_seq[i] && (best_gpu < 0 || x->seq < best.seq)) { best = *x; best_gpu = i; }
        }
    }
    if (best_gpu < 0) return 0;
    set->last_seq[best_gpu] = best.seq;
    memset(data, 0, sizeof(*data));
    data->device = &handles[best_gpu];
    data->eventType = EV_XID;
    data->eventData = best.code;
    data->gpuInstanceId = data->computeInstanceId = 0xFFFFFFFF;
    return 1;
}

EXPORT nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeout_ms)
{
    if (!init_count) return NVML_ERROR_UNINITIALIZED;
    if (!set || !data) return NVML_ERROR_INVALID_ARGUMENT;
    struct timespec start, now, nap = {0, 5 * 1000 * 1000};   /* poll the state file every 5 ms */
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        pthread_mutex_lock(&lock); refresh();
        int got = next_event(set, data);
        pthread_mutex_unlock(&lock);
        if (got) return NVML_SUCCESS;
        clock_gettime(CLOCK_MONOTONIC, &now);
        long elapsed_ms = (now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000;
        if (elapsed_ms >= (long)timeout_ms) return NVML_ERROR_TIMEOUT;
        nanosleep(&nap, NULL);
    }
}
EXPORT nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeout_ms) { return nvmlEventSetWait_v2(set, data, timeout_ms); }

EXPORT nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set)
{
    if (!set) return NVML_ERROR_INVALID_ARGUMENT;
    free(set);
    return NVML_SUCCESS;
}
