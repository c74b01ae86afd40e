//! An array has at least one value: `Array::with_len(0)` in a static does not compile.
use egpu::maps::Array;

static HISTOGRAM: Array<u64> = Array::with_len(0);

fn main() {
    let _ = HISTOGRAM.get(0);
}
