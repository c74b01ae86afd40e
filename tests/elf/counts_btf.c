/* Bytes read per kernel, in a BTF-defined hash map. */
#include <egpu.h>

struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, 64);
    __type(key, __u64);
    __type(value, __u64);
} BYTES SEC(".maps");

#include "count_loads.h"
