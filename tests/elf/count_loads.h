/* The program of counts_btf.c and counts_legacy.c, whose map BYTES each declares its way. */
SEC("egpu/device/global_load")
int count_loads(struct egpu_mem_access_ctx *ctx) {
    __u64 kernel = ctx->kernel_id, zero = 0;
    __u64 *v = bpf_map_lookup_elem(&BYTES, &kernel);
    if (!v) {
        bpf_map_update_elem(&BYTES, &kernel, &zero, BPF_NOEXIST);
        v = bpf_map_lookup_elem(&BYTES, &kernel);
        if (!v) return 0;
    }
    __sync_fetch_and_add(v, ctx->size);
    return 0;
}
