// The layout egpu-preload's CUPTI reader (src/device/cupti.rs) relies on, as this machine's
// CUPTI headers declare it: one `name value` per line, in the order of that module's
// `EXPECTED` table, so the two can be compared with `diff`. CUPTI_API_VERSION goes to stderr.
//
//   gcc -I/usr/local/cuda/include -I/usr/local/cuda/extras/CUPTI/include cupti_layout.c -o cupti_layout
//   ./cupti_layout > layout.txt
//
// CUpti_ActivityUnifiedMemoryCounter3 is CUDA 12.8's and later; with older headers, build with
// -DCOUNTER2 to print CUpti_ActivityUnifiedMemoryCounter2 instead (the same fields up to `pad`,
// 64 bytes: the module decodes only the first 48, which both share).
#include <stddef.h>
#include <stdio.h>

#include <cupti_activity.h>
#include <cupti_version.h>

#ifdef COUNTER2
typedef CUpti_ActivityUnifiedMemoryCounter2 Record;
#define RECORD "CUpti_ActivityUnifiedMemoryCounter2"
#else
typedef CUpti_ActivityUnifiedMemoryCounter3 Record;
#define RECORD "CUpti_ActivityUnifiedMemoryCounter3"
#endif
typedef CUpti_ActivityUnifiedMemoryCounterConfig Config;
#define CONFIG "CUpti_ActivityUnifiedMemoryCounterConfig"

static void show(const char *type, const char *name, unsigned long long value) {
    if (type)
        printf("%s.%s %llu\n", type, name, value);
    else
        printf("%s %llu\n", name, value);
}

#define FIELD(s, name, f) show(name, #f, (unsigned long long)offsetof(s, f))
#define VALUE(v) show(NULL, #v, (unsigned long long)(v))

int main(void) {
    fprintf(stderr, "CUPTI_API_VERSION %u\n", (unsigned)CUPTI_API_VERSION);

    show(RECORD, "sizeof", sizeof(Record));
    FIELD(Record, RECORD, kind);
    FIELD(Record, RECORD, counterKind);
    FIELD(Record, RECORD, value);
    FIELD(Record, RECORD, start);
    FIELD(Record, RECORD, end);
    FIELD(Record, RECORD, address);
    FIELD(Record, RECORD, srcId);
    FIELD(Record, RECORD, dstId);
    FIELD(Record, RECORD, streamId);
    FIELD(Record, RECORD, processId);
    FIELD(Record, RECORD, flags);
    FIELD(Record, RECORD, pad);
#ifndef COUNTER2
    FIELD(Record, RECORD, processors);
#endif

    show(CONFIG, "sizeof", sizeof(Config));
    FIELD(Config, CONFIG, scope);
    FIELD(Config, CONFIG, kind);
    FIELD(Config, CONFIG, deviceId);
    FIELD(Config, CONFIG, enable);

    VALUE(CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER);
    VALUE(CUPTI_SUCCESS);
    VALUE(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    VALUE(CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_SCOPE_PROCESS_SINGLE_DEVICE);
    VALUE(CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_HTOD);
    VALUE(CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_DTOH);
    VALUE(CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_CPU_PAGE_FAULT_COUNT);
    VALUE(CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_GPU_PAGE_FAULT);
    VALUE(CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_THRASHING);
    VALUE(CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_THROTTLING);
    VALUE(CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_REMOTE_MAP);
    VALUE(CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_DTOD);
    return 0;
}
