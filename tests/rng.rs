//! The deterministic generator of the top-level tests: splitmix64, seeded from `EGPU_SEED`
//! (decimal or `0x` hex) or a default, and printed, so a failure can be reproduced.

pub(crate) struct Rng(u64);

#[allow(dead_code, reason = "each test binary draws what it needs")]
impl Rng {
    /// A generator for `test`, from `EGPU_SEED` or `default`.
    pub(crate) fn from_env(test: &str, default: u64) -> Rng {
        let seed = std::env::var("EGPU_SEED")
            .ok()
            .and_then(|s| match s.strip_prefix("0x") {
                Some(h) => u64::from_str_radix(h, 16).ok(),
                None => s.parse().ok(),
            })
            .unwrap_or(default);
        println!("{test}: EGPU_SEED={seed:#x}");
        Rng(seed)
    }

    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub(crate) fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    pub(crate) fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }

    pub(crate) fn chance(&mut self, one_in: usize) -> bool {
        self.below(one_in) == 0
    }
}
