//! Tensor maps under the preloaded library, without a GPU: a program (`tests/fixture/
//! tensor_maps.c`) encodes maps through the stand-in driver's encoders (`tests/fixture/
//! fake_cuda.c`, which write what they were given into the map), found by `dlsym` and by
//! `cuGetProcAddress`. The program must get what the driver gave, byte for byte; the library must
//! count each map, and keep each box's bytes in the table in "device memory" of the context that
//! loaded an instrumented module, as a kernel would look them up: at once, except during a
//! stream capture (then right after it).

mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use egpu::device::inject::tensor_maps::{BoxTable, MAP_BYTES, SLOT_BYTES};
use egpu::ebpf::KernelCtx;
use egpu::maps::Array;
use support::{build, preload_library, program};

/// Kernels entered: the pack's one device probe, so that modules are instrumented.
static ENTERED: Array<u64> = Array::with_len(1);

#[egpu::probe(device::kernel_entry)]
fn entered(_ctx: &KernelCtx) {
    ENTERED.fetch_add(0, 1);
}

/// What the program printed: each map's result and bytes, and the table's slots that are not
/// empty at each point it looked (none when there was no table).
#[derive(Debug, Default)]
struct Output {
    maps: BTreeMap<String, (i32, Vec<u8>)>,
    tables: BTreeMap<String, BTreeMap<usize, Vec<u8>>>,
    no_table: Vec<String>,
}

fn hex(text: &str) -> Vec<u8> {
    assert!(text.len().is_multiple_of(2), "{text}");
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("hex"))
        .collect()
}

fn parse(stdout: &str) -> Output {
    let mut out = Output::default();
    for line in stdout.lines() {
        let words: Vec<&str> = line.split(' ').collect();
        match words[..] {
            ["map", name, "result", result, bytes] => {
                let bytes = hex(bytes);
                assert_eq!(bytes.len(), MAP_BYTES, "{line}");
                out.maps.insert(name.into(), (result.parse().expect("a result"), bytes));
            }
            ["table", when, slot, bytes] => {
                let slots = out.tables.entry(when.into()).or_default();
                slots.insert(slot.parse().expect("a slot"), hex(bytes));
            }
            ["no", "table", when] => out.no_table.push(when.into()),
            _ => panic!("an unexpected line: {line}"),
        }
    }
    out
}

/// The program, under the library with a pack of device probes (`preload`) or not: what it
/// printed, and the library's summary.
fn run(dir: &Path, preload: bool) -> (Output, Option<String>) {
    let exe = program(dir, "tensor_maps");
    let ptx = dir.join("saxpy.ptx");
    std::fs::write(&ptx, include_str!("../../tests/ptx/saxpy.ptx")).expect("a module file");
    let mut command = Command::new(exe);
    command.arg(&ptx).env("LD_LIBRARY_PATH", dir).env_remove("LD_PRELOAD");
    if preload {
        let mut pack = egpu::pack::Pack::new();
        pack.add(entered::probe()).expect("the probe packs");
        let path = dir.join("entered.pack");
        std::fs::write(&path, pack.to_text()).expect("the pack file");
        command
            .env("LD_PRELOAD", preload_library())
            .env("EGPU_PROBES", path)
            .env("EGPU_SUMMARY", dir.join("summary"));
    }
    let out = command.output().expect("running the program");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let summary = std::fs::read_dir(dir)
        .expect("the directory")
        .filter_map(Result::ok)
        .find(|e| e.file_name().to_string_lossy().starts_with("summary."))
        .map(|e| std::fs::read_to_string(e.path()).expect("the summary"));
    (parse(&stdout), summary)
}

fn map(out: &Output, name: &str) -> [u8; MAP_BYTES] {
    let (_, bytes) = out.maps.get(name).unwrap_or_else(|| panic!("map {name}: {out:?}"));
    bytes.as_slice().try_into().expect("128 bytes")
}

/// The slots of `table` that are not empty, as the program prints them.
fn slots(table: &BoxTable) -> BTreeMap<usize, Vec<u8>> {
    table
        .to_bytes()
        .chunks(SLOT_BYTES)
        .enumerate()
        .filter(|(_, slot)| slot.iter().any(|&b| b != 0))
        .map(|(i, slot)| (i, slot.to_vec()))
        .collect()
}

/// The encoders, reached by `dlsym` and `cuGetProcAddress`, answer as the driver does, with the
/// maps it wrote; the summary counts the maps recorded (tiled, im2col, an address replaced, one
/// during a capture) and the one whose box's bytes are unknown (4-bit elements); the map the
/// driver refused is neither.
#[test]
fn the_encoders_answer_as_the_driver_does_and_each_map_is_counted() {
    let dir = build("tensor-maps-counted");
    let (alone, none) = run(&dir, false);
    assert!(none.is_none(), "no summary without the library");
    let (preloaded, summary) = run(&dir, true);
    assert_eq!(alone.maps.len(), 8, "{alone:?}");
    assert_eq!(preloaded.maps, alone.maps, "the maps and results, as the driver gave them");
    for (name, (result, bytes)) in &alone.maps {
        let expected = if name == "bad" { 1 } else { 0 };
        assert_eq!(*result, expected, "map {name}");
        assert_eq!(bytes.iter().any(|&b| b != 0), expected == 0, "map {name}: {bytes:?}");
    }
    // The stand-in wrote A's address, and the replacement A2's.
    assert_eq!(map(&alone, "A")[8..16], 0x7f00_0000_1000_u64.to_le_bytes());
    assert_eq!(map(&alone, "A2")[8..16], 0x7f00_0050_0000_u64.to_le_bytes());
    assert_eq!(map(&alone, "A2")[16..], map(&alone, "A")[16..]);
    let summary = summary.expect("a summary");
    assert!(summary.contains("modules instrumented: 1, not instrumentable: 0\n"), "{summary}");
    assert!(summary.contains("tensor maps recorded 6, box bytes unknown for 1\n"), "{summary}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The context's table holds the boxes' bytes as `BoxTable` does: the maps encoded before the
/// module load when it is made, each map encoded after at once; during a capture nothing is
/// copied, and the whole table is at the next map after it.
#[test]
fn the_contexts_table_holds_each_boxs_bytes() {
    let dir = build("tensor-maps-table");
    let (alone, _) = run(&dir, false);
    assert!(alone.tables.is_empty(), "no table without the library: {alone:?}");
    assert_eq!(alone.no_table, ["before", "loaded", "after", "captured", "end"]);
    let (out, summary) = run(&dir, true);
    assert_eq!(out.no_table, ["before"], "a table once a module is instrumented: {summary:?}");
    let mut table = BoxTable::new();
    table.record(&map(&out, "A"), 16384);
    assert_eq!(out.tables["loaded"], slots(&table), "uploaded with the context");
    table.record(&map(&out, "B"), 2 * 16 * 8 * 4);
    table.record(&map(&out, "C"), 4 * 64 * 32);
    table.record(&map(&out, "A2"), 16384);
    assert_eq!(table.bytes_of(&map(&out, "D")), None);
    assert_eq!(out.tables["after"], slots(&table), "each map copied when encoded");
    assert_eq!(out.tables["captured"], slots(&table), "nothing copied during the capture");
    table.record(&map(&out, "E"), 256);
    table.record(&map(&out, "F"), 64);
    assert_eq!(out.tables["end"], slots(&table), "the whole table after the capture");
    assert_eq!(out.tables["end"].len(), 6, "six maps in six slots");
    let _ = std::fs::remove_dir_all(&dir);
}
