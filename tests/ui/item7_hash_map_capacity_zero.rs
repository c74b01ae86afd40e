//! A map's capacity is 1 to 2^28: a static with capacity 0 does not compile, and the error is
//! at the static, naming the limit.
use egpu::maps::HashMap;

static LAUNCHES: HashMap<u64, u64> = HashMap::with_capacity(0);

fn main() {
    let _ = LAUNCHES.fetch_add(&1, 1);
}
