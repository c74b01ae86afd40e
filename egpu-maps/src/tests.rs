//! Unit tests of the map kinds.

use crate::*;

#[test]
fn hash_map_basics() {
    let m: HashMap<u64, [u32; 3]> = HashMap::with_capacity(10);
    assert!(m.is_empty());
    for k in 0..10u64 {
        m.insert(&k, &[k as u32, 1, 2]).unwrap();
    }
    assert!(matches!(m.insert(&99, &[0; 3]), Err(MapError::Full { capacity: 10 })));
    assert_eq!(m.len(), 10);
    for k in 0..10u64 {
        assert_eq!(m.get(&k), Some([k as u32, 1, 2]));
    }
    assert!(m.remove(&3));
    assert!(!m.remove(&3));
    m.insert(&99, &[9; 3]).unwrap();
    assert_eq!(m.get(&99), Some([9; 3]));
    assert_eq!(m.get(&3), None);
    let mut all: Vec<_> = m.iter().map(|(k, _)| k).collect();
    all.sort();
    assert_eq!(all, [0, 1, 2, 4, 5, 6, 7, 8, 9, 99]);
}
