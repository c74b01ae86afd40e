//! The BTF reader on a hand-made `.maps` and on garbage; the loader on bytes that are not an
//! object.

use super::btf::{Btf, BtfMap};
use super::{ElfError, is_bpf_object, is_object, load};

/// A BTF blob: the header, then `types` (words), then `strings`.
fn blob(types: &[u32], strings: &[u8]) -> Vec<u8> {
    let mut b = vec![0x9f, 0xeb, 1, 0];
    let type_len = (types.len() * 4) as u32;
    for w in [24u32, 0, type_len, type_len, strings.len() as u32] {
        b.extend(w.to_le_bytes());
    }
    types.iter().for_each(|w| b.extend(w.to_le_bytes()));
    b.extend(strings);
    b
}

/// `info` of a type: its kind and member count.
fn info(kind: u32, vlen: u32) -> u32 {
    (kind << 24) | vlen
}

/// `struct { __uint(type, 1); __uint(max_entries, 64); __type(key, u64); __uint(value_size, 16); }
/// COUNTS SEC(".maps");` by hand.
fn maps_blob() -> Vec<u8> {
    // Strings: 0 "", 1 "int", 5 "u64", 9 "type", 14 "max_entries", 26 "key", 30 "value_size",
    // 41 "COUNTS", 48 ".maps", 54 "__ARRAY_SIZE_TYPE__".
    let strings =
        b"\0int\0u64\0type\0max_entries\0key\0value_size\0COUNTS\0.maps\0__ARRAY_SIZE_TYPE__\0";
    let types = [
        // 1: int (4 bytes, signed, 32 bits)
        1,
        info(1, 0),
        4,
        0x0100_0020,
        // 2: u64
        5,
        info(1, 0),
        8,
        64,
        // 3: array of int, index int, 1 element: __uint(type, 1)
        0,
        info(3, 0),
        0,
        1,
        1,
        1,
        // 4: pointer to 3
        0,
        info(2, 0),
        3,
        // 5: array of int, 64 elements
        0,
        info(3, 0),
        0,
        1,
        1,
        64,
        // 6: pointer to 5
        0,
        info(2, 0),
        5,
        // 7: pointer to u64
        0,
        info(2, 0),
        2,
        // 8: array of int, 16 elements
        0,
        info(3, 0),
        0,
        1,
        1,
        16,
        // 9: pointer to 8
        0,
        info(2, 0),
        8,
        // 10: the struct: type, max_entries, key, value_size
        0,
        info(4, 4),
        32,
        9,
        4,
        0,
        14,
        6,
        64,
        26,
        7,
        128,
        30,
        9,
        192,
        // 11: var COUNTS of type 10
        41,
        info(14, 0),
        10,
        1,
        // 12: datasec .maps with COUNTS at 0, 32 bytes
        48,
        info(15, 1),
        32,
        11,
        0,
        32,
    ];
    blob(&types, strings)
}

#[test]
fn a_btf_map_definition_is_read() {
    let btf = Btf::parse(&maps_blob()).expect("parses");
    let maps = btf.maps().expect("maps");
    let want = BtfMap {
        name: "COUNTS".into(),
        kind: Some(1),
        key_size: Some(8),
        value_size: Some(16),
        max_entries: Some(64),
    };
    assert_eq!(maps, [want]);
}

#[test]
fn garbage_btf_is_refused_without_panics() {
    let good = maps_blob();
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = || {
        state = state.wrapping_mul(0x5851_f42d_4c95_7f2d).wrapping_add(0x1405_7b7e_f767_814f);
        (state >> 33) as usize
    };
    let (mut refused, mut read) = (0, 0);
    for _ in 0..3000 {
        let mut b = good.clone();
        match next() % 3 {
            0 => b.truncate(next() % good.len()),
            _ => {
                for _ in 0..1 + next() % 6 {
                    let at = next() % b.len();
                    b[at] = next() as u8;
                }
            }
        }
        match Btf::parse(&b).and_then(|btf| btf.maps()) {
            Ok(_) => read += 1,
            Err(ElfError::Btf(why)) => {
                assert!(!why.is_empty());
                refused += 1;
            }
            Err(other) => panic!("not a BTF error: {other}"),
        }
    }
    assert!(refused > 100 && read > 0, "{refused} refused, {read} read");
}

#[test]
fn bytes_that_are_no_object_are_refused() {
    assert!(!is_object(b"\x7fELF") && !is_bpf_object(&[0; 64]));
    assert!(matches!(load(b""), Err(ElfError::Malformed(_))));
    assert!(matches!(load(&[0x7f, b'E', b'L', b'F', 2, 1, 1, 0]), Err(ElfError::Malformed(_))));
}
