//! The cache what-if (`egpu::host::mem::cache`): LRU and LFU against a reference written here
//! the slow way (a scan of every resident page at each eviction), on random sequences of page
//! accesses and on sequences whose answer is known by hand; prints
//! `cache what-if cases: N, 0 wrong`.

use egpu::host::mem::cache::{Access, Outcome, Policy, SHARES, simulate, what_if};
use egpu_test_support::Rng;

/// A number below `n`.
fn below(rng: &mut Rng, n: u64) -> u64 {
    rng.below(n as usize) as u64
}

/// The reference: the resident pages in a list, the victim found by a scan.
fn reference(accesses: &[Access], policy: Policy, capacity: u64, page_bytes: u64) -> Outcome {
    // (page, uses since brought in, last use, written since brought in)
    let mut resident: Vec<(u64, u64, u64, bool)> = Vec::new();
    let mut touched: Vec<u64> = Vec::new();
    let mut o = Outcome { policy: Some(policy), capacity, page_bytes, ..Outcome::default() };
    for (clock, a) in accesses.iter().enumerate() {
        let clock = clock as u64 + 1;
        o.accesses += 1;
        if let Some(r) = resident.iter_mut().find(|r| r.0 == a.page) {
            r.1 += 1;
            r.2 = clock;
            r.3 |= a.write;
            o.hits += 1;
            continue;
        }
        if touched.contains(&a.page) {
            o.capacity_misses += 1;
        } else {
            touched.push(a.page);
            o.cold_misses += 1;
        }
        if resident.len() as u64 >= capacity {
            let key = |r: &(u64, u64, u64, bool)| match policy {
                Policy::Lru => (r.2, 0, r.0),
                Policy::Lfu => (r.1, r.2, r.0),
            };
            let victim = (0..resident.len()).min_by_key(|&i| key(&resident[i])).expect("full");
            let evicted = resident.swap_remove(victim);
            o.evictions += 1;
            o.written_back += u64::from(evicted.3);
        }
        resident.push((a.page, 1, clock, a.write));
    }
    o
}

/// Sequences of `len` accesses over `pages` pages: uniform, skewed (a few pages take most
/// accesses), loops with noise, and phases that move from one set of pages to the next.
fn sequences(rng: &mut Rng) -> Vec<Vec<Access>> {
    let mut out = Vec::new();
    for (pages, len) in [(4, 40), (16, 300), (64, 2000), (200, 3000)] {
        let access = |rng: &mut Rng, page: u64| Access { page, write: below(rng, 4) == 0 };
        let uniform: Vec<_> = (0..len).map(|_| below(rng, pages)).collect();
        let skewed: Vec<_> = (0..len)
            .map(|_| {
                let r = below(rng, pages * pages);
                pages - 1 - r.isqrt().min(pages - 1)
            })
            .collect();
        let looped: Vec<_> = (0..len as u64)
            .map(|i| if below(rng, 10) == 0 { below(rng, pages) } else { i % pages })
            .collect();
        let phased: Vec<_> = (0..len as u64)
            .map(|i| (i * 4 / len as u64) * pages / 4 + below(rng, pages / 4 + 1))
            .collect();
        for seq in [uniform, skewed, looped, phased] {
            out.push(seq.into_iter().map(|p| access(rng, p)).collect());
        }
    }
    out
}

#[test]
fn lru_and_lfu_agree_with_the_reference_and_with_known_answers() {
    let page = 1 << 21;
    let mut cases = 0u32;
    let mut wrong = Vec::new();
    let mut check = |what: String, got: Outcome, want: Outcome| {
        cases += 1;
        if got != want {
            wrong.push(format!("{what}: got {got:?}, want {want:?}"));
        }
    };

    // Random sequences at every capacity from one page to past the working set.
    let mut rng = Rng::from_env("mem_cache", 0x9E37_79B9_7F4A_7C15);
    for (n, seq) in sequences(&mut rng).iter().enumerate() {
        let distinct = seq.iter().map(|a| a.page).collect::<std::collections::HashSet<_>>().len();
        let step = (distinct / 12).max(1);
        for capacity in (1..=distinct as u64 + 1).step_by(step) {
            for policy in Policy::ALL {
                let got = simulate(seq.iter().copied(), policy, capacity, page);
                let want = reference(seq, policy, capacity, page);
                check(format!("sequence {n}, {} pages, {policy:?}", capacity), got, want);
            }
        }
    }

    let known = |policy, capacity, hits, cold, capacity_misses, evictions, written_back| Outcome {
        policy: Some(policy),
        capacity,
        page_bytes: page,
        accesses: hits + cold + capacity_misses,
        hits,
        cold_misses: cold,
        capacity_misses,
        evictions,
        written_back,
    };
    // A loop over 10 pages, 5 times, in a cache of fewer: every access misses under both.
    let looped: Vec<Access> = (0..50).map(|i| Access::read(i % 10)).collect();
    for capacity in [1, 5, 9] {
        for policy in Policy::ALL {
            let want = known(policy, capacity, 0, 10, 40, 50 - capacity, 0);
            check(
                format!("loop, {capacity} pages"),
                simulate(looped.clone(), policy, capacity, page),
                want,
            );
        }
    }
    // The what-if's capacities (2, 5 and 7 pages) hold less than the loop: LRU and LFU hit 0.
    let w = what_if(&looped, page);
    assert_eq!(w.working_set, 10);
    for (share, o) in &w.outcomes {
        let policy = o.policy.expect("a policy");
        check(
            format!("what-if loop {share}%"),
            *o,
            known(policy, o.capacity, 0, 10, 40, 50 - o.capacity, 0),
        );
    }
    // The same loop in a cache that holds it all: only the first touches miss.
    for policy in Policy::ALL {
        check(
            "loop in a cache of 10".into(),
            simulate(looped.clone(), policy, 10, page),
            known(policy, 10, 40, 10, 0, 0, 0),
        );
    }
    // A page used ten times, then two pages in turn in a cache of two: LFU keeps the first page
    // and the two others push each other out; LRU lets the first go and keeps the two.
    let mut trap: Vec<Access> = vec![Access::read(0); 10];
    trap.extend((0..20).map(|i| Access::read(1 + i % 2)));
    check(
        "trap, LFU".into(),
        simulate(trap.clone(), Policy::Lfu, 2, page),
        known(Policy::Lfu, 2, 9, 3, 18, 19, 0),
    );
    check(
        "trap, LRU".into(),
        simulate(trap.clone(), Policy::Lru, 2, page),
        known(Policy::Lru, 2, 27, 3, 0, 1, 0),
    );
    // Written pages go back when evicted; clean ones do not.
    let writes =
        [Access::write(1), Access::read(2), Access::read(1), Access::write(2), Access::read(3)];
    for policy in Policy::ALL {
        let o = simulate(writes, policy, 1, page);
        check("write-backs".into(), o, known(policy, 1, 0, 3, 2, 4, 2));
        assert_eq!((o.bytes_in(), o.bytes_out()), (5 * page, 2 * page));
    }

    println!("cache what-if cases: {cases}, {} wrong", wrong.len());
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    assert!(cases > 300, "{cases} cases");
}

#[test]
fn the_what_if_tries_each_share_under_both_policies_and_prints_a_table() {
    let accesses: Vec<Access> = (0..400).map(|i| Access::read((i * 7) % 40)).collect();
    let w = what_if(&accesses, 4096);
    assert_eq!((w.working_set, w.accesses), (40, 400));
    let shares: Vec<(u64, u64, Option<Policy>)> =
        w.outcomes.iter().map(|(s, o)| (*s, o.capacity, o.policy)).collect();
    let mut want = Vec::new();
    for share in SHARES {
        for policy in Policy::ALL {
            want.push((share, 40 * share / 100, Some(policy)));
        }
    }
    assert_eq!(shares, want);
    let table = w.to_string();
    assert!(table.starts_with("cache what-if: 400 accesses, working set 40 pages of 4096 bytes"));
    assert_eq!(table.lines().count(), 2 + 6, "{table}");
    assert!(table.contains("LRU") && table.contains("LFU"), "{table}");
    // An empty sequence: no working set, nothing served.
    let empty = what_if(&[], 4096);
    assert_eq!(empty.working_set, 0);
    assert!(empty.outcomes.iter().all(|(_, o)| o.accesses == 0 && o.hit_rate() == 0.0));
}
