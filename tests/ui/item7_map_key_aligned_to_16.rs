//! Map memory is made of 8-byte words: a key aligned to 16 is refused at the user's static
//! (issue 18 item 6's case), not inside egpu-maps.
use bytemuck::{Pod, Zeroable};
use egpu::maps::HashMap;

#[repr(C, align(16))]
#[derive(Clone, Copy, Pod, Zeroable)]
struct Key {
    words: [u64; 2],
}

static BY_KEY: HashMap<Key, u64> = HashMap::with_capacity(64);

fn main() {
    let _ = BY_KEY.fetch_add(&Key { words: [1, 2] }, 1);
}
