/* egpu's C ABI from C: a probe from assembly and one from bytecode, verified (and an unsafe one
 * refused, with the instruction named), run on the CPU VM over a map this program made, a host
 * probe fired on kernel launches this program describes, a pack's probe, a PTX module
 * instrumented, and the errors bad arguments get. Prints `c example: ok`, or what went wrong
 * and exits 1.
 *
 * Build (egpu's tests do, with the static and with the shared library):
 *   cargo build -p egpu-capi
 *   cc -Iegpu-capi/include -Iinclude examples/c/egpu_example.c target/debug/libegpu_capi.a \
 *      -lpthread -ldl -lm -o egpu_example */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "egpu.h"      /* the contexts of host events: struct egpu_launch_ctx, ... */
#include "egpu_capi.h" /* the ABI */

static int failures;

/* Fails the example with what went wrong, and the library's message. */
#define CHECK(cond, what)                                                                        \
    do {                                                                                         \
        if (!(cond)) {                                                                           \
            fprintf(stderr, "c example: %s:%d: %s (last error: %s)\n", __FILE__, __LINE__, what, \
                    egpu_last_error());                                                          \
            failures++;                                                                          \
            goto done;                                                                           \
        }                                                                                        \
    } while (0)

/* A call that must succeed. */
#define OK(call) CHECK((call) == EGPU_OK, #call)

/* counts[ctx.key] += ctx.amount, on a context of two 32-bit words; returns the amount. */
static const char *COUNT =
    "ldxw %r6, [%r1+4]\n"
    "ldxw %r2, [%r1+0]\n"
    "stxw [%r10-4], %r2\n"
    "lddw %r1, map[0]\n"
    "mov %r2, %r10\n"
    "add %r2, -4\n"
    "call 1\n"
    "jeq %r0, 0, +1\n"
    "lock add [%r0+0], %r6\n"
    "mov %r0, %r6\n"
    "exit\n";

/* The same, without the null check the verifier insists on: refused at instruction 7. */
static const char *UNSAFE =
    "ldxw %r2, [%r1+0]\n"
    "stxw [%r10-4], %r2\n"
    "lddw %r1, map[0]\n"
    "mov %r2, %r10\n"
    "add %r2, -4\n"
    "call 1\n"
    "ldxdw %r0, [%r0+0]\n"
    "exit\n";

/* On each launch: blocks[kernel_id] += grid.x * grid.y (inserted the first time). */
static const char *BLOCKS =
    "ldxdw %r6, [%r1+0]\n"
    "ldxw %r7, [%r1+40]\n"
    "ldxw %r8, [%r1+44]\n"
    "mul %r7, %r8\n"
    "stxdw [%r10-8], %r6\n"
    "lddw %r1, map[0]\n"
    "mov %r2, %r10\n"
    "add %r2, -8\n"
    "call 1\n"
    "jeq %r0, 0, +3\n"
    "lock add [%r0+0], %r7\n"
    "mov %r0, 0\n"
    "exit\n"
    "stxdw [%r10-16], %r7\n"
    "lddw %r1, map[0]\n"
    "mov %r2, %r10\n"
    "add %r2, -8\n"
    "mov %r3, %r10\n"
    "add %r3, -16\n"
    "mov %r4, 0\n"
    "call 2\n"
    "mov %r0, 0\n"
    "exit\n";

/* `mov %r0, 42` / `exit` as bytecode: little-endian 8-byte instructions. */
static const uint8_t ANSWER[] = {0xb7, 0, 0, 0, 42, 0, 0, 0, 0x95, 0, 0, 0, 0, 0, 0, 0};

/* A pack's text: the same program, as `egpu::export_probes!` would carry it. */
static const char *PACK =
    "egpu-probes 2\n"
    "probe answer user(8)\n"
    "code b7000000" "2a000000" "95000000" "00000000\n"
    "end\n";

/* A device probe: every global load's bytes added to bytes[0]. */
static const char *LOADED_BYTES =
    "ldxw %r6, [%r1+16]\n"
    "mov %r2, 0\n"
    "stxw [%r10-4], %r2\n"
    "lddw %r1, map[0]\n"
    "mov %r2, %r10\n"
    "add %r2, -4\n"
    "call 1\n"
    "jeq %r0, 0, +1\n"
    "lock add [%r0+0], %r6\n"
    "mov %r0, 0\n"
    "exit\n";

/* saxpy, as nvcc writes it: two global loads and a store in a grid-stride loop. */
static const char *SAXPY =
    ".version 9.0\n"
    ".target sm_90\n"
    ".address_size 64\n"
    ".visible .entry saxpy(.param .u32 n, .param .f32 a, .param .u64 x, .param .u64 y)\n"
    "{\n"
    "\t.reg .pred %p<3>;\n"
    "\t.reg .f32 %f<5>;\n"
    "\t.reg .b32 %r<11>;\n"
    "\t.reg .b64 %rd<8>;\n"
    "\tld.param.u32 %r6, [n];\n"
    "\tld.param.f32 %f1, [a];\n"
    "\tld.param.u64 %rd3, [x];\n"
    "\tld.param.u64 %rd4, [y];\n"
    "\tmov.u32 %r1, %ntid.x;\n"
    "\tmov.u32 %r7, %ctaid.x;\n"
    "\tmov.u32 %r8, %tid.x;\n"
    "\tmad.lo.s32 %r10, %r7, %r1, %r8;\n"
    "\tsetp.ge.s32 %p1, %r10, %r6;\n"
    "\t@%p1 bra $L__BB0_3;\n"
    "\tmov.u32 %r9, %nctaid.x;\n"
    "\tmul.lo.s32 %r3, %r1, %r9;\n"
    "\tcvta.to.global.u64 %rd1, %rd3;\n"
    "\tcvta.to.global.u64 %rd2, %rd4;\n"
    "$L__BB0_2:\n"
    "\tmul.wide.s32 %rd5, %r10, 4;\n"
    "\tadd.s64 %rd6, %rd1, %rd5;\n"
    "\tld.global.nc.f32 %f2, [%rd6];\n"
    "\tadd.s64 %rd7, %rd2, %rd5;\n"
    "\tld.global.f32 %f3, [%rd7];\n"
    "\tfma.rn.f32 %f4, %f2, %f1, %f3;\n"
    "\tst.global.f32 [%rd7], %f4;\n"
    "\tadd.s32 %r10, %r10, %r3;\n"
    "\tsetp.lt.s32 %p2, %r10, %r6;\n"
    "\t@%p2 bra $L__BB0_2;\n"
    "$L__BB0_3:\n"
    "\tret;\n"
    "}\n";

static int run_on_the_vm(void) {
    egpu_program *count = NULL, *unsafe_program = NULL, *answer = NULL;
    egpu_map *counts = NULL;
    egpu_vm *vm = NULL;

    /* ANCHOR: vm */
    /* A program from assembly, with its attach point and map table as text. */
    egpu_program_desc desc = {sizeof desc, "count", "user(8)", "counts=hash:4:8:64"};
    OK(egpu_program_from_assembly(&desc, COUNT, &count));
    OK(egpu_program_verify(count));
    egpu_program_info info = {.size = sizeof info};
    OK(egpu_program_get_info(count, &info));
    CHECK(info.verified == 1 && info.maps == 1 && info.context_size == 8, "count's info");

    /* The verifier refuses the unsafe one, and says where. */
    desc.name = "unsafe";
    OK(egpu_program_from_assembly(&desc, UNSAFE, &unsafe_program));
    CHECK(egpu_program_verify(unsafe_program) == EGPU_VERIFY, "the unsafe program is refused");
    CHECK(strstr(egpu_last_error(), "instruction 7 `ldxdw %r0, [%r0]`") != NULL,
          "the refusal names the instruction");
    printf("refused: %.*s\n", (int)strcspn(egpu_last_error(), "\n"), egpu_last_error());

    /* A map made here, bound to the program's table, and filled by its runs. */
    egpu_map_desc map = {.size = sizeof map, .kind = EGPU_MAP_HASH, .key_size = 4, .value_size = 8, .capacity = 64};
    OK(egpu_map_create(&map, &counts));
    for (uint32_t key = 1; key <= 3; key++) {
        uint64_t zero = 0;
        OK(egpu_map_update(counts, (const uint8_t *)&key, 4, (const uint8_t *)&zero, 8,
                           EGPU_UPDATE_NOEXIST));
    }
    const egpu_map *bound[] = {counts};
    OK(egpu_vm_new(count, bound, 1, &vm));
    uint32_t contexts[][2] = {{1, 10}, {2, 20}, {1, 5}, {3, 7}, {9, 1}};
    for (size_t i = 0; i < sizeof contexts / sizeof contexts[0]; i++) {
        uint64_t r0 = 0;
        OK(egpu_vm_run(vm, (uint8_t *)contexts[i], 8, &r0));
        CHECK(r0 == contexts[i][1], "the run returns the amount");
    }
    uint32_t want[][2] = {{1, 15}, {2, 20}, {3, 7}};
    for (size_t i = 0; i < 3; i++) {
        uint64_t value = 0;
        OK(egpu_map_lookup(counts, (const uint8_t *)&want[i][0], 4, (uint8_t *)&value, 8));
        CHECK(value == want[i][1], "counts holds what the runs added");
    }
    uint32_t absent = 9;
    uint64_t value = 0;
    CHECK(egpu_map_lookup(counts, (const uint8_t *)&absent, 4, (uint8_t *)&value, 8) ==
              EGPU_NOT_FOUND,
          "a key the program did not insert is not there");
    size_t n = 0;
    CHECK(egpu_map_keys(counts, NULL, 0, &n) == EGPU_BUFFER_TOO_SMALL && n == 3, "three keys");
    uint32_t keys[3];
    OK(egpu_map_keys(counts, (uint8_t *)keys, sizeof keys, &n));
    printf("counts: 1 -> 15, 2 -> 20, 3 -> 7 (%zu keys)\n", n);
    /* ANCHOR_END: vm */

    /* A program from bytecode, and from a pack's text. */
    desc.name = "answer";
    desc.maps = NULL;
    OK(egpu_program_from_bytecode(&desc, ANSWER, sizeof ANSWER, &answer));
    egpu_vm *answer_vm = NULL;
    OK(egpu_vm_new(answer, NULL, 0, &answer_vm));
    uint64_t ctx = 0, r0 = 0;
    CHECK(egpu_vm_run(answer_vm, (uint8_t *)&ctx, 8, &r0) == EGPU_OK && r0 == 42, "bytecode");
    egpu_vm_free(answer_vm);
    egpu_object *object = NULL;
    OK(egpu_object_from_pack((const uint8_t *)PACK, strlen(PACK), &object));
    egpu_program *packed = NULL;
    OK(egpu_object_find(object, "answer", &packed));
    egpu_object_free(object);
    OK(egpu_vm_new(packed, NULL, 0, &answer_vm));
    CHECK(egpu_vm_run(answer_vm, (uint8_t *)&ctx, 8, &r0) == EGPU_OK && r0 == 42, "pack");
    egpu_vm_free(answer_vm);
    egpu_program_free(packed);

done:
    egpu_vm_free(vm);
    egpu_map_free(counts);
    egpu_program_free(count);
    egpu_program_free(unsafe_program);
    egpu_program_free(answer);
    return failures == 0;
}

static int fire_host_events(void) {
    egpu_program *blocks = NULL;
    egpu_map *map = NULL;
    egpu_probes *probes = NULL;

    /* ANCHOR: host */
    egpu_program_desc desc = {sizeof desc, "blocks", "host::launch", "blocks=hash:8:8:64"};
    OK(egpu_program_from_assembly(&desc, BLOCKS, &blocks));
    OK(egpu_map_create_for(blocks, 0, NULL, &map));
    OK(egpu_probes_new(&probes));
    const egpu_map *bound[] = {map};
    uint64_t id = 0;
    OK(egpu_probes_attach(probes, blocks, bound, 1, &id));

    /* Three launches of kernel 7 and one of kernel 8, described as the driver would see them. */
    CHECK(egpu_context_size(EGPU_EVENT_LAUNCH) == sizeof(struct egpu_launch_ctx), "ctx size");
    unsigned grids[][3] = {{7, 4, 2}, {7, 8, 1}, {8, 16, 16}, {7, 1, 1}};
    for (size_t i = 0; i < 4; i++) {
        struct egpu_launch_ctx launch;
        memset(&launch, 0, sizeof launch);
        launch.kernel_id = grids[i][0];
        launch.grid[0] = grids[i][1];
        launch.grid[1] = grids[i][2];
        launch.grid[2] = 1;
        launch.block[0] = 256;
        OK(egpu_probes_fire(probes, EGPU_EVENT_LAUNCH, EGPU_PHASE_ENTER, (const uint8_t *)&launch,
                            sizeof launch));
    }
    uint64_t kernel = 7, total = 0;
    OK(egpu_map_lookup(map, (const uint8_t *)&kernel, 8, (uint8_t *)&total, 8));
    CHECK(total == 8 + 8 + 1, "kernel 7's blocks");
    kernel = 8;
    OK(egpu_map_lookup(map, (const uint8_t *)&kernel, 8, (uint8_t *)&total, 8));
    CHECK(total == 256, "kernel 8's blocks");
    /* ANCHOR_END: host */
    egpu_probes_health health = {.size = sizeof health};
    OK(egpu_probes_get_health(probes, &health));
    CHECK(health.runs == 4 && health.faults == 0, "four runs");
    printf("launches: kernel 7 -> 17 blocks, kernel 8 -> 256 blocks (%" PRIu64 " probe runs)\n",
           health.runs);

    /* After a detach, launches run nothing. */
    OK(egpu_probes_detach(probes, id));
    struct egpu_launch_ctx launch;
    memset(&launch, 0, sizeof launch);
    launch.kernel_id = 8;
    launch.grid[0] = launch.grid[1] = 1;
    OK(egpu_probes_fire(probes, EGPU_EVENT_LAUNCH, EGPU_PHASE_ENTER, (const uint8_t *)&launch,
                        sizeof launch));
    OK(egpu_map_lookup(map, (const uint8_t *)&kernel, 8, (uint8_t *)&total, 8));
    CHECK(total == 256, "nothing ran after the detach");

done:
    egpu_probes_free(probes);
    egpu_map_free(map);
    egpu_program_free(blocks);
    return failures == 0;
}

static int instrument_ptx(void) {
    egpu_program *probe = NULL;
    egpu_ptx_result *result = NULL;

    egpu_program_desc desc = {sizeof desc, "loaded_bytes", "device::global_load",
                              "bytes=array:4:8:1"};
    OK(egpu_program_from_assembly(&desc, LOADED_BYTES, &probe));
    /* Where the map would be in GPU memory (the caller allocates and copies it). */
    egpu_device_map map = {sizeof map, 0x7f0000000000ull, EGPU_MAP_ARRAY, 4, 8, 1, 0, 1, 0};
    egpu_device_probe probes[] = {{sizeof probes[0], probe, &map, 1}};
    egpu_ptx_request request = {.size = sizeof request, .ptx = SAXPY, .probes = probes, .probe_count = 1};
    OK(egpu_ptx_instrument(&request, &result));
    egpu_ptx_summary summary = {.size = sizeof summary};
    OK(egpu_ptx_result_summary(result, &summary));
    CHECK(summary.sites == 2 && summary.memory_instructions == 3 && summary.observed == 3,
          "two loads instrumented, three accesses observed");
    for (size_t i = 0; i < summary.sites; i++) {
        egpu_ptx_site site = {.size = sizeof site};
        OK(egpu_ptx_result_site(result, i, &site));
        CHECK(site.event == EGPU_DEVICE_GLOBAL_LOAD && site.bytes == 4, "a 4-byte load");
        CHECK(strcmp(site.function, "saxpy") == 0, "in saxpy");
    }
    const char *ptx = egpu_ptx_result_text(result);
    CHECK(ptx != NULL && strstr(ptx, "ld.global.nc.f32 %f2, [%rd6];") != NULL,
          "the original instructions stay");
    printf("ptx: %zu sites, %zu of %zu global memory instructions observed, %zu bytes of PTX\n",
           summary.sites, summary.observed, summary.memory_instructions, strlen(ptx));

done:
    egpu_ptx_result_free(result);
    egpu_program_free(probe);
    return failures == 0;
}

static int bad_arguments(void) {
    egpu_program *program = NULL;
    egpu_map *map = NULL;

    /* A struct whose size is not set, or too small: an error code, not a crash. */
    egpu_program_desc small = {sizeof small - 8, "count", "user(8)", NULL};
    CHECK(egpu_program_from_assembly(&small, COUNT, &program) == EGPU_BAD_SIZE, "bad size");
    CHECK(strstr(egpu_last_error(), "sizeof(egpu_program_desc)") != NULL, "says the size");
    egpu_map_desc unset = {.size = 0, .kind = EGPU_MAP_HASH, .key_size = 4, .value_size = 8, .capacity = 64};
    CHECK(egpu_map_create(&unset, &map) == EGPU_BAD_SIZE, "size 0");
    /* Null pointers. */
    CHECK(egpu_program_from_assembly(NULL, COUNT, &program) == EGPU_NULL_ARGUMENT, "null desc");
    egpu_program_desc desc = {sizeof desc, "count", "user(8)", "counts=hash:4:8:64"};
    CHECK(egpu_program_from_assembly(&desc, NULL, &program) == EGPU_NULL_ARGUMENT, "null text");
    CHECK(egpu_program_from_assembly(&desc, COUNT, NULL) == EGPU_NULL_ARGUMENT, "null out");
    CHECK(egpu_vm_run(NULL, NULL, 0, NULL) == EGPU_NULL_ARGUMENT, "null VM");
    CHECK(egpu_map_lookup(NULL, NULL, 0, NULL, 0) == EGPU_NULL_ARGUMENT, "null map");
    egpu_map_free(NULL);
    egpu_program_free(NULL);
    /* Garbage where a program is. */
    uint8_t garbage[24] = {0xff, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13};
    CHECK(egpu_program_from_bytecode(&desc, garbage, 13, &program) == EGPU_BAD_PROGRAM, "13 B");
    egpu_object *object = NULL;
    CHECK(egpu_object_from_elf(garbage, sizeof garbage, &object) == EGPU_BAD_PROGRAM, "not ELF");
    CHECK(egpu_object_from_pack(garbage, sizeof garbage, &object) == EGPU_BAD_PROGRAM, "no pack");
    /* Out of range: a kind, an attach point, a handle of another kind. */
    egpu_map_desc odd = {.size = sizeof odd, .kind = 3, .key_size = 4, .value_size = 8, .capacity = 64};
    CHECK(egpu_map_create(&odd, &map) == EGPU_BAD_ARGUMENT, "map kind 3");
    desc.attach = "host::nothing";
    CHECK(egpu_program_from_assembly(&desc, COUNT, &program) == EGPU_BAD_ARGUMENT, "attach");
    desc.attach = "user(8)";
    OK(egpu_program_from_assembly(&desc, COUNT, &program));
    egpu_map_free((egpu_map *)program); /* refused: the handle is a program's */
    CHECK(strstr(egpu_last_error(), "egpu_program") != NULL, "a program is not a map");
    printf("bad arguments: error codes, no crash\n");

done:
    egpu_program_free(program);
    egpu_map_free(map);
    return failures == 0;
}

int main(void) {
    if (egpu_abi_version() != EGPU_ABI_VERSION) {
        fprintf(stderr, "c example: the library's ABI is %u, the header's %u\n",
                egpu_abi_version(), EGPU_ABI_VERSION);
        return 1;
    }
    printf("egpu %s, ABI %u\n", egpu_version(), egpu_abi_version());
    int ok = run_on_the_vm() && fire_host_events() && instrument_ptx() && bad_arguments();
    if (!ok) {
        fprintf(stderr, "c example: %d failures\n", failures);
        return 1;
    }
    printf("c example: ok\n");
    return 0;
}
