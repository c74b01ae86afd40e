//! A ring buffer's records are 64 KiB at most: a static of larger records does not compile.
use egpu::maps::RingBuf;

static EVENTS: RingBuf<[[u64; 1024]; 9]> = RingBuf::with_capacity(16);

fn main() {
    let _ = EVENTS.output(&[[0; 1024]; 9]);
}
