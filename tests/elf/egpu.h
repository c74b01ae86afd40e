/* What the C probes of tests/elf need of egpu, by hand: the context of an access to global
 * memory (MemAccessCtx, 88 bytes; the fields used here), helper declarations as libbpf's
 * bpf_helper_defs.h makes them, and libbpf's map-definition macros. */
#ifndef EGPU_TEST_H
#define EGPU_TEST_H

typedef unsigned char __u8;
typedef unsigned int __u32;
typedef unsigned long long __u64;

#define SEC(name) __attribute__((section(name), used))
#define __uint(name, val) int (*name)[val]
#define __type(name, val) typeof(val) *name

struct mem_access_ctx {
    __u64 addr;
    __u64 kernel_id;
    __u32 size;
    __u32 site;
    __u32 thread[3];
    __u32 block[3];
    __u32 warp;
    __u32 lane;
    __u32 sm;
    __u32 is_store;
    __u64 launch_id;
    __u32 device;
    __u32 class_;
    __u32 op;
    __u32 fetch;
};

enum { BPF_MAP_TYPE_HASH = 1, BPF_MAP_TYPE_ARRAY = 2, BPF_MAP_TYPE_RINGBUF = 27 };
enum { BPF_ANY = 0, BPF_NOEXIST = 1 };

struct bpf_map_def {
    __u32 type;
    __u32 key_size;
    __u32 value_size;
    __u32 max_entries;
    __u32 map_flags;
};

static void *(*bpf_map_lookup_elem)(void *map, const void *key) = (void *)1;
static long (*bpf_map_update_elem)(void *map, const void *key, const void *value, __u64 flags) = (void *)2;
static long (*bpf_ringbuf_output)(void *ringbuf, void *data, __u64 size, __u64 flags) = (void *)130;

#endif
