/* The same as counts_btf.c, its map a legacy `struct bpf_map_def` in `maps`. */
#include <egpu.h>

struct bpf_map_def SEC("maps") BYTES = {
    .type = BPF_MAP_TYPE_HASH,
    .key_size = sizeof(__u64),
    .value_size = sizeof(__u64),
    .max_entries = 64,
};

#include "count_loads.h"
