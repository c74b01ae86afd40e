//! The seeded generator of the tests.

/// Which sequence a [`Rng`] draws. Both are kept because tests already depend on each: a fixed
/// seed must keep generating the same programs and mutations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    /// SplitMix64 ([`splitmix64`]): any seed, zero included. What [`Rng::new`] and
    /// [`Rng::from_env`] draw.
    SplitMix64,
    /// xorshift64* ([`xorshift64star`]): the PTX mutation tests and the model of
    /// `bpf_get_prandom_u32` in the CPU benchmark. The seed must not be zero.
    XorShift64Star,
}

/// One step of SplitMix64: advances `state` by the golden-ratio increment and returns the mixed
/// value. Every `state`, zero included, starts a full-period sequence.
#[inline]
pub fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// One step of xorshift64*: shifts `state` (12 right, 25 left, 27 right) and returns it times
/// the multiplier. A zero `state` stays zero: start from any other value.
#[inline]
pub fn xorshift64star(state: &mut u64) -> u64 {
    let mut x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    x.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

/// The seed of `test`: `EGPU_SEED` when set (decimal, or hexadecimal after `0x`), else
/// `default`. It is printed (`test: EGPU_SEED=0x…`), so that a failing run can be reproduced.
///
/// # Panics
///
/// When `EGPU_SEED` is set but is not a `u64` (an empty value counts as unset): a seed meant to
/// reproduce a failure must not be silently replaced by the default.
pub fn seed_from_env(test: &str, default: u64) -> u64 {
    let seed = match std::env::var("EGPU_SEED") {
        Ok(text) => parse_seed(&text).unwrap_or_else(|e| panic!("{test}: {e}")).unwrap_or(default),
        Err(std::env::VarError::NotPresent) => default,
        Err(e) => panic!("{test}: EGPU_SEED: {e}"),
    };
    println!("{test}: EGPU_SEED={seed:#x} (set EGPU_SEED to reproduce)");
    seed
}

/// `EGPU_SEED`'s text as a seed: `None` when empty.
fn parse_seed(text: &str) -> Result<Option<u64>, String> {
    let s = text.trim();
    if s.is_empty() {
        return Ok(None);
    }
    let parsed = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => s.parse(),
    };
    parsed.map(Some).map_err(|e| format!("EGPU_SEED={s:?} is not a u64 (decimal or 0x hex): {e}"))
}

/// FNV-1a of `name`: what [`Rng::from_env_salted`] mixes into the seed.
fn salt(name: &str) -> u64 {
    name.bytes()
        .fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

/// A small deterministic generator for tests: the same seed, the same numbers, on every machine.
/// Not for anything that needs unpredictable numbers.
///
/// ```
/// use egpu_test_support::Rng;
///
/// let mut rng = Rng::from_env("my test", 0x5eed);
/// let op = rng.pick(&["add", "sub", "mul"]);
/// let len = 1 + rng.below(16);
/// # assert!(op.len() == 3 && len <= 16);
/// ```
#[derive(Debug, Clone)]
pub struct Rng {
    state: u64,
    algorithm: Algorithm,
}

impl Rng {
    /// SplitMix64 from `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng::with_algorithm(Algorithm::SplitMix64, seed)
    }

    /// `algorithm` from `seed`.
    ///
    /// # Panics
    ///
    /// For xorshift64* with a zero seed, which would draw only zeros.
    pub fn with_algorithm(algorithm: Algorithm, seed: u64) -> Rng {
        assert!(
            algorithm != Algorithm::XorShift64Star || seed != 0,
            "xorshift64* needs a seed other than 0"
        );
        Rng { state: seed, algorithm }
    }

    /// SplitMix64 for `test`, from `EGPU_SEED` or `default` (see [`seed_from_env`]).
    pub fn from_env(test: &str, default: u64) -> Rng {
        Rng::new(seed_from_env(test, default))
    }

    /// As [`Rng::from_env`], with the seed mixed with a hash of `test`: each test of a binary
    /// has a stream of its own for one `EGPU_SEED`, so adding a test changes no other test's.
    pub fn from_env_salted(test: &str, default: u64) -> Rng {
        Rng::new(seed_from_env(test, default) ^ salt(test))
    }

    /// The next number of the sequence.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        match self.algorithm {
            Algorithm::SplitMix64 => splitmix64(&mut self.state),
            Algorithm::XorShift64Star => xorshift64star(&mut self.state),
        }
    }

    /// A number in `0..n` (the modulo bias does not matter here); 0, drawing nothing, when `n`
    /// is 0.
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 { 0 } else { (self.next_u64() % n as u64) as usize }
    }

    /// A number in `lo..=hi` (`lo <= hi`, and the span below 2^63).
    pub fn range(&mut self, lo: i64, hi: i64) -> i64 {
        debug_assert!(lo <= hi, "range({lo}, {hi})");
        lo + (self.next_u64() % (hi - lo + 1) as u64) as i64
    }

    /// True once in `n` draws, on average (`n > 0`). The same draw as `chance(1, n)`.
    pub fn one_in(&mut self, n: usize) -> bool {
        self.chance(1, n)
    }

    /// True with probability `num / den` (`den > 0`).
    pub fn chance(&mut self, num: usize, den: usize) -> bool {
        assert!(den > 0, "chance({num}, 0)");
        self.below(den) < num
    }

    /// An element of `items`, which must not be empty.
    pub fn pick<T: Clone>(&mut self, items: &[T]) -> T {
        assert!(!items.is_empty(), "pick from an empty slice");
        items[self.below(items.len())].clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first draws of the seeds the tests use, as the copies this crate replaced drew them:
    /// a change here changes every generated test case.
    #[test]
    fn sequences_are_pinned() {
        let draw = |mut rng: Rng| [rng.next_u64(), rng.next_u64(), rng.next_u64()];
        assert_eq!(draw(Rng::new(0)), SPLITMIX_0);
        assert_eq!(draw(Rng::new(0x00e6_9d0c_cafe_f00d)), SPLITMIX_CPU_VM);
        assert_eq!(
            draw(Rng::with_algorithm(Algorithm::XorShift64Star, 0x9e37_79b9_7f4a_7c15)),
            XORSHIFT_GOLDEN_RATIO
        );
        let mut state = 0;
        assert_eq!(splitmix64(&mut state), SPLITMIX_0[0]);
        let mut state = 0x9e37_79b9_7f4a_7c15;
        assert_eq!(xorshift64star(&mut state), XORSHIFT_GOLDEN_RATIO[0]);
    }

    const SPLITMIX_0: [u64; 3] =
        [0xe220_a839_7b1d_cdaf, 0x6e78_9e6a_a1b9_65f4, 0x06c4_5d18_8009_454f];
    const SPLITMIX_CPU_VM: [u64; 3] =
        [0x99e5_32e1_1a33_9df3, 0x0ce5_ce8c_a31a_569f, 0x6353_3909_b41e_20c8];
    const XORSHIFT_GOLDEN_RATIO: [u64; 3] =
        [0x0d83_b3e2_9a21_487a, 0x54c4_4c79_f1fe_9d67, 0xa845_f342_007a_0e78];

    #[test]
    fn salted_streams_differ_by_test_name() {
        assert_eq!(salt(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(salt("a"), 0xaf63_dc4c_8601_ec8c);
        assert_ne!(salt("a"), salt("b"));
    }

    #[test]
    fn draws_stay_in_range() {
        let mut rng = Rng::new(7);
        for _ in 0..1000 {
            assert!(rng.below(10) < 10);
            assert!((-3..=3).contains(&rng.range(-3, 3)));
            assert!([1, 2, 3].contains(&rng.pick(&[1, 2, 3])));
        }
        assert!(rng.chance(1, 1) && !rng.chance(0, 5));
    }

    #[test]
    fn below_zero_draws_nothing() {
        let (mut a, mut b) = (Rng::new(3), Rng::new(3));
        assert_eq!(a.below(0), 0);
        assert_eq!(a.next_u64(), b.next_u64());
    }

    #[test]
    fn one_in_is_chance_of_one() {
        let (mut a, mut b) = (Rng::new(11), Rng::new(11));
        for n in 1..200 {
            assert_eq!(a.one_in(n), b.chance(1, n));
        }
    }

    #[test]
    fn seeds_parse_as_egpu_seed_is_documented() {
        assert_eq!(parse_seed(""), Ok(None));
        assert_eq!(parse_seed("  "), Ok(None));
        assert_eq!(parse_seed("42"), Ok(Some(42)));
        assert_eq!(parse_seed("0x2a"), Ok(Some(42)));
        assert_eq!(parse_seed("0X2A\n"), Ok(Some(42)));
        assert!(parse_seed("forty-two").is_err());
        assert!(parse_seed("0x").is_err());
    }

    #[test]
    #[should_panic(expected = "seed other than 0")]
    fn xorshift_refuses_zero() {
        Rng::with_algorithm(Algorithm::XorShift64Star, 0);
    }
}
